#include "dot_product_attention.hpp"

#include <cmath>
#include <utility>

#include "core/call_context.hpp"
#include "core/ops.hpp"
#include "core/flash_attention.hpp"
#include "core/random.hpp"

namespace xgrad::nn {

DotProductAttention::DotProductAttention(double dropout) try
    : Module(detail::enter_constructor("DotProductAttention")),  // a refused p names this module
      m_dropout(register_module("dropout", std::make_shared<Dropout>(dropout))) {
    detail::leave_call();
} catch (...) {
    detail::leave_constructor("DotProductAttention");
}

Tensor DotProductAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                    const Tensor& valid_lens) {
    return as_call("DotProductAttention", [&]() -> Tensor {
        return forward(queries, keys, values, AttentionMask::valid_lens(valid_lens));
    });
}

Tensor DotProductAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                    const AttentionMask& mask) {
    return as_call("DotProductAttention", [&]() -> Tensor {
        return forward_heads(queries, keys, values, 1, mask);
    });
}

Tensor DotProductAttention::forward_heads(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                          std::size_t num_heads, const AttentionMask& mask) {
    // queries: (batch, Tq, H·d), keys: (batch, Tk, H·d), values: (batch, Tk, H·v)
    constexpr const char* who = "DotProductAttention";
    check_attention_inputs(who, queries, keys, values);
    if (queries.size(2) != keys.size(2))
        throw Error(fmt::format("{}: queries and keys must have the same last axis, got queries {} and keys {}", who,
                                shape_str(queries.shape()), shape_str(keys.shape())));
    if (num_heads == 0) throw Error(fmt::format("{}: num_heads must be positive, got 0", who));
    for (const auto& [arg, t] : {std::pair{"queries", &queries}, std::pair{"values", &values}})
        if (t->size(2) % num_heads != 0)
            throw Error(fmt::format("{}: {}' last axis ({}) must be divisible by num_heads ({}), got shape {}", who,
                                    arg, t->size(2), num_heads, shape_str(t->shape())));
    return forward_heads(queries, keys, values, num_heads,
                         mask.resolve(who, queries.size(0), queries.size(1), keys.size(1)));
}

Tensor DotProductAttention::forward_heads(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                          std::size_t num_heads, const ResolvedMask& mask) {
    // 1/√d; without features (d = 0) every score sums nothing and is 0 whatever the scale, and
    // head_attention_weights refuses an infinite one.
    const double d = static_cast<double>(queries.size(2) / num_heads);
    const double scale = d > 0 ? 1.0 / std::sqrt(d) : 1.0;
    const std::size_t Tq = queries.size(1), Tk = keys.size(1), dh = queries.size(2) / num_heads;
    if (uses_fused(Tq, Tk, dh)) {
        // The fused path's dropout: one seed from the thread's generator per forward, in
        // training only, as the module's Dropout draws its masks.
        const double p = is_training() ? m_dropout->p() : 0.0;
        const std::uint64_t seed = p > 0 ? default_generator().engine()() : 0;
        const Tensor out = flash_attention(queries, keys, values, num_heads, scale, mask, p, seed);
        Tensor previous;
        {
            const std::lock_guard<std::mutex> lock(m_weights_mutex);
            previous = std::exchange(m_attention_weights, Tensor());
            m_not_kept = fmt::format("it ran the fused attention on heads of {} queries × {} keys", Tq, Tk);
        }
        return out;
    }
    // The local handle, not the member, goes on: another thread's forward may replace the member.
    const Tensor weights = head_attention_weights(queries, keys, num_heads, scale, mask);
    const bool keep = m_need_weights.value_or(true);
    Tensor previous;  // released after the lock: it may hold a whole graph
    {
        const std::lock_guard<std::mutex> lock(m_weights_mutex);
        previous = std::exchange(m_attention_weights, keep ? weights : Tensor());
        m_not_kept = keep ? std::string() : std::string("need_weights(false) was set");
    }
    return head_attention_combine(m_dropout->forward(weights), values, num_heads);  // (batch, Tq, H·v)
}

DotProductAttention& DotProductAttention::need_weights(std::optional<bool> keep) {
    m_need_weights = keep;
    return *this;
}

bool DotProductAttention::uses_fused(std::size_t Tq, std::size_t Tk, std::size_t d) const {
    return !m_need_weights.value_or(false) && flash_attention_faster(Tq, Tk, d);
}

Tensor DotProductAttention::attention_weights() const {
    const std::lock_guard<std::mutex> lock(m_weights_mutex);
    if (!m_not_kept.empty())
        throw Error(fmt::format("DotProductAttention::attention_weights: the last forward kept no weights ({}); call "
                                "need_weights(true) on this module (or on the MultiHeadAttention that holds it) "
                                "before forward to keep them",
                                m_not_kept));
    return m_attention_weights;
}

void need_attention_weights(Module& model, std::optional<bool> keep) {
    for (const auto& [name, m] : model.named_modules())
        if (auto* a = dynamic_cast<DotProductAttention*>(m)) a->need_weights(keep);
}

}  // namespace xgrad::nn
