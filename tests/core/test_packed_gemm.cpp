// PackedMatrix: a float32 right operand packed once (the recurrent layers' W_hh), against
// blas::gemm on shapes with row and column tails, both layouts, set and accumulate.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

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
