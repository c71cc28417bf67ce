#pragma once
/// The row-softmax kernel every softmax in xgrad runs on: softmax and log_softmax along any
/// axis, the masked softmax, the head-attention weights and cross-entropy. Internal to core.
///
/// A row of n scores x gives y = softmax(x) over the keys the mask keeps, with masked keys
/// exactly 0 whatever the kept scores are (d2l fills them with -1e6, which gives them weight
/// once every kept score is below about -1e6 - 87); a row that keeps no key is uniform, 1/n
/// each, as d2l's all -1e6 row. Where d2l's fill already gave the masked keys 0 (the kept
/// maximum above -1e6 + 87 in float, + 745 in double: every ordinary row) the bits are d2l's.
/// float rows use the vectorised exp of runtime/vec_math.hpp, double rows std::exp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/attention_mask.hpp"
#include "core/bool_bytes.hpp"
#include "core/runtime/vec_math.hpp"

namespace xgrad::kernel {

/// max of x[0..n), n ≥ 1. With a NaN in x the result may or may not be NaN; either way the
/// exps below give NaN for that key and so a NaN sum, so every softmax row with a NaN among its
/// kept keys becomes NaN, as in torch (test_adversarial_nan.cpp checks every kernel and dtype).
template <class T> T row_max(const T* x, std::size_t n) {
    if constexpr (std::is_same_v<T, float>) {
        return vec::max_of(x, n);
    } else {
        T m = x[0];
        for (std::size_t j = 1; j < n; ++j) m = std::max(m, x[j]);
        return m;
    }
}

/// y[j] = e^(x[j] − m) for j < n (x[j] ≤ m); returns Σ y[j]. y may be x.
template <class T> T exp_shifted_sum(const T* x, T m, T* y, std::size_t n) {
    if constexpr (std::is_same_v<T, float>) {
        return vec::exp_shifted_sum(x, m, y, n);
    } else {
        T z = 0;
        for (std::size_t j = 0; j < n; ++j) z += (y[j] = std::exp(x[j] - m));
        return z;
    }
}

// A prefix row's shift: the largest of its L kept scores (unused when it keeps none).
template <class T> T prefix_shift(const T* x, std::size_t L) { return L > 0 ? row_max(x, L) : T(0); }

// A row that keeps no key: uniform, as d2l's row of fills.
template <class T> void uniform_row(T* y, std::size_t n) {
    const T u = T(1) / static_cast<T>(n);
    for (std::size_t j = 0; j < n; ++j) y[j] = u;
}

// A prefix row once y[0..L) holds its kept exps, summing to z: the division, and 0 for the
// masked keys (0·(1/z): NaN when a NaN among the kept scores made z NaN, as the whole row is).
template <class T> void finish_prefix_row(T* y, std::size_t n, std::size_t L, T z) {
    if (L == 0) return uniform_row(y, n);
    const T inv = T(1) / z;
    for (std::size_t j = 0; j < L; ++j) y[j] *= inv;
    for (std::size_t j = L; j < n; ++j) y[j] = T(0) * inv;
}

/// y = softmax of the n scores x over keys j < L, masked keys 0 (L = 0: uniform; L = n:
/// unmasked). y may be x.
template <class T> void softmax_prefix(const T* x, T* y, std::size_t n, std::size_t L) {
    const T m = prefix_shift(x, L);
    finish_prefix_row(y, n, L, exp_shifted_sum(x, m, y, L));
}

/// softmax_prefix of `rows` consecutive rows of n, row i keeping L[i] keys; the same bits as
/// one call per row. float rows take their exps together (vec::exp_shifted_rows): a row of a
/// few keys is one vector, whose exp is a chain of dependent steps that rows taken one at a
/// time would wait out one after another.
template <class T> void softmax_prefix_rows(const T* x, T* y, std::size_t n, const std::size_t* L, std::size_t rows) {
    if constexpr (std::is_same_v<T, float>) {
        constexpr std::size_t kGroup = 32;
        float m[kGroup], z[kGroup];
        for (std::size_t r0 = 0; r0 < rows; r0 += kGroup) {
            const std::size_t g = std::min(kGroup, rows - r0);
            for (std::size_t i = 0; i < g; ++i) m[i] = prefix_shift(x + (r0 + i) * n, L[r0 + i]);
            vec::exp_shifted_rows(x + r0 * n, n, m, L + r0, y + r0 * n, z, g);
            for (std::size_t i = 0; i < g; ++i) finish_prefix_row(y + (r0 + i) * n, n, L[r0 + i], z[i]);
        }
    } else {
        for (std::size_t i = 0; i < rows; ++i) softmax_prefix(x + i * n, y + i * n, n, L[i]);
    }
}

/// log Σ e^x[j] over the n scores (stable); `scratch` holds n values.
template <class T> T logsumexp(const T* x, std::size_t n, T* scratch) {
    const T m = row_max(x, n);
    return m + std::log(exp_shifted_sum(x, m, scratch, n));
}

/// Backward of a softmax row y given the upstream g: d = y ⊙ (g − Σ g⊙y), 0 where keep is
/// false (keys j ≥ L for a prefix, or keep[j] false for a bool mask row). float rows sum in
/// eight partial sums (vec::softmax_grad), double rows in one.
template <class T> void softmax_grad_prefix(const T* y, const T* g, T* d, std::size_t n, std::size_t L) {
    if constexpr (std::is_same_v<T, float>) {
        vec::softmax_grad(y, g, d, n, L);
    } else {
        T dot = 0;
        for (std::size_t j = 0; j < n; ++j) dot += g[j] * y[j];
        for (std::size_t j = 0; j < L; ++j) d[j] = y[j] * (g[j] - dot);
        for (std::size_t j = L; j < n; ++j) d[j] = T(0);
    }
}

/// Rows of scores (batch·queries, keys) under a resolved mask: forward and backward of row r.
class MaskedRows {
public:
    explicit MaskedRows(const ResolvedMask& mask) : m_mask(mask), m_by_mask(mask.by_mask()) {
        if (m_by_mask) m_where = bool_bytes(mask.where());
    }
    /// y = masked softmax of row r's scores x (y may be x).
    template <class T> void forward(std::size_t r, const T* x, T* y) const {
        const std::size_t n = m_mask.keys();
        if (n == 0) return;  // no keys: nothing to write, and no prefix table to read
        if (!m_by_mask) return softmax_prefix(x, y, n, m_mask.prefix()[r]);
        // Masked keys scored -inf: their exps are exactly 0 and they never raise the max, so
        // the row runs the unmasked kernel, lanes and sums as with d2l's fill.
        const std::uint8_t* keep = keep_row(r);
        const T fill = -std::numeric_limits<T>::infinity();
        bool any = false;
        for (std::size_t j = 0; j < n; ++j) {
            y[j] = keep[j] ? x[j] : fill;
            any |= keep[j] != 0;
        }
        if (!any) return uniform_row(y, n);
        softmax_prefix(y, y, n, n);
    }
    /// forward() of rows r, r + 1, ... r + count − 1, stored one after another (n apart).
    template <class T> void forward_rows(std::size_t r, std::size_t count, const T* x, T* y) const {
        const std::size_t n = m_mask.keys();
        if (n == 0) return;
        if (!m_by_mask) return softmax_prefix_rows(x, y, n, m_mask.prefix().data() + r, count);
        for (std::size_t i = 0; i < count; ++i) forward(r + i, x + i * n, y + i * n);
    }
    /// d = gradient of row r's scores from its weights y and their gradient g.
    template <class T> void backward(std::size_t r, const T* y, const T* g, T* d) const {
        const std::size_t n = m_mask.keys();
        if (n == 0) return;
        if (!m_by_mask) return softmax_grad_prefix(y, g, d, n, m_mask.prefix()[r]);
        softmax_grad_prefix(y, g, d, n, n);
        const std::uint8_t* keep = keep_row(r);
        for (std::size_t j = 0; j < n; ++j)
            if (!keep[j]) d[j] = T(0);
    }

private:
    // the mask's bytes (bool_bytes): any but 0 keeps the key
    const std::uint8_t* keep_row(std::size_t r) const {
        return m_where + (m_mask.shared() ? r % m_mask.queries() : r) * m_mask.keys();
    }
    const ResolvedMask& m_mask;
    bool m_by_mask;  // (an empty bool mask has a null data pointer: the flag decides, not the pointer)
    const std::uint8_t* m_where = nullptr;
};

}  // namespace xgrad::kernel
