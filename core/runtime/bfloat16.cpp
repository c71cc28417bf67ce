#include "core/runtime/bfloat16.hpp"

#include "core/runtime/simd_dispatch.hpp"

namespace xgrad {

void bf16_from_float(const float* in, std::uint16_t* out, std::size_t n) { bf16_from_float_rows(in, n, out, n, 1, n); }

void bf16_from_float_rows(const float* in, std::size_t in_stride, std::uint16_t* out, std::size_t out_stride,
                          std::size_t rows, std::size_t cols) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t r = 0; r < rows; ++r) {
            const float* x = in + r * in_stride;
            std::uint16_t* y = out + r * out_stride;
            for (std::size_t i = 0; i < cols; ++i) y[i] = bf16_from_float(x[i]);
        }
    });
}

void bf16_to_float(const std::uint16_t* in, float* out, std::size_t n) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
    });
}

}  // namespace xgrad
