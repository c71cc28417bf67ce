#include "core/runtime/vec_math.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/runtime/kernel_loops.hpp"
#include "core/runtime/simd_dispatch.hpp"

namespace xgrad::vec {

namespace {

constexpr std::size_t kExpBlock = 16;

// y[l] = e^(x[l] − m) for one block of kExpBlock values: a fixed trip count, so that each level
// compiles it to whole vectors (one on AVX-512, four on SSE2) with no scalar remainder.
inline __attribute__((always_inline)) void exp_block(const float* x, float m, float* y) {
    for (std::size_t l = 0; l < kExpBlock; ++l) {
        const float t0 = x[l] - m;
        // t in [-87, 88] whatever x and m are: NaN (max(-87, NaN) is -87) or +inf (x above an m
        // that a NaN kept from being the row's maximum) would make the exponent bits below
        // undefined. The select at the end puts NaN back; a NaN in the row makes the sum NaN.
        const float t = std::min(88.0f, std::max(-87.0f, t0));
        // t = k·ln2 + r, |r| ≤ ln2/2; k rounded to nearest by the 1.5·2^23 trick
        const float k = (t * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
        float r = t - k * 0.693359375f;
        r = r - k * -2.12194440e-4f;
        float p = 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * r * r + r + 1.0f;
        const float two_k = __builtin_bit_cast(float, (static_cast<std::int32_t>(k) + 127) << 23);
        const float v = p * two_k;
        y[l] = t0 >= -87.0f ? v : (t0 == t0 ? 0.0f : t0);
    }
}

// exp_shifted_sum's row, for the dispatched bodies below; `readable` values from x may be read
// (n or more), and those past n do not change the result.
inline __attribute__((always_inline)) float exp_row(const float* x, float m, float* y, std::size_t n,
                                                    std::size_t readable) {
    std::size_t j = 0;
    for (; j + kExpBlock <= n; j += kExpBlock) exp_block(x + j, m, y + j);
    if (j < n) {
        // The rest as a whole block too (attention over a few keys has rows shorter than one
        // vector, which would otherwise take the exp one value at a time), only its first n − j
        // values kept. Read in place when a whole block is readable (the next rows of a block
        // of rows): a block gathered value by value is read back before those stores reach the
        // cache, which stalls every row behind the one before it.
        float in[kExpBlock], out[kExpBlock];
        const float* src = x + j;
        if (readable - j < kExpBlock) {
            for (std::size_t l = 0; l < kExpBlock; ++l) in[l] = j + l < n ? x[j + l] : m;
            src = in;
        }
        exp_block(src, m, out);
        for (std::size_t l = 0; j + l < n; ++l) y[j + l] = out[l];
    }
    // eight partial sums: a vector of adds instead of one serial chain
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (j = 0; j + 8 <= n; j += 8)
        for (std::size_t l = 0; l < 8; ++l) s[l] += y[j + l];
    float total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; j < n; ++j) total += y[j];
    // One NaN for every NaN sum: which of two NaNs an addition keeps depends on the order the
    // compiler gives its operands, which may differ between the levels' loops.
    return total == total ? total : std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

float exp_shifted_sum(const float* x, float m, float* y, std::size_t n) {
    return simd_dispatch([&]() XGRAD_SIMD_BODY { return exp_row(x, m, y, n, n); });
}

void exp_shifted_rows(const float* x, std::size_t stride, const float* m, const std::size_t* len, float* y,
                      float* sums, std::size_t rows) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        for (std::size_t i = 0; i < rows; ++i)
            sums[i] = exp_row(x + i * stride, m[i], y + i * stride, len[i], (rows - 1 - i) * stride + len[rows - 1]);
    });
}

float max_of(const float* x, std::size_t n) {
    return simd_dispatch([&]() XGRAD_SIMD_BODY {
        // eight running maxima, lane l over j ≡ l (mod 8), as two GCC vectors of four: written
        // as eight floats the compiler keeps them scalar (with NaN, max is no reduction it may
        // reorder); a vector of eight it splits into scalars on SSE2
        using f4 = float __attribute__((vector_size(16)));
        f4 lo = {x[0], x[0], x[0], x[0]}, hi = lo;
        std::size_t j = 0;
        for (; j + 8 <= n; j += 8) {
            f4 a, b;
            std::memcpy(&a, x + j, sizeof a);
            std::memcpy(&b, x + j + 4, sizeof b);
            lo = lo < a ? a : lo;  // std::max per lane
            hi = hi < b ? b : hi;
        }
        const float s[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
        float m = std::max(std::max(std::max(s[0], s[1]), std::max(s[2], s[3])),
                           std::max(std::max(s[4], s[5]), std::max(s[6], s[7])));
        for (; j < n; ++j) m = std::max(m, x[j]);
        return m;
    });
}

void softmax_grad(const float* y, const float* g, float* d, std::size_t n, std::size_t L) {
    simd_dispatch([&]() XGRAD_SIMD_BODY {
        const float dot = lane_sum<float>(n, [&](std::size_t j) { return g[j] * y[j]; });
        for (std::size_t j = 0; j < L; ++j) {
            // one NaN for every NaN d[j]: the product keeps y's or the difference's NaN
            // depending on the operand order the compiler picks, which may differ by level
            const float v = y[j] * (g[j] - dot);
            d[j] = v == v ? v : std::numeric_limits<float>::quiet_NaN();
        }
        for (std::size_t j = L; j < n; ++j) d[j] = 0.0f;
    });
}

}  // namespace xgrad::vec
