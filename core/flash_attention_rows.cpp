#include "core/flash_attention_rows.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>

namespace xgrad::flash_rows {

namespace {

constexpr std::size_t kLanes = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

#define XGRAD_ROW_LOOP inline __attribute__((always_inline))

// e^(x − m) of one value (t = x − m clamped to [−87, 88] so that the exponent bits are
// defined; the select restores 0 below −87 and NaN), written so that a loop of kLanes of them
// vectorises.
XGRAD_ROW_LOOP float exp_at(float x, float m) {
    const float t0 = x - m;
    const float t = std::min(88.0f, std::max(-87.0f, t0));
    const float k = (t * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = t - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const float v = p * __builtin_bit_cast(float, (static_cast<std::int32_t>(k) + 127) << 23);
    return t0 >= -87.0f ? v : (t0 == t0 ? 0.0f : t0);
}

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
        for (std::size_t l = 0; l < kLanes; ++l) s[l] += (y[j + l] = exp_at(x[j + l], m));
    if (j < n) {
        float in[kLanes], out[kLanes];
        for (std::size_t l = 0; l < kLanes; ++l) in[l] = j + l < n ? x[j + l] : kNegInf;
        for (std::size_t l = 0; l < kLanes; ++l) s[l] += (out[l] = exp_at(in[l], m));
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
        const float p = exp_at(row[c], L);
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

// The AVX2 copies (no "fma": the same roundings as the baseline copies).
__attribute__((target("avx2"), noinline, flatten)) float exp_avx2(const float* x, float m, float* y, std::size_t n) {
    return exp_row(x, m, y, n);
}
__attribute__((target("avx2"), noinline, flatten)) void online_avx2(float* S, std::size_t nq, std::size_t nk,
                                                                   const std::size_t* kept, float* m, float* l,
                                                                   float* rescale) {
    online_body(S, nq, nk, kept, m, l, rescale);
}
__attribute__((target("avx2"), noinline, flatten)) void grad_avx2(float* S, float* dP, std::size_t nq, std::size_t nk,
                                                                 const std::size_t* kept, const float* lse,
                                                                 const float* D, const bool* no_grad) {
    grad_body(S, dP, nq, nk, kept, lse, D, no_grad);
}

std::atomic<bool> g_baseline{false};

bool has_avx2() {
    static const bool cpu = __builtin_cpu_supports("avx2");
    return cpu && !g_baseline.load(std::memory_order_relaxed);
}

}  // namespace

bool runs_avx2() { return has_avx2(); }
void use_baseline(bool baseline) { g_baseline.store(baseline); }

float exp_shifted_sum(const float* x, float m, float* y, std::size_t n) {
    return has_avx2() ? exp_avx2(x, m, y, n) : exp_row(x, m, y, n);
}

void online_softmax(float* S, std::size_t nq, std::size_t nk, const std::size_t* kept, float* m, float* l,
                    float* rescale) {
    if (has_avx2()) return online_avx2(S, nq, nk, kept, m, l, rescale);
    online_body(S, nq, nk, kept, m, l, rescale);
}

void weights_grad(float* S, float* dP, std::size_t nq, std::size_t nk, const std::size_t* kept, const float* lse,
                  const float* D, const bool* no_grad) {
    if (has_avx2()) return grad_avx2(S, dP, nq, nk, kept, lse, D, no_grad);
    grad_body(S, dP, nq, nk, kept, lse, D, no_grad);
}

}  // namespace xgrad::flash_rows
