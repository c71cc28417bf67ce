// The BLAS that xgrad loads at run time: products large enough to take OpenBLAS's blocked
// kernels match a naive triple loop, and blas_info() reports the core they run on.
#include "core/blas.hpp"
#include "helpers.hpp"

#include <cmath>

using namespace xgrad;
using namespace xgrad::test;

namespace {

std::vector<double> naive(const std::vector<double>& a, const std::vector<double>& b, std::size_t m,
                          std::size_t k, std::size_t n) {
    std::vector<double> c(m * n, 0.0);
    for (std::size_t i = 0; i < m; ++i)
        for (std::size_t p = 0; p < k; ++p)
            for (std::size_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
    return c;
}

std::vector<double> wave(std::size_t count, double phase) {
    std::vector<double> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = std::sin(0.37 * static_cast<double>(i) + phase);
    return v;
}

}  // namespace

TEST_CASE("blocked BLAS products match a naive product", "[blas]") {
    // Odd sizes past OpenBLAS's register blocks, so edge kernels run too.
    const std::size_t m = 67, k = 129, n = 70;
    const auto a = wave(m * k, 0.0), b = wave(k * n, 1.0);
    const auto want = naive(a, b, m, k, n);
    for (Dtype dt : {kFloat32, kFloat64}) {
        const Tensor c = matmul(from_vector(a, {m, k}, dt), from_vector(b, {k, n}, dt));
        const double tol = dt == kFloat32 ? 1e-4 : 1e-12;
        CHECK_THAT(vals(c), approx(want, tol));
    }
}

TEST_CASE("blas_info reports the loaded library and its core", "[blas]") {
    const BlasInfo& info = blas_info();
    CHECK_FALSE(info.library.empty());
    CHECK_FALSE(info.core.empty());
    CHECK_FALSE(info.cpu_level.empty());
    CHECK_FALSE(info.detected.empty());
    CHECK(info.num_threads >= 1);
    CHECK(&blas_info() == &info);  // loaded once
    if (info.core_fixed) CHECK(info.core != info.detected);
}

TEST_CASE("blas_count records each product shape while on", "[blas]") {
    blas_count(true);
    matmul(ones({3, 4}), ones({4, 5}));
    matmul(ones({3, 4}), ones({4, 5}));
    blas_count(false);
    matmul(ones({2, 2}), ones({2, 2}));  // not counted
    const auto counted = blas_counted();
    REQUIRE(counted.size() == 1);
    CHECK(counted[0].m == 3);
    CHECK(counted[0].n == 5);
    CHECK(counted[0].k == 4);
    CHECK(counted[0].calls == 2);
    CHECK_FALSE(counted[0].is_double);
    CHECK(counted[0].seconds >= 0);
}
