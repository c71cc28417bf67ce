// The checker itself: it must pass correct gradients and catch a wrong one.
#include <cmath>

#include "core/node.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {
// x³ with a deliberately wrong backward (2x² instead of 3x²).
Tensor bad_cube(const Tensor& a) {
    xt::xarray<double> y = xt::pow(values<double>(a), 3.0);
    return make_result<double>(std::move(y), {a}, "bad_cube", Formula([](const GradArgs& in) -> std::vector<Tensor> {
        const Tensor& x = in.inputs[0];
        return {in.grad() * 2.0 * x * x};
    }));
}
}  // namespace

TEST_CASE("gradcheck catches a wrong gradient and says where", "[gradcheck]") {
    Tensor x = param({2, 3}, 0.5, 1.5);
    auto result = gradcheck([](auto& v) { return bad_cube(v[0]); }, {x}, {1e-6, 1e-5, 1e-3, 0, "bad_cube"});
    CHECK(!result.passed);
    CHECK_THAT(result.report, Catch::Contains("bad_cube") && Catch::Contains("input 0") &&
                                  Catch::Contains("(2, 3)") && Catch::Contains("index"));
}

TEST_CASE("gradcheck passes a right gradient and skips inputs without requires_grad", "[gradcheck]") {
    Tensor x = param({2, 3});
    Tensor c = ones({2, 3}, kFloat64);
    auto result = gradcheck([](auto& v) { return v[0] * v[1] + v[0]; }, {x, c});
    CHECK(result.passed);
    CHECK(result.report.empty());
    CHECK(!x.grad().defined());  // the caller's tensors are untouched
}

TEST_CASE("gradcheck refuses tolerances and steps that would measure nothing", "[gradcheck]") {
    Tensor x = param({2, 3}, 0.5, 1.5);
    auto f = [](auto& v) { return bad_cube(v[0]); };
    const double nan = std::nan(""), inf = HUGE_VAL;
    for (double eps : {0.0, -1e-6, nan, inf})
        CHECK_THROWS_WITH(gradcheck(f, {x}, {eps, 1e-5, 1e-3, 0, "f"}), Catch::StartsWith("gradcheck: eps must be"));
    for (double tol : {-1.0, nan, inf}) {
        INFO(tol);  // a NaN tolerance once passed this wrong gradient
        CHECK_THROWS_WITH(gradcheck(f, {x}, {1e-6, tol, 1e-3, 0, "f"}), Catch::StartsWith("gradcheck: atol must be"));
        CHECK_THROWS_WITH(gradcheck(f, {x}, {1e-6, 1e-5, tol, 0, "f"}), Catch::StartsWith("gradcheck: rtol must be"));
    }
}
