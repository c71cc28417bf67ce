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
// that e^(−x²)·Q rounds away against 1. F is a float or a block of lanes (below); `exp` is
// e^t for t ≤ 0 (exp_kernel::any, or what gives its bits).
template <class F> inline __attribute__((always_inline)) F erf_near(F x) {
    const F u = x * x;
    F p = F{} + 7.898743934e-05f;
    p = p * u + -8.024831186e-04f;
    p = p * u + 5.190163385e-03f;
    p = p * u + -2.685491554e-02f;
    p = p * u + 1.128361747e-01f;
    p = p * u + -3.761262894e-01f;
    p = p * u + 1.283791661e-01f;  // 2/√π − 1: x + x·p keeps the leading term exact
    return x + x * p;
}
// 1 − e^(−x²)·Q(t), erf(|x|) for |x| ≥ 1
template <class F, class Exp> inline __attribute__((always_inline)) F erfc_far(F x, F a, Exp exp) {
    const F t = 1.0f / (1.0f + 0.5f * a);
    F q = F{} + 1.193305627e-01f;
    q = q * t + -4.712586999e-01f;
    q = q * t + 5.635287166e-01f;
    q = q * t + -1.039562300e-01f;
    q = q * t + 3.480290174e-01f;
    q = q * t + 2.596071064e-01f;
    q = q * t + 2.849274576e-01f;
    q = q * t + -1.553134935e-04f;
    return 1.0f - exp(-(x * x)) * q;
}
// Both branches computed, one kept: no branch per element.
inline __attribute__((always_inline)) float erf_any(float x) {
    const float a = std::fabs(x);
    const float tail = erfc_far(x, a, [](float t) { return exp_kernel::any(t); });
    return a < 1.0f ? erf_near(x) : std::copysign(tail, x);
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

// --- blocks of eight lanes as GCC vectors (one AVX2 vector, two SSE2 ones), for kernels that
// skip work a whole block does not need: per lane the same operations as the float forms
// above, so the same bits; only what is skipped differs.
using Lanes = float __attribute__((vector_size(32)));
using LaneMask = std::int32_t __attribute__((vector_size(32)));
constexpr std::size_t kLanes = sizeof(Lanes) / sizeof(float);

inline __attribute__((always_inline)) Lanes load_lanes(const float* p) {
    Lanes v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline __attribute__((always_inline)) void store_lanes(float* p, Lanes v) { std::memcpy(p, &v, sizeof v); }

// Whether every lane of a comparison's mask is set.
inline __attribute__((always_inline)) bool all_lanes(LaneMask m) {
    std::uint64_t w[4];
    std::memcpy(w, &m, sizeof w);
    return ((w[0] & w[1]) & (w[2] & w[3])) == ~std::uint64_t{0};
}

inline __attribute__((always_inline)) Lanes abs_lanes(Lanes x) {
    return __builtin_bit_cast(Lanes, __builtin_bit_cast(LaneMask, x) & 0x7fffffff);
}

// std::copysign per lane
inline __attribute__((always_inline)) Lanes copysign_lanes(Lanes mag, Lanes sign) {
    const LaneMask m = __builtin_bit_cast(LaneMask, mag) & 0x7fffffff,
                   s = __builtin_bit_cast(LaneMask, sign) & static_cast<std::int32_t>(0x80000000u);
    return __builtin_bit_cast(Lanes, m | s);
}

inline __attribute__((always_inline)) Lanes one_nan_lanes(Lanes v) {
    return v == v ? v : Lanes{} + std::numeric_limits<float>::quiet_NaN();
}

// exp_kernel::any(t) for t ≤ 0, in its plain form when every lane's result is normal
inline __attribute__((always_inline)) Lanes exp_nonpositive(Lanes t) {
    return all_lanes(t >= -80.0f) ? exp_kernel::normal(t) : exp_kernel::any(t);
}

// erf_any per lane, the far branch only for a block with a lane (or a NaN) at |x| ≥ 1: most
// of a GELU's inputs are near 0, and the far branch is three quarters of the work.
inline __attribute__((always_inline)) Lanes erf_lanes(Lanes x) {
    const Lanes a = abs_lanes(x);
    const LaneMask near = a < 1.0f;
    const Lanes e = erf_near(x);
    if (all_lanes(near)) return e;
    return near ? e : copysign_lanes(erfc_far(x, a, [](Lanes t) { return exp_nonpositive(t); }), x);
}

constexpr float kSqrtHalf = 0.707106781186547524f, kInvSqrt2Pi = 0.398942280401432678f;

inline __attribute__((always_inline)) Lanes gelu_lanes(Lanes x) {
    return one_nan_lanes(0.5f * x * (1.0f + erf_lanes(x * kSqrtHalf)));
}

inline __attribute__((always_inline)) Lanes gelu_backward_lanes(Lanes g, Lanes v) {
    const Lanes cdf = 0.5f * (1.0f + erf_lanes(v * kSqrtHalf));
    const Lanes pdf = exp_nonpositive(-0.5f * v * v) * kInvSqrt2Pi;
    return one_nan_lanes(g * (cdf + v * pdf));
}

// out[0, n) = f(in[0, n)...) for n < kLanes, through blocks padded with zeros
template <std::size_t N, class F> inline __attribute__((always_inline)) void partial_block(std::size_t n, const float* const (&in)[N], float* out, F f) {
    float pad[N][kLanes] = {}, res[kLanes];
    for (std::size_t k = 0; k < N; ++k)
        for (std::size_t l = 0; l < n; ++l) pad[k][l] = in[k][l];
    if constexpr (N == 1) store_lanes(res, f(load_lanes(pad[0])));
    else store_lanes(res, f(load_lanes(pad[0]), load_lanes(pad[1])));
    for (std::size_t l = 0; l < n; ++l) out[l] = res[l];
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
        std::size_t i = 0;
        for (; i + kLanes <= n; i += kLanes) store_lanes(y + i, gelu_lanes(load_lanes(x + i)));
        if (i < n) partial_block(n - i, {x + i}, y + i, [](Lanes v) { return gelu_lanes(v); });
    });
}

void gelu_backward(const float* g, const float* x, float* d, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        std::size_t i = 0;
        for (; i + kLanes <= n; i += kLanes) store_lanes(d + i, gelu_backward_lanes(load_lanes(g + i), load_lanes(x + i)));
        if (i < n) partial_block(n - i, {g + i, x + i}, d + i, [](Lanes gv, Lanes v) { return gelu_backward_lanes(gv, v); });
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
