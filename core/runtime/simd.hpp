#pragma once
/// Which instruction set xgrad's hot float loops run on: the bfloat16 conversions of whole
/// arrays, and the softmax row's exp, max and backward. Each of these loops is written once and
/// compiled twice, for baseline x86-64 (SSE2, 4 floats a step: what the library is built for)
/// and for AVX-512 (16 for the conversions and the exp; the max and the backward's dot product
/// keep eight partial results, so they stay 8 wide), and the level is picked at run time. Both
/// levels give the same bits for every input (the loops are compiled without FMA contraction
/// and keep one order of operations), so the level changes the speed of these loops, never
/// their result: on CPUs of different levels they agree (the products may still differ; README,
/// "Bit-identity across machines").
#include <string>

namespace xgrad {

enum class SimdLevel { Baseline, Avx512 };

/// What this CPU and OS can run: Avx512 on x86-64 with AVX512F, BW, VL and DQ and the OS
/// saving the 512-bit registers, else Baseline.
SimdLevel simd_level_supported();

/// XGRAD_SIMD's values: "auto" (the `supported` level), or a level by the name
/// simd_level_name gives it, "baseline" or "avx512". "avx512" where `supported` is Baseline is
/// an Error naming `what`, the value and what the CPU lacks; anything else is an Error naming
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
