#include "multi_head_attention.hpp"

#include "core/call_context.hpp"
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
    // (b, n, h) → (b, n, H, h/H) → (b, H, n, h/H) → (b·H, n, h/H)
    if (num_heads == 0 || X.dim() != 3 || X.size(2) % num_heads != 0)
        throw Error(fmt::format("transpose_qkv: X must be 3-D with axis 2 divisible by num_heads ({}), got shape {}",
                                num_heads, shape_str(X.shape())));
    const long H = static_cast<long>(num_heads), b = X.size(0), n = X.size(1);
    const long d = X.size(2) / H;
    return X.reshape({b, n, H, d}).permute({0, 2, 1, 3}).reshape({b * H, n, d});
}

Tensor transpose_output(const Tensor& X, std::size_t num_heads) {
    // (b·H, n, d) → (b, H, n, d) → (b, n, H, d) → (b, n, H·d)
    if (num_heads == 0 || X.dim() != 3 || X.size(0) % num_heads != 0)
        throw Error(fmt::format("transpose_output: X must be 3-D with axis 0 divisible by num_heads ({}), got shape {}",
                                num_heads, shape_str(X.shape())));
    const long H = static_cast<long>(num_heads), n = X.size(1), d = X.size(2);
    const long b = X.size(0) / H;
    return X.reshape({b, H, n, d}).permute({0, 2, 1, 3}).reshape({b, n, H * d});
}

namespace {

MultiHeadAttentionOptions positional(SizeArg key_size, SizeArg query_size, SizeArg value_size, SizeArg num_hiddens,
                                     SizeArg num_heads, double dropout, bool bias) {
    constexpr const char* who = "MultiHeadAttention";
    // An explicit 0 is an error here (Linear says so), not "num_hiddens" as in the options.
    auto size = [&](const SizeArg& s, const char* what) {
        const std::size_t v = s.get(who, what);
        if (v == 0) throw Error(fmt::format("{}: {} must be positive, got 0", who, what));
        return v;
    };
    return MultiHeadAttentionOptions(size(num_hiddens, "num_hiddens"), num_heads.get(who, "num_heads"))
        .key_size(size(key_size, "key_size"))
        .query_size(size(query_size, "query_size"))
        .value_size(size(value_size, "value_size"))
        .dropout(dropout)
        .bias(bias);
}

std::size_t or_hiddens(std::size_t size, std::size_t num_hiddens) { return size == 0 ? num_hiddens : size; }

}  // namespace

MultiHeadAttention::MultiHeadAttention(SizeArg key_size, SizeArg query_size, SizeArg value_size,
                                       SizeArg num_hiddens, SizeArg num_heads, double dropout, BoolArg bias,
                                       Generator& gen)
    : MultiHeadAttention(positional(key_size, query_size, value_size, num_hiddens, num_heads, dropout, bias), gen) {}

// Constructed as the user's call (detail::enter_constructor): what a projection refuses, or
// running out of memory for its weights, names MultiHeadAttention.
MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionOptions& o, Generator& gen) try
    : Module(detail::enter_constructor("MultiHeadAttention")),
      m_key_size(or_hiddens(o.key_size(), o.num_hiddens())),
      m_query_size(or_hiddens(o.query_size(), o.num_hiddens())),
      m_value_size(or_hiddens(o.value_size(), o.num_hiddens())),
      m_num_heads(checked_heads(o.num_hiddens(), o.num_heads())),
      m_attention(register_module("attention", std::make_shared<DotProductAttention>(o.dropout()))),
      m_W_q(register_module("W_q", std::make_shared<Linear>(m_query_size, o.num_hiddens(), o.bias(), gen))),
      m_W_k(register_module("W_k", std::make_shared<Linear>(m_key_size, o.num_hiddens(), o.bias(), gen))),
      m_W_v(register_module("W_v", std::make_shared<Linear>(m_value_size, o.num_hiddens(), o.bias(), gen))),
      m_W_o(register_module("W_o", std::make_shared<Linear>(o.num_hiddens(), o.num_hiddens(), o.bias(), gen))) {
    detail::leave_call();
} catch (...) {
    detail::leave_constructor("MultiHeadAttention");
}

Tensor MultiHeadAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                   const Tensor& valid_lens) {
    return as_call("MultiHeadAttention", [&]() -> Tensor {
        return forward(queries, keys, values, AttentionMask::valid_lens(valid_lens));
    });
}

Tensor MultiHeadAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                   const AttentionMask& mask) {
    return as_call("MultiHeadAttention", [&]() -> Tensor {
        // queries: (batch, Tq, query_size), keys: (batch, Tk, key_size), values: (batch, Tk, value_size)
        constexpr const char* who = "MultiHeadAttention";
        check_attention_inputs(who, queries, keys, values);
        for (const auto& [arg, t] : {std::pair{"queries", &queries}, std::pair{"keys", &keys}, std::pair{"values", &values}})
            check_input_dtype(who, arg, *t, m_W_q->weight().dtype());
        check_last_axis(who, "queries", queries, "query_size", m_query_size);
        check_last_axis(who, "keys", keys, "key_size", m_key_size);
        check_last_axis(who, "values", values, "value_size", m_value_size);
        // Checked once, here: the mask is resolved (valid_lens read to the host) and passed down.
        const ResolvedMask kept = mask.resolve(who, queries.size(0), queries.size(1), keys.size(1));

        // The heads stay packed in the projections (batch, T, num_hiddens); the attention reads
        // them in place and writes its output merged, (batch, Tq, num_hiddens).
        const Tensor out = m_attention->forward_heads(m_W_q->forward(queries), m_W_k->forward(keys),
                                                      m_W_v->forward(values), m_num_heads, kept);
        return m_W_o->forward(out);  // (batch, Tq, num_hiddens)
    });
}

Tensor MultiHeadAttention::attention_weights_copy() const {
    const Tensor& w = m_attention->attention_weights();  // (batch·H, Tq, Tk)
    if (!w.defined()) return w;
    return reshape(w, {-1, static_cast<long>(m_num_heads), w.size(1), w.size(2)}).clone();
}

}  // namespace xgrad::nn
