#include "functional.hpp"

#include <cmath>
#include <type_traits>

#include "core/creation.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"
#include "core/parallel.hpp"
#include "core/vec_math.hpp"

namespace xgrad::nn {

namespace {

constexpr double kMaskedScore = -1e6;  // d2l's fill: finite, so an all-masked row stays uniform

// "[1, 2]" for the flat index k of a tensor of `shape`.
std::string index_str(std::size_t k, const Shape& shape) {
    return fmt::format("[{}]", fmt::join(unravel_index(k, shape), ", "));
}

void check_length_values(const char* who, const char* arg, const Tensor& lens) {
    if (lens.dtype() == kBool)
        throw Error(
            fmt::format("{}: {} must hold whole numbers (int64, float32 or float64), got bool", who, arg));
    const auto v = lens.to_vector<double>();
    for (std::size_t k = 0; k < v.size(); ++k) {
        if (std::isnan(v[k]) || v[k] != std::floor(v[k]))
            throw Error(fmt::format("{}: {} must be whole numbers, got {} at {}", who, arg, v[k],
                                    index_str(k, lens.shape())));
        if (v[k] < 0)
            throw Error(fmt::format("{}: {} must be non-negative, got {} at {}", who, arg, v[k],
                                    index_str(k, lens.shape())));
    }
}

// Bool tensor, true where query i of batch row b may attend key j, broadcastable to
// (batch, queries, keys); undefined for Kind::all. The mask has been checked.
Tensor keep_mask(const AttentionMask& mask, std::size_t queries, std::size_t keys) {
    switch (mask.kind()) {
        case AttentionMask::Kind::all:
            return Tensor();
        case AttentionMask::Kind::attend_where:
            return mask.tensor();
        case AttentionMask::Kind::valid_lens: {
            const Tensor& lens = mask.tensor();
            const Tensor position = reshape(arange(static_cast<double>(keys), kFloat64), {1, 1, -1});
            // (batch,) → (batch, 1, 1); (batch, queries) → (batch, queries, 1)
            const Tensor limit = lens.dim() == 1 ? reshape(cast(lens, kFloat64), {-1, 1, 1})
                                                 : unsqueeze(cast(lens, kFloat64), 2);
            return lt(position, limit);
        }
        case AttentionMask::Kind::causal: {
            const Tensor key = reshape(arange(static_cast<double>(keys), kFloat64), {1, 1, -1});
            const Tensor last = reshape(arange(static_cast<double>(queries), kFloat64), {1, -1, 1}) +
                                static_cast<double>(keys - queries);
            return le(key, last);
        }
    }
    return Tensor();
}

// For masks that keep a prefix of each row (valid lengths, causal): how many leading keys each
// row of X (batch, queries, keys), flattened to batch·queries rows, keeps.
std::vector<std::size_t> kept_prefix(const AttentionMask& mask, std::size_t batch, std::size_t queries,
                                     std::size_t keys) {
    std::vector<std::size_t> keep(batch * queries, keys);
    if (mask.kind() == AttentionMask::Kind::valid_lens) {
        const auto lens = mask.tensor().to_vector<double>();  // checked: whole, non-negative
        const bool per_query = mask.tensor().dim() == 2;
        for (std::size_t r = 0; r < keep.size(); ++r)
            keep[r] = std::min(keys, static_cast<std::size_t>(lens[per_query ? r : r / queries]));
    } else {  // causal, aligned bottom-right: query i keeps keys j <= i + keys - queries
        for (std::size_t r = 0; r < keep.size(); ++r) keep[r] = r % queries + keys - queries + 1;
    }
    return keep;
}

// softmax(masked_fill(X, j >= keep[r], kMaskedScore), -1) as one op: no mask tensor and no
// filled copy. Values and gradients are those of the composition: masked scores take part in
// the max and the sum as kMaskedScore would (one exp per row), and get no gradient.
Tensor softmax_prefix(const Tensor& X, std::vector<std::size_t> keep) {
    const std::size_t n = X.size(2);
    return dispatch_floating("masked_softmax", X.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T fill = static_cast<T>(kMaskedScore);
        const T* x = values<T>(X).data();
        xt::xarray<T> out = xt::empty<T>(X.shape());
        T* y = out.data();
        const std::size_t grain = std::max<std::size_t>(1, 16384 / std::max<std::size_t>(n, 1));  // rows per chunk
        parallel_for(keep.size(), grain, [&](std::size_t r0, std::size_t r1) {
          for (std::size_t r = r0; r < r1; ++r) {
            const T* xr = x + r * n;
            T* yr = y + r * n;
            const std::size_t L = keep[r];
            T m = L < n ? fill : -std::numeric_limits<T>::infinity();
            T z = 0;
            if constexpr (std::is_same_v<T, float>) {
                if (L > 0) m = std::max(m, vec::max_of(xr, L));
                z = vec::exp_shifted_sum(xr, m, yr, L);
            } else {
                for (std::size_t j = 0; j < L; ++j) m = std::max(m, xr[j]);
                for (std::size_t j = 0; j < L; ++j) z += (yr[j] = std::exp(xr[j] - m));
            }
            const T e_masked = L < n ? std::exp(fill - m) : T(0);
            z += e_masked * static_cast<T>(n - L);
            const T inv = T(1) / z;
            for (std::size_t j = 0; j < L; ++j) yr[j] *= inv;
            for (std::size_t j = L; j < n; ++j) yr[j] = e_masked * inv;
          }
        });
        return make_result<T>(std::move(out), {X}, "masked_softmax",
                              [keep = std::move(keep), n, grain](Node& self, const Storage& gs) {
                                  // gx = y ⊙ (g − Σₖ g⊙y) at kept keys, 0 at masked ones
                                  const T* y = values<T>(self).data();
                                  const T* g = grad_as<T>(gs).data();
                                  xt::xarray<T> gx = xt::empty<T>(self.shape);
                                  T* d = gx.data();
                                  parallel_for(keep.size(), grain, [&](std::size_t r0, std::size_t r1) {
                                    for (std::size_t r = r0; r < r1; ++r) {
                                      const T *yr = y + r * n, *gr = g + r * n;
                                      T* dr = d + r * n;
                                      T dot = 0;
                                      for (std::size_t j = 0; j < n; ++j) dot += gr[j] * yr[j];
                                      const std::size_t L = keep[r];
                                      for (std::size_t j = 0; j < L; ++j) dr[j] = yr[j] * (gr[j] - dot);
                                      for (std::size_t j = L; j < n; ++j) dr[j] = T(0);
                                    }
                                  });
                                  accumulate<T>("masked_softmax", self.parents[0], std::move(gx));
                              });
    });
}

Tensor softmax_where(const Tensor& X, const Tensor& keep) {
    if (!keep.defined()) return softmax(X, -1);
    return softmax(masked_fill(X, logical_not(keep), kMaskedScore), -1);
}

}  // namespace

