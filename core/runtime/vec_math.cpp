#include "core/runtime/vec_math.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/runtime/exp_kernel.hpp"
#include "core/runtime/kernel_loops.hpp"
#include "core/runtime/simd_dispatch.hpp"

namespace xgrad::vec {

namespace {

constexpr std::size_t kExpBlock = 16;

// y[l] = e^(x[l] − m) for one block of kExpBlock values: a fixed trip count, so that each level
// compiles it to whole vectors (one on AVX-512, four on SSE2) with no scalar remainder.
inline __attribute__((always_inline)) void exp_block(const float* x, float m, float* y) {
    for (std::size_t l = 0; l < kExpBlock; ++l) y[l] = exp_kernel::shifted(x[l], m);
}

// exp_shifted_sum's row, for the dispatched bodies below; `readable` values from x may be read
// (n or more), and those past n do not change the result.
inline __attribute__((always_inline)) float exp_row(const float* x, float m, float* y, std::size_t n,
                                                    std::size_t readable) {
    std::size_t j = 0;
    for (; j + kExpBlock <= n; j += kExpBlock) exp_block(x + j, m, y + j);
    if (j < n) {
        // The rest as a whole block too (attention over a few keys has rows shorter than one
        // vector, which would otherwise take the exp one value at a time), only its first n − j
        // values kept. Read in place when a whole block is readable (the next rows of a block
        // of rows): a block gathered value by value is read back before those stores reach the
        // cache, which stalls every row behind the one before it.
        float in[kExpBlock], out[kExpBlock];
        const float* src = x + j;
        if (readable - j < kExpBlock) {
            for (std::size_t l = 0; l < kExpBlock; ++l) in[l] = j + l < n ? x[j + l] : m;
            src = in;
        }
        exp_block(src, m, out);
        for (std::size_t l = 0; j + l < n; ++l) y[j + l] = out[l];
    }
    // eight partial sums: a vector of adds instead of one serial chain
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (j = 0; j + 8 <= n; j += 8)
        for (std::size_t l = 0; l < 8; ++l) s[l] += y[j + l];
    float total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; j < n; ++j) total += y[j];
    // One NaN for every NaN sum: which of two NaNs an addition keeps depends on the order the
    // compiler gives its operands, which may differ between the levels' loops.
    return total == total ? total : std::numeric_limits<float>::quiet_NaN();
}

// erf(x) within 2 ulp of std::erf: x + x·P(x²) for |x| < 1 (x·(1 + P) a fitted degree-6
// polynomial in x² with the constant 2/√π, relative error 1.3e-9 before rounding), else sign(x)·(1 − e^(−x²)·Q(t)) with t = 1/(1 + |x|/2)
// and Q a fitted degree-7 polynomial (erfc(x)·e^(x²) to 3.3e-10 relative on [1, 3.95]); beyond
// that e^(−x²)·Q rounds away against 1. Both branches computed, one kept: no branch per element.
inline __attribute__((always_inline)) float erf_any(float x) {
    const float a = std::fabs(x), u = x * x;
    float p = 7.898743934e-05f;
    p = p * u + -8.024831186e-04f;
    p = p * u + 5.190163385e-03f;
    p = p * u + -2.685491554e-02f;
    p = p * u + 1.128361747e-01f;
    p = p * u + -3.761262894e-01f;
    p = p * u + 1.283791661e-01f;  // 2/√π − 1: x + x·p keeps the leading term exact
    const float t = 1.0f / (1.0f + 0.5f * a);
    float q = 1.193305627e-01f;
    q = q * t + -4.712586999e-01f;
    q = q * t + 5.635287166e-01f;
    q = q * t + -1.039562300e-01f;
    q = q * t + 3.480290174e-01f;
    q = q * t + 2.596071064e-01f;
    q = q * t + 2.849274576e-01f;
    q = q * t + -1.553134935e-04f;
    const float tail = 1.0f - exp_kernel::any(-u) * q;
    return a < 1.0f ? x + x * p : std::copysign(tail, x);
}

// tanh as Cephes' tanhf: its odd polynomial below |x| = 0.625 (no cancellation near 0),
// 1 − 2/(e^{2|x|} + 1) with x's sign above.
inline __attribute__((always_inline)) float tanh_any(float x) {
    const float s = x * x;
    const float poly = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s +
                         1.33314422036e-1f) * s - 3.33332819422e-1f) * s * x + x;
    const float big = std::copysign(1.0f - 2.0f / (exp_kernel::any(2.0f * std::fabs(x)) + 1.0f), x);
    // x itself at ±0: the polynomial's sum would turn −0 into +0
    return std::fabs(x) < 0.625f ? (s == 0.0f ? x : poly) : big;
}

