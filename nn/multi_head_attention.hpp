#pragma once
/// Multi-head attention, d2l's MultiHeadAttention (the seeds' code), with an AttentionMask
/// overload for boolean and causal masks.
#include <cstddef>
#include <memory>

#include "core/random.hpp"
#include "nn/dot_product_attention.hpp"
#include "nn/functional.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// d2l's transpose_qkv: (batch, n, num_hiddens) → (batch·num_heads, n, num_hiddens/num_heads);
/// head h of batch row b goes to row b·num_heads + h (batch-major packing).
Tensor transpose_qkv(const Tensor& X, std::size_t num_heads);
/// d2l's transpose_output, the inverse: (batch·num_heads, n, d) → (batch, n, num_heads·d).
Tensor transpose_output(const Tensor& X, std::size_t num_heads);

/// The options of MultiHeadAttention, as LibTorch's MultiheadAttentionOptions:
///   MultiHeadAttention mha(MultiHeadAttentionOptions(64, 4).dropout(0.1).bias(true));
/// key_size, query_size and value_size are the last axes of the keys, queries and values
/// (the projections' inputs, as in d2l); 0, the default, means num_hiddens.
struct MultiHeadAttentionOptions {
    MultiHeadAttentionOptions(SizeArg num_hiddens, SizeArg num_heads)
        : m_num_hiddens(num_hiddens.get("MultiHeadAttentionOptions", "num_hiddens")),
          m_num_heads(num_heads.get("MultiHeadAttentionOptions", "num_heads")) {}
    XGRAD_SIZE_ARG(MultiHeadAttentionOptions, num_hiddens, 0);
    XGRAD_SIZE_ARG(MultiHeadAttentionOptions, num_heads, 0);
    XGRAD_SIZE_ARG(MultiHeadAttentionOptions, key_size, 0);
    XGRAD_SIZE_ARG(MultiHeadAttentionOptions, query_size, 0);
    XGRAD_SIZE_ARG(MultiHeadAttentionOptions, value_size, 0);
    XGRAD_ARG(MultiHeadAttentionOptions, double, dropout, 0.0);
    XGRAD_BOOL_ARG(MultiHeadAttentionOptions, bias, false);
};

/// out = W_o · concat_h attention(W_q^h·q, W_k^h·k, W_v^h·v), with scaled dot-product
/// attention per head. W_q (query_size → num_hiddens), W_k (key_size → num_hiddens),
/// W_v (value_size → num_hiddens), W_o (num_hiddens → num_hiddens), with a bias only if
/// `bias`; registered (and drawn from `gen`) in d2l's order: attention, W_q, W_k, W_v, W_o.
/// Dropout masks come from the calling thread's default generator (manual_seed), as in PyTorch.
/// Shapes: queries (batch, Tq, query_size), keys (batch, Tk, key_size), values (batch, Tk,
/// value_size) → (batch, Tq, num_hiddens).
/// valid_lens: undefined, (batch,) or (batch, Tq), shared by the heads of each batch row (as
/// d2l's repeat_interleave does). For a boolean mask (TRUE = MAY ATTEND) or a causal mask use
/// the AttentionMask overload. The heads are never split into or merged from copies:
/// DotProductAttention::forward_heads reads them from the projections in place.
///
/// Attention weights, two accessors with one shape each:
///  - attention()->attention_weights(): (batch·num_heads, Tq, Tk), d2l's
///    `mha.attention.attention_weights` (head h of batch row b at row b·num_heads + h), the
///    tensor itself (aliases);
///  - attention_weights_copy(): the same weights as (batch, num_heads, Tq, Tk), a new tensor
///    (a clone of the reshaped weights: a write into it does not reach the layer's).
class MultiHeadAttention : public Module, public Callable<MultiHeadAttention> {
public:
    /// d2l's positional form: MultiHeadAttention(key_size, query_size, value_size, num_hiddens,
    /// num_heads, dropout, bias = false).
    MultiHeadAttention(SizeArg key_size, SizeArg query_size, SizeArg value_size, SizeArg num_hiddens,
                       SizeArg num_heads, double dropout, BoolArg bias = false, Generator& gen = default_generator());
    explicit MultiHeadAttention(const MultiHeadAttentionOptions& options, Generator& gen = default_generator());

    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const Tensor& valid_lens = Tensor());
    /// mask: AttentionMask() (every key), ::valid_lens(lens), ::attend_where(bool (batch, Tq, Tk)
    /// or (Tq, Tk), true = attend) or ::causal().
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const AttentionMask& mask);

    /// Per-head weights of the last forward, before dropout: (batch, num_heads, Tq, Tk);
    /// undefined before the first forward. A copy, reshaped (with gradient to the weights): a
    /// write to it stays in it. d2l's (batch·num_heads, Tq, Tk), the tensor the module keeps, is
    /// attention()->attention_weights().
    /// Throws xgrad::Error when the last forward kept no weights (see need_weights).
    Tensor attention_weights_copy() const;

    /// Whether forward keeps the attention weights, torch's need_weights: true always keeps
    /// them (materialised), false never, unset (the default) when the heads are short enough
    /// for the materialised path (see DotProductAttention::need_weights). Heads of Tq·Tk from
    /// 512·512 otherwise run the fused flash_attention, which holds no weights.
    MultiHeadAttention& need_weights(std::optional<bool> keep) {
        m_attention->need_weights(keep);
        return *this;
    }

    std::size_t num_heads() const { return m_num_heads; }
    std::size_t num_hiddens() const { return m_W_o->out_features(); }
    std::size_t key_size() const { return m_key_size; }
    std::size_t query_size() const { return m_query_size; }
    std::size_t value_size() const { return m_value_size; }
    const std::shared_ptr<DotProductAttention>& attention() const { return m_attention; }
    const std::shared_ptr<Linear>& W_q() const { return m_W_q; }
    const std::shared_ptr<Linear>& W_k() const { return m_W_k; }
    const std::shared_ptr<Linear>& W_v() const { return m_W_v; }
    const std::shared_ptr<Linear>& W_o() const { return m_W_o; }

private:
    std::size_t m_key_size;
    std::size_t m_query_size;
    std::size_t m_value_size;
    std::size_t m_num_heads;
    std::shared_ptr<DotProductAttention> m_attention;
    std::shared_ptr<Linear> m_W_q;
    std::shared_ptr<Linear> m_W_k;
    std::shared_ptr<Linear> m_W_v;
    std::shared_ptr<Linear> m_W_o;
};

}  // namespace xgrad::nn
