#pragma once
// Running a kernel on each SIMD level this CPU runs (core/runtime/simd.hpp), for the tests that
// compare the levels' bits.
#include <utility>
#include <vector>

#include "core/runtime/simd.hpp"
#include "helpers.hpp"

namespace xgrad::test {

/// run(level) on each level this CPU runs, baseline first, the level put back after. Where there
/// is no AVX2 it warns that the levels are not compared here, and runs the baseline alone.
template <class Run> int on_each_level(Run run) {
    std::vector<SimdLevel> levels = {SimdLevel::Baseline};
    for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Avx512})
        if (simd_level_runs(level)) levels.push_back(level);
    if (levels.size() == 1)
        if (static bool warned = false; !std::exchange(warned, true))  // once per test case
            WARN("this CPU has no AVX2: the comparison with the baseline loops is skipped");
    struct Restore {
        SimdLevel level = simd_level();
        ~Restore() { set_simd_level(level); }
    } restore;
    for (SimdLevel level : levels) {
        set_simd_level(level);
        run(level);
    }
    return static_cast<int>(levels.size());
}

/// Where a level's results go in the tests' arrays: on_each_level's levels are a prefix of
/// baseline, AVX2, AVX-512 (every AVX-512 CPU has AVX2), so slots 0 .. levels − 1.
inline int slot(SimdLevel level) { return level == SimdLevel::Baseline ? 0 : level == SimdLevel::Avx2 ? 1 : 2; }

}  // namespace xgrad::test
