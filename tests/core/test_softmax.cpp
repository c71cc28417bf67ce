// softmax and log_softmax: values, stability at large inputs, gradients along every axis.
#include <cmath>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("softmax rows sum to one and match the formula", "[softmax]") {
    Tensor x = tensor({{1, 2, 3}, {0, 0, 0}}, kFloat64);
    const double z = std::exp(1) + std::exp(2) + std::exp(3);
    CHECK_THAT(vals(softmax(x, -1)), approx({std::exp(1) / z, std::exp(2) / z, std::exp(3) / z, 1. / 3, 1. / 3, 1. / 3}));
    CHECK_THAT(vals(softmax(x, 0)), approx({1 / (1 + std::exp(-1)), 1 / (1 + std::exp(-2)), 1 / (1 + std::exp(-3)),
                                             1 / (1 + std::exp(1)), 1 / (1 + std::exp(2)), 1 / (1 + std::exp(3))}));
    CHECK_THAT(vals(log_softmax(x, 1)), approx({1 - std::log(z), 2 - std::log(z), 3 - std::log(z),
                                                 -std::log(3), -std::log(3), -std::log(3)}));
}

TEST_CASE("softmax is stable for large inputs", "[softmax]") {
    Tensor x = tensor({1000, 1001, -1e6});
    CHECK_THAT(vals(softmax(x, 0)), approx({1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-1.0)), 0}, 1e-6));
    auto l = vals(log_softmax(x, 0));
    CHECK(std::isfinite(l[0]));
    CHECK(l[1] == Approx(-std::log1p(std::exp(-1.0))).margin(1e-4));  // float32 ulp at 1000 is 6e-5
}

TEST_CASE("softmax and log_softmax pass gradcheck along any axis", "[softmax][gradcheck]") {
    auto [shape, axis] = GENERATE(table<Shape, long>({
        {{5}, 0}, {{2, 3}, -1}, {{2, 3}, 0}, {{2, 3, 4}, 1}, {{1, 4, 1}, 1}, {{3, 1}, 1},
    }));
    Tensor x = param(shape, -2, 2);
    REQUIRE_GRADCHECK([axis = axis](auto& v) { return softmax(v[0], axis); }, {x}, "softmax");
    REQUIRE_GRADCHECK([axis = axis](auto& v) { return log_softmax(v[0], axis); }, {x}, "log_softmax");
}

TEST_CASE("softmax rejects a bad axis and integer input", "[softmax][errors]") {
    CHECK_THROWS_WITH(softmax(ones({2, 3}), 2), Catch::Contains("softmax: axis 2 is out of range") &&
                                                    Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(log_softmax(ones({2}, kInt64), 0), Catch::Contains("log_softmax") && Catch::Contains("int64"));
}
