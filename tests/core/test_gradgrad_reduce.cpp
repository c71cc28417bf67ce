// Second derivatives of the selection, reduction, sorting and conversion ops: gradgradcheck on
// every overload, and torch 1.13's own values where its conventions decide them (ties, a zero
// norm or std, NaN).
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <utility>

#include "core/autograd.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

using Fn = GradcheckFn;

// An op of one input as a gradcheck function.
template <class F> Fn one(F f) {
    return [f](const std::vector<Tensor>& x) { return f(x[0]); };
}

// Distinct values of distinct magnitudes in ±[0.2, 2), far apart at gradcheck's eps: no ties
// for max, sort or norm inf, no zeros for norm p = 1. (7 is prime to the sizes used.)
Tensor spread(const Shape& shape, std::size_t seed) {
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = (i % 2 ? -1.0 : 1.0) * (0.2 + 1.8 * static_cast<double>((i * 7 + seed) % n) / static_cast<double>(n));
    return from_vector(v, shape, kFloat64).requires_grad_();
}

struct SecondOrder {
    Tensor y, g, dx, dv;
};

// torch.autograd.grad twice: g = d(f(x)·v)/dx with create_graph, then the gradients of g·w
// with respect to x and v (undefined where g does not depend on them).
SecondOrder second_order(const std::function<Tensor(const Tensor&)>& f, const Tensor& x0, const std::vector<double>& v,
                         const std::vector<double>& w) {
    Tensor x = x0.detach().requires_grad_();
    SecondOrder r;
    r.y = f(x);
    Tensor vt = from_vector(v, r.y.shape(), kFloat64).requires_grad_();
    r.g = autograd::grad({r.y}, {x}, {vt}, std::nullopt, /*create_graph=*/true)[0];
    auto d = autograd::grad({r.g}, {x, vt}, {from_vector(w, r.g.shape(), kFloat64)}, std::nullopt, false,
                            /*allow_unused=*/true);
    r.dx = d[0];
    r.dv = d[1];
    return r;
}

// "" when t holds `expected` to 1e-9 (NaN where it is NaN, inf where it is inf), else where not.
std::string differences(const Tensor& t, const std::vector<double>& expected) {
    if (!t.defined()) return "undefined";
    const std::vector<double> got = t.to(kFloat64).to_vector<double>();
    if (got.size() != expected.size()) return fmt::format("{} values, expected {}", got.size(), expected.size());
    std::string out;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double a = got[i], e = expected[i];
        const bool same = std::isnan(e) ? std::isnan(a) : std::isinf(e) ? a == e : std::abs(a - e) <= 1e-9 * (1 + std::abs(e));
        if (!same) out += fmt::format("[{}] {:.17g}, torch {:.17g}; ", i, a, e);
    }
    return out;
}

#define CHECK_TORCH(t, ...) CHECK(differences(t, std::vector<double>__VA_ARGS__) == "")

const std::vector<double> kW6{0.3, -1.2, 0.8, 1.1, -0.4, 0.6};

}  // namespace

TEST_CASE("gradgradcheck: where and masked_fill, broadcast", "[autograd][higher][gradgradcheck][select]") {
    Tensor a = param({3, 4}, -1.0, 1.0, 21), b = param({3, 4}, -1.0, 1.0, 22), col = param({3, 1}, 0.5, 1.5, 23);
    Tensor row = param({4}, -1.0, 1.0, 24);
    const Tensor cond = tensor({{1.0, 0.0, 0.0, 1.0}, {0.0, 1.0, 1.0, 0.0}, {1.0, 1.0, 0.0, 0.0}}) > 0.5;
    const Tensor cond_row = tensor({{1.0, 0.0, 1.0, 0.0}}) > 0.5;
    auto where_sq = [](const std::vector<Tensor>& x) { return where(x[0], x[1] * x[1], x[2] * x[1]); };
    REQUIRE_GRADGRADCHECK(where_sq, {cond, a, b}, "where");
    REQUIRE_GRADGRADCHECK(where_sq, {cond_row, col, b}, "where, cond and a broadcast");
    REQUIRE_GRADGRADCHECK(where_sq, {cond, a, row}, "where, b broadcast");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return where(x[0], x[1], x[2]); }, {cond_row, col, row},
                          "where, all three broadcast");
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& x) { return masked_fill(x[0] * x[0], cond, 2.0); }, {a},
                          "masked_fill");
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& x) { return masked_fill(x[0] * x[0], cond_row, -1.5) * x[0]; },
                          {a}, "masked_fill, mask broadcast");
}

