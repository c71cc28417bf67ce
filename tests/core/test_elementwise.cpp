// Elementwise ops: values by hand, gradients by gradcheck, broadcasting both ways.
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("binary ops compute values with broadcasting", "[elementwise]") {
    Tensor a = tensor({{1., 2., 3.}, {4., 5., 6.}});
    Tensor b = tensor({10., 20., 30.});
    CHECK_THAT(vals(a + b), approx({11, 22, 33, 14, 25, 36}));
    CHECK_THAT(vals(a - b), approx({-9, -18, -27, -6, -15, -24}));
    CHECK_THAT(vals(a * b), approx({10, 40, 90, 40, 100, 180}));
    CHECK_THAT(vals(b / a), approx({10, 10, 10, 2.5, 4, 5}));
    CHECK((a + b).shape() == Shape{2, 3});
    CHECK_THAT(vals(2.0 - a), approx({1, 0, -1, -2, -3, -4}));
    CHECK_THAT(vals(6.0 / a), approx({6, 3, 2, 1.5, 1.2, 1}));
}

TEST_CASE("unary ops compute values", "[elementwise]") {
    Tensor x = tensor({-1.0, 0.5, 2.0}, kFloat64);
    CHECK_THAT(vals(exp(x)), approx({std::exp(-1.0), std::exp(0.5), std::exp(2.0)}));
    CHECK_THAT(vals(relu(x)), approx({0, 0.5, 2}));
    CHECK_THAT(vals(tanh(x)), approx({std::tanh(-1.0), std::tanh(0.5), std::tanh(2.0)}));
    CHECK_THAT(vals(sigmoid(x)), approx({1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-0.5)), 1 / (1 + std::exp(-2.0))}));
    CHECK_THAT(vals(pow(x, 3)), approx({-1, 0.125, 8}));
    // torch.nn.functional.gelu(torch.tensor([-1., .5, 2.], dtype=torch.float64))
    CHECK_THAT(vals(gelu(x)), approx({-0.15865525393145707, 0.34573123063700656, 1.9544997361036416}));
    Tensor p = tensor({0.25, 4.0}, kFloat64);
    CHECK_THAT(vals(sqrt(p)), approx({0.5, 2}));
    CHECK_THAT(vals(log(p)), approx({std::log(0.25), std::log(4.0)}));
}

TEST_CASE("binary ops pass gradcheck, broadcasting included", "[elementwise][gradcheck]") {
    auto [sa, sb] = GENERATE(table<Shape, Shape>({
        {{2, 3}, {2, 3}},
        {{2, 3}, {3}},
        {{4, 1, 3}, {2, 1}},
        {{1, 3}, {5, 1}},
        {{}, {2, 2}},
        {{1}, {1}},
    }));
    Tensor a = param(sa, -1, 1, 1);
    Tensor b = param(sb, 0.5, 2, 2);  // away from 0 for div
    REQUIRE_GRADCHECK([](auto& x) { return x[0] + x[1]; }, {a, b}, "add");
    REQUIRE_GRADCHECK([](auto& x) { return x[0] - x[1]; }, {a, b}, "sub");
    REQUIRE_GRADCHECK([](auto& x) { return x[0] * x[1]; }, {a, b}, "mul");
    REQUIRE_GRADCHECK([](auto& x) { return x[0] / x[1]; }, {a, b}, "div");
}

