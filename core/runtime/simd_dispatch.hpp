#pragma once
/// simd_dispatch: the one place a loop is compiled for each SimdLevel (simd.hpp) and the level
/// picked. Internal to core's kernels.
///
///     return simd_dispatch([&]() XGRAD_SIMD_BODY { for (...) ...; return total; });
///
/// The loop is written once, as a lambda that must be inlined (XGRAD_SIMD_BODY): GCC then
/// compiles one copy into a function built for AVX-512, one for AVX2 (without FMA) and one
/// into the caller (baseline), and
/// refuses to build rather than leave a call to the baseline copy. Everything the body calls
/// is inlined into the AVX-512 copy as well, so a body is a leaf loop: no pool, no allocation. Same bits on both levels
/// needs a source compiled with -ffp-contract=off (core/CMakeLists.txt lists them): a target
/// with FMA would otherwise fuse a·b + c there and round once where the baseline rounds twice.
/// Also no -ffast-math there, so that the vectoriser keeps the order of every float sum.
#include "core/runtime/simd.hpp"

#define XGRAD_SIMD_BODY __attribute__((always_inline))

namespace xgrad {

#if defined(__x86_64__) && defined(__GNUC__)
namespace simd_detail {
// prefer-vector-width=512 (GCC) and min_vector_width(512) (clang, which rejects the former and
// with it the whole target attribute): generic tuning may stop at 256-bit vectors. flatten:
// what the body calls (lane_sum, std::max) is compiled into this variant too, not called in
// its baseline copy.
#if defined(__clang__)
#define XGRAD_AVX512_VARIANT \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), min_vector_width(512), noinline, flatten))
#else
#define XGRAD_AVX512_VARIANT \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512"), noinline, flatten))
#endif
template <class Body> XGRAD_AVX512_VARIANT auto on_avx512(const Body& body) {
    return body();
}
#undef XGRAD_AVX512_VARIANT
// AVX2 without FMA: wider vectors of the same operations, in the same order, so the same bits.
#if defined(__clang__)
#define XGRAD_AVX2_VARIANT __attribute__((target("avx2"), min_vector_width(256), noinline, flatten))
#else
#define XGRAD_AVX2_VARIANT __attribute__((target("avx2,no-fma"), noinline, flatten))
#endif
template <class Body> XGRAD_AVX2_VARIANT auto on_avx2(const Body& body) {
    return body();
}
#undef XGRAD_AVX2_VARIANT
}  // namespace simd_detail
#endif

/// body() compiled for simd_level(); throws simd_level()'s Error for a bad XGRAD_SIMD.
template <class Body> auto simd_dispatch(const Body& body) {
#if defined(__x86_64__) && defined(__GNUC__)
    const SimdLevel level = simd_level();
    if (level == SimdLevel::Avx512) return simd_detail::on_avx512(body);
    if (level == SimdLevel::Avx2) return simd_detail::on_avx2(body);
#else
    (void)simd_level();
#endif
    return body();
}

}  // namespace xgrad
