// PackedMatrix: a float32 right operand packed once (the recurrent layers' W_hh, flash
// attention's heads), against blas::gemm on shapes with row and column tails, both layouts,
// set and accumulate, and on blocks of it (rows, panel columns, a transposed left operand, α).
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "core/error.hpp"

#include "core/runtime/blas.hpp"
#include "core/runtime/packed_gemm.hpp"

using namespace xgrad;

TEST_CASE("A packed matrix multiplies as blas::gemm does", "[packed-gemm]") {
    if (!PackedMatrix::available()) return;  // no AVX2 and FMA: callers use blas::gemm
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> u(-1, 1);
    struct Shape3 {
        std::size_t m, n, k;
    };
    for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{7, 45, 13}, Shape3{6, 16, 8}, Shape3{13, 5, 3},
                           Shape3{32, 96, 32}, Shape3{5, 33, 0}, Shape3{0, 8, 4}})
        for (const bool transpose : {false, true})
            for (const bool accumulate : {false, true}) {
                INFO("m " << s.m << " n " << s.n << " k " << s.k << " transpose " << transpose << " accumulate "
                          << accumulate);
                std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
                for (auto* v : {&a, &b, &c})
                    for (float& x : *v) x = u(gen);
                std::vector<float> want = c;
                const std::size_t ldb = transpose ? s.k : s.n;
                if (s.m > 0)
                    blas::gemm<float>(false, transpose, s.m, s.n, s.k, 1.0f, a.data(), std::max<std::size_t>(s.k, 1),
                                      b.data(), std::max<std::size_t>(ldb, 1), accumulate ? 1.0f : 0.0f, want.data(),
                                      s.n);
                const PackedMatrix packed(b.data(), ldb, transpose, s.k, s.n);
                packed.multiply(a.data(), s.k, s.m, c.data(), s.n, accumulate);
                for (std::size_t i = 0; i < c.size(); ++i) REQUIRE(std::abs(c[i] - want[i]) <= 1e-5f * (1 + s.k));
            }
}

TEST_CASE("A block of a packed matrix multiplies as blas::gemm does on that block", "[packed-gemm]") {
    if (!PackedMatrix::available()) return;
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> u(-1, 1);
    // op(B) is 40×70; the blocks start at panel columns and any row, with partial panels at
    // the end and single rows and columns.
    const std::size_t K = 40, N = 70;
    std::vector<float> b(K * N);
    for (float& x : b) x = u(gen);
    struct Part {
        std::size_t k0, k, n0, n;
    };
    for (const bool transpose : {false, true}) {
        const std::size_t ldb = transpose ? K : N;
        std::vector<float> stored(K * N);  // B as stored: op(B) transposed when `transpose`
        for (std::size_t r = 0; r < K; ++r)
            for (std::size_t c = 0; c < N; ++c) (transpose ? stored[c * ldb + r] : stored[r * ldb + c]) = b[r * N + c];
        const PackedMatrix packed(stored.data(), ldb, transpose, K, N);
        for (const Part p : {Part{0, 40, 0, 70}, Part{7, 13, 16, 54}, Part{39, 1, 64, 6}, Part{0, 0, 0, 70},
                             Part{3, 20, 32, 1}, Part{10, 30, 48, 0}})
            for (const std::size_t m : {std::size_t(1), std::size_t(8), std::size_t(13)})
                for (const bool a_transposed : {false, true})
                    for (const bool accumulate : {false, true})
                        for (const float alpha : {1.0f, 0.125f}) {
                            INFO("block rows " << p.k0 << "+" << p.k << " columns " << p.n0 << "+" << p.n << " m " << m
                                               << " transpose " << transpose << " a_transposed " << a_transposed
                                               << " accumulate " << accumulate << " alpha " << alpha);
                            // A as op(A) m×k, stored with padding: row length lda = k + 3 (or m + 3).
                            const std::size_t lda = (a_transposed ? m : p.k) + 3, ldc = p.n + 2;
                            std::vector<float> a((a_transposed ? p.k : m) * lda + 1), c(m * ldc);
                            for (auto* v : {&a, &c})
                                for (float& x : *v) x = u(gen);
                            std::vector<float> want = c;
                            if (p.n > 0)
                                blas::gemm<float>(a_transposed, false, m, p.n, p.k, alpha, a.data(), lda,
                                                  b.data() + p.k0 * N + p.n0, N, accumulate ? 1.0f : 0.0f, want.data(),
                                                  ldc);
                            packed.multiply_block(a.data(), lda, a_transposed, m, {p.k0, p.k, p.n0, p.n}, alpha,
                                                  c.data(), ldc, accumulate);
                            // Every element, the padding columns (left as they were) included.
                            for (std::size_t i = 0; i < c.size(); ++i)
                                REQUIRE(std::abs(c[i] - want[i]) <= 1e-5f * (1 + p.k));
                        }
        // A block outside the matrix, or not starting a panel, is refused.
        std::vector<float> a(64), c(64);
        REQUIRE_THROWS_WITH(packed.multiply_block(a.data(), 4, false, 1, {0, 4, 8, 4}, 1.0f, c.data(), 4, false),
                            Catch::Contains("multiple of 16"));
        REQUIRE_THROWS_WITH(packed.multiply_block(a.data(), 4, false, 1, {38, 4, 0, 4}, 1.0f, c.data(), 4, false),
                            Catch::Contains("must lie in"));
        REQUIRE_THROWS_WITH(packed.multiply_block(a.data(), 4, false, 1, {0, 4, 64, 16}, 1.0f, c.data(), 4, false),
                            Catch::Contains("must lie in"));
    }
}
