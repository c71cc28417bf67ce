#include "multi_head_attention.hpp"

#include "core/node.hpp"
#include "core/ops.hpp"
#include "core/parallel.hpp"

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

namespace {

// X viewed as (A, B, C, D) → its axes 1 and 2 swapped, (A, C, B, D), returned with shape
// `out` (same element count): one copy, where reshape·permute·reshape made three. The
// backward is the same swap the other way.
Tensor swap_middle(const Tensor& X, std::size_t A, std::size_t B, std::size_t C, std::size_t D, Shape out) {
    return dispatch_floating("transpose_qkv", X.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto swap = [](const T* src, T* dst, std::size_t A, std::size_t B, std::size_t C, std::size_t D) {
            // rows (a, b) of C·D elements each, split over the pool
            parallel_for(A * B, std::max<std::size_t>(1, 32768 / std::max<std::size_t>(C * D, 1)),
                         [&](std::size_t r0, std::size_t r1) {
                             for (std::size_t r = r0; r < r1; ++r) {
                                 const std::size_t a = r / B, b = r % B;
                                 for (std::size_t c = 0; c < C; ++c) {
                                     const T* s = src + (r * C + c) * D;
                                     std::copy(s, s + D, dst + ((a * C + c) * B + b) * D);
                                 }
                             }
                         });
        };
        xt::xarray<T> y = xt::empty<T>(out);
        swap(values<T>(X).data(), y.data(), A, B, C, D);
        return make_result<T>(std::move(y), {X}, "transpose_qkv",
                              [swap, A, B, C, D](Node& self, const Storage& gs) {
                                  const Tensor& x = self.parents[0];
                                  xt::xarray<T> gx = xt::empty<T>(x.shape());
                                  swap(grad_as<T>(gs).data(), gx.data(), A, C, B, D);
                                  accumulate<T>("transpose_qkv", x, std::move(gx));
                              });
    });
}

}  // namespace

void check_heads(const char* who, const Tensor& X, std::size_t num_heads, std::size_t split_axis) {
    if (num_heads == 0 || X.dim() != 3 || X.size(split_axis) % num_heads != 0)
        throw Error(fmt::format("{}: X must be 3-D with axis {} divisible by num_heads ({}), got shape {}", who,
                                split_axis, num_heads, shape_str(X.shape())));
}

Tensor transpose_qkv(const Tensor& X, std::size_t num_heads) {
    check_heads("transpose_qkv", X, num_heads, 2);
    const std::size_t b = X.size(0), n = X.size(1), d = X.size(2) / num_heads;
    // (b, n, h) as (b, n, H, h/H) → (b, H, n, h/H) → (b·H, n, h/H)
    return swap_middle(X, b, n, num_heads, d, {b * num_heads, n, d});
}

Tensor transpose_output(const Tensor& X, std::size_t num_heads) {
    check_heads("transpose_output", X, num_heads, 0);
    const std::size_t n = X.size(1), d = X.size(2), b = X.size(0) / num_heads;
    // (b·H, n, d) as (b, H, n, d) → (b, n, H, d) → (b, n, H·d)
    return swap_middle(X, b, num_heads, n, d, {b, n, num_heads * d});
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

    // The heads stay packed in the projections (batch, T, num_hiddens); the attention reads
    // them in place and writes its output merged, (batch, Tq, num_hiddens).
    const Tensor out = m_attention->forward_heads(m_W_q->forward(queries), m_W_k->forward(keys),
                                                  m_W_v->forward(values), m_num_heads, mask);
    return m_W_o->forward(out);  // (batch, Tq, num_hiddens)
}

Tensor MultiHeadAttention::attention_weights() const {
    const Tensor& w = m_attention->attention_weights();  // (batch·H, Tq, Tk)
    if (!w.defined()) return w;
    return reshape(
        w, {-1, static_cast<long>(m_num_heads), static_cast<long>(w.size(1)), static_cast<long>(w.size(2))});
}

}  // namespace xgrad::nn
