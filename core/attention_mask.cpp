#include "core/attention_mask.hpp"

#include <algorithm>
#include <cmath>
#include <new>

#include "core/runtime/alloc.hpp"

namespace xgrad {

AttentionMask AttentionMask::valid_lens(const Tensor& lens) {
    return lens.defined() ? AttentionMask(Kind::valid_lens, lens) : AttentionMask();
}

AttentionMask AttentionMask::attend_where(const Tensor& mask) {
    if (!mask.defined()) throw Error("AttentionMask::attend_where: the mask is an undefined tensor");
    return AttentionMask(Kind::attend_where, mask);
}

AttentionMask AttentionMask::causal() { return AttentionMask(Kind::causal, Tensor()); }

namespace {

// The table of keys kept per row, batch·queries long, left unfilled. None without keys: every
// row keeps 0 of them, and 2^40 empty rows must cost nothing. Running out of memory for it is
// an Error naming `who` and the scores' shape, as for an op's result (AllocContext).
std::vector<std::size_t> row_table(const char* who, std::size_t batch, std::size_t queries, std::size_t keys) {
    const Shape scores{batch, queries, keys};
    checked_numel(who, scores, [] { return std::string("the scores (batch, queries, keys) the mask is resolved for"); });
    if (keys == 0) return {};
    try {
        return std::vector<std::size_t>(batch * queries);
    } catch (const std::bad_alloc&) {
        const AllocContext context(who, scores);
        throw_out_of_memory(batch * queries, sizeof(std::size_t));
    }
}

// The lengths as keys kept per row: whole, finite, non-negative, capped at `keys`.
std::vector<std::size_t> kept_lengths(const char* who, const char* arg, const Tensor& lens, std::size_t batch,
                                      std::size_t queries, std::size_t keys) {
    const bool shape_ok = (lens.dim() == 1 && lens.shape()[0] == batch) ||
                          (lens.dim() == 2 && lens.shape() == Shape{batch, queries});
    if (!shape_ok)
        throw Error(fmt::format("{}: {} must have shape ({},) or ({}, {}), got {}", who, arg, batch, batch,
                                queries, shape_str(lens.shape())));
    if (lens.dtype() == kBool)
        throw Error(fmt::format("{}: {} must hold whole numbers (int64, float32 or float64), got bool", who, arg));
    const auto v = lens.to_vector<double>();
    for (std::size_t k = 0; k < v.size(); ++k) {
        const auto where = [&] { return fmt::format("[{}]", fmt::join(unravel_index(k, lens.shape()), ", ")); };
        if (!std::isfinite(v[k]) || v[k] != std::floor(v[k]))
            throw Error(fmt::format("{}: {} must be whole numbers, got {} at {}", who, arg, v[k], where()));
        if (v[k] < 0)
            throw Error(fmt::format("{}: {} must be non-negative, got {} at {}", who, arg, v[k], where()));
    }
    const bool per_query = lens.dim() == 2;
    std::vector<std::size_t> keep = row_table(who, batch, queries, keys);
    for (std::size_t r = 0; r < keep.size(); ++r) {
        // A whole v in [0, 2^64) converts exactly; larger ones, like any beyond `keys`, mean every key.
        const double v_r = v[per_query ? r : r / queries];
        keep[r] = v_r >= 0x1p64 ? keys : std::min(keys, static_cast<std::size_t>(v_r));
    }
    return keep;
}

}  // namespace

ResolvedMask AttentionMask::resolve(const char* who, std::size_t batch, std::size_t queries, std::size_t keys,
                                    const char* arg) const {
    ResolvedMask r;
    r.m_batch = batch;
    r.m_queries = queries;
    r.m_keys = keys;
    switch (m_kind) {
        case Kind::all:
            r.m_prefix = row_table(who, batch, queries, keys);
            std::fill(r.m_prefix.begin(), r.m_prefix.end(), keys);
            break;
        case Kind::valid_lens:
            r.m_prefix = kept_lengths(who, arg, m_tensor, batch, queries, keys);
            break;
        case Kind::causal:
            if (keys < queries)
                throw Error(fmt::format("{}: a causal mask needs at least as many keys as queries, got {} queries "
                                        "and {} keys",
                                        who, queries, keys));
            // aligned bottom-right: query i keeps keys j <= i + keys - queries
            r.m_prefix = row_table(who, batch, queries, keys);
            for (std::size_t row = 0; row < r.m_prefix.size(); ++row)
                r.m_prefix[row] = row % queries + keys - queries + 1;
            break;
        case Kind::attend_where:
            if (m_tensor.dtype() != kBool)
                throw Error(fmt::format("{}: mask must be a bool tensor (true = attend), got {}", who,
                                        dtype_name(m_tensor.dtype())));
            if (m_tensor.shape() != Shape{batch, queries, keys} && m_tensor.shape() != Shape{queries, keys})
                throw Error(fmt::format("{}: mask must have shape {} or {}, got {}", who,
                                        shape_str({batch, queries, keys}), shape_str({queries, keys}),
                                        shape_str(m_tensor.shape())));
            r.m_where = m_tensor;
            r.m_shared = m_tensor.dim() == 2;
            break;
    }
    return r;
}

void ResolvedMask::check_fits(const char* op, std::size_t batch, std::size_t queries, std::size_t keys) const {
    if (batch != m_batch || queries != m_queries || keys != m_keys)
        throw Error(fmt::format("{}: the mask was resolved for scores {}, got {}", op,
                                shape_str({m_batch, m_queries, m_keys}), shape_str({batch, queries, keys})));
}

}  // namespace xgrad
