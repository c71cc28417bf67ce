#pragma once
/// Additive (Bahdanau) attention, d2l's AdditiveAttention.
#include <cstddef>
#include <memory>
#include <mutex>

#include "core/random.hpp"
#include "nn/dropout.hpp"
#include "nn/functional.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// score(q, k) = w_vᵀ·tanh(W_q·q + W_k·k) → masked_softmax → dropout → ·V.
/// W_k (key_size → num_hiddens), W_q (query_size → num_hiddens) and w_v (num_hiddens → 1),
/// all without bias, registered in d2l's order W_k, W_q, w_v, dropout.
/// Shapes: queries (batch, Tq, query_size), keys (batch, Tk, key_size), values (batch, Tk, v)
/// → (batch, Tq, v); the features tensor is (batch, Tq, Tk, num_hiddens).
/// valid_lens: undefined, (batch,) or (batch, Tq). attention_weights() keeps the last weights.
class AdditiveAttention : public Module, public Callable<AdditiveAttention> {
public:
    AdditiveAttention(SizeArg key_size, SizeArg query_size, SizeArg num_hiddens, double dropout,
                      Generator& gen = default_generator());

    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const Tensor& valid_lens = Tensor());
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const AttentionMask& mask);

    /// (batch, Tq, Tk) from the last forward, before dropout; undefined before the first. The
    /// tensor itself (aliases what the module keeps and that forward's graph), as
    /// DotProductAttention::attention_weights.
    /// When several threads run forward at once, the weights of whichever stored last.
    Tensor attention_weights() const;

private:
    std::size_t m_key_size;
    std::size_t m_query_size;
    std::shared_ptr<Linear> m_W_k;
    std::shared_ptr<Linear> m_W_q;
    std::shared_ptr<Linear> m_w_v;
    std::shared_ptr<Dropout> m_dropout;
    Tensor m_attention_weights;
    mutable std::mutex m_weights_mutex;  // threads running forward at once each store theirs
};

}  // namespace xgrad::nn
