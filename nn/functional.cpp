#include "functional.hpp"

#include <cmath>
#include <limits>
#include <type_traits>

#include "core/blas.hpp"
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

// A defined tensor of 3 axes (batch, length, features), or an error naming op and argument.
void check_3d(const char* op, const char* arg, const Tensor& t) {
    if (!t.defined()) throw Error(fmt::format("{}: {} is an undefined tensor", op, arg));
    if (t.dim() != 3)
        throw Error(fmt::format("{}: {} must be 3-D (batch, length, features), got shape {}", op, arg,
                                shape_str(t.shape())));
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

// Which keys each row r = b·queries + i of scores (batch, queries, keys) keeps: the first
// prefix[r] (every key, valid lengths, causal), or, when by_mask, the true entries of a bool
// mask (batch, queries, keys) or (queries, keys) that the kernels get as a pointer (the mask
// tensor is a parent of the op, so it lives as long as the backward needs it).
struct kept_keys {
    std::size_t queries = 0, keys = 0;
    std::vector<std::size_t> prefix;
    bool by_mask = false;
    bool shared = false;  // a (queries, keys) mask, one for the whole batch
    const bool* row(const bool* where, std::size_t r) const {
        return where + (shared ? r % queries : r) * keys;
    }
};

kept_keys kept_keys_of(const AttentionMask& mask, std::size_t batch, std::size_t queries, std::size_t keys) {
    kept_keys k;
    k.queries = queries;
    k.keys = keys;
    switch (mask.kind()) {
        case AttentionMask::Kind::all:
            k.prefix.assign(batch * queries, keys);
            break;
        case AttentionMask::Kind::valid_lens:
        case AttentionMask::Kind::causal:
            k.prefix = kept_prefix(mask, batch, queries, keys);
            break;
        case AttentionMask::Kind::attend_where:
            k.by_mask = true;
            k.shared = mask.tensor().dim() == 2;
            break;
    }
    return k;
}

// The bool mask's values when the mask is one (it is then the op's parent `index`), else null.
const bool* where_of(const Node& self, const kept_keys& k, std::size_t index) {
    return k.by_mask ? values<bool>(self.parents[index]).data() : nullptr;
}

// One row of n scores x → y (y may be x): softmax with keys j ≥ L scored kMaskedScore. The
// masked keys take part in the max and the sum as the fill would (one exp for all of them).
template <class T> void softmax_row_prefix(const T* x, T* y, std::size_t n, std::size_t L) {
    const T fill = static_cast<T>(kMaskedScore);
    T m = L < n ? fill : -std::numeric_limits<T>::infinity();
    T z = 0;
    if constexpr (std::is_same_v<T, float>) {
        if (L > 0) m = std::max(m, vec::max_of(x, L));
        z = vec::exp_shifted_sum(x, m, y, L);
    } else {
        for (std::size_t j = 0; j < L; ++j) m = std::max(m, x[j]);
        for (std::size_t j = 0; j < L; ++j) z += (y[j] = std::exp(x[j] - m));
    }
    const T e_masked = L < n ? std::exp(fill - m) : T(0);
    z += e_masked * static_cast<T>(n - L);
    const T inv = T(1) / z;
    for (std::size_t j = 0; j < L; ++j) y[j] *= inv;
    for (std::size_t j = L; j < n; ++j) y[j] = e_masked * inv;
}

// The same where keep[j] is false: the plain softmax of the row filled with kMaskedScore.
template <class T> void softmax_row_where(const T* x, T* y, std::size_t n, const bool* keep) {
    const T fill = static_cast<T>(kMaskedScore);
    for (std::size_t j = 0; j < n; ++j) y[j] = keep[j] ? x[j] : fill;
    softmax_row_prefix(y, y, n, n);
}

template <class T>
void softmax_row(const kept_keys& k, const bool* where, std::size_t r, const T* x, T* y) {
    if (k.by_mask)
        softmax_row_where(x, y, k.keys, k.row(where, r));
    else
        softmax_row_prefix(x, y, k.keys, k.prefix[r]);
}

// Backward of one row: d = y ⊙ (g − Σₖ g⊙y) at kept keys, 0 at masked ones (the fill cuts them off).
template <class T>
void softmax_row_grad(const kept_keys& k, const bool* where, std::size_t r, const T* y, const T* g, T* d) {
    const std::size_t n = k.keys;
    T dot = 0;
    for (std::size_t j = 0; j < n; ++j) dot += g[j] * y[j];
    if (k.by_mask) {
        const bool* keep = k.row(where, r);
        for (std::size_t j = 0; j < n; ++j) d[j] = keep[j] ? y[j] * (g[j] - dot) : T(0);
    } else {
        const std::size_t L = k.prefix[r];
        for (std::size_t j = 0; j < L; ++j) d[j] = y[j] * (g[j] - dot);
        for (std::size_t j = L; j < n; ++j) d[j] = T(0);
    }
}

// softmax(masked_fill(X, not kept, kMaskedScore), -1) as one op: no mask tensor for lengths and
// causal, no filled copy for any mask. Values and gradients are those of the composition.
Tensor softmax_kept(const Tensor& X, const AttentionMask& mask) {
    const std::size_t n = X.size(2);
    kept_keys kept = kept_keys_of(mask, X.size(0), X.size(1), n);
    std::vector<Tensor> inputs{X};
    if (kept.by_mask) inputs.push_back(mask.tensor());
    return dispatch_floating("masked_softmax", X.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* x = values<T>(X).data();
        const bool* where = kept.by_mask ? values<bool>(mask.tensor()).data() : nullptr;
        xt::xarray<T> out = xt::empty<T>(X.shape());
        T* y = out.data();
        const std::size_t rows = X.size(0) * X.size(1);
        const std::size_t grain = std::max<std::size_t>(1, 16384 / std::max<std::size_t>(n, 1));  // rows per chunk
        parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) softmax_row(kept, where, r, x + r * n, y + r * n);
        });
        return make_result<T>(std::move(out), std::move(inputs), "masked_softmax",
                              [kept = std::move(kept), rows, n, grain](Node& self, const Storage& gs) {
                                  const bool* where = where_of(self, kept, 1);
                                  const T* y = values<T>(self).data();
                                  const T* g = grad_as<T>(gs).data();
                                  xt::xarray<T> gx = xt::empty<T>(self.shape);
                                  T* d = gx.data();
                                  parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
                                      for (std::size_t r = r0; r < r1; ++r)
                                          softmax_row_grad(kept, where, r, y + r * n, g + r * n, d + r * n);
                                  });
                                  accumulate<T>("masked_softmax", self.parents[0], std::move(gx));
                              });
    });
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
    check_3d(who, "queries", queries);
    check_3d(who, "keys", keys);
    check_3d(who, "values", values);
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
    return softmax_kept(X, mask);
}

