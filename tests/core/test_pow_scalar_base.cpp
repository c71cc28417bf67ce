// pow(number, tensor): torch.pow(10000, x), as d2l's PositionalEncoding writes it.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "../helpers.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"

using namespace xgrad;
using Catch::Matchers::Contains;

TEST_CASE("pow(number, tensor) gives torch's values and gradients", "[pow-scalar-base]") {
    // torch.pow(10000, torch.arange(0, 32, 2, dtype=torch.float32) / 32), torch 1.13
    const std::vector<float> want{1.0f,        1.778279423713684f, 3.1622776985168457f, 5.6234130859375f,
                                  10.0f,       17.782794952392578f, 31.62277603149414f,  56.234130859375f,
                                  100.0f,      177.82794189453125f, 316.2277526855469f,  562.34130859375f,
                                  1000.0f,     1778.2794189453125f, 3162.277587890625f,  5623.4130859375f};
    const Tensor e = arange(0, 32, 2, kFloat32) / 32;
    const Tensor y = pow(10000, e);
    REQUIRE(y.dtype() == kFloat32);
    REQUIRE(y.to_vector<float>() == want);

    // torch.pow(3.0, e).sum().backward(): e.grad = 3^e·ln 3
    const Tensor e3 = tensor({0.5, -1.0, 2.0}, kFloat64).requires_grad_();
    const Tensor y3 = pow(3.0, e3);
    y3.sum().backward();
    const std::vector<double> v3 = y3.to_vector<double>(), g3 = e3.grad().to_vector<double>();
    const std::vector<double> want_v{1.7320508075688772, 0.3333333333333333, 9.0};
    const std::vector<double> want_g{1.902852301792692, 0.3662040962227032, 9.887510598012987};
    for (std::size_t i = 0; i < 3; ++i) {
        CHECK(v3[i] == Approx(want_v[i]).epsilon(1e-15));
        CHECK(g3[i] == Approx(want_g[i]).epsilon(1e-15));
    }

    // A base of 0, as torch: 0^0 = 1, 0^e = 0 for e > 0 with gradient 0 (not 0·-inf), 0^-1 = inf.
    const Tensor e0 = tensor({0.0, 1.0, 2.5, -1.0}, kFloat64).requires_grad_();
    const Tensor y0 = pow(0.0, e0);
    y0.sum().backward();
    const double inf = std::numeric_limits<double>::infinity();
    REQUIRE(y0.to_vector<double>() == std::vector<double>{1.0, 0.0, 0.0, inf});
    REQUIRE(e0.grad().to_vector<double>() == std::vector<double>{0.0, 0.0, 0.0, -inf});

    const Tensor x = randn({2, 3}, kFloat64).requires_grad_();
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& in) { return pow(10000, in[0] / 4.0); }, {x}, "pow(10000, x)");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return pow(0.5, in[0]); }, {x}, "pow(0.5, x)");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return pow(0.0, in[0] * in[0] + 0.5); }, {x},
                          "pow(0, x)");

    REQUIRE_THROWS_WITH(pow(2.0, Tensor()), Contains("pow: exponent is an undefined tensor"));
    // An integer exponent takes torch's result_type (test_adversarial_integer_promotion.cpp).
    REQUIRE(pow(2.0, arange(3, kInt64)).dtype() == kFloat32);
    REQUIRE(pow(2, arange(3, kInt64)).dtype() == kInt64);
}