// One NaN for every NaN result, whichever operand's NaN an operation kept on this level.
inline __attribute__((always_inline)) float one_nan(float v) {
    return v == v ? v : std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

void exp(const float* x, float* y, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < n; ++i) y[i] = one_nan(exp_kernel::any(x[i]));
    });
}

void erf(const float* x, float* y, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < n; ++i) y[i] = one_nan(erf_any(x[i]));
    });
}

void tanh(const float* x, float* y, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < n; ++i) y[i] = one_nan(tanh_any(x[i]));
    });
}

void sigmoid(const float* x, float* y, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < n; ++i) y[i] = one_nan(1.0f / (1.0f + exp_kernel::any(-x[i])));
    });
}

void gelu(const float* x, float* y, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < n; ++i) {
            const float v = x[i];
            y[i] = one_nan(0.5f * v * (1.0f + erf_any(v * 0.707106781186547524f)));
        }
    });
}

void gelu_backward(const float* g, const float* x, float* d, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < n; ++i) {
            const float v = x[i];
            const float cdf = 0.5f * (1.0f + erf_any(v * 0.707106781186547524f));
            const float pdf = exp_kernel::any(-0.5f * v * v) * 0.398942280401432678f;
            d[i] = one_nan(g[i] * (cdf + v * pdf));
        }
    });
}

float exp_shifted_sum(const float* x, float m, float* y, std::size_t n) {
    return simd_dispatch([&]() XGRAD_SIMD_BODY { return exp_row(x, m, y, n, n); });
}

void exp_shifted_rows(const float* x, std::size_t stride, const float* m, const std::size_t* len, float* y,
                      float* sums, std::size_t rows) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < rows; ++i)
            sums[i] = exp_row(x + i * stride, m[i], y + i * stride, len[i], (rows - 1 - i) * stride + len[rows - 1]);
    });
}

float max_of(const float* x, std::size_t n) {
    return simd_dispatch([&]() XGRAD_SIMD_BODY {
        // eight running maxima, lane l over j ≡ l (mod 8), as two GCC vectors of four: written
        // as eight floats the compiler keeps them scalar (with NaN, max is no reduction it may
        // reorder); a vector of eight it splits into scalars on SSE2
        using f4 = float __attribute__((vector_size(16)));
        f4 lo = {x[0], x[0], x[0], x[0]}, hi = lo;
        std::size_t j = 0;
        for (; j + 8 <= n; j += 8) {
            f4 a, b;
            std::memcpy(&a, x + j, sizeof a);
            std::memcpy(&b, x + j + 4, sizeof b);
            lo = lo < a ? a : lo;  // std::max per lane
            hi = hi < b ? b : hi;
        }
        const float s[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
        float m = std::max(std::max(std::max(s[0], s[1]), std::max(s[2], s[3])),
                           std::max(std::max(s[4], s[5]), std::max(s[6], s[7])));
        for (; j < n; ++j) m = std::max(m, x[j]);
        return m;
    });
}

void softmax_grad(const float* y, const float* g, float* d, std::size_t n, std::size_t L) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        const float dot = lane_sum<float>(n, [&](std::size_t j) { return g[j] * y[j]; });
        for (std::size_t j = 0; j < L; ++j) {
            // one NaN for every NaN d[j]: the product keeps y's or the difference's NaN
            // depending on the operand order the compiler picks, which may differ by level
            const float v = y[j] * (g[j] - dot);
            d[j] = v == v ? v : std::numeric_limits<float>::quiet_NaN();
        }
        for (std::size_t j = L; j < n; ++j) d[j] = 0.0f;
    });
}

}  // namespace xgrad::vec
