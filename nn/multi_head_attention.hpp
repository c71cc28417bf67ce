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
class MultiHeadAttention : public Module {
public:
    MultiHeadAttention(std::size_t key_size, std::size_t query_size, std::size_t value_size,
                       std::size_t num_hiddens, std::size_t num_heads, double dropout, bool bias = false,
                       Generator& gen = default_generator());

    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const Tensor& valid_lens = Tensor());
    /// mask: AttentionMask() (every key), ::valid_lens(lens), ::attend_where(bool (batch, Tq, Tk)
    /// or (Tq, Tk), true = attend) or ::causal().
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const AttentionMask& mask);

    /// Per-head weights of the last forward, before dropout: (batch, num_heads, Tq, Tk);
    /// undefined before the first forward.
    Tensor attention_weights() const;

    std::size_t num_heads() const { return m_num_heads; }
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
