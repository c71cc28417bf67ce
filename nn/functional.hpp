#pragma once
/// Masking functions with d2l's semantics (sequence_mask, masked_softmax), the AttentionMask
/// that the attention layers accept, the fused per-head attention ops (head_attention_weights,
/// head_attention_combine) and the input checks they share.
#include <cstddef>

#include "core/tensor.hpp"

namespace xgrad::nn {

/// Which keys each query may attend to. Scores at positions not attended are set to -1e6
/// before the softmax (d2l's value: a row with nothing to attend becomes uniform, never NaN),
/// and receive no gradient.
///
///   AttentionMask()                    every key (d2l's valid_lens = None).
///   AttentionMask::valid_lens(lens)    d2l: the first lens[b] keys (lens of shape (batch,)),
///                                      or the first lens[b, i] keys for query i (shape
///                                      (batch, queries)). int64 or floating whole numbers ≥ 0;
///                                      a length beyond the number of keys means every key.
///   AttentionMask::attend_where(mask)  bool, of shape (batch, queries, keys) or (queries, keys)
///                                      (shared by the batch).
///                                      >>> TRUE MEANS "MAY ATTEND"; false is masked out. <<<
///                                      This is F.scaled_dot_product_attention's convention and
///                                      the OPPOSITE of torch.nn.MultiheadAttention's bool
///                                      attn_mask (there true = masked out). Other dtypes throw.
///   AttentionMask::causal()            query i attends keys j ≤ i + (keys − queries): the
///                                      usual lower triangle when keys == queries; with more
///                                      keys than queries (keys cached from earlier decoding
///                                      steps) the queries are the last positions and each
///                                      sees every earlier key (bottom-right aligned, as
///                                      flash-attention; torch's is_causal aligns top-left).
///                                      Needs keys ≥ queries.
class AttentionMask {
public:
    enum class Kind { all, valid_lens, attend_where, causal };

    AttentionMask() = default;
    /// An undefined `lens` gives AttentionMask() (every key), as d2l's None.
    static AttentionMask valid_lens(const Tensor& lens);
    static AttentionMask attend_where(const Tensor& mask);
    static AttentionMask causal();

    Kind kind() const { return m_kind; }
    /// The lengths or the bool mask; undefined for all and causal.
    const Tensor& tensor() const { return m_tensor; }

private:
    AttentionMask(Kind kind, Tensor t) : m_kind(kind), m_tensor(std::move(t)) {}
    Kind m_kind = Kind::all;
    Tensor m_tensor;
};

/// d2l's sequence_mask: a copy of X whose entries at positions j ≥ valid_len[i] along axis 1
/// are `value` (d2l writes into X in place; this returns a new tensor). No gradient reaches
/// the replaced entries.
/// Shapes: X (n, maxlen, ...) floating; valid_len (n,), int64 or floating whole numbers ≥ 0.
Tensor sequence_mask(const Tensor& X, const Tensor& valid_len, double value = 0.0);

/// d2l's masked_softmax: softmax over the last axis of X after setting the scores of keys
/// j ≥ valid length to -1e6. X (batch, queries, keys); valid_lens undefined (plain softmax,
/// any rank), (batch,) or (batch, queries). A valid length of 0 gives a uniform row; masked
/// positions get probability 0 (to within e^-1e6) and gradient 0.
Tensor masked_softmax(const Tensor& X, const Tensor& valid_lens);
/// The same with any AttentionMask; X (batch, queries, keys) unless the mask is all. One fused
/// op for every mask but all (a plain softmax): saves its output (and a bool mask) for backward.
Tensor masked_softmax(const Tensor& X, const AttentionMask& mask);

// --- multi-head attention with the heads read and written in place ------------------------
// The H heads of a packed projection X (batch, n, H·d) are its column blocks
// X_bh = X[b, :, h·d:(h+1)·d]; the ops below hand them to gemm with row length H·d, so neither
// d2l's transpose_qkv nor transpose_output copies is made. Head (b, h) is row b·H + h of the
// weights, the order of transpose_qkv.

/// Attention weights of every head, scores and softmax in one op:
///   weights[b·H + h] = masked_softmax(scale · Q_bh · K_bhᵀ, mask of batch row b).
/// Shapes: queries (batch, Tq, H·d), keys (batch, Tk, H·d) → weights (batch·H, Tq, Tk).
/// The mask (as for masked_softmax, per batch row) applies to all heads of its row; masked
/// scores count as -1e6 (a row with nothing to attend is uniform) and get no gradient.
/// The scores are computed into the output and softmaxed in place: nothing but the weights
/// (and a bool mask) is saved for backward, and no (batch·H, Tq, Tk) scores tensor is kept.
Tensor head_attention_weights(const Tensor& queries, const Tensor& keys, std::size_t num_heads, double scale,
                              const AttentionMask& mask = AttentionMask());

/// Each head's weights applied to its values, written in the merged layout:
///   out[b, :, h·dv:(h+1)·dv] = weights[b·H + h] · V_bh.
/// Shapes: weights (batch·H, Tq, Tk), values (batch, Tk, H·dv) → (batch, Tq, H·dv), what
/// transpose_output(bmm(weights, transpose_qkv(values, H)), H) gives. Saves only its inputs.
Tensor head_attention_combine(const Tensor& weights, const Tensor& values, std::size_t num_heads);

// --- checks shared by the attention layers; `who` names the caller in messages ---------------

/// Throws unless valid_lens is undefined, or of shape (batch,) or (batch, queries), of dtype
/// int64/float32/float64, with whole non-negative values:
/// "MultiHeadAttention: valid_lens must have shape (2,) or (2, 4), got (3,)".
void check_valid_lens(const char* who, const Tensor& valid_lens, std::size_t batch, std::size_t queries);

/// Throws unless `mask` suits scores of shape (batch, queries, keys) (see AttentionMask).
void check_attention_mask(const char* who, const AttentionMask& mask, std::size_t batch, std::size_t queries,
                          std::size_t keys);

/// Throws unless queries, keys and values are 3-D (batch, n, features) with one batch size and
/// keys and values of the same length n.
void check_attention_inputs(const char* who, const Tensor& queries, const Tensor& keys, const Tensor& values);

/// Throws unless num_heads > 0 and it divides the last axes of queries and values:
/// "DotProductAttention: values' last axis (5) must be divisible by num_heads (2), got shape (2, 4, 5)".
void check_head_split(const char* who, const Tensor& queries, const Tensor& values, std::size_t num_heads);

/// Throws unless t's last axis is `size`:
/// "MultiHeadAttention: keys must have last axis key_size = 3, got shape (2, 6, 4)".
void check_last_axis(const char* who, const char* arg, const Tensor& t, const char* size_name,
                     std::size_t size);

}  // namespace xgrad::nn
