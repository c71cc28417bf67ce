// Reductions: sum, mean, max, argmax. Values by hand, gradients by gradcheck, ties, errors.
#include <cmath>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("sum and mean over all axes or some", "[reduce]") {
    Tensor a = tensor({{1., 2., 3.}, {4., 5., 6.}});
    CHECK(sum(a).shape() == Shape{});
    CHECK(sum(a).item<double>() == 21);
    CHECK_THAT(vals(sum(a, {0})), approx({5, 7, 9}));
    CHECK_THAT(vals(sum(a, {-1})), approx({6, 15}));
    CHECK(sum(a, {1}, true).shape() == Shape{2, 1});
    CHECK_THAT(vals(sum(a, {1}, true)), approx({6, 15}));
    CHECK(sum(a, {0, 1}).shape() == Shape{});
    // An empty axes list sums everything, as torch.sum(x, dim=[]).
    CHECK(sum(a, {}).shape() == Shape{});
    CHECK(sum(a, {}).item<double>() == 21);
    CHECK(sum(a, {}, true).shape() == Shape{1, 1});
    CHECK(mean(a).item<double>() == 3.5);
    CHECK_THAT(vals(mean(a, {0})), approx({2.5, 3.5, 4.5}));
    CHECK_THAT(vals(mean(a, {-1}, true)), approx({2, 5}));
    CHECK(a.sum({0}).dtype() == kFloat32);
    CHECK(sum(tensor(3.0)).item<double>() == 3);
    CHECK(mean(tensor(3.0)).shape() == Shape{});

    // (2, 2, 3): axes 0 and 2 leave the middle one.
    Tensor b = tensor({{{1, 2, 3}, {4, 5, 6}}, {{7, 8, 9}, {10, 11, 12}}}, kFloat64);
    CHECK_THAT(vals(sum(b, {0, 2})), approx({1 + 2 + 3 + 7 + 8 + 9, 4 + 5 + 6 + 10 + 11 + 12}));
    CHECK(sum(b, {2, 0}, true).shape() == Shape{1, 2, 1});
    CHECK_THAT(vals(mean(b, {0, -1})), approx({5, 8}));
    CHECK(mean(b, {1}).dtype() == kFloat64);
}

TEST_CASE("sum of int64 and bool tensors gives int64", "[reduce]") {
    Tensor i = from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(sum(i).dtype() == kInt64);
    CHECK(sum(i).item<std::int64_t>() == 21);
    CHECK(sum(i, {0}).to_vector<std::int64_t>() == std::vector<std::int64_t>{5, 7, 9});
    Tensor m = gt(tensor({{1, 5, 3}, {4, 2, 6}}), 2.5);
    CHECK(sum(m).dtype() == kInt64);
    CHECK(sum(m).item<std::int64_t>() == 4);
    CHECK(sum(m, {1}).to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 2});
}

TEST_CASE("sum and mean pass gradcheck", "[reduce][gradcheck]") {
    auto [shape, axes, keepdims] = GENERATE(table<Shape, std::vector<long>, bool>({
        {{2, 3}, {0}, false},
        {{2, 3}, {1}, true},
        {{2, 3}, {-1}, false},
        {{1, 4}, {0}, false},
        {{3, 1, 4}, {0, 2}, true},
        {{3, 2, 4}, {-1, 0}, false},
        {{2, 3, 4}, {}, false},
        {{2, 3, 4}, {}, true},
        {{5}, {0}, false},
        {{}, {}, false},
    }));
    Tensor x = param(shape);
    REQUIRE_GRADCHECK([axes = axes, keepdims = keepdims](auto& v) { return sum(v[0], axes, keepdims); }, {x}, "sum");
    REQUIRE_GRADCHECK([axes = axes, keepdims = keepdims](auto& v) { return mean(v[0], axes, keepdims); }, {x}, "mean");
    REQUIRE_GRADCHECK([](auto& v) { return sum(v[0]); }, {x}, "sum all");
    REQUIRE_GRADCHECK([](auto& v) { return mean(v[0]); }, {x}, "mean all");
}