// --- heads read and written in place -------------------------------------------------------

namespace {

void check_num_heads(const char* op, std::size_t num_heads) {
    if (num_heads == 0) throw Error(fmt::format("{}: num_heads must be positive, got 0", op));
}

void check_divisible(const char* op, const char* arg, const Tensor& t, std::size_t num_heads) {
    if (t.size(2) % num_heads != 0)
        throw Error(fmt::format("{}: {}' last axis ({}) must be divisible by num_heads ({}), got shape {}", op, arg,
                                t.size(2), num_heads, shape_str(t.shape())));
}

// A head's block of a packed output (rows of H·d, d of them its own) is written by one product.
// Such outputs start zeroed, in one contiguous pass, and the products add into them (beta = 1):
// with beta = 0 OpenBLAS first clears the strided block itself, row by row (sgemm_beta: 0.9% of
// the samples of a bench_mha --config large run; gone with the zero fill, memset unchanged).
//
// (b, h) pairs per parallel chunk: about 2^20 multiply-adds each, as the batched products.
std::size_t pair_grain(std::size_t rows, std::size_t cols, std::size_t inner) {
    return std::max<std::size_t>(1, (std::size_t(1) << 20) / std::max<std::size_t>(1, rows * cols * inner));
}

}  // namespace

void check_head_split(const char* who, const Tensor& queries, const Tensor& values, std::size_t num_heads) {
    check_num_heads(who, num_heads);
    check_divisible(who, "queries", queries, num_heads);
    check_divisible(who, "values", values, num_heads);
}