TEST_CASE("gradgradcheck: max and min, along an axis and of everything", "[autograd][higher][gradgradcheck][reduce]") {
    Tensor x = spread({2, 3, 4}, 31);
    for (long axis : {0L, 1L, -1L})
        for (bool keep : {false, true}) {
            const std::string at = fmt::format(" (axis {}, keepdims {})", axis, keep);
            REQUIRE_GRADGRADCHECK(one([=](const Tensor& t) { return max(t * t, axis, keep).values; }), {x}, "max" + at);
            REQUIRE_GRADGRADCHECK(one([=](const Tensor& t) { return min(t, axis, keep).values * t.sum(); }), {x}, "min" + at);
        }
    REQUIRE_GRADGRADCHECK(one([](const Tensor& t) { return max(t) * t; }), {x}, "max of all");
    REQUIRE_GRADGRADCHECK(one([](const Tensor& t) { return min(t * t); }), {x}, "min of all");
}

TEST_CASE("gradgradcheck: var and std, every overload", "[autograd][higher][gradgradcheck][reduce]") {
    Tensor x = param({2, 3, 4}, -1.0, 1.0, 41);
    for (const std::vector<long>& axes : {std::vector<long>{}, {1}, {0, 2}, {-1}})
        for (bool keep : {false, true})
            for (double c : {0.0, 1.0, 2.5}) {
                const std::string at = fmt::format(" (axes ({}), correction {}, keepdims {})", fmt::join(axes, ", "), c, keep);
                REQUIRE_GRADGRADCHECK(one([=](const Tensor& t) { return var(t, axes, Correction{c}, keep); }), {x}, "var" + at);
                REQUIRE_GRADGRADCHECK(one([=](const Tensor& t) { return xgrad::std(t, axes, Correction{c}, keep); }), {x},
                                      "std" + at);
            }
    REQUIRE_GRADGRADCHECK(one([](const Tensor& t) { return var(t, {1}, false) * t.sum(); }), {x}, "var, unbiased = false");
    REQUIRE_GRADGRADCHECK(one([](const Tensor& t) { return xgrad::std(t * t, {2}, true, true); }), {x}, "std, unbiased");
    REQUIRE_GRADGRADCHECK(one([](const Tensor& t) { return xgrad::std(t); }), {x}, "std of all");
}

TEST_CASE("gradgradcheck: cumsum along each axis", "[autograd][higher][gradgradcheck][reduce]") {
    Tensor x = param({2, 3, 4}, -1.0, 1.0, 51);
    for (long axis : {0L, 1L, 2L, -1L})
        REQUIRE_GRADGRADCHECK(one([=](const Tensor& t) { return cumsum(t * t, axis); }), {x},
                              fmt::format("cumsum (axis {})", axis));
}

TEST_CASE("gradgradcheck: norm for p = 1, 2, 3, inf and between", "[autograd][higher][gradgradcheck][reduce]") {
    Tensor x = spread({2, 3, 4}, 61);
    for (double p : {1.0, 2.0, 3.0, double(INFINITY), 0.5, 1.5, 2.5, 4.0})
        for (const std::vector<long>& axes : {std::vector<long>{}, {1}, {0, 2}})
            for (bool keep : {false, true}) {
                if (axes.empty() && keep) continue;
                REQUIRE_GRADGRADCHECK(one([=](const Tensor& t) { return norm(t, p, axes, keep); }), {x},
                                      fmt::format("norm (p {}, axes ({}), keepdims {})", p, fmt::join(axes, ", "), keep));
            }
    REQUIRE_GRADGRADCHECK(one([](const Tensor& t) { return norm(t * t, 3.0, {-1}) * t.sum(); }), {x}, "norm of a product");
}

TEST_CASE("gradgradcheck: sort and topk", "[autograd][higher][gradgradcheck][sort]") {
    Tensor x = spread({2, 3, 4}, 71);
    for (long axis : {0L, 1L, -1L})
        for (bool flag : {false, true}) {
            REQUIRE_GRADGRADCHECK(one([=](const Tensor& t) { return sort(t * t, axis, flag).values; }), {x},
                                  fmt::format("sort (axis {}, descending {})", axis, flag));
            REQUIRE_GRADGRADCHECK(one([=](const Tensor& t) { return topk(t * t, 2, axis, flag).values * t.sum(); }), {x},
                                  fmt::format("topk (axis {}, largest {})", axis, flag));
        }
    REQUIRE_GRADGRADCHECK(one([](const Tensor& t) { return sort(t.sum() * t.sum()).values; }), {x}, "sort of a 0-d tensor");
}

