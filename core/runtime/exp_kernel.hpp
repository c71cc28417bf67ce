#pragma once
/// The float exp of core's SIMD loops, one element at a time, written to be inlined into a
/// loop that the compiler vectorises (no branch, no call): vec_math.cpp's row and elementwise
/// kernels and flash_attention_rows.cpp's row loops use it, so they give the same bits. A
/// source that includes it must be one of the SIMD sources compiled with -ffp-contract=off and
/// -fno-trapping-math (core/CMakeLists.txt): same bits on every level, selects as blends.
/// reduce and any take a float or a GCC vector of floats (vec_math.cpp's blocks of lanes): the
/// same operations in the same order, so the same bits per lane. Internal to core's kernels.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace xgrad::exp_kernel {

/// e^r for |r| ≤ ln2/2 (Cephes' degree-6 polynomial), and k with t = k·ln2 + r (Cody–Waite:
/// k rounded to nearest by the 1.5·2^23 trick, ln2 in two parts), for t in [−104, 88.75].
template <class F> struct Reduced {
    F p;
    F k;
};
template <class F> inline __attribute__((always_inline)) Reduced<F> reduce(F t) {
    const F k = (t * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    F r = t - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    F p = F{} + 1.9875691500e-4f;  // the constant in every lane
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return {p, k};
}

/// The int32 lanes of a float or of a GCC vector of floats (whose comparisons give them).
template <class F> struct Ints {
    using type = decltype(F{} < F{});
};
template <> struct Ints<float> {
    using type = std::int32_t;
};

/// static_cast<std::int32_t> per lane (truncation).
template <class F> inline __attribute__((always_inline)) typename Ints<F>::type to_ints(F v) {
    if constexpr (std::is_same_v<F, float>) return static_cast<std::int32_t>(v);
    else return __builtin_convertvector(v, typename Ints<F>::type);
}

/// std::min(a, b) and std::max(a, b) per lane (each keeps a where the comparison is false, NaN
/// included).
template <class F> inline __attribute__((always_inline)) F lane_min(F a, F b) { return b < a ? b : a; }
template <class F> inline __attribute__((always_inline)) F lane_max(F a, F b) { return a < b ? b : a; }

/// 2^k as a float (F's lanes), for integral k in [−126, 127].
template <class F = float, class I> inline __attribute__((always_inline)) F pow2(I k) {
    return __builtin_bit_cast(F, (k + 127) << 23);
}

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
template <class F> inline __attribute__((always_inline)) F any(F t0) {
    using I = typename Ints<F>::type;
    // clamped so that the exponent bits below are always defined (NaN clamps to −104 here)
    const F t = lane_min(F{} + 88.75f, lane_max(F{} - 104.0f, t0));
    const Reduced e = reduce(t);
    // 2^k as 2^k1 · 2^k2, both normal for k in [−150, 128]: the first product is exact, the
    // second rounds only a denormal result
    const I ki = to_ints(e.k), k1 = ki >> 1, k2 = ki - k1;
    const F v = (e.p * pow2<F>(k1)) * pow2<F>(k2);
    const F big = t0 > 88.7228317f ? F{} + std::numeric_limits<float>::infinity() : v;
    return t0 < -103.972084f ? F{} : (t0 == t0 ? big : t0);
}

/// any(t) for t ≥ −80, where every result is normal: the same bits without the clamps,
/// the denormal scaling and the special cases. Only for such t: callers test first.
template <class F> inline __attribute__((always_inline)) F normal(F t) {
    const Reduced e = reduce(t);
    return e.p * pow2<F>(to_ints(e.k));
}

}  // namespace xgrad::exp_kernel