AttentionMask AttentionMask::valid_lens(const Tensor& lens) {
    return lens.defined() ? AttentionMask(Kind::valid_lens, lens) : AttentionMask();
}

AttentionMask AttentionMask::attend_where(const Tensor& mask) {
    if (!mask.defined()) throw Error("AttentionMask::attend_where: the mask is an undefined tensor");
    return AttentionMask(Kind::attend_where, mask);
}

AttentionMask AttentionMask::causal() { return AttentionMask(Kind::causal, Tensor()); }

void check_valid_lens(const char* who, const Tensor& lens, std::size_t batch, std::size_t queries) {
    if (!lens.defined()) return;
    const bool shape_ok = (lens.dim() == 1 && lens.size(0) == batch) ||
                          (lens.dim() == 2 && lens.shape() == Shape{batch, queries});
    if (!shape_ok)
        throw Error(fmt::format("{}: valid_lens must have shape ({},) or ({}, {}), got {}", who, batch, batch,
                                queries, shape_str(lens.shape())));
    check_length_values(who, "valid_lens", lens);
}

void check_attention_mask(const char* who, const AttentionMask& mask, std::size_t batch, std::size_t queries,
                          std::size_t keys) {
    switch (mask.kind()) {
        case AttentionMask::Kind::all:
            return;
        case AttentionMask::Kind::valid_lens:
            check_valid_lens(who, mask.tensor(), batch, queries);
            return;
        case AttentionMask::Kind::attend_where: {
            const Tensor& m = mask.tensor();
            if (m.dtype() != kBool)
                throw Error(fmt::format("{}: mask must be a bool tensor (true = attend), got {}", who,
                                        dtype_name(m.dtype())));
            if (m.shape() != Shape{batch, queries, keys} && m.shape() != Shape{queries, keys})
                throw Error(fmt::format("{}: mask must have shape {} or {}, got {}", who,
                                        shape_str({batch, queries, keys}), shape_str({queries, keys}),
                                        shape_str(m.shape())));
            return;
        }
        case AttentionMask::Kind::causal:
            if (keys < queries)
                throw Error(
                    fmt::format("{}: a causal mask needs at least as many keys as queries, got {} "
                                "queries and {} keys",
                                who, queries, keys));
            return;
    }
}

