#include "core/runtime/bfloat16.hpp"

#include "core/runtime/simd_dispatch.hpp"

namespace xgrad {

void bf16_from_float(const float* in, std::uint16_t* out, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < n; ++i) out[i] = bf16_from_float(in[i]);
    });
}

void bf16_to_float(const std::uint16_t* in, float* out, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
    });
}

}  // namespace xgrad
