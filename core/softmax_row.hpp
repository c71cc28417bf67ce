#pragma once
/// The row-softmax kernel every softmax in xgrad runs on: softmax and log_softmax along any
/// axis, the masked softmax, the head-attention weights and cross-entropy. Internal to core.
///
/// A row of n scores x gives y = softmax(x) with the keys a mask leaves out scored as
/// kMaskedScore (-1e6, d2l's fill) rather than removed, so an all-masked row is uniform, as in
/// d2l. float rows use the vectorised exp of runtime/vec_math.hpp, double rows std::exp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/attention_mask.hpp"
#include "core/runtime/vec_math.hpp"

namespace xgrad::kernel {

constexpr double kMaskedScore = -1e6;

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

/// y = softmax of the n scores x with keys j ≥ L scored kMaskedScore (L = n: unmasked). The
/// masked keys take part in the max and the sum as the fill would, one exp for all of them.
/// y may be x.
template <class T> void softmax_prefix(const T* x, T* y, std::size_t n, std::size_t L) {
    const T fill = static_cast<T>(kMaskedScore);
    T m = L < n ? fill : -std::numeric_limits<T>::infinity();
    if (L > 0) m = std::max(m, row_max(x, L));
    T z = exp_shifted_sum(x, m, y, L);
    const T e_masked = L < n ? std::exp(fill - m) : T(0);
    z += e_masked * static_cast<T>(n - L);
    const T inv = T(1) / z;
    for (std::size_t j = 0; j < L; ++j) y[j] *= inv;
    for (std::size_t j = L; j < n; ++j) y[j] = e_masked * inv;
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
        if (m_by_mask) m_where = mask.where().const_data_ptr<bool>();
    }
    /// y = masked softmax of row r's scores x (y may be x).
    template <class T> void forward(std::size_t r, const T* x, T* y) const {
        const std::size_t n = m_mask.keys();
        if (!m_by_mask) return softmax_prefix(x, y, n, m_mask.prefix()[r]);
        const bool* keep = keep_row(r);
        const T fill = static_cast<T>(kMaskedScore);
        for (std::size_t j = 0; j < n; ++j) y[j] = keep[j] ? x[j] : fill;
        softmax_prefix(y, y, n, n);
    }
    /// d = gradient of row r's scores from its weights y and their gradient g.
    template <class T> void backward(std::size_t r, const T* y, const T* g, T* d) const {
        const std::size_t n = m_mask.keys();
        if (!m_by_mask) return softmax_grad_prefix(y, g, d, n, m_mask.prefix()[r]);
        softmax_grad_prefix(y, g, d, n, n);
        const bool* keep = keep_row(r);
        for (std::size_t j = 0; j < n; ++j)
            if (!keep[j]) d[j] = T(0);
    }

private:
    const bool* keep_row(std::size_t r) const {
        return m_where + (m_mask.shared() ? r % m_mask.queries() : r) * m_mask.keys();
    }
    const ResolvedMask& m_mask;
    bool m_by_mask;  // (an empty bool mask has a null data pointer: the flag decides, not the pointer)
    const bool* m_where = nullptr;
};

}  // namespace xgrad::kernel
