// The SIMD level (simd.hpp): the CPU's, XGRAD_SIMD's, or set_simd_level's.
#include "core/runtime/simd.hpp"

#include <atomic>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.hpp"

namespace xgrad {

namespace {

// -1 until the first simd_level() resolves XGRAD_SIMD, or set_simd_level(); then a SimdLevel.
// One relaxed load per kernel call: the kernels run it per row.
std::atomic<int> g_level{-1};

// Every level: XGRAD_SIMD takes the name simd_level_name gives each.
constexpr SimdLevel kLevels[] = {SimdLevel::Baseline, SimdLevel::Avx512};

// Why AVX-512 cannot run here, for either way of asking for it.
constexpr const char* kNoAvx512 = "this CPU (or its OS) has no AVX512F, BW, VL and DQ";

}  // namespace

SimdLevel simd_level_supported() {
#if defined(__x86_64__) && defined(__GNUC__)
    static const SimdLevel level = [] {
        __builtin_cpu_init();
        // libgcc's answers include the OS check (XGETBV): no avx512 unless it saves the zmm state.
        const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
        return avx512 ? SimdLevel::Avx512 : SimdLevel::Baseline;
    }();
    return level;
#else
    return SimdLevel::Baseline;
#endif
}

SimdLevel parse_simd_setting(const std::string& value, const char* what, SimdLevel supported) {
    if (value == "auto") return supported;
    for (SimdLevel level : kLevels)
        if (value == simd_level_name(level)) {
            if (level == SimdLevel::Avx512 && supported != SimdLevel::Avx512)
                throw Error(fmt::format("{}: '{}' asks for AVX-512, but {} (auto or baseline run here)", what, value,
                                        kNoAvx512));
            return level;
        }
    throw Error(fmt::format("{}: expected auto, baseline or avx512, got '{}'", what, value));
}

const char* simd_level_name(SimdLevel level) { return level == SimdLevel::Avx512 ? "avx512" : "baseline"; }

SimdLevel simd_level() {
    const int level = g_level.load(std::memory_order_relaxed);
    if (level >= 0) return static_cast<SimdLevel>(level);
    const char* v = std::getenv("XGRAD_SIMD");
    // A bad value is not stored: every call throws it again.
    const SimdLevel from_env = v == nullptr || *v == '\0' ? simd_level_supported() : parse_simd_setting(v);
    int unset = -1;
    g_level.compare_exchange_strong(unset, static_cast<int>(from_env), std::memory_order_relaxed);
    return static_cast<SimdLevel>(g_level.load(std::memory_order_relaxed));
}

void set_simd_level(SimdLevel level) {
    if (level != SimdLevel::Baseline && level != SimdLevel::Avx512)
        throw Error(fmt::format("set_simd_level: expected Baseline or Avx512, got value {}", static_cast<int>(level)));
    if (level == SimdLevel::Avx512 && simd_level_supported() != SimdLevel::Avx512)
        throw Error(fmt::format("set_simd_level: Avx512 asked for, but {}", kNoAvx512));
    g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

}  // namespace xgrad
