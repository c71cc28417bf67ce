#pragma once
/// Scaled dot-product attention, d2l's DotProductAttention.
#include <memory>
#include <mutex>

#include "nn/dropout.hpp"
#include "nn/functional.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// weights = masked_softmax(Q·Kᵀ/√d) (-1e6 where masked) → dropout → ·V.
/// Shapes: queries (batch, Tq, d), keys (batch, Tk, d), values (batch, Tk, v) → (batch, Tq, v).
/// valid_lens: undefined, (batch,) or (batch, Tq) (see AttentionMask for the other masks).
/// attention_weights() keeps the weights of the last forward, before dropout. The scores and
/// the softmax are one op (head_attention_weights): no scores tensor is kept for backward.
/// Prints as `DotProductAttention(\n  (dropout): Dropout(p=0.5, inplace=False)\n)`.
class DotProductAttention : public Module, public Callable<DotProductAttention> {
public:
    explicit DotProductAttention(double dropout);

    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const Tensor& valid_lens = Tensor());
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const AttentionMask& mask);

    /// The same for each of num_heads heads packed along the features, as Linear projections
    /// give them: head h of queries (batch, Tq, H·d) is columns h·d:(h+1)·d, likewise keys
    /// (batch, Tk, H·d) and values (batch, Tk, H·v); scaled by 1/√d; → (batch, Tq, H·v) with
    /// head h's output in columns h·v:(h+1)·v. The mask of batch row b serves all its heads.
    /// Equals transpose_output(forward(transpose_qkv(·, H)...), H) without those copies
    /// (see head_attention_weights / head_attention_combine). forward() is num_heads = 1.
    Tensor forward_heads(const Tensor& queries, const Tensor& keys, const Tensor& values, std::size_t num_heads,
                         const AttentionMask& mask = AttentionMask());

    /// forward_heads for a caller that checked its inputs and resolved the mask at its own
    /// entry (MultiHeadAttention): nothing is checked or copied to the host again.
    Tensor forward_heads(const Tensor& queries, const Tensor& keys, const Tensor& values, std::size_t num_heads,
                         const ResolvedMask& mask);

    /// (batch·H, Tq, Tk) from the last forward (H = 1 for forward()), head h of batch row b at
    /// row b·H + h; undefined before the first forward. The tensor itself, as d2l's attribute:
    /// the handle aliases what the module keeps and what that forward computed with (a write
    /// through it changes both, and is refused at that forward's backward, which saved it);
    /// detach() keeps a copy apart from the graph.
    /// When several threads run forward at once, the weights of whichever stored last.
    Tensor attention_weights() const;

private:
    std::shared_ptr<Dropout> m_dropout;
    Tensor m_attention_weights;
    mutable std::mutex m_weights_mutex;  // threads running forward at once each store theirs
};

}  // namespace xgrad::nn