TEST_CASE("gradgradcheck: clone and casts between float32 and float64", "[autograd][higher][gradgradcheck]") {
    Tensor x = param({3, 4}, 0.5, 1.5, 81);
    REQUIRE_GRADGRADCHECK(one([](const Tensor& t) { return t.clone() * t; }), {x}, "clone");
    // Through float32 the function is rounded to float's 1e-7: differences over eps = 1e-6
    // would be mostly that rounding, so this check steps by 1e-2 (the functions are
    // quadratic, so central differences make no error of their own).
    GradcheckOptions wide;
    wide.eps = 1e-2;
    wide.name = "cast through float32";
    const auto r = gradgradcheck(
        one([](const Tensor& t) { return (t.to(kFloat32) * t.to(kFloat32)).to(kFloat64) + t.to(kFloat32).clone().to(kFloat64) * t; }),
        {x}, wide);
    INFO(r.report);
    CHECK(r.passed);
}

// The values below are torch 1.13's, made with /usr/bin/python3 by
//     x = torch.tensor(X, dtype=torch.float64, requires_grad=True); y = f(x)
//     v = torch.tensor(V).reshape(y.shape).requires_grad_()
//     g, = torch.autograd.grad(y, x, v, create_graph=True)
//     dx, dv = torch.autograd.grad(g, [x, v], torch.tensor(W).reshape(g.shape), allow_unused=True)
// with f, X, V and W as each test gives them ("none" where torch returned None).

TEST_CASE("second derivatives as torch's: norm at a zero norm and a zero element", "[autograd][higher][reduce][torch]") {
    // f = torch.norm(x, 2, [1]): the zero row's x-derivative is NaN in torch (0/0 in its
    // double backward), its v-derivative 0.
    auto r = second_order([](const Tensor& x) { return norm(x, 2, {1}); }, tensor({{0.0, 0.0}, {1.0, -2.0}, {3.0, 0.5}}, kFloat64),
                          {0.7, -1.3, 0.9}, kW6);
    CHECK_TORCH(r.g, {0.0, 0.0, -0.5813776741499453, 1.1627553482998907, 0.8877545314489294, 0.14795908857482157});
    CHECK_TORCH(r.dx, {NAN, NAN, -0.627887888081941, -0.3139439440409704, -0.031991154286447915, 0.19194692571868746});
    CHECK_TORCH(r.dv, {0.0, -0.6260990336999412, -0.2959181771496432});
    // f = torch.norm(x, 3, [0]) with zeros in x.
    r = second_order([](const Tensor& x) { return norm(x, 3, {0}); }, tensor({{0.0, 1.5, -2.0}, {1.0, -0.5, 0.0}}, kFloat64),
                     {1.2, -0.8, 0.6}, kW6);
    CHECK_TORCH(r.g, {0.0, -0.7808371641965991, -0.6, 1.2, 0.08675968491073323, 0.0});
    CHECK_TORCH(r.dx, {0.0, 0.0892385330510399, 0.0, 0.0, 0.2677155991531197, 0.0});
    CHECK_TORCH(r.dv, {1.1, -1.1278759038395318, -0.8});
    // f = torch.norm(x, inf, [1]) with a tie for the maximum: the gradient is split, x reaches
    // it only through sgn (zeros, not None).
    r = second_order([](const Tensor& x) { return norm(x, INFINITY, {1}); }, tensor({{1.0, -3.0, 3.0}, {2.0, 0.5, -1.0}}, kFloat64),
                     {0.7, -1.3}, kW6);
    CHECK_TORCH(r.g, {0.0, -0.35, 0.35, -1.3, -0.0, 0.0});
    CHECK_TORCH(r.dx, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0});
    CHECK_TORCH(r.dv, {1.0, 1.1});
}

