#pragma once
/// Scaled dot-product attention, d2l's DotProductAttention.
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "nn/dropout.hpp"
#include "nn/functional.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// weights = masked_softmax(Q·Kᵀ/√d) (-1e6 where masked) → dropout → ·V.
/// Shapes: queries (batch, Tq, d), keys (batch, Tk, d), values (batch, Tk, v) → (batch, Tq, v).
/// valid_lens: undefined, (batch,) or (batch, Tq) (see AttentionMask for the other masks).
/// attention_weights() keeps the weights of the last forward, before dropout, when they were
/// materialised (see need_weights). The scores and the softmax are one op
/// (head_attention_weights): no scores tensor is kept for backward.
///
/// Two paths, the same values to rounding: the materialised one (head_attention_weights, the
/// module's Dropout, head_attention_combine), which holds every head's (Tq, Tk) weights, and
/// the fused flash_attention, which holds none (memory linear in the lengths) and is faster
/// for long heads (flash_attention_faster: from Tq·Tk = 512·512, as tools/bench --seq-sweep
/// measures it). In training with dropout the fused path draws its own counter-based mask,
/// seeded by one draw from the calling thread's default generator, so the two paths drop
/// different weights for the same seed.
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
    ///
    /// Throws xgrad::Error when the last forward kept no weights (need_weights(false), or the
    /// fused path under the default), saying how to keep them.
    Tensor attention_weights() const;

    /// Whether forward keeps the weights for attention_weights(), as torch's
    /// MultiheadAttention.forward(need_weights=...):
    ///  - true: forward always materialises the weights and keeps them (what a heatmap needs);
    ///  - false: never kept; forward runs whichever path is faster;
    ///  - unset (the default, std::nullopt): whichever path is faster, the weights kept when
    ///    it is the materialised one (every head below 512·512 queries × keys: d2l's examples).
    DotProductAttention& need_weights(std::optional<bool> keep);
    std::optional<bool> need_weights() const { return m_need_weights; }
    /// Whether forward on heads of Tq queries, Tk keys and d features runs the fused path.
    bool uses_fused(std::size_t Tq, std::size_t Tk, std::size_t d) const;

private:
    std::shared_ptr<Dropout> m_dropout;
    Tensor m_attention_weights;
    std::optional<bool> m_need_weights;
    std::string m_not_kept;  // why the last forward kept no weights; empty when it kept them
    mutable std::mutex m_weights_mutex;  // threads running forward at once each store theirs
};

/// need_weights(keep) on every DotProductAttention in `model` (itself included), the
/// MultiHeadAttention layers' too: what a program sets before the forward whose attention it
/// draws (`need_attention_weights(net, true)`), and resets with std::nullopt.
void need_attention_weights(Module& model, std::optional<bool> keep);

}  // namespace xgrad::nn
