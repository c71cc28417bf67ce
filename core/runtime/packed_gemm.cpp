#include "core/runtime/packed_gemm.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/runtime/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define XGRAD_PACKED_KERNEL 1
#endif

namespace xgrad {

namespace {

constexpr std::size_t kPanel = 16;  // columns per panel: two 8-float AVX registers
constexpr std::size_t kRows = 6;    // rows per register block: 12 accumulators of 16

#ifdef XGRAD_PACKED_KERNEL
// One block of R rows of C by one panel: acc[r] = Σ_p a[r][p]·panel[p], in p order, then
// α·acc stored (added to C when accumulating) into its first `cols` columns. A is read as
// a[r][p] = a[r·lda + p], or a[p·lda + r] when transposed (AT).
template <std::size_t R, bool AT>
__attribute__((target("avx2,fma"))) void block(const float* a, std::size_t lda, const float* panel, std::size_t k,
                                               float alpha, float* c, std::size_t ldc, std::size_t cols,
                                               bool accumulate) {
    __m256 lo[R], hi[R];
#pragma GCC unroll 6
    for (std::size_t r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    for (std::size_t p = 0; p < k; ++p) {
        const __m256 b0 = _mm256_loadu_ps(panel + p * kPanel), b1 = _mm256_loadu_ps(panel + p * kPanel + 8);
#pragma GCC unroll 6
        for (std::size_t r = 0; r < R; ++r) {
            const __m256 x = _mm256_broadcast_ss(AT ? a + p * lda + r : a + r * lda + p);
            lo[r] = _mm256_fmadd_ps(x, b0, lo[r]);
            hi[r] = _mm256_fmadd_ps(x, b1, hi[r]);
        }
    }
    const __m256 scale = _mm256_set1_ps(alpha);
#pragma GCC unroll 6
    for (std::size_t r = 0; r < R; ++r) {
        float* row = c + r * ldc;
        lo[r] = _mm256_mul_ps(lo[r], scale);  // exact when α = 1
        hi[r] = _mm256_mul_ps(hi[r], scale);
        if (cols == kPanel) {
            if (accumulate) {
                lo[r] = _mm256_add_ps(_mm256_loadu_ps(row), lo[r]);
                hi[r] = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi[r]);
            }
            _mm256_storeu_ps(row, lo[r]);
            _mm256_storeu_ps(row + 8, hi[r]);
        } else {
            alignas(32) float sums[kPanel];
            _mm256_store_ps(sums, lo[r]);
            _mm256_store_ps(sums + 8, hi[r]);
            for (std::size_t j = 0; j < cols; ++j) row[j] = accumulate ? row[j] + sums[j] : sums[j];
        }
    }
}

// Every block of rows of C by panels [p0, p1) of `data`, each panel `stride` floats apart and
// read from its row k0 for k rows; C's column 0 is panel p0's, and the last panel ends at
// column n of C.
template <bool AT>
void panels(const float* a, std::size_t lda, std::size_t m, const float* data, std::size_t stride, std::size_t k,
            std::size_t p0, std::size_t p1, std::size_t n, float alpha, float* c, std::size_t ldc, bool accumulate) {
    for (std::size_t p = p0; p < p1; ++p) {
        const float* panel = data + p * stride;
        const std::size_t col = (p - p0) * kPanel, cols = std::min(kPanel, n - col);
        float* cp = c + col;
        // Blocks of 6 rows; a tail of 1 or 2 rows (which streams the panel for few sums) takes
        // the last block with it as 4 + 3 or 4 + 4 rows.
        std::size_t full = m / kRows, rest = m % kRows;
        if ((rest == 1 || rest == 2) && full > 0) --full, rest += kRows;
        const auto at = [&](std::size_t i) { return AT ? a + i : a + i * lda; };
        std::size_t i = 0;
        for (; i < full * kRows; i += kRows)
            block<kRows, AT>(at(i), lda, panel, k, alpha, cp + i * ldc, ldc, cols, accumulate);
        while (rest > 0) {
            const std::size_t rows = rest > kRows ? 4 : rest;
            const float* ai = at(i);
            float* ci = cp + i * ldc;
            switch (rows) {
                case 1: block<1, AT>(ai, lda, panel, k, alpha, ci, ldc, cols, accumulate); break;
                case 2: block<2, AT>(ai, lda, panel, k, alpha, ci, ldc, cols, accumulate); break;
                case 3: block<3, AT>(ai, lda, panel, k, alpha, ci, ldc, cols, accumulate); break;
                case 4: block<4, AT>(ai, lda, panel, k, alpha, ci, ldc, cols, accumulate); break;
                case 5: block<5, AT>(ai, lda, panel, k, alpha, ci, ldc, cols, accumulate); break;
                default: block<6, AT>(ai, lda, panel, k, alpha, ci, ldc, cols, accumulate); break;
            }
            i += rows;
            rest -= rows;
        }
    }
}
#endif

}  // namespace

bool PackedMatrix::available() {
#ifdef XGRAD_PACKED_KERNEL
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return yes;
#else
    return false;
#endif
}

PackedMatrix::PackedMatrix(const float* b, std::size_t ldb, bool transpose, std::size_t k, std::size_t n) {
    pack(b, ldb, transpose, k, n);
}

void PackedMatrix::pack(const float* b, std::size_t ldb, bool transpose, std::size_t k, std::size_t n) {
    m_k = k, m_n = n, m_panels = (n + kPanel - 1) / kPanel;
    m_data.assign(m_panels * k * kPanel, 0.0f);
    for (std::size_t p = 0; p < m_panels; ++p) {
        float* panel = m_data.data() + p * k * kPanel;
        const std::size_t cols = std::min(kPanel, n - p * kPanel);
        if (transpose) {
            // Column j of the panel is row p·16 + j of B, read along its length.
            for (std::size_t j = 0; j < cols; ++j) {
                const float* from = b + (p * kPanel + j) * ldb;
                for (std::size_t r = 0; r < k; ++r) panel[r * kPanel + j] = from[r];
            }
        } else {
            for (std::size_t r = 0; r < k; ++r) {
                const float* from = b + r * ldb + p * kPanel;
                std::copy(from, from + cols, panel + r * kPanel);
            }
        }
    }
}

void PackedMatrix::multiply(const float* a, std::size_t lda, std::size_t m, float* c, std::size_t ldc,
                            bool accumulate) const {
#ifdef XGRAD_PACKED_KERNEL
    if (m == 0 || m_n == 0) return;
    // Panels per chunk: about 2^17 multiply-adds each, so a hand-off is worth it.
    const std::size_t per_panel = std::max<std::size_t>(1, m * m_k * kPanel);
    const std::size_t grain = std::max<std::size_t>(1, (std::size_t(1) << 17) / per_panel);
    parallel_for(m_panels, grain, [&](std::size_t p0, std::size_t p1) {
        panels<false>(a, lda, m, m_data.data(), m_k * kPanel, m_k, p0, p1, m_n - p0 * kPanel, 1.0f,
                      c + p0 * kPanel, ldc, accumulate);
    });
#else
    (void)a, (void)lda, (void)m, (void)c, (void)ldc, (void)accumulate;
#endif
}

void PackedMatrix::multiply_block(const float* a, std::size_t lda, bool a_transposed, std::size_t m,
                                  const Block& b, float alpha, float* c, std::size_t ldc, bool accumulate) const {
    if (b.n0 % kPanel != 0 || b.k0 + b.k > m_k || b.n0 + b.n > m_n)
        throw Error(fmt::format("PackedMatrix::multiply_block: block rows [{}, {}) columns [{}, {}) must lie in the "
                                "packed {}x{} with columns from a multiple of {}",
                                b.k0, b.k0 + b.k, b.n0, b.n0 + b.n, m_k, m_n, kPanel));
#ifdef XGRAD_PACKED_KERNEL
    if (m == 0 || b.n == 0) return;
    const float* data = m_data.data() + b.k0 * kPanel;
    const std::size_t p0 = b.n0 / kPanel, p1 = (b.n0 + b.n + kPanel - 1) / kPanel;
    if (a_transposed) panels<true>(a, lda, m, data, m_k * kPanel, b.k, p0, p1, b.n, alpha, c, ldc, accumulate);
    else panels<false>(a, lda, m, data, m_k * kPanel, b.k, p0, p1, b.n, alpha, c, ldc, accumulate);
#else
    (void)a, (void)lda, (void)a_transposed, (void)m, (void)alpha, (void)c, (void)ldc, (void)accumulate;
#endif
}

}  // namespace xgrad