void check_attention_inputs(const char* who, const Tensor& queries, const Tensor& keys,
                            const Tensor& values) {
    const std::pair<const char*, const Tensor*> args[] = {
        {"queries", &queries}, {"keys", &keys}, {"values", &values}};
    for (const auto& [name, t] : args) {
        if (!t->defined()) throw Error(fmt::format("{}: {} is an undefined tensor", who, name));
        if (t->dim() != 3)
            throw Error(fmt::format("{}: {} must be 3-D (batch, length, features), got shape {}", who, name,
                                    shape_str(t->shape())));
    }
    if (queries.size(0) != keys.size(0) || keys.size(0) != values.size(0))
        throw Error(
            fmt::format("{}: queries, keys and values must have the same batch size, got {}, {} and {}", who,
                        shape_str(queries.shape()), shape_str(keys.shape()), shape_str(values.shape())));
    if (keys.size(1) != values.size(1))
        throw Error(
            fmt::format("{}: keys and values must have the same length (axis 1), got keys {} and "
                        "values {}",
                        who, shape_str(keys.shape()), shape_str(values.shape())));
}

void check_last_axis(const char* who, const char* arg, const Tensor& t, const char* size_name,
                     std::size_t size) {
    if (t.dim() == 0 || t.size(-1) != size)
        throw Error(fmt::format("{}: {} must have last axis {} = {}, got shape {}", who, arg, size_name, size,
                                shape_str(t.shape())));
}

Tensor sequence_mask(const Tensor& X, const Tensor& valid_len, double value) {
    if (X.dim() < 2)
        throw Error(fmt::format("sequence_mask: X must have at least 2 axes (n, maxlen, ...), got shape {}",
                                shape_str(X.shape())));
    if (!valid_len.defined() || valid_len.dim() != 1 || valid_len.size(0) != X.size(0))
        throw Error(fmt::format("sequence_mask: valid_len must have shape ({},), got {}", X.size(0),
                                valid_len.defined() ? shape_str(valid_len.shape()) : "an undefined tensor"));
    check_length_values("sequence_mask", "valid_len", valid_len);
    // mask (n, maxlen, 1, ...): position j < valid_len[i], broadcast over X's trailing axes.
    std::vector<long> row(X.dim(), 1), col(X.dim(), 1);
    row[1] = -1;
    col[0] = -1;
    const Tensor position = reshape(arange(static_cast<double>(X.size(1)), kFloat64), row);
    const Tensor keep = lt(position, reshape(cast(valid_len, kFloat64), col));
    return masked_fill(X, logical_not(keep), value);
}

Tensor masked_softmax(const Tensor& X, const Tensor& valid_lens) {
    return masked_softmax(X, AttentionMask::valid_lens(valid_lens));
}

Tensor masked_softmax(const Tensor& X, const AttentionMask& mask) {
    if (mask.kind() == AttentionMask::Kind::all) return softmax(X, -1);
    if (X.dim() != 3)
        throw Error(
            fmt::format("masked_softmax: X must be 3-D (batch, queries, keys) when masked, got shape {}",
                        shape_str(X.shape())));
    check_attention_mask("masked_softmax", mask, X.size(0), X.size(1), X.size(2));
    if (mask.kind() == AttentionMask::Kind::valid_lens || mask.kind() == AttentionMask::Kind::causal)
        return softmax_prefix(X, kept_prefix(mask, X.size(0), X.size(1), X.size(2)));
    return softmax_where(X, keep_mask(mask, X.size(1), X.size(2)));
}

}  // namespace xgrad::nn