TEST_CASE("max and argmax along an axis", "[reduce]") {
    Tensor a = tensor({{1., 5., 3.}, {4., 2., 6.}});
    CHECK_THAT(vals(max(a, 1).values), approx({5, 6}));
    CHECK_THAT(vals(max(a, 0).values), approx({4, 5, 6}));
    CHECK(max(a, -1, true).values.shape() == Shape{2, 1});
    CHECK(max(a, 0).values.dtype() == kFloat32);
    CHECK(argmax(a, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2});
    CHECK(argmax(a, -2).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 1});
    CHECK(argmax(a, 0, true).shape() == Shape{1, 3});
    CHECK(argmax(a, 0).dtype() == kInt64);
    // (2, 2, 2) along the middle axis.
    Tensor b = tensor({{{1, 8}, {3, 2}}, {{-1, -5}, {-2, -4}}}, kFloat64);
    CHECK_THAT(vals(max(b, 1).values), approx({3, 8, -1, -4}));
    CHECK(argmax(b, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 0, 1});
    // int64 values too, without gradient.
    Tensor i = from_vector(std::vector<std::int64_t>{3, 9, 2, 7}, {2, 2});
    CHECK(max(i, 1).values.to_vector<std::int64_t>() == std::vector<std::int64_t>{9, 7});
    // NaN propagates, as torch.max.
    Tensor n = tensor({1.0, NAN, 3.0}, kFloat64);
    CHECK(std::isnan(max(n, 0).values.item<double>()));
    CHECK(argmax(n, 0).item<std::int64_t>() == 1);
}

TEST_CASE("max passes gradcheck on inputs without ties", "[reduce][gradcheck]") {
    auto [shape, axis, keepdims] = GENERATE(table<Shape, long, bool>({
        {{3, 4}, 1, false},
        {{3, 4}, -2, true},
        {{1, 5}, 1, false},
        {{1, 5}, 0, false},
        {{2, 3, 4}, 1, true},
        {{2, 3, 4}, -1, false},
        {{6}, 0, false},
    }));
    // Uniform doubles: ties have probability zero, and the nearest pair stays far above eps.
    Tensor x = param(shape, -1, 1, 7);
    REQUIRE_GRADCHECK([axis = axis, keepdims = keepdims](auto& v) { return max(v[0], axis, keepdims).values; }, {x},
                      "max");
}

TEST_CASE("max sends the gradient of a tie to the first maximum only", "[reduce]") {
    Tensor x = tensor({{2, 7, 7}, {3, 3, 1}, {5, 5, 5}}, kFloat64).requires_grad_();
    Tensor m = max(x, 1).values;
    CHECK_THAT(vals(m), approx({7, 3, 5}));
    (m * tensor({10, 20, 30}, kFloat64)).sum().backward();
    CHECK_THAT(vals(x.grad()), approx({0, 10, 0, 20, 0, 0, 30, 0, 0}));
    CHECK(argmax(x, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 0});

    Tensor y = tensor({{4, 1}, {4, 1}}, kFloat64).requires_grad_();
    max(y, 0).values.sum().backward();
    CHECK_THAT(vals(y.grad()), approx({1, 1, 0, 0}));
}

TEST_CASE("bad reduction arguments are rejected", "[reduce][errors]") {
    Tensor a = ones({2, 3});
    CHECK_THROWS_WITH(sum(a, {1, -1}), Catch::Contains("sum") && Catch::Contains("more than once") &&
                                           Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(mean(a, {0, 0}), Catch::Contains("mean") && Catch::Contains("more than once"));
    CHECK_THROWS_WITH(sum(a, {2}), Catch::Contains("sum") && Catch::Contains("axis 2") && Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(mean(a, {-3}), Catch::Contains("mean") && Catch::Contains("axis -3"));
    CHECK_THROWS_WITH(mean(ones({2}, kInt64)), Catch::Contains("mean") && Catch::Contains("int64"));
    CHECK_THROWS_WITH(max(a, 2).values, Catch::Contains("max") && Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(argmax(a, -3), Catch::Contains("argmax") && Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(max(zeros({2, 0}), 1).values, Catch::Contains("max") && Catch::Contains("length 0") &&
                                                 Catch::Contains("(2, 0)"));
    CHECK_THROWS_WITH(argmax(zeros({0}), 0), Catch::Contains("argmax") && Catch::Contains("length 0"));
}

// xtensor's immediate reducer segfaulted on an empty input reduced over some of its axes.
TEST_CASE("sum and mean over empty tensors give torch's zeros and NaN", "[reduce]") {
    Tensor x = zeros({0, 3}, TensorOptions(kFloat64).requires_grad(true));
    CHECK(sum(x, {0}).shape() == Shape{3});
    CHECK_THAT(vals(sum(x, {0})), approx({0, 0, 0}));
    CHECK(sum(x, {1}).shape() == Shape{0});
    CHECK(sum(x, {0}, true).shape() == Shape{1, 3});
    CHECK(sum(zeros({2, 0, 3}), {1}).shape() == Shape{2, 3});
    CHECK(sum(zeros({0, 3}, kInt64), {0}).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 0});
    CHECK(sum(zeros({0, 3}, kInt64), {1}).shape() == Shape{0});
    Tensor m = mean(x, {0});
    CHECK(m.shape() == Shape{3});
    CHECK(std::isnan(m.to_vector<double>()[0]));  // torch.zeros(0, 3).mean(0) is nan
    sum(sum(x, {0})).backward();
    CHECK(x.grad().shape() == Shape{0, 3});
}
