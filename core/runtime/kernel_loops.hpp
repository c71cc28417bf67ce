#pragma once
/// Two helpers for element loops that must vectorise without -ffast-math (baseline x86-64):
/// lane_sum splits a sum into independent chains, with_flag turns a run-time flag into a
/// compile-time one so that the loop body has no per-element test. Internal to the kernels
/// (core's ops and optim's updates); header-only, no xtensor.
#include <cstddef>
#include <type_traits>

namespace xgrad {

/// Σ f(j) over [0, n) in kLanes interleaved partial sums (lane l takes j ≡ l mod kLanes, in
/// increasing j), combined pairwise in a fixed order. One running sum is a single dependency
/// chain the compiler may not split (that would change the rounding); these eight vectorise.
/// The result depends only on n and the values, never on the threads or the machine.
template <class A, class F> A lane_sum(std::size_t n, F f) {
    constexpr std::size_t kLanes = 8;
    // The lanes as 16-byte GCC vectors (two of four floats, four of two doubles): as an array
    // of eight scalars GCC vectorised across iterations with shuffles, or not at all, 3-4x
    // slower for a float dot product. The same lanes in the same order: the same bits.
    constexpr std::size_t kWidth = 16 / sizeof(A), kVectors = kLanes / kWidth;
    static_assert(kVectors * kWidth == kLanes, "lane_sum: float or double");
    typedef A Vec __attribute__((vector_size(16)));
    Vec acc[kVectors] = {};
    std::size_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
        for (std::size_t v = 0; v < kVectors; ++v) {
            Vec x = {};
            for (std::size_t l = 0; l < kWidth; ++l) x[l] = f(j + v * kWidth + l);
            acc[v] += x;
        }
    A s[kLanes];
    for (std::size_t l = 0; l < kLanes; ++l) s[l] = acc[l / kWidth][l % kWidth];
    for (std::size_t l = 0; j < n; ++j, ++l) s[l] += f(j);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/// f(std::true_type{}) or f(std::false_type{}): f's loops see the flag as a constant
/// (`if constexpr (flag)`) rather than testing it per element. Nest for several flags.
template <class F> void with_flag(bool on, F&& f) {
    if (on) f(std::true_type{});
    else f(std::false_type{});
}

}  // namespace xgrad
