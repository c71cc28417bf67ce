// clip_grad_norm against hand-computed norms.
#include <cmath>
#include <cstdio>

#include "helpers.hpp"
#include "optim/clip_grad.hpp"

using namespace xgrad;
using namespace xgrad::optim;
using namespace xgrad::test;

namespace {

// Two parameters whose gradients are (3, 4) and ((12)): per-tensor 2-norms 5 and 12, total 13.
std::vector<Tensor> with_gradients(Dtype dtype) {
    Tensor a = zeros({2}, TensorOptions(dtype).requires_grad(true));
    Tensor b = zeros({1, 1}, TensorOptions(dtype).requires_grad(true));
    Tensor none = zeros({3}, TensorOptions(dtype).requires_grad(true));  // no gradient: skipped
    a.set_grad(tensor({3.0, -4.0}, dtype));
    b.set_grad(from_vector({12.0}, {1, 1}, dtype));
    return {a, none, b};
}

}  // namespace

TEST_CASE("clip_grad_norm scales gradients to max_norm and returns the norm before", "[optim][clip]") {
    const Dtype dtype = GENERATE(kFloat32, kFloat64);
    auto params = with_gradients(dtype);
    const double total = clip_grad_norm(params, 6.5);
    CHECK(total == Approx(13.0).epsilon(1e-12));
    const double coef = 6.5 / (13.0 + 1e-6);  // torch's clip coefficient
    CHECK_THAT(vals(params[0].grad()), approx({3 * coef, -4 * coef}));
    CHECK_THAT(vals(params[2].grad()), approx({12 * coef}));
    CHECK_FALSE(params[1].grad().defined());
    // The clipped gradients have norm max_norm (up to the 1e-6).
    CHECK(clip_grad_norm(params, 1e9) == Approx(6.5).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm leaves gradients below max_norm alone", "[optim][clip]") {
    auto params = with_gradients(kFloat64);
    CHECK(clip_grad_norm(params, 13.5) == Approx(13.0));
    CHECK(vals(params[0].grad()) == std::vector<double>{3, -4});
    CHECK(vals(params[2].grad()) == std::vector<double>{12});
}

TEST_CASE("clip_grad_norm supports other p-norms and infinity", "[optim][clip]") {
    auto params = with_gradients(kFloat64);
    CHECK(clip_grad_norm(params, 100, 1.0) == Approx(19.0));                         // 3 + 4 + 12
    CHECK(clip_grad_norm(params, 100, INFINITY) == Approx(12.0));                    // the largest |g|
    CHECK(clip_grad_norm(params, 100, 3.0) == Approx(std::cbrt(27.0 + 64 + 1728)));  // (Σ|g|³)^(1/3)
    CHECK(clip_grad_norm(params, 6.0, INFINITY) == Approx(12.0));
    CHECK_THAT(vals(params[2].grad()), approx({12 * 6.0 / (12.0 + 1e-6)}));
}

TEST_CASE("clip_grad_norm without gradients returns 0, and bad arguments throw", "[optim][clip][errors]") {
    CHECK(clip_grad_norm({param({2})}, 1.0) == 0.0);
    CHECK(clip_grad_norm({}, 1.0) == 0.0);
    auto params = with_gradients(kFloat64);
    CHECK_THROWS_WITH(clip_grad_norm(params, -1.0), Catch::Contains("clip_grad_norm: invalid max_norm -1"));
    CHECK_THROWS_WITH(clip_grad_norm(params, 1.0, 0.0), Catch::Contains("clip_grad_norm: invalid norm_type 0"));
}

// std::max(acc, NaN) is acc, so the infinity norm once skipped a NaN gradient: it returned a
// finite norm and left the other gradients unclipped. torch returns nan and spreads it.
TEST_CASE("clip_grad_norm with the infinity norm keeps a NaN, as the 2-norm does", "[optim][clip]") {
    for (double norm_type : {2.0, double(INFINITY)}) {
        Tensor a = zeros({3}, TensorOptions(kFloat64).requires_grad(true));
        Tensor b = zeros({1}, TensorOptions(kFloat64).requires_grad(true));
        a.set_grad(tensor({1.0, std::nan(""), 5.0}, kFloat64));
        b.set_grad(tensor({100.0}, kFloat64));
        CHECK(std::isnan(clip_grad_norm({a, b}, 1.0, norm_type)));
        CHECK(std::isnan(vals(b.grad())[0]));
        // NaN in the second parameter only: the running maximum across parameters keeps it too.
        a.set_grad(tensor({1.0, 2.0, 3.0}, kFloat64));
        b.set_grad(tensor({std::nan("")}, kFloat64));
        CHECK(std::isnan(clip_grad_norm({a, b}, 1.0, norm_type)));
    }
}

namespace {

// Gradients of sizes around the lane count (8) and a large one, in float32 or float64, with
// values of mixed scales; their norms in long double, per tensor then over the tensors.
struct RandomGradients {
    std::vector<Tensor> params;
    std::vector<std::vector<double>> grads;

    RandomGradients(Dtype dtype, std::uint64_t seed) {
        Generator gen(seed);
        for (std::size_t n : {1, 3, 7, 8, 9, 17, 1001, 70001}) {
            Tensor p = zeros({n}, TensorOptions(dtype).requires_grad(true));
            Tensor g = mul(randn({n}, dtype, gen), uniform({n}, 0.01, 100.0, dtype, gen));
            p.set_grad(g);
            params.push_back(p);
            grads.push_back(vals(g));
        }
    }

    double reference_norm(double p) const {
        long double total = 0;
        for (const auto& g : grads) {
            long double acc = 0;
            for (double x : g) {
                const long double a = std::fabs(static_cast<long double>(x));
                acc = std::isinf(p) ? std::max(acc, a) : acc + std::pow(a, static_cast<long double>(p));
            }
            total = std::isinf(p) ? std::max(total, acc) : total + acc;
        }
        return double(std::isinf(p) ? total : std::pow(total, 1 / static_cast<long double>(p)));
    }
};

}  // namespace

// The sums run in interleaved partial sums: a lost lane or tail element would show here (one
// element of the largest tensor is about 1e-5 of its sum).
TEST_CASE("clip_grad_norm of many random gradients matches a long double sum", "[optim][clip]") {
    const Dtype dtype = GENERATE(kFloat32, kFloat64);
    const double norm_type = GENERATE(2.0, 1.0, 3.0, 0.5, double(INFINITY));
    CAPTURE(dtype_name(dtype), norm_type);
    RandomGradients r(dtype, 5);
    const double want = r.reference_norm(norm_type);
    const double max_norm = want / 4;
    const double total = clip_grad_norm(r.params, max_norm, norm_type);
    CHECK(total == Approx(want).epsilon(1e-12));
    // Every gradient scaled by the clip coefficient, in the gradient's type.
    const double coef = max_norm / (total + 1e-6);
    for (std::size_t i = 0; i < r.params.size(); ++i) {
        const std::vector<double> got = vals(r.params[i].grad());
        for (std::size_t j = 0; j < got.size(); ++j) {
            const double expected =
                dtype == kFloat32 ? double(float(r.grads[i][j]) * float(coef)) : r.grads[i][j] * coef;
            if (got[j] != expected) FAIL("gradient " << i << " element " << j << ": " << got[j] << " != " << expected);
        }
    }
}

// Each position of a lane block and of the tail, in a small and a large tensor.
TEST_CASE("clip_grad_norm keeps a NaN or an infinite gradient wherever it sits", "[optim][clip]") {
    const Dtype dtype = GENERATE(kFloat32, kFloat64);
    const double norm_type = GENERATE(2.0, 1.0, 3.0, double(INFINITY));
    const std::size_t n = GENERATE(9, 70001);
    for (std::size_t at : {std::size_t(0), std::size_t(5), n / 2, n - 1}) {
        for (double bad : {double(NAN), double(INFINITY), -double(INFINITY)}) {
            CAPTURE(dtype_name(dtype), norm_type, n, at, bad);
            Tensor a = zeros({n}, TensorOptions(dtype).requires_grad(true));
            Tensor b = zeros({2}, TensorOptions(dtype).requires_grad(true));
            std::vector<double> g(n, 0.5);
            g[at] = bad;
            a.set_grad(from_vector(g, {n}, dtype));
            b.set_grad(tensor({3.0, -4.0}, dtype));
            const double total = clip_grad_norm({a, b}, 1.0, norm_type);
            if (std::isnan(bad)) {
                CHECK(std::isnan(total));
                CHECK(std::isnan(vals(b.grad())[0]));  // a NaN norm spreads, as in torch
            } else {
                CHECK(total == INFINITY);
                CHECK(vals(b.grad()) == std::vector<double>{0.0, -0.0});  // scaled by 1 / inf
            }
        }
    }
}

// Run by the test below in processes with different pool sizes: the norms in hexadecimal.
TEST_CASE("clip_grad_norm child: prints the norms of random gradients", "[.clip-threads-child]") {
    for (Dtype dtype : {kFloat32, kFloat64}) {
        for (double norm_type : {2.0, 1.0, 3.0, double(INFINITY)}) {
            RandomGradients r(dtype, 9);
            std::printf("norm %a\n", clip_grad_norm(r.params, 1.0, norm_type));
            std::printf("first clipped %a\n", vals(r.params.back().grad())[0]);
        }
    }
}

TEST_CASE("clip_grad_norm gives the same bits whatever the number of threads", "[optim][clip]") {
    const auto [one, three] = run_on_1_and_3_threads("[.clip-threads-child]");
    INFO(one);
    REQUIRE(one.find("norm 0x") != std::string::npos);
    CHECK(one == three);
}
