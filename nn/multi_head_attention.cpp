#include "multi_head_attention.hpp"

#include "core/ops.hpp"

namespace xgrad::nn {

namespace {

std::size_t checked_heads(std::size_t num_hiddens, std::size_t num_heads) {
    if (num_heads == 0) throw Error("MultiHeadAttention: num_heads must be positive, got 0");
    if (num_hiddens % num_heads != 0)
        throw Error(fmt::format("MultiHeadAttention: num_hiddens ({}) must be divisible by num_heads ({})",
                                num_hiddens, num_heads));
    return num_heads;
}

}  // namespace

Tensor transpose_qkv(const Tensor& X, std::size_t num_heads) {
    const long b = static_cast<long>(X.size(0)), n = static_cast<long>(X.size(1));
    // (b, n, h) → (b, n, H, h/H) → (b, H, n, h/H) → (b·H, n, h/H)
    const Tensor split = permute(reshape(X, {b, n, static_cast<long>(num_heads), -1}), {0, 2, 1, 3});
    return reshape(split, {-1, n, static_cast<long>(split.size(3))});
}

Tensor transpose_output(const Tensor& X, std::size_t num_heads) {
    const long n = static_cast<long>(X.size(1)), d = static_cast<long>(X.size(2));
    // (b·H, n, d) → (b, H, n, d) → (b, n, H, d) → (b, n, H·d)
    const Tensor joined = permute(reshape(X, {-1, static_cast<long>(num_heads), n, d}), {0, 2, 1, 3});
    return reshape(joined, {static_cast<long>(joined.size(0)), n, -1});
}

MultiHeadAttention::MultiHeadAttention(std::size_t key_size, std::size_t query_size, std::size_t value_size,
                                       std::size_t num_hiddens, std::size_t num_heads, double dropout,
                                       bool bias, Generator& gen)
    : Module("MultiHeadAttention"),
      m_key_size(key_size),
      m_query_size(query_size),
      m_value_size(value_size),
      m_num_heads(checked_heads(num_hiddens, num_heads)),
      m_attention(register_module("attention", std::make_shared<DotProductAttention>(dropout))),
      m_W_q(register_module("W_q", std::make_shared<Linear>(query_size, num_hiddens, bias, gen))),
      m_W_k(register_module("W_k", std::make_shared<Linear>(key_size, num_hiddens, bias, gen))),
      m_W_v(register_module("W_v", std::make_shared<Linear>(value_size, num_hiddens, bias, gen))),
      m_W_o(register_module("W_o", std::make_shared<Linear>(num_hiddens, num_hiddens, bias, gen))) {}

Tensor MultiHeadAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                   const Tensor& valid_lens) {
    return forward(queries, keys, values, AttentionMask::valid_lens(valid_lens));
}

Tensor MultiHeadAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                   const AttentionMask& mask) {
    // queries: (batch, Tq, query_size), keys: (batch, Tk, key_size), values: (batch, Tk, value_size)
    constexpr const char* who = "MultiHeadAttention";
    check_attention_inputs(who, queries, keys, values);
    check_last_axis(who, "queries", queries, "query_size", m_query_size);
    check_last_axis(who, "keys", keys, "key_size", m_key_size);
    check_last_axis(who, "values", values, "value_size", m_value_size);
    check_attention_mask(who, mask, queries.size(0), queries.size(1), keys.size(1));

    // After transpose_qkv: (batch·H, Tq or Tk, num_hiddens/H)
    const Tensor q = transpose_qkv(m_W_q->forward(queries), m_num_heads);
    const Tensor k = transpose_qkv(m_W_k->forward(keys), m_num_heads);
    const Tensor v = transpose_qkv(m_W_v->forward(values), m_num_heads);

    // Per-batch masks become per-(batch, head) rows: row b·H + h takes batch row b's.
    AttentionMask per_head = mask;
    if (mask.kind() == AttentionMask::Kind::valid_lens)
        per_head = AttentionMask::valid_lens(repeat_interleave(mask.tensor(), m_num_heads, 0));
    else if (mask.kind() == AttentionMask::Kind::attend_where && mask.tensor().dim() == 3)
        per_head = AttentionMask::attend_where(repeat_interleave(mask.tensor(), m_num_heads, 0));

    const Tensor out = m_attention->forward(q, k, v, per_head);  // (batch·H, Tq, num_hiddens/H)
    return m_W_o->forward(transpose_output(out, m_num_heads));   // (batch, Tq, num_hiddens)
}

Tensor MultiHeadAttention::attention_weights() const {
    const Tensor& w = m_attention->attention_weights();  // (batch·H, Tq, Tk)
    if (!w.defined()) return w;
    return reshape(
        w, {-1, static_cast<long>(m_num_heads), static_cast<long>(w.size(1)), static_cast<long>(w.size(2))});
}

}  // namespace xgrad::nn