TEST_CASE("unary and scalar ops pass gradcheck", "[elementwise][gradcheck]") {
    Tensor x = param({3, 4}, -2, 2);
    Tensor pos = param({3, 4}, 0.5, 2, 3);
    REQUIRE_GRADCHECK([](auto& v) { return -v[0]; }, {x}, "neg");
    REQUIRE_GRADCHECK([](auto& v) { return exp(v[0]); }, {x}, "exp");
    REQUIRE_GRADCHECK([](auto& v) { return log(v[0]); }, {pos}, "log");
    REQUIRE_GRADCHECK([](auto& v) { return sqrt(v[0]); }, {pos}, "sqrt");
    REQUIRE_GRADCHECK([](auto& v) { return pow(v[0], 3.0); }, {x}, "pow 3");
    REQUIRE_GRADCHECK([](auto& v) { return pow(v[0], -1.5); }, {pos}, "pow -1.5");
    REQUIRE_GRADCHECK([](auto& v) { return tanh(v[0]); }, {x}, "tanh");
    REQUIRE_GRADCHECK([](auto& v) { return sigmoid(v[0]); }, {x}, "sigmoid");
    REQUIRE_GRADCHECK([](auto& v) { return gelu(v[0]); }, {x}, "gelu");
    // ReLU only away from its kink at 0: magnitudes in [0.1, 1), alternating signs.
    Tensor away = (param({3, 4}, 0.1, 1, 4) * tensor({1, -1, 1, -1}, kFloat64)).detach().requires_grad_();
    REQUIRE_GRADCHECK([](auto& v) { return relu(v[0]); }, {away}, "relu");
    REQUIRE_GRADCHECK([](auto& v) { return v[0] * 2.5 + 1.0; }, {x}, "mul/add scalar");
    REQUIRE_GRADCHECK([](auto& v) { return v[0] / 4.0 - 3.0; }, {x}, "div/sub scalar");
    REQUIRE_GRADCHECK([](auto& v) { return 3.0 - v[0]; }, {x}, "rsub");
    REQUIRE_GRADCHECK([](auto& v) { return 3.0 / v[0]; }, {pos}, "rdiv");
}

TEST_CASE("incompatible shapes and dtypes are rejected with the op's name", "[elementwise][errors]") {
    Tensor a = ones({2, 3});
    Tensor b = ones({4});
    CHECK_THROWS_WITH(a + b, Catch::Contains("add") && Catch::Contains("(2, 3)") && Catch::Contains("(4,)"));
    CHECK_THROWS_AS(a * b, Error);
    // Mixed dtypes promote as torch (test_operators.cpp); a matmul still wants one dtype.
    CHECK((a + ones({2, 3}, kFloat64)).dtype() == kFloat64);
    CHECK_THROWS_WITH(matmul(a, ones({3, 2}, kFloat64)), Catch::Contains("dtypes differ"));
    CHECK_THROWS_WITH(gelu(ones({2}, kInt64)), Catch::Contains("gelu") && Catch::Contains("int64"));
}

TEST_CASE("every binary op names itself and both shapes on a mismatch", "[elementwise][errors]") {
    const Tensor a = ones({2, 3});
    const Tensor b = ones({4});
    // A macro, not a lambda returning the matcher: `m1 && m2` keeps references to m1 and m2,
    // which a returned matcher would outlive (AddressSanitizer's stack-use-after-return).
#define NAMES_BOTH(op) Catch::StartsWith(op ":") && Catch::Contains("(2, 3)") && Catch::Contains("(4,)")
    CHECK_THROWS_WITH(add(a, b), NAMES_BOTH("add"));
    CHECK_THROWS_WITH(sub(a, b), NAMES_BOTH("sub"));
    CHECK_THROWS_WITH(mul(a, b), NAMES_BOTH("mul"));
    CHECK_THROWS_WITH(div(a, b), NAMES_BOTH("div"));
    CHECK_THROWS_WITH(eq(a, b), NAMES_BOTH("eq"));
    CHECK_THROWS_WITH(ne(a, b), NAMES_BOTH("ne"));
    CHECK_THROWS_WITH(lt(a, b), NAMES_BOTH("lt"));
    CHECK_THROWS_WITH(le(a, b), NAMES_BOTH("le"));
    CHECK_THROWS_WITH(gt(a, b), NAMES_BOTH("gt"));
    CHECK_THROWS_WITH(ge(a, b), NAMES_BOTH("ge"));
    CHECK_THROWS_WITH(where(gt(a, 0.0), a, b), NAMES_BOTH("where"));
    CHECK_THROWS_WITH(masked_fill(a, gt(b, 0.0), 0.0), NAMES_BOTH("masked_fill"));
    // Broadcasting goes one way for masked_fill: the result keeps the input's shape.
    CHECK_THROWS_WITH(masked_fill(ones({3}), gt(a, 0.0), 0.0),
                      Catch::Contains("masked_fill") && Catch::Contains("(2, 3)") && Catch::Contains("(3,)"));
    CHECK_THROWS_WITH(where(a, a, a), Catch::Contains("where") && Catch::Contains("bool"));
#undef NAMES_BOTH
}

