#pragma once
/// bfloat16: the top half of an IEEE float32 (sign, 8 exponent bits, 7 mantissa bits). Same
/// range as float32, about 3 significant decimal digits. The conversions are torch's: float32 to
/// bfloat16 rounds to nearest, ties to even; NaN stays NaN (quiet, sign kept); values that round
/// past the largest bfloat16 become infinity. bfloat16 to float32 is exact.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace xgrad {

inline std::uint16_t bf16_from_float(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_to_float(std::uint16_t b) {
    const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/// n values at a time (the loops vectorise, on AVX-512 where the CPU has it: runtime/simd.hpp;
/// the same bits as the one-value forms on every level); `out` may not overlap `in`.
void bf16_from_float(const float* in, std::uint16_t* out, std::size_t n);
void bf16_to_float(const std::uint16_t* in, float* out, std::size_t n);
/// A block of `rows` rows of `cols` values, row i read at in + i·in_stride and written at
/// out + i·out_stride: one call for a strided block (a head's columns of a packed projection),
/// where a call per row would cost more than its few dozen values.
void bf16_from_float_rows(const float* in, std::size_t in_stride, std::uint16_t* out, std::size_t out_stride,
                          std::size_t rows, std::size_t cols);

}  // namespace xgrad
