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
constexpr SimdLevel kLevels[] = {SimdLevel::Baseline, SimdLevel::Avx2, SimdLevel::Avx512};

// Why a level cannot run here, for either way of asking for it.
constexpr const char* kNoAvx512 = "this CPU (or its OS) has no AVX512F, BW, VL and DQ";
constexpr const char* kNoAvx2 = "this CPU (or its OS) has no AVX2";

const char* lacking(SimdLevel level) { return level == SimdLevel::Avx512 ? kNoAvx512 : kNoAvx2; }
const char* asks_for(SimdLevel level) { return level == SimdLevel::Avx512 ? "AVX-512" : "AVX2"; }

// What runs where `supported` is the best level, for the messages.
const char* runs_here(SimdLevel supported) {
    return supported == SimdLevel::Avx2 ? "auto, baseline or avx2" : "auto or baseline";
}

}  // namespace

SimdLevel simd_level_supported() {
#if defined(__x86_64__) && defined(__GNUC__)
    static const SimdLevel level = [] {
        __builtin_cpu_init();
        // libgcc's answers include the OS check (XGETBV): no avx512 unless it saves the zmm state.
        const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
        if (avx512) return SimdLevel::Avx512;
        return __builtin_cpu_supports("avx2") ? SimdLevel::Avx2 : SimdLevel::Baseline;
    }();
    return level;
#else
    return SimdLevel::Baseline;
#endif
}

bool simd_level_runs(SimdLevel level, SimdLevel supported) {
    if (level == SimdLevel::Baseline) return true;
    if (level == SimdLevel::Avx2) return supported == SimdLevel::Avx2 || supported == SimdLevel::Avx512;
    return supported == SimdLevel::Avx512;
}

SimdLevel parse_simd_setting(const std::string& value, const char* what, SimdLevel supported) {
    if (value == "auto") return supported;
    for (SimdLevel level : kLevels)
        if (value == simd_level_name(level)) {
            if (!simd_level_runs(level, supported))
                throw Error(fmt::format("{}: '{}' asks for {}, but {} ({} run here)", what, value, asks_for(level),
                                        lacking(level), runs_here(supported)));
            return level;
        }
    throw Error(fmt::format("{}: expected auto, baseline, avx2 or avx512, got '{}'", what, value));
}

const char* simd_level_name(SimdLevel level) {
    return level == SimdLevel::Avx512 ? "avx512" : level == SimdLevel::Avx2 ? "avx2" : "baseline";
}

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
    if (level != SimdLevel::Baseline && level != SimdLevel::Avx2 && level != SimdLevel::Avx512)
        throw Error(fmt::format("set_simd_level: expected Baseline, Avx2 or Avx512, got value {}", static_cast<int>(level)));
    if (!simd_level_runs(level))
        throw Error(fmt::format("set_simd_level: {} asked for, but {}", level == SimdLevel::Avx512 ? "Avx512" : "Avx2",
                                lacking(level)));
    g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

}  // namespace xgrad