TEST_CASE("second derivatives as torch's: std of a constant row, var with a correction", "[autograd][higher][reduce][torch]") {
    // f = torch.std(x, [1]): the constant row's v-derivative is NaN in torch, its x-derivative 0.
    auto r = second_order([](const Tensor& x) { return xgrad::std(x, {1}); }, tensor({{2.0, 2.0, 2.0}, {1.0, -1.0, 3.0}}, kFloat64),
                          {0.7, -1.3}, kW6);
    CHECK_TORCH(r.y, {0.0, 2.0});
    CHECK_TORCH(r.g, {0.0, 0.0, 0.0, -0.0, 0.65, -0.65});
    CHECK_TORCH(r.dx, {0.0, 0.0, 0.0, -0.2166666666666667, 0.10833333333333336, 0.10833333333333334});
    CHECK_TORCH(r.dv, {NAN, 0.5});
    // f = torch.var(x * x, [0], correction=2, keepdim=True).
    r = second_order([](const Tensor& x) { return var(x * x, {0}, Correction{2}, true); },
                     tensor({{1.0, -0.5, 2.0}, {0.3, 1.5, -1.0}, {-2.0, 0.8, 0.4}}, kFloat64), {0.7, -1.3, 0.9},
                     {0.3, -1.2, 0.8, 1.1, -0.4, 0.6, 0.2, 0.9, -0.7});
    CHECK_TORCH(r.g, {-1.950666666666666, -2.0713333333333335, 16.416000000000004, -1.3495999999999997, -9.386, 2.592,
                      -12.898666666666667, 1.6917333333333329, -2.2464000000000004});
    CHECK_TORCH(r.dx, {0.6654666666666668, -3.0992000000000006, 26.150400000000005, -4.5229333333333335, 15.606933333333334,
                       4.492800000000001, 6.6285333333333325, -2.090400000000001, 2.4335999999999998});
    CHECK_TORCH(r.dv, {-6.642133333333334, -5.9712000000000005, 18.067200000000003});
}

TEST_CASE("second derivatives as torch's: max at ties, cumsum, sort", "[autograd][higher][reduce][sort][torch]") {
    // f = torch.max(x) * x, two elements tie for the max: each gets half.
    auto r = second_order([](const Tensor& x) { return max(x) * x; }, tensor({1.0, 3.0, 3.0, -2.0}, kFloat64),
                          {0.7, -1.3, 0.9, 0.5}, {0.3, -1.2, 0.8, 1.1});
    CHECK_TORCH(r.g, {2.0999999999999996, -4.65, 1.9500000000000002, 1.5});
    CHECK_TORCH(r.dx, {-0.13999999999999996, 1.78, 1.34, -0.09999999999999998});
    CHECK_TORCH(r.dv, {0.7, -4.199999999999999, 1.8000000000000005, 3.7});
    // f = torch.max(x * x, 1)[0], ties along the axis: the first index takes it all.
    r = second_order([](const Tensor& x) { return max(x * x, 1).values; }, tensor({{1.0, 3.0, -3.0}, {2.0, 0.5, -2.0}}, kFloat64),
                     {0.7, -1.3}, kW6);
    CHECK_TORCH(r.g, {0.0, 4.199999999999999, -0.0, -5.2, 0.0, -0.0});
    CHECK_TORCH(r.dx, {0.0, -1.68, 0.0, -2.8600000000000003, -0.0, 0.0});
    CHECK_TORCH(r.dv, {-7.199999999999999, 4.4});
    // The max of all elements: x is not on the gradient's path (torch: None).
    r = second_order([](const Tensor& x) { return max(x); }, tensor({1.0, 3.0, 3.0}, kFloat64), {0.7}, {0.3, -1.2, 0.8});
    CHECK_FALSE(r.dx.defined());
    CHECK_TORCH(r.dv, {-0.2});
    // f = torch.cumsum(x * x, 1).
    const Tensor x23 = tensor({{1.0, -0.5, 2.0}, {0.3, 1.5, -1.0}}, kFloat64);
    const std::vector<double> v6{0.7, -1.3, 0.9, 0.5, 1.1, -0.2};
    r = second_order([](const Tensor& x) { return cumsum(x * x, 1); }, x23, v6, kW6);
    CHECK_TORCH(r.g, {0.5999999999999999, 0.4, 3.6, 0.8400000000000001, 2.7, 0.4});
    CHECK_TORCH(r.dx, {0.17999999999999997, 0.96, 1.4400000000000002, 3.0800000000000005, -0.7200000000000002, -0.24});
    CHECK_TORCH(r.dv, {0.6, 1.7999999999999998, 5.0, 0.66, -0.5400000000000001, -1.7400000000000002});
    // f = torch.sort(x * x, stable=True, dim=1, descending=True)[0].
    r = second_order([](const Tensor& x) { return sort(x * x, 1, true).values; }, x23, v6, kW6);
    CHECK_TORCH(r.g, {-2.6, -0.9, 2.8, -0.12, 1.5, -2.2});
    CHECK_TORCH(r.dx, {-0.78, -2.16, 1.1199999999999999, -0.44000000000000006, -0.4, 1.32});
    CHECK_TORCH(r.dv, {3.2, 0.6, 1.2, -1.2000000000000002, -1.2, 0.66});
    // f = torch.where(torch.tensor([True, False, True]), x * x, torch.sin(x.sum(1, True))).
    const Tensor cond = tensor({1.0, 0.0, 1.0}) > 0.5;
    r = second_order([&](const Tensor& x) { return where(cond, x * x, sin(x.sum({1}, true))); }, x23, v6, kW6);
    CHECK_TORCH(r.g, {2.441486700211014, 1.0414867002110137, 4.641486700211014, 1.066377380281882, 0.766377380281882,
                      1.166377380281882});
    CHECK_TORCH(r.dx, {0.34219862126648576, -0.07780137873351424, 1.3621986212664858, 0.07418079001368239,
                       -1.0258192099863177, -1.2658192099863177});
    CHECK_TORCH(r.dv, {0.6, 0.08011436155469326, 3.2, 0.66, 0.905718722151315, -1.2});
}