TEST_CASE("comparisons give bool tensors", "[elementwise]") {
    Tensor a = tensor({1, 2, 3});
    Tensor m = gt(a, 1.5);
    CHECK(m.dtype() == kBool);
    CHECK(m.to_vector<bool>() == std::vector<bool>{false, true, true});
    CHECK(logical_not(m).to_vector<bool>() == std::vector<bool>{true, false, false});
    CHECK(eq(a, tensor({1, 0, 3})).to_vector<bool>() == std::vector<bool>{true, false, true});
}

TEST_CASE("casting between float types is differentiable", "[elementwise][gradcheck]") {
    // A float32 round trip would drown central differences in rounding: check the chain rule
    // through each direction instead.
    Tensor x32 = tensor({1.5, -2.0}).requires_grad_();
    (cast(x32, kFloat64) * 3.0).sum().backward();
    CHECK(x32.grad().dtype() == kFloat32);
    CHECK_THAT(vals(x32.grad()), approx({3, 3}));
    Tensor x = param({2, 2});
    REQUIRE_GRADCHECK([](auto& v) { return cast(v[0], kFloat64) * 2.0; }, {x}, "cast");
    CHECK(x.to(kInt64).dtype() == kInt64);
    CHECK(!x.to(kInt64).requires_grad());
    CHECK(x.to(kFloat64).is_same(x));
}

// sum_to once reduced an empty gradient with xtensor's immediate reducer, which segfaulted.
TEST_CASE("broadcasting against an empty tensor sends zero gradients back", "[elementwise]") {
    Tensor a = zeros({0, 3}, TensorOptions(kFloat64).requires_grad(true));
    Tensor b = ones({1, 3}, TensorOptions(kFloat64).requires_grad(true));
    Tensor y = mul(a, b);
    CHECK(y.shape() == Shape{0, 3});
    sum(y).backward();
    CHECK(a.grad().shape() == Shape{0, 3});
    CHECK(b.grad().shape() == Shape{1, 3});
    CHECK_THAT(vals(b.grad()), approx({0, 0, 0}));
}

// The number was once cast to int64 first, so that 2 < 2.5 came out false and 2 == 2.5 true.
TEST_CASE("an int64 tensor compares with a fractional number exactly", "[elementwise]") {
    Tensor i = from_vector(std::vector<std::int64_t>{1, 2, 3}, {3});
    CHECK(lt(i, 2.5).to_vector<bool>() == std::vector<bool>{true, true, false});
    CHECK(gt(i, 1.5).to_vector<bool>() == std::vector<bool>{false, true, true});
    CHECK(eq(i, 2.5).to_vector<bool>() == std::vector<bool>{false, false, false});
    CHECK(eq(i, 2.0).to_vector<bool>() == std::vector<bool>{false, true, false});
    CHECK(lt(i, -0.5).to_vector<bool>() == std::vector<bool>{false, false, false});
}

// The backward computed 0·0^(-1) = NaN at x = 0; torch.pow(x, 0) has gradient 0 everywhere.
TEST_CASE("pow with exponent 0 has a zero gradient, also at 0", "[elementwise]") {
    for (Dtype d : {kFloat32, kFloat64}) {
        Tensor x = tensor({0.0, 2.0, -1.5}, TensorOptions(d).requires_grad(true));
        Tensor y = pow(x, 0.0);
        CHECK_THAT(vals(y), approx({1, 1, 1}));
        sum(y).backward();
        CHECK_THAT(vals(x.grad()), approx({0, 0, 0}));
    }
}
