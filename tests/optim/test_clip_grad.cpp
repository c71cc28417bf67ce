// clip_grad_norm against hand-computed norms.
#include <cmath>

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
