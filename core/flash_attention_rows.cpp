#include "core/flash_attention_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/runtime/exp_kernel.hpp"
#include "core/runtime/simd_dispatch.hpp"

namespace xgrad::flash_rows {

namespace {

constexpr std::size_t kLanes = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

#define XGRAD_ROW_LOOP inline __attribute__((always_inline))

XGRAD_ROW_LOOP float combine(const float* s) {
    float a[8];
    for (std::size_t l = 0; l < 8; ++l) a[l] = s[l] + s[l + 8];
    const float total = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    return total == total ? total : std::numeric_limits<float>::quiet_NaN();
}

// y[0..n) = e^(x − m), Σ in kLanes lane sums; the tail as one padded block (−inf gives 0).
XGRAD_ROW_LOOP float exp_row(const float* x, float m, float* y, std::size_t n) {
    float s[kLanes] = {};
    std::size_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
        for (std::size_t l = 0; l < kLanes; ++l) s[l] += (y[j + l] = exp_kernel::shifted(x[j + l], m));
    if (j < n) {
        float in[kLanes], out[kLanes];
        for (std::size_t l = 0; l < kLanes; ++l) in[l] = j + l < n ? x[j + l] : kNegInf;
        for (std::size_t l = 0; l < kLanes; ++l) s[l] += (out[l] = exp_kernel::shifted(in[l], m));
        for (std::size_t l = 0; j + l < n; ++l) y[j + l] = out[l];
    }
    return combine(s);
}

XGRAD_ROW_LOOP float max_row(const float* x, std::size_t n) {
    float s[kLanes];
    for (std::size_t l = 0; l < kLanes; ++l) s[l] = kNegInf;
    std::size_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
        for (std::size_t l = 0; l < kLanes; ++l) s[l] = std::max(s[l], x[j + l]);
    for (std::size_t l = 0; j + l < n; ++l) s[l] = std::max(s[l], x[j + l]);
    for (std::size_t l = 0; l < 8; ++l) s[l] = std::max(s[l], s[l + 8]);
    return std::max(std::max(std::max(s[0], s[1]), std::max(s[2], s[3])),
                    std::max(std::max(s[4], s[5]), std::max(s[6], s[7])));
}

XGRAD_ROW_LOOP void online_body(float* S, std::size_t nq, std::size_t nk, const std::size_t* kept, float* m, float* l,
                                float* rescale) {
    for (std::size_t r = 0; r < nq; ++r) {
        float* row = S + r * nk;
        const std::size_t k = kept[r];
        std::fill(row + k, row + nk, 0.0f);
        if (k == 0) {
            rescale[r] = 1.0f;
            continue;
        }
        const float m_new = std::max(m[r], max_row(row, k));
        const float shift = m_new == kNegInf ? 0.0f : m_new;
        rescale[r] = std::exp(m[r] - shift);
        l[r] = l[r] * rescale[r] + exp_row(row, shift, row, k);
        m[r] = m_new;
    }
}

// One row of grad_body; Live false: the row keeps no key, dS = 0.
template <bool Live>
XGRAD_ROW_LOOP void grad_row(float* row, float* dp, std::size_t k, float L, float Di) {
    std::size_t j = 0;
    auto one = [&](std::size_t c) __attribute__((always_inline)) {
        const float p = exp_kernel::shifted(row[c], L);
        row[c] = p;
        dp[c] = Live ? p * (dp[c] - Di) : 0.0f;
    };
    for (; j + kLanes <= k; j += kLanes)
        for (std::size_t c = j; c < j + kLanes; ++c) one(c);
    for (; j < k; ++j) one(j);
}

XGRAD_ROW_LOOP void grad_body(float* S, float* dP, std::size_t nq, std::size_t nk, const std::size_t* kept,
                              const float* lse, const float* D, const bool* no_grad) {
    for (std::size_t r = 0; r < nq; ++r) {
        float* row = S + r * nk;
        float* dp = dP + r * nk;
        const std::size_t k = kept[r];
        if (no_grad[r]) grad_row<false>(row, dp, k, lse[r], D[r]);
        else grad_row<true>(row, dp, k, lse[r], D[r]);
        std::fill(row + k, row + nk, 0.0f);
        std::fill(dp + k, dp + nk, 0.0f);
    }
}

}  // namespace

float exp_shifted_sum(const float* x, float m, float* y, std::size_t n) {
    return simd_dispatch([&]() XGRAD_SIMD_BODY { return exp_row(x, m, y, n); });
}

void online_softmax(float* S, std::size_t nq, std::size_t nk, const std::size_t* kept, float* m, float* l,
                    float* rescale) {
    simd_dispatch([&]() XGRAD_SIMD_BODY { online_body(S, nq, nk, kept, m, l, rescale); });
}

void weights_grad(float* S, float* dP, std::size_t nq, std::size_t nk, const std::size_t* kept, const float* lse,
                  const float* D, const bool* no_grad) {
    simd_dispatch([&]() XGRAD_SIMD_BODY { grad_body(S, dP, nq, nk, kept, lse, D, no_grad); });
}

}  // namespace xgrad::flash_rows
