#pragma once
/// The float exp of core's SIMD loops, one element at a time, written to be inlined into a
/// loop that the compiler vectorises (no branch, no call): vec_math.cpp's row and elementwise
/// kernels and flash_attention_rows.cpp's row loops use it, so they give the same bits. A
/// source that includes it must be one of the SIMD sources compiled with -ffp-contract=off and
/// -fno-trapping-math (core/CMakeLists.txt): same bits on every level, selects as blends.
/// Internal to core's kernels.
#include <algorithm>
#include <cstdint>
#include <limits>

namespace xgrad::exp_kernel {

/// e^r for |r| ≤ ln2/2 (Cephes' degree-6 polynomial), and k with t = k·ln2 + r (Cody–Waite:
/// k rounded to nearest by the 1.5·2^23 trick, ln2 in two parts), for t in [−104, 88.75].
struct Reduced {
    float p;
    float k;
};
inline __attribute__((always_inline)) Reduced reduce(float t) {
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
    return {p, k};
}

/// 2^k as a float, for integral k in [−126, 127].
inline __attribute__((always_inline)) float pow2(std::int32_t k) { return __builtin_bit_cast(float, (k + 127) << 23); }

/// e^(x − m), the softmax rows' exp: within 2 ulp of std::exp; 0 where x − m < −87 (e^−87 ≈
/// 1.6e−38, the float floor); NaN for NaN. x − m is clamped to [−87, 88] before the exponent
/// is built, so any x and m are safe (NaN clamps to −87; +inf to 88, whose value the select
/// then keeps: a row's x above its m only comes with a NaN elsewhere in the row).
inline __attribute__((always_inline)) float shifted(float x, float m) {
    const float t0 = x - m;
    const float t = std::min(88.0f, std::max(-87.0f, t0));
    const Reduced e = reduce(t);
    const float v = e.p * pow2(static_cast<std::int32_t>(e.k));
    return t0 >= -87.0f ? v : (t0 == t0 ? 0.0f : t0);
}

/// e^t for any float t, within 2 ulp of std::exp where the result is normal; below 2^−126 the
/// scaling rounds once more, to the denormal's own ulp. +inf above ln(FLT_MAX), +0 below the
/// smallest denormal's log, NaN for NaN.
inline __attribute__((always_inline)) float any(float t0) {
    // clamped so that the exponent bits below are always defined (NaN clamps to −104 here)
    const float t = std::min(88.75f, std::max(-104.0f, t0));
    const Reduced e = reduce(t);
    // 2^k as 2^k1 · 2^k2, both normal for k in [−150, 128]: the first product is exact, the
    // second rounds only a denormal result
    const std::int32_t ki = static_cast<std::int32_t>(e.k), k1 = ki >> 1, k2 = ki - k1;
    const float v = (e.p * pow2(k1)) * pow2(k2);
    const float big = t0 > 88.7228317f ? std::numeric_limits<float>::infinity() : v;
    return t0 < -103.972084f ? 0.0f : (t0 == t0 ? big : t0);
}

}  // namespace xgrad::exp_kernel
