// The BLAS xgrad runs (OpenBLAS loaded at run time, or the CBLAS linked at configure time):
// products large enough to take blocked kernels match a naive triple loop, and blas_info()
// reports what runs.
#include "core/runtime/blas.hpp"
#include "core/runtime/dnnl.hpp"
#include "core/runtime/parallel.hpp"
#include "helpers.hpp"

#include <algorithm>
#include <array>
#include <atomic>
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

TEST_CASE("blas::gemm honours both transpose flags, leading dimensions, alpha and beta", "[blas]") {
    // Each operand is stored inside a wider buffer (leading dimension = width + 3), so a flag or
    // a leading dimension passed wrongly to the library reads the padding.
    const std::size_t m = 37, n = 29, k = 41, pad = 3;
    const auto a = wave(m * k, 0.3), b = wave(k * n, 1.7), c0 = wave(m * n, 2.9);
    const auto want_ab = naive(a, b, m, k, n);
    auto run = [&](auto zero, bool ta, bool tb) {
        using T = decltype(zero);
        // A stored as m×k (or k×m when transposed), B as k×n (or n×k); padding holds NaN.
        const std::size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        std::vector<T> A(ar * (ac + pad), T(NAN)), B(br * (bc + pad), T(NAN)), C(m * (n + pad), T(NAN));
        for (std::size_t i = 0; i < m; ++i)
            for (std::size_t p = 0; p < k; ++p) A[ta ? p * (ac + pad) + i : i * (ac + pad) + p] = T(a[i * k + p]);
        for (std::size_t p = 0; p < k; ++p)
            for (std::size_t j = 0; j < n; ++j) B[tb ? j * (bc + pad) + p : p * (bc + pad) + j] = T(b[p * n + j]);
        for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) C[i * (n + pad) + j] = T(c0[i * n + j]);
        blas::gemm<T>(ta, tb, m, n, k, T(0.5), A.data(), ac + pad, B.data(), bc + pad, T(-2), C.data(), n + pad);
        std::vector<double> got(m * n);
        for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) got[i * n + j] = double(C[i * (n + pad) + j]);
        return got;
    };
    std::vector<double> want(m * n);
    for (std::size_t i = 0; i < m * n; ++i) want[i] = 0.5 * want_ab[i] - 2 * c0[i];
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            INFO("trans_a " << ta << ", trans_b " << tb);
            CHECK_THAT(run(0.0, ta, tb), approx(want, 1e-12));
            CHECK_THAT(run(0.0f, ta, tb), approx(want, 1e-4));
        }
}

TEST_CASE("blas_info reports the library that runs and its core", "[blas]") {
    const BlasInfo& info = blas_info();
    CHECK(&blas_info() == &info);  // loaded once
    CHECK_FALSE(info.library.empty());
    CHECK_FALSE(info.vendor.empty());
    CHECK_FALSE(info.core.empty());
    CHECK_FALSE(info.cpu_level.empty());
    CHECK_FALSE(info.detected.empty());
    if (info.backend == "openblas-runtime") {
        CHECK(info.num_threads >= 1);
        if (info.core_fixed) CHECK(info.core != info.detected);
    } else {
        REQUIRE(info.backend == "cblas");
        // A linked CBLAS keeps its own kernel choice, and xgrad names the file it runs from.
        CHECK_FALSE(info.core_fixed);
        CHECK(info.detected == info.core);
        CHECK(info.library.front() == '/');
        CHECK(info.num_threads >= 0);
    }
}

TEST_CASE("blas_set_num_threads sets the library's threads where it has a call for it", "[blas]") {
    const int before = blas_info().num_threads;
    blas_set_num_threads(1);
    // 0: a CBLAS with no call to ask (then none to set either, and nothing changes).
    CHECK(blas_info().num_threads == (before == 0 ? 0 : 1));
    blas_set_num_threads(std::max(before, 1));
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

TEST_CASE("blas_count records the products of either engine", "[blas][gemm_engine]") {
    // A bench's rate inside the products must see the oneDNN ones too: 2 batches of 64x48x32.
    for (GemmEngine e : {GemmEngine::OpenBlas, GemmEngine::OneDnn}) {
        if (e == GemmEngine::OneDnn && !dnnl::available()) continue;
        const GemmEngine before = gemm_engine();
        set_gemm_engine(e);
        blas_count(true);
        matmul(ones({2, 64, 32}), ones({2, 32, 48}));
        blas_count(false);
        set_gemm_engine(before);
        const auto counted = blas_counted();
        INFO(gemm_engine_name(e));
        REQUIRE(counted.size() == 1);
        CHECK(counted[0].m == 64);
        CHECK(counted[0].n == 48);
        CHECK(counted[0].k == 32);
        CHECK(counted[0].calls == 2);
    }
}

TEST_CASE("products split over the thread pool match a naive product", "[blas]") {
    // 300×200 by 200×150 splits C's rows; 40×200 by 200×300 its columns; 16 batches of 64³
    // run as parallel batches. Transposed operands take the same paths.
    for (auto [m, k, n] : {std::array<std::size_t, 3>{300, 200, 150}, {40, 200, 300}}) {
        const auto a = wave(m * k, 0.5), b = wave(k * n, 2.0);
        const auto want = naive(a, b, m, k, n);
        const Tensor A = from_vector(a, {m, k}, kFloat64), B = from_vector(b, {k, n}, kFloat64);
        CHECK_THAT(vals(matmul(A, B)), approx(want, 1e-10));
        CHECK_THAT(vals(matmul_t(A.transpose(0, 1), B.transpose(0, 1), true, true)), approx(want, 1e-10));
    }
    const std::size_t batch = 16, s = 64;
    const auto a = wave(batch * s * s, 0.1), b = wave(batch * s * s, 0.2);
    std::vector<double> want;
    for (std::size_t i = 0; i < batch; ++i) {
        const std::vector<double> ai(a.begin() + i * s * s, a.begin() + (i + 1) * s * s);
        const std::vector<double> bi(b.begin() + i * s * s, b.begin() + (i + 1) * s * s);
        const auto ci = naive(ai, bi, s, s, s);
        want.insert(want.end(), ci.begin(), ci.end());
    }
    CHECK_THAT(vals(bmm(from_vector(a, {batch, s, s}, kFloat64), from_vector(b, {batch, s, s}, kFloat64))),
               approx(want, 1e-10));
}

TEST_CASE("parallel_for covers the range once, in order within chunks, and nests inline", "[blas]") {
    CHECK(num_threads() >= 1);
    std::vector<int> hits(1000, 0);
    std::atomic<bool> nested_inline{true};  // Catch2 assertions are not thread-safe: check after
    parallel_for(hits.size(), 10, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) ++hits[i];
        parallel_for(4, 1, [&](std::size_t b2, std::size_t e2) {
            if (b2 != 0 || e2 != 4) nested_inline = false;
        });
    });
    CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    CHECK(nested_inline);
    std::size_t calls = 0;
    parallel_for(5, 100, [&](std::size_t b, std::size_t e) {
        ++calls;
        CHECK((b == 0 && e == 5));  // fewer items than one grain: inline
    });
    CHECK(calls == 1);
    parallel_for(0, 1, [&](std::size_t, std::size_t) { ++calls; });
    CHECK(calls == 1);
}
