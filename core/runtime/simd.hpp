#pragma once
/// Which instruction set xgrad's hot float loops run on: the bfloat16 conversions of whole
/// arrays, the softmax row's exp, max and backward, the float elementwise kernels
/// (runtime/vec_math.hpp: exp, erf, tanh, sigmoid, gelu) and flash_attention's row loops
/// (flash_attention_rows.hpp). Each of these loops is written once
/// and compiled three times, for baseline x86-64 (SSE2, 4 floats a step: what the library is
/// built for), for AVX2 (8) and for AVX-512 (16 for the conversions and the exp; the max and
/// the backward's dot product keep eight partial results, so they stay 8 wide), and the level
/// is picked at run time. Both
/// levels give the same bits for every input (the loops are compiled without FMA contraction
/// and keep one order of operations), so the level changes the speed of these loops, never
/// their result: on CPUs of different levels they agree (the products may still differ; README,
/// "Bit-identity across machines").
#include <string>

namespace xgrad {

/// Avx2 comes after Avx512 so that the values stored before it existed keep their meaning.
enum class SimdLevel { Baseline, Avx512, Avx2 };

/// What this CPU and OS can run: Avx512 on x86-64 with AVX512F, BW, VL and DQ and the OS
/// saving the 512-bit registers, else Avx2 with AVX2 (and the 256-bit registers saved), else
/// Baseline.
SimdLevel simd_level_supported();

/// Whether a CPU whose best level is `supported` runs `level` (an AVX-512 CPU runs AVX2 too).
bool simd_level_runs(SimdLevel level, SimdLevel supported = simd_level_supported());

/// XGRAD_SIMD's values: "auto" (the `supported` level), or a level by the name
/// simd_level_name gives it, "baseline", "avx2" or "avx512". A level `supported` does not run
/// is an Error naming `what`, the value and what the CPU lacks; anything else is an Error naming
/// `what` and the choices. `supported` is this CPU's level, given only to check the refusal on
/// any machine.
SimdLevel parse_simd_setting(const std::string& value, const char* what = "XGRAD_SIMD",
                             SimdLevel supported = simd_level_supported());
const char* simd_level_name(SimdLevel level);

/// The level the loops run on: the last set_simd_level(), else XGRAD_SIMD from the environment
/// (read once; unset or empty means auto; a bad value is an Error on every call, as XGRAD_GEMM's).
SimdLevel simd_level();

/// Sets the level for the whole process from then on, e.g. to compare the two on one machine.
/// A level this CPU cannot run throws xgrad::Error and changes nothing.
void set_simd_level(SimdLevel level);

}  // namespace xgrad