Tensor head_attention_weights(const Tensor& queries, const Tensor& keys, std::size_t num_heads, double scale,
                              const AttentionMask& mask) {
    constexpr const char* op = "head_attention_weights";
    check_3d(op, "queries", queries);
    check_3d(op, "keys", keys);
    check_num_heads(op, num_heads);
    if (queries.size(0) != keys.size(0))
        throw Error(fmt::format("{}: queries and keys must have the same batch size, got {} and {}", op,
                                shape_str(queries.shape()), shape_str(keys.shape())));
    if (queries.size(2) != keys.size(2))
        throw Error(fmt::format("{}: queries and keys must have the same last axis, got queries {} and keys {}", op,
                                shape_str(queries.shape()), shape_str(keys.shape())));
    check_divisible(op, "queries", queries, num_heads);
    check_same_dtype(op, queries, keys);
    const std::size_t B = queries.size(0), Lq = queries.size(1), Lk = keys.size(1), D = queries.size(2);
    const std::size_t H = num_heads, d = D / H;
    check_attention_mask(op, mask, B, Lq, Lk);
    kept_keys kept = kept_keys_of(mask, B, Lq, Lk);
    std::vector<Tensor> inputs{queries, keys};
    if (kept.by_mask) inputs.push_back(mask.tensor());
    return dispatch_floating(op, queries.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* Q = values<T>(queries).data();
        const T* K = values<T>(keys).data();
        const bool* where = kept.by_mask ? values<bool>(mask.tensor()).data() : nullptr;
        const T alpha = static_cast<T>(scale);
        const std::size_t grain = pair_grain(Lq, Lk, d);
        xt::xarray<T> out = xt::empty<T>(Shape{B * H, Lq, Lk});
        T* W = out.data();
        // Q_bh = Q[b, :, h·d:(h+1)·d] and K_bh likewise: row length D as stored.
        parallel_for(B * H, grain, [&](std::size_t p0, std::size_t p1) {
            for (std::size_t p = p0; p < p1; ++p) {
                const std::size_t b = p / H, h = p % H;
                T* S = W + p * Lq * Lk;
                // S = scale·Q_bh·K_bhᵀ : (Lq, d)·(d, Lk), then softmax in place row by row
                blas::gemm<T>(false, true, Lq, Lk, d, alpha, Q + b * Lq * D + h * d, D, K + b * Lk * D + h * d, D,
                              T(0), S, Lk);
                for (std::size_t i = 0; i < Lq; ++i) softmax_row(kept, where, b * Lq + i, S + i * Lk, S + i * Lk);
            }
        });
        return make_result<T>(
            std::move(out), std::move(inputs), op,
            [kept = std::move(kept), B, H, Lq, Lk, D, d, alpha, grain](Node& self, const Storage& gs) {
                const bool need_q = needs_grad(self, 0), need_k = needs_grad(self, 1);
                if (!need_q && !need_k) return;
                const bool* where = where_of(self, kept, 2);
                const T* W = values<T>(self).data();
                const T* G = grad_as<T>(gs).data();
                const T* Q = values<T>(self.parents[0]).data();
                const T* K = values<T>(self.parents[1]).data();
                // every element of dQ and dK is added by exactly one (b, h) product, into zeros
                xt::xarray<T> dq, dk;
                if (need_q) dq = xt::zeros<T>(Shape{B, Lq, D});
                if (need_k) dk = xt::zeros<T>(Shape{B, Lk, D});
                parallel_for(B * H, grain, [&](std::size_t p0, std::size_t p1) {
                    std::vector<T> dS(Lq * Lk);  // one (b, h) at a time
                    for (std::size_t p = p0; p < p1; ++p) {
                        const std::size_t b = p / H, h = p % H;
                        const std::size_t w0 = p * Lq * Lk, q0 = b * Lq * D + h * d, k0 = b * Lk * D + h * d;
                        for (std::size_t i = 0; i < Lq; ++i)
                            softmax_row_grad(kept, where, b * Lq + i, W + w0 + i * Lk, G + w0 + i * Lk,
                                             dS.data() + i * Lk);
                        if (need_q)  // dQ_bh = scale·dS·K_bh : (Lq, Lk)·(Lk, d)
                            blas::gemm<T>(false, false, Lq, d, Lk, alpha, dS.data(), Lk, K + k0, D, T(1),
                                          dq.data() + q0, D);
                        if (need_k)  // dK_bh = scale·dSᵀ·Q_bh : (Lk, Lq)·(Lq, d)
                            blas::gemm<T>(true, false, Lk, d, Lq, alpha, dS.data(), Lk, Q + q0, D, T(1),
                                          dk.data() + k0, D);
                    }
                });
                if (need_q) accumulate<T>("head_attention_weights", self.parents[0], std::move(dq));
                if (need_k) accumulate<T>("head_attention_weights", self.parents[1], std::move(dk));
            });
    });
}

