// pow with a tensor exponent: torch.pow(a, b), a.pow(b), broadcasting, with torch's gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../helpers.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Matchers::Contains;

namespace {

// Equal to 1e-15 relative, NaN where want is NaN, infinities of the same sign.
void check_same(const std::vector<double>& got, const std::vector<double>& want) {
    check_close_or_both_nan(got, want, Tolerance{1e-15, 0});
}
}  // namespace

TEST_CASE("torch.pow(b, e) with broadcasting gives torch's float32 values and gradients", "[pow-tensor]") {
    // torch.pow(torch.tensor([[1.5], [0.3], [2.7]]), torch.tensor([0.5, -1.25, 3.1, 7.0])), torch 1.13
    const std::vector<float> want{0x1.3988e2p+0f, 0x1.346df2p-1f, 0x1.c1e044p+1f, 0x1.116p+4f,
                                  0x1.186f18p-1f, 0x1.20418ap+2f, 0x1.883082p-6f, 0x1.caa5b4p-13f,
                                  0x1.a4a6a4p+0f, 0x1.27ddbap-2f, 0x1.5bd08p+4f,  0x1.058244p+10f};
    const Tensor b = tensor({1.5, 0.3, 2.7}).reshape({3, 1}).requires_grad_();
    const Tensor e = tensor({0.5, -1.25, 3.1, 7.0}).requires_grad_();
    const Tensor y = pow(b, e);
    REQUIRE(y.dtype() == kFloat32);
    REQUIRE(y.shape() == Shape{3, 4});
    CHECK(y.to_vector<float>() == want);
    CHECK(b.pow(e).to_vector<float>() == want);  // the method
    y.sum().backward();
    CHECK_THAT(vals(b.grad()), approx({86.90424346923828, -17.601341247558594, 2737.0732421875}, 1e-3));
    CHECK_THAT(vals(e.grad()), approx({1.4692275524139404, -4.891458988189697, 22.987958908081055, 1045.904052734375}, 1e-3));
}

TEST_CASE("torch.pow(b, e) at a zero base, negative bases and NaN gives torch's values and gradients",
          "[pow-tensor]") {
    // torch 1.13, float64: y = torch.pow(b, e); y.backward(torch.ones_like(y))
    const Tensor b = tensor({0., 0., 0., -2., -2., -2., 2., kNaN, 1., 0., -0.5, 3.}, kFloat64).requires_grad_();
    const Tensor e = tensor({2., 0., -1., 3., 2., 0.5, kNaN, 0., kNaN, kNaN, -2., 0.}, kFloat64).requires_grad_();
    const Tensor y = pow(b, e);
    y.backward(ones_like(y));
    check_same(vals(y), {0.0, 1.0, kInf, -8.0, 4.0, kNaN, kNaN, 1.0, 1.0, kNaN, 4.0, 1.0});
    check_same(vals(b.grad()), {0.0, 0.0, -kInf, 12.0, -4.0, kNaN, kNaN, 0.0, kNaN, kNaN, 16.0, 0.0});
    check_same(vals(e.grad()), {0.0, 0.0, -kInf, kNaN, kNaN, kNaN, kNaN, kNaN, 0.0, kNaN, kNaN, 1.0986122886681098});
}

TEST_CASE("torch.pow(0, e) gives a NaN gradient for a NaN exponent, as torch", "[pow-tensor]") {
    // torch.pow(0, x).sum().backward() for x = [nan, -1, 1]: x.grad = [nan, -inf, 0]
    const Tensor x = tensor({kNaN, -1.0, 1.0}, kFloat64).requires_grad_();
    pow(0.0, x).sum().backward();
    check_same(vals(x.grad()), {kNaN, -kInf, 0.0});
}

TEST_CASE("torch.pow(b, e) passes gradcheck and gradgradcheck in double", "[pow-tensor]") {
    const Tensor b = param({3, 1}, 0.5, 2.0, 1), e = param({1, 4}, -1.5, 2.5, 2);
    const auto f = [](const std::vector<Tensor>& in) { return pow(in[0], in[1]); };
    REQUIRE_GRADCHECK(f, {b, e}, "pow(b, e)");
    REQUIRE_GRADGRADCHECK(f, {b, e}, "pow(b, e)");
    // The exponent alone, and the base alone, each against a constant of the other.
    const Tensor c = param({3, 4}, 0.5, 2.0, 3);
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& in) { return pow(c, in[0]); }, {e}, "pow(c, e)");
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& in) { return in[0].pow(c); }, {b}, "b.pow(c)");
    // Negative bases with integer exponents (the exponent's gradient is NaN there, as torch's;
    // only the base is checked).
    const Tensor nb = param({4}, -2.0, -0.5, 4);
    const Tensor ie = tensor({2.0, 3.0, -1.0, 0.0}, kFloat64);
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& in) { return pow(in[0], ie); }, {nb}, "pow(negative b, integer e)");
}

TEST_CASE("torch.pow of int64 tensors raises integers and wraps as torch", "[pow-tensor]") {
    // torch.pow(torch.tensor([2, -3, 0, 3, 2, 1, -1]), torch.tensor([3, 3, 0, 40, -1, -1, -3]))
    const Tensor y = pow(tensor({2, -3, 0, 3, 2, 1, -1}), tensor({3, 3, 0, 40, -1, -1, -3}));
    CHECK(y.dtype() == kInt64);
    CHECK(y.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{8, -27, 1, -6289078614652622815, 0, 1, -1});
    // torch.pow(torch.tensor([2, 3]), torch.tensor([1.5, 2.])) promotes to float32.
    const Tensor f = pow(tensor({2, 3}), tensor({1.5, 2.0}));
    CHECK(f.dtype() == kFloat32);
    CHECK(f.to_vector<float>() == std::vector<float>{std::pow(2.0f, 1.5f), 9.0f});
    // torch.pow(torch.tensor([2., 3.]), torch.tensor(2)): a 0-d int64 exponent keeps float32.
    CHECK(pow(tensor({2.0, 3.0}), tensor(2)).to_vector<float>() == std::vector<float>{4, 9});
    CHECK_THROWS_WITH(pow(tensor({true}), tensor({true})), Contains("pow: bool"));
    CHECK_THROWS_WITH(pow(ones({2, 3}), ones({4})), Contains("pow"));
    CHECK_THROWS_WITH(pow(Tensor(), ones({4})), Contains("pow") && Contains("base"));
}
