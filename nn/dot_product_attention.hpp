#pragma once
/// Scaled dot-product attention, d2l's DotProductAttention.
#include <memory>

#include "nn/dropout.hpp"
#include "nn/functional.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// scores = Q·Kᵀ/√d → masked_softmax (-1e6 where masked) → dropout → ·V.
/// Shapes: queries (batch, Tq, d), keys (batch, Tk, d), values (batch, Tk, v) → (batch, Tq, v).
/// valid_lens: undefined, (batch,) or (batch, Tq) (see AttentionMask for the other masks).
/// attention_weights() keeps the weights of the last forward, before dropout.
/// Prints as `DotProductAttention(\n  (dropout): Dropout(p=0.5, inplace=False)\n)`.
class DotProductAttention : public Module {
public:
    explicit DotProductAttention(double dropout);

    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const Tensor& valid_lens = Tensor());
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const AttentionMask& mask);

    /// (batch, Tq, Tk) from the last forward; part of that forward's graph (detach() to keep a copy
    /// apart from it); undefined before the first forward.
    const Tensor& attention_weights() const { return m_attention_weights; }

private:
    std::shared_ptr<Dropout> m_dropout;
    Tensor m_attention_weights;
};

}  // namespace xgrad::nn