Tensor head_attention_combine(const Tensor& weights, const Tensor& values, std::size_t num_heads) {
    constexpr const char* op = "head_attention_combine";
    check_3d(op, "weights", weights);
    check_3d(op, "values", values);
    check_num_heads(op, num_heads);
    const std::size_t B = values.size(0), Lk = values.size(1), E = values.size(2), H = num_heads;
    if (weights.size(0) != B * H || weights.size(2) != Lk)
        throw Error(fmt::format("{}: weights must have shape (batch·num_heads, queries, keys) = ({}, queries, {}) "
                                "for values {} and num_heads {}, got {}",
                                op, B * H, Lk, shape_str(values.shape()), H, shape_str(weights.shape())));
    check_divisible(op, "values", values, num_heads);
    check_same_dtype(op, weights, values);
    const std::size_t Lq = weights.size(1), dv = E / H;
    return dispatch_floating(op, values.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* W = xgrad::values<T>(weights).data();
        const T* V = xgrad::values<T>(values).data();  // qualified: the argument hides the function
        const std::size_t grain = pair_grain(Lq, dv, Lk);
        xt::xarray<T> out = xt::zeros<T>(Shape{B, Lq, E});
        // out_bh = out[b, :, h·dv:(h+1)·dv] = W_bh·V_bh : (Lq, Lk)·(Lk, dv), row length E as stored
        parallel_for(B * H, grain, [&](std::size_t p0, std::size_t p1) {
            for (std::size_t p = p0; p < p1; ++p) {
                const std::size_t b = p / H, h = p % H;
                blas::gemm<T>(false, false, Lq, dv, Lk, T(1), W + p * Lq * Lk, Lk, V + b * Lk * E + h * dv, E, T(1),
                              out.data() + b * Lq * E + h * dv, E);
            }
        });
        return make_result<T>(std::move(out), {weights, values}, op,
                              [B, H, Lq, Lk, E, dv, grain](Node& self, const Storage& gs) {
                                  const bool need_w = needs_grad(self, 0), need_v = needs_grad(self, 1);
                                  const T* W = xgrad::values<T>(self.parents[0]).data();
                                  const T* V = xgrad::values<T>(self.parents[1]).data();
                                  const T* G = grad_as<T>(gs).data();
                                  xt::xarray<T> dw, dval;
                                  if (need_w) dw = xt::empty<T>(Shape{B * H, Lq, Lk});
                                  if (need_v) dval = xt::zeros<T>(Shape{B, Lk, E});
                                  parallel_for(B * H, grain, [&](std::size_t p0, std::size_t p1) {
                                      for (std::size_t p = p0; p < p1; ++p) {
                                          const std::size_t b = p / H, h = p % H;
                                          const std::size_t g0 = b * Lq * E + h * dv, v0 = b * Lk * E + h * dv;
                                          if (need_w)  // dW_bh = G_bh·V_bhᵀ : (Lq, dv)·(dv, Lk)
                                              blas::gemm<T>(false, true, Lq, Lk, dv, T(1), G + g0, E, V + v0, E,
                                                            T(0), dw.data() + p * Lq * Lk, Lk);
                                          if (need_v)  // dV_bh = W_bhᵀ·G_bh : (Lk, Lq)·(Lq, dv)
                                              blas::gemm<T>(true, false, Lk, dv, Lq, T(1), W + p * Lq * Lk, Lk,
                                                            G + g0, E, T(1), dval.data() + v0, E);
                                      }
                                  });
                                  if (need_w) accumulate<T>("head_attention_combine", self.parents[0], std::move(dw));
                                  if (need_v) accumulate<T>("head_attention_combine", self.parents[1], std::move(dval));
                              });
    });
}

}  // namespace xgrad::nn