TEST_CASE("second derivatives through bfloat16 round as torch's", "[autograd][higher][bfloat16][torch]") {
    // f = (x * x).to(torch.bfloat16).to(torch.float64) * x: the gradient through the casts is
    // rounded to bfloat16 on its way back, at first and at second order.
    auto r = second_order([](const Tensor& x) { return (x * x).to(kBFloat16).to(kFloat64) * x; },
                          tensor({1.1, -0.7, 1.9}, kFloat64), {0.7, -1.3, 0.9}, {0.3, -1.2, 0.8});
    CHECK_TORCH(r.y, {1.33203125, -0.3431640625, 6.8578125});
    CHECK_TORCH(r.g, {2.5406250000000004, -1.9115234375, 9.75});
    CHECK_TORCH(r.dx, {1.3857421875, -6.555468749999999, 8.2109375});
    CHECK_TORCH(r.dv, {1.089453125, -1.7640625, 8.6765625});
}

// First-order values where xgrad differed from torch 1.13 before these gradients became
// formulas (made as above, with g = torch.autograd.grad(y, x, v)).
TEST_CASE("first derivatives as torch's at NaN, zero elements and corrections past N", "[autograd][reduce][torch]") {
    auto first = [](const std::function<Tensor(const Tensor&)>& f, const Tensor& x0, const std::vector<double>& v) {
        Tensor x = x0.detach().requires_grad_();
        Tensor y = f(x);
        y.backward(from_vector(v, y.shape(), kFloat64));
        return std::pair{y, x.grad()};
    };
    // torch.norm(x, 0.5, [1]): 0 at the zero elements (|x|^(p−1) is infinite there).
    auto [y, g] = first([](const Tensor& x) { return norm(x, 0.5, {1}); }, tensor({{0.0, 1.0, -4.0}, {0.0, 0.0, 0.0}}, kFloat64),
                        {0.7, -1.3});
    CHECK_TORCH(g, {0.0, 2.0999999999999996, -1.0499999999999998, -0.0, -0.0, -0.0});
    // torch.norm(x, inf, [1]) and torch.norm(x, 1, [1]) of a row with a NaN: the norm is NaN
    // (wherever the NaN sits), sgn(NaN) is 0.
    std::tie(y, g) = first([](const Tensor& x) { return norm(x, INFINITY, {1}); },
                           tensor({{NAN, 1.0, -4.0}, {2.0, -2.0, 0.5}}, kFloat64), {0.7, -1.3});
    CHECK_TORCH(y, {NAN, 2.0});
    CHECK_TORCH(g, {0.0, 0.0, -0.0, -0.65, 0.65, -0.0});
    std::tie(y, g) = first([](const Tensor& x) { return norm(x, 1, {1}); }, tensor({{NAN, 1.0, -4.0}, {2.0, -2.0, 0.5}}, kFloat64),
                           {0.7, -1.3});
    CHECK_TORCH(g, {0.0, 0.7, -0.7, -1.3, 1.3, -1.3});
    // torch.var(x, [1], correction=4) over 3 elements: inf, and a gradient by N − correction = -1.
    std::tie(y, g) = first([](const Tensor& x) { return var(x, {1}, Correction{4}); },
                           tensor({{1.0, -0.5, 2.0}, {0.3, 1.5, -1.0}}, kFloat64), {0.7, -1.3});
    CHECK_TORCH(y, {INFINITY, INFINITY});
    CHECK_TORCH(g, {-0.23333333333333325, 1.8666666666666667, -1.633333333333333, 0.08666666666666666, 3.206666666666667,
                    -3.2933333333333334});
    // torch.cumsum(x * x, 0) of a 0-d tensor.
    std::tie(y, g) = first([](const Tensor& x) { return cumsum(x * x, 0); }, tensor(1.5, kFloat64), {0.7});
    CHECK_TORCH(y, {2.25});
    CHECK_TORCH(g, {2.0999999999999996});
}
