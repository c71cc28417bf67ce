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
    A acc[kLanes] = {};
    std::size_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
        for (std::size_t l = 0; l < kLanes; ++l) acc[l] += f(j + l);
    for (std::size_t l = 0; j < n; ++j, ++l) acc[l] += f(j);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/// f(std::true_type{}) or f(std::false_type{}): f's loops see the flag as a constant
/// (`if constexpr (flag)`) rather than testing it per element. Nest for several flags.
template <class F> void with_flag(bool on, F&& f) {
    if (on) f(std::true_type{});
    else f(std::false_type{});
}

}  // namespace xgrad
