#include "additive_attention.hpp"

#include <utility>

#include "core/call_context.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

AdditiveAttention::AdditiveAttention(SizeArg key_size, SizeArg query_size, SizeArg num_hiddens_arg,
                                     double dropout, Generator& gen) try
    // Constructed as the user's call (detail::enter_constructor): what a projection refuses, or
    // running out of memory for its weights, names AdditiveAttention.
    : Module(detail::enter_constructor("AdditiveAttention")),
      m_key_size(key_size.get("AdditiveAttention", "key_size")),
      m_query_size(query_size.get("AdditiveAttention", "query_size")),
      m_W_k(register_module("W_k", std::make_shared<Linear>(m_key_size, num_hiddens_arg, false, gen))),
      m_W_q(register_module("W_q", std::make_shared<Linear>(m_query_size, num_hiddens_arg, false, gen))),
      m_w_v(register_module("w_v", std::make_shared<Linear>(num_hiddens_arg, 1, false, gen))),
      m_dropout(register_module("dropout", std::make_shared<Dropout>(dropout))) {
    detail::leave_call();
} catch (...) {
    detail::leave_constructor("AdditiveAttention");
}

Tensor AdditiveAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                  const Tensor& valid_lens) {
    return as_call("AdditiveAttention", [&]() -> Tensor {
        return forward(queries, keys, values, AttentionMask::valid_lens(valid_lens));
    });
}

Tensor AdditiveAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                  const AttentionMask& mask) {
    return as_call("AdditiveAttention", [&]() -> Tensor {
        // queries: (batch, Tq, query_size), keys: (batch, Tk, key_size), values: (batch, Tk, v)
        check_attention_inputs("AdditiveAttention", queries, keys, values);
        for (const auto& [arg, t] : {std::pair{"queries", &queries}, std::pair{"keys", &keys}, std::pair{"values", &values}})
            check_input_dtype("AdditiveAttention", arg, *t, m_W_q->weight().dtype());
        check_last_axis("AdditiveAttention", "queries", queries, "query_size", m_query_size);
        check_last_axis("AdditiveAttention", "keys", keys, "key_size", m_key_size);
        const ResolvedMask kept = mask.resolve("AdditiveAttention", queries.size(0), queries.size(1), keys.size(1));
        const Tensor q = m_W_q->forward(queries);  // (batch, Tq, h)
        const Tensor k = m_W_k->forward(keys);     // (batch, Tk, h)
        // Every query against every key by broadcasting: (batch, Tq, 1, h) + (batch, 1, Tk, h).
        const Tensor features = tanh(unsqueeze(q, 2) + unsqueeze(k, 1));  // (batch, Tq, Tk, h)
        const Tensor scores = squeeze(m_w_v->forward(features), -1);      // (batch, Tq, Tk)
        const Tensor weights = masked_softmax(scores, kept);
        Tensor previous;  // released after the lock: it may hold a whole graph
        {
            const std::lock_guard<std::mutex> lock(m_weights_mutex);
            previous = std::exchange(m_attention_weights, weights);
        }
        return bmm(m_dropout->forward(weights), values);  // (batch, Tq, v)
    });
}

Tensor AdditiveAttention::attention_weights() const {
    const std::lock_guard<std::mutex> lock(m_weights_mutex);
    return m_attention_weights;
}

}  // namespace xgrad::nn
