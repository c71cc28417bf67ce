// The ops a d2l port reaches for: values against torch 1.13 (literals generated once) and a
// double-precision gradient check for each differentiable one, with broadcast and permuted
// inputs where they apply.
#include <cmath>
#include <limits>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

std::vector<std::int64_t> ints(const Tensor& t) { return t.to_vector<std::int64_t>(); }

// [[0, -1.5, 2], [2, 0.5, -1.5]] and [[0, 1, 2], [-1, 0.5, 3]]: zeros, ties and kinks on purpose.
Tensor kinky_x() { return tensor({{0.0, -1.5, 2.0}, {2.0, 0.5, -1.5}}, TensorOptions(kFloat64).requires_grad(true)); }
Tensor kinky_y() { return tensor({{0.0, 1.0, 2.0}, {-1.0, 0.5, 3.0}}, TensorOptions(kFloat64).requires_grad(true)); }

// Gradient of sum(f(x)) at the kinky inputs, compared with torch's.
template <class F> std::vector<double> grad_of(F f, Tensor x) {
    x.zero_grad();
    f(x).sum().backward();
    return vals(x.grad());
}

}  // namespace

TEST_CASE("sin cos and abs match torch and pass gradcheck", "[new_ops][gradcheck]") {
    const Tensor x = kinky_x();
    CHECK_THAT(vals(sin(x)), approx({0, std::sin(-1.5), std::sin(2.0), std::sin(2.0), std::sin(0.5), std::sin(-1.5)}));
    CHECK_THAT(vals(cos(x)), approx({1, std::cos(-1.5), std::cos(2.0), std::cos(2.0), std::cos(0.5), std::cos(-1.5)}));
    CHECK_THAT(vals(abs(x)), approx({0, 1.5, 2, 2, 0.5, 1.5}));
    // torch: the gradient of abs at 0 is 0 (sign).
    CHECK_THAT(grad_of([](const Tensor& t) { return abs(t); }, x), approx({0, -1, 1, 1, 1, -1}));
    CHECK(ints(abs(tensor({-3.0, 2.0}).to(kInt64))) == std::vector<std::int64_t>{3, 2});
    const Tensor p = param({3, 4}, -2, 2);
    REQUIRE_GRADCHECK([](auto& v) { return sin(v[0]); }, {p}, "sin");
    REQUIRE_GRADCHECK([](auto& v) { return cos(v[0].transpose(0, 1)); }, {p}, "cos permuted");
    REQUIRE_GRADCHECK([](auto& v) { return abs(v[0]) * v[0].index({0}); }, {p}, "abs broadcast");
}

TEST_CASE("clamp passes the gradient inside the bounds inclusive as torch", "[new_ops][gradcheck]") {
    const Tensor x = kinky_x();
    // torch: x.clamp(-1.5, 0.5) and x.clamp(min=0)
    CHECK_THAT(vals(clamp(x, -1.5, 0.5)), approx({0, -1.5, 0.5, 0.5, 0.5, -1.5}));
    CHECK_THAT(grad_of([](const Tensor& t) { return clamp(t, -1.5, 0.5); }, x), approx({1, 1, 0, 0, 1, 1}));
    CHECK_THAT(vals(clamp(x, 0.0)), approx({0, 0, 2, 2, 0.5, 0}));
    CHECK_THAT(grad_of([](const Tensor& t) { return clamp(t, 0.0); }, x), approx({1, 0, 1, 1, 1, 0}));
    CHECK_THAT(vals(clamp(x, std::nullopt, 0.0)), approx({0, -1.5, 0, 0, 0, -1.5}));
    CHECK_THAT(vals(clamp(x, 1.0, -1.0)), approx({-1, -1, -1, -1, -1, -1}));  // min > max: all max
    CHECK(std::isnan(clamp(tensor({NAN}), 0.0, 1.0).item<double>()));
    CHECK_THROWS_WITH(clamp(x, std::nullopt, std::nullopt), Catch::Contains("clamp") && Catch::Contains("min"));
    const Tensor p = param({3, 4}, -2, 2, 7);
    REQUIRE_GRADCHECK([](auto& v) { return clamp(v[0], -1.0, 1.0); }, {p}, "clamp");
    REQUIRE_GRADCHECK([](auto& v) { return clamp(v[0].permute({1, 0}), std::nullopt, 0.3); }, {p}, "clamp max");
}

TEST_CASE("clamp, clamp_min and clamp_max as torch's methods", "[new_ops][gradcheck]") {
    const Tensor x = kinky_x();
    // torch: x.clamp(-1.5, 0.5), x.clamp_min(0.5), x.clamp_max(0) and their gradients.
    CHECK_THAT(vals(x.clamp(-1.5, 0.5)), approx({0, -1.5, 0.5, 0.5, 0.5, -1.5}));
    CHECK_THAT(vals(x.clamp_min(0.5)), approx({0.5, 0.5, 2, 2, 0.5, 0.5}));
    CHECK_THAT(vals(clamp_min(x, 0.5)), approx({0.5, 0.5, 2, 2, 0.5, 0.5}));
    CHECK_THAT(vals(x.clamp_max(0)), approx({0, -1.5, 0, 0, 0, -1.5}));
    CHECK_THAT(grad_of([](const Tensor& t) { return t.clamp_min(0.5); }, x), approx({0, 0, 1, 1, 1, 0}));
    CHECK_THAT(grad_of([](const Tensor& t) { return clamp_max(t, 0); }, x), approx({1, 1, 0, 0, 0, 1}));
    // int64 stays int64 with integer bounds and becomes float32 with a floating one.
    const Tensor i = tensor({-3.0, 0.0, 7.0}).to(kInt64);
    CHECK(ints(i.clamp_min(0)) == std::vector<std::int64_t>{0, 0, 7});
    CHECK(ints(i.clamp_max(5)) == std::vector<std::int64_t>{-3, 0, 5});
    CHECK(i.clamp_min(0.5).dtype() == kFloat32);
    CHECK_THAT(vals(i.clamp_min(0.5)), approx({0.5, 0.5, 7}));
    CHECK(clamp_max(i, 2.5).dtype() == kFloat32);
    // In place, on the tensor and through an index; a floating bound cannot go into int64.
    const Tensor j = i.clone();
    j.clamp_min_(1);
    CHECK(ints(j) == std::vector<std::int64_t>{1, 1, 7});
    j[2].clamp_max_(4);
    CHECK(ints(j) == std::vector<std::int64_t>{1, 1, 4});
    CHECK_THROWS_WITH(j.clamp_min_(0.5), Catch::Contains("clamp_min_"));
    // A NaN bound is refused naming the op (torch fills NaN; its clamp ignores a lone NaN).
    CHECK_THROWS_WITH(x.clamp_min(NAN), Catch::Contains("clamp_min") && Catch::Contains("NaN"));
    CHECK_THROWS_WITH(clamp_max(x, NAN), Catch::Contains("clamp_max") && Catch::Contains("NaN"));
    const Tensor p = param({3, 4}, -2, 2, 7);
    REQUIRE_GRADCHECK([](auto& v) { return v[0].clamp_min(-0.5) * v[0]; }, {p}, "clamp_min");
    REQUIRE_GRADCHECK([](auto& v) { return v[0].transpose(0, 1).clamp_max(0.3); }, {p}, "clamp_max permuted");
    REQUIRE_GRADGRADCHECK([](auto& v) { return v[0].clamp(-1.0, 1.0) * v[0]; }, {p}, "clamp method");
}

TEST_CASE("maximum and minimum split a tie's gradient as torch", "[new_ops][gradcheck]") {
    Tensor x = kinky_x(), y = kinky_y();
    const Tensor mx = maximum(x, y);
    CHECK_THAT(vals(mx), approx({0, 1, 2, 2, 0.5, 3}));
    mx.sum().backward();
    CHECK_THAT(vals(x.grad()), approx({0.5, 0, 0.5, 1, 0.5, 0}));
    CHECK_THAT(vals(y.grad()), approx({0.5, 1, 0.5, 0, 0.5, 1}));
    x.zero_grad();
    y.zero_grad();
    const Tensor mn = minimum(x, y);
    CHECK_THAT(vals(mn), approx({0, -1.5, 2, -1, 0.5, -1.5}));
    mn.sum().backward();
    CHECK_THAT(vals(x.grad()), approx({0.5, 1, 0.5, 0, 0.5, 1}));
    CHECK_THAT(vals(y.grad()), approx({0.5, 0, 0.5, 1, 0.5, 0}));
    // NaN propagates; ints and mixed dtypes promote as add.
    CHECK(std::isnan(vals(maximum(tensor({NAN, 1.0}), tensor({0.0, 0.0})))[0]));
    CHECK(std::isnan(vals(minimum(tensor({0.0, 1.0}), tensor({NAN, 0.0})))[0]));
    CHECK(ints(maximum(tensor({1.0, 5.0}).to(kInt64), tensor({3.0, 2.0}).to(kInt64))) == std::vector<std::int64_t>{3, 5});
    CHECK(maximum(tensor({1.0, 5.0}).to(kInt64), tensor({3.0, 2.0})).dtype() == kFloat32);
    const Tensor a = param({3, 4}, -1, 1, 1), b = param({4}, -1, 1, 2), c = param({4, 3}, -1, 1, 3);
    REQUIRE_GRADCHECK([](auto& v) { return maximum(v[0], v[1]); }, {a, b}, "maximum broadcast");
    REQUIRE_GRADCHECK([](auto& v) { return minimum(v[0], v[1].transpose(0, 1)); }, {a, c}, "minimum permuted");
}

TEST_CASE("min and max with a dim give values and indices as torch", "[new_ops][gradcheck]") {
    const Tensor t = tensor({{3.0, 1.0, 3.0, 2.0, 1.0}, {0.0, 5.0, 5.0, -1.0, 5.0}}, kFloat64);
    auto [values, indices] = max(t, 1);
    CHECK_THAT(vals(values), approx({3, 5}));
    CHECK(ints(indices) == std::vector<std::int64_t>{0, 1});
    const ValuesIndices m = min(t, 1, true);
    CHECK(m.values.shape() == Shape{2, 1});
    CHECK_THAT(vals(m.values), approx({1, -1}));
    CHECK(ints(m.indices) == std::vector<std::int64_t>{1, 3});
    CHECK(ints(argmin(t, 0)) == std::vector<std::int64_t>{1, 0, 0, 1, 0});
    // Whole-tensor max/min: a tie shares the gradient (torch), with a dim the first index takes it.
    const Tensor x = kinky_x();
    CHECK(max(x).item<double>() == 2);
    CHECK_THAT(grad_of([](const Tensor& a) { return max(a); }, x), approx({0, 0, 0.5, 0.5, 0, 0}));
    CHECK_THAT(grad_of([](const Tensor& a) { return min(a); }, x), approx({0, 0.5, 0, 0, 0, 0.5}));
    CHECK_THAT(grad_of([](const Tensor& a) { return max(a, 1).values; }, x), approx({0, 0, 1, 1, 0, 0}));
    CHECK_THAT(grad_of([](const Tensor& a) { return min(a, 0).values; }, x), approx({1, 1, 0, 0, 0, 1}));
    CHECK(std::isnan(max(tensor({1.0, NAN})).item<double>()));
    CHECK_THROWS_WITH(max(zeros({0})), Catch::Contains("max") && Catch::Contains("empty"));
    const Tensor p = param({3, 4, 2});
    REQUIRE_GRADCHECK([](auto& v) { return min(v[0], 1).values; }, {p}, "min dim");
    REQUIRE_GRADCHECK([](auto& v) { return max(v[0].permute({2, 0, 1}), -1, true).values; }, {p}, "max permuted");
    REQUIRE_GRADCHECK([](auto& v) { return max(v[0]) * min(v[0]); }, {p}, "max min all");
}

TEST_CASE("var and std follow torch's unbiased and correction", "[new_ops][gradcheck]") {
    const Tensor v = tensor({{1.0, 2.0, 4.0}, {3.0, 3.0, 3.0}}, kFloat64);
    CHECK_THAT(vals(var(v, {1})), approx({7.0 / 3, 0}));
    CHECK_THAT(vals(var(v, {1}, false)), approx({14.0 / 9, 0}));
    CHECK_THAT(vals(var(v)), approx({1.0666666666666667}));
    CHECK_THAT(vals(xgrad::std(v, {0})), approx({std::sqrt(2.0), std::sqrt(0.5), std::sqrt(0.5)}));
    CHECK_THAT(vals(var(v, {1}, Correction{2})), approx({14.0 / 3, 0}));
    CHECK(var(v, {1}, true, true).shape() == Shape{2, 1});
    // N − correction ≤ 0: torch divides by 0 (inf, or NaN for a constant row).
    const auto c3 = vals(var(v, {1}, Correction{3}));
    CHECK(c3[0] == std::numeric_limits<double>::infinity());
    CHECK(std::isnan(c3[1]));
    CHECK(std::isnan(var(tensor({5.0})).item<double>()));
    CHECK(var(tensor({5.0}), {}, false).item<double>() == 0);
    // std of a constant: gradient 0, not 0/0.
    const Tensor flat = tensor({2.0, 2.0}, TensorOptions(kFloat64).requires_grad(true));
    xgrad::std(flat).backward();  // qualified: a bare `std` names the namespace
    CHECK_THAT(vals(flat.grad()), approx({0, 0}));
    const Tensor p = param({3, 4, 2});
    REQUIRE_GRADCHECK([](auto& x) { return var(x[0], {1}); }, {p}, "var dim");
    REQUIRE_GRADCHECK([](auto& x) { return var(x[0], {0, 2}, Correction{0}, true); }, {p}, "var correction 0");
    REQUIRE_GRADCHECK([](auto& x) { return xgrad::std(x[0].permute({2, 1, 0}), {-1}); }, {p}, "std permuted");
    REQUIRE_GRADCHECK([](auto& x) { return xgrad::std(x[0]); }, {p}, "std all");
}

TEST_CASE("cumsum tril and triu match torch", "[new_ops][gradcheck]") {
    const Tensor v = tensor({{1.0, 2.0, 4.0}, {3.0, 3.0, 3.0}}, kFloat64);
    CHECK_THAT(vals(cumsum(v, 1)), approx({1, 3, 7, 3, 6, 9}));
    CHECK_THAT(vals(cumsum(v, 0)), approx({1, 2, 4, 4, 5, 7}));
    CHECK(ints(cumsum(tensor({1.0, 0.0, 1.0}).to(kBool), 0)) == std::vector<std::int64_t>{1, 1, 2});
    const Tensor m = arange(1, 13, 1, kFloat64).reshape({3, 4});
    CHECK_THAT(vals(tril(m)), approx({1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}));
    CHECK_THAT(vals(tril(m, 1)), approx({1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12}));
    CHECK_THAT(vals(tril(m, -1)), approx({0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}));
    CHECK_THAT(vals(triu(m)), approx({1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}));
    CHECK_THAT(vals(triu(m, 2)), approx({0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0}));
    CHECK_THAT(vals(triu(m, -1)), approx({1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12}));
    // A causal mask, as a d2l decoder builds it.
    CHECK((tril(ones({3, 3}, kBool)) == tensor({{1, 0, 0}, {1, 1, 0}, {1, 1, 1}}).to(kBool)).to_vector<bool>() ==
          std::vector<bool>(9, true));
    CHECK_THROWS_WITH(tril(zeros({3})), Catch::Contains("tril") && Catch::Contains("2 dimensions"));
    const Tensor p = param({2, 3, 4});
    REQUIRE_GRADCHECK([](auto& x) { return cumsum(x[0], 1); }, {p}, "cumsum");
    REQUIRE_GRADCHECK([](auto& x) { return cumsum(x[0].permute({2, 0, 1}), -1); }, {p}, "cumsum permuted");
    REQUIRE_GRADCHECK([](auto& x) { return tril(x[0], 1); }, {p}, "tril");
    REQUIRE_GRADCHECK([](auto& x) { return triu(x[0].transpose(1, 2), -1); }, {p}, "triu permuted");
}

TEST_CASE("stack split and chunk match torch with gradients", "[new_ops][gradcheck]") {
    CHECK(ints(stack({tensor({1.0, 2.0}).to(kInt64), tensor({3.0, 4.0}).to(kInt64)}, 1)) ==
          std::vector<std::int64_t>{1, 3, 2, 4});
    CHECK(stack({zeros({2, 3}), zeros({2, 3})}, -1).shape() == Shape{2, 3, 2});
    CHECK(stack({zeros({2, 3})}).shape() == Shape{1, 2, 3});
    CHECK_THROWS_WITH(stack({zeros({2}), zeros({3})}), Catch::Contains("stack") && Catch::Contains("entry 1"));
    CHECK_THROWS_WITH(stack({}), Catch::Contains("stack"));
    auto sizes = [](const std::vector<Tensor>& parts) {
        std::vector<std::size_t> n;
        for (const Tensor& p : parts) n.push_back(p.numel());
        return n;
    };
    const Tensor seven = arange(7, kInt64);
    CHECK(sizes(split(seven, 3)) == std::vector<std::size_t>{3, 3, 1});
    CHECK(ints(split(seven, 3)[2]) == std::vector<std::int64_t>{6});
    CHECK(sizes(split(seven, std::vector<long>{2, 5})) == std::vector<std::size_t>{2, 5});
    CHECK(sizes(chunk(seven, 3)) == std::vector<std::size_t>{3, 3, 1});
    CHECK(sizes(chunk(arange(6, kInt64), 4)) == std::vector<std::size_t>{2, 2, 2});  // fewer, as torch
    CHECK(sizes(chunk(arange(5, kInt64), 2)) == std::vector<std::size_t>{3, 2});
    CHECK_THROWS_WITH(split(seven, std::vector<long>{2, 4}), Catch::Contains("split") && Catch::Contains("7"));
    CHECK_THROWS_WITH(split(seven, 0), Catch::Contains("split_size"));
    CHECK_THROWS_WITH(chunk(seven, 0), Catch::Contains("chunks"));
    const Tensor a = param({3, 4}, -1, 1, 1), b = param({3, 4}, -1, 1, 2);
    REQUIRE_GRADCHECK([](auto& v) { return stack({v[0], v[1].transpose(0, 1).transpose(0, 1)}, 1); }, {a, b}, "stack");
    REQUIRE_GRADCHECK([](auto& v) { return split(v[0], 3, 1)[1] * split(v[0], std::vector<long>{1, 2}, 0)[1].sum(); },
                      {a}, "split");
    REQUIRE_GRADCHECK([](auto& v) { auto c = chunk(v[0].permute({1, 0}), 2); return c[0] - c[1]; }, {a}, "chunk");
}

TEST_CASE("one_hot matches torch and rejects bad classes", "[new_ops]") {
    const Tensor r = one_hot(tensor({0.0, 2.0, 1.0}).to(kInt64));
    CHECK(r.dtype() == kInt64);
    CHECK(r.shape() == Shape{3, 3});
    CHECK(ints(r) == std::vector<std::int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0});
    const Tensor r2 = one_hot(tensor({0.0, 1.0}).reshape({2, 1}).to(kInt64), 4);
    CHECK(r2.shape() == Shape{2, 1, 4});
    CHECK(ints(r2) == std::vector<std::int64_t>{1, 0, 0, 0, 0, 1, 0, 0});
    CHECK_THROWS_WITH(one_hot(tensor({-1.0, 0.0}).to(kInt64), 3), Catch::Contains("non-negative"));
    CHECK_THROWS_WITH(one_hot(tensor({0.0, 3.0}).to(kInt64), 3), Catch::Contains("smaller than num_classes 3"));
    CHECK_THROWS_WITH(one_hot(tensor({0.0})), Catch::Contains("int64") && Catch::Contains("float32"));
    CHECK_THROWS_WITH(one_hot(zeros({0}, kInt64)), Catch::Contains("num_classes"));
    CHECK(one_hot(zeros({0}, kInt64), 3).shape() == Shape{0, 3});
}

TEST_CASE("sort argsort and topk match torch with gradients for values", "[new_ops][gradcheck]") {
    const Tensor t = tensor({{3.0, 1.0, 3.0, 2.0, 1.0}, {0.0, 5.0, 5.0, -1.0, 5.0}}, kFloat64);
    auto [s, si] = sort(t, 1);
    CHECK_THAT(vals(s), approx({1, 1, 2, 3, 3, -1, 0, 5, 5, 5}));
    CHECK(ints(si) == std::vector<std::int64_t>{1, 4, 3, 0, 2, 3, 0, 1, 2, 4});
    const ValuesIndices d = sort(t, 1, true);
    CHECK_THAT(vals(d.values), approx({3, 3, 2, 1, 1, 5, 5, 5, 0, -1}));
    CHECK(ints(d.indices) == std::vector<std::int64_t>{0, 2, 3, 1, 4, 1, 2, 4, 0, 3});
    CHECK(ints(argsort(t, -1, true)) == ints(d.indices));
    CHECK_FALSE(d.indices.requires_grad());
    // torch.topk(t, 2, largest=False) and topk(t, 1, dim=0); ties in index order (torch's
    // order among ties is unspecified).
    const ValuesIndices k = topk(t, 2, 1, false);
    CHECK_THAT(vals(k.values), approx({1, 1, -1, 0}));
    CHECK(ints(k.indices) == std::vector<std::int64_t>{1, 4, 3, 0});
    const ValuesIndices k0 = topk(t, 1, 0);
    CHECK(k0.values.shape() == Shape{1, 5});
    CHECK(ints(k0.indices) == std::vector<std::int64_t>{0, 1, 1, 0, 1});
    CHECK_THAT(vals(topk(t, 3).values), approx({3, 3, 2, 5, 5, 5}));
    CHECK(topk(t, 0).values.shape() == Shape{2, 0});
    CHECK_THROWS_WITH(topk(t, 6), Catch::Contains("topk") && Catch::Contains("k = 6"));
    CHECK_THROWS_WITH(topk(t, -1), Catch::Contains("topk"));
    // NaN sorts as the largest value, as torch.
    CHECK(ints(argsort(tensor({1.0, NAN, 0.0}))) == std::vector<std::int64_t>{2, 0, 1});
    CHECK(ints(argsort(tensor({1.0, NAN, 0.0}), 0, true)) == std::vector<std::int64_t>{1, 0, 2});
    CHECK(ints(sort(tensor({3.0, 1.0, 2.0}).to(kInt64)).values) == std::vector<std::int64_t>{1, 2, 3});
    const Tensor p = param({3, 4, 5});
    REQUIRE_GRADCHECK([](auto& v) { return sort(v[0], 1).values; }, {p}, "sort");
    REQUIRE_GRADCHECK([](auto& v) { return sort(v[0].permute({2, 0, 1}), -1, true).values; }, {p}, "sort permuted");
    REQUIRE_GRADCHECK([](auto& v) { return topk(v[0], 2, -1).values; }, {p}, "topk");
    REQUIRE_GRADCHECK([](auto& v) { return topk(v[0], 3, 0, false).values; }, {p}, "topk smallest");
}

TEST_CASE("norm matches torch and has a zero gradient at zero", "[new_ops][gradcheck]") {
    const Tensor x = kinky_x();
    CHECK(norm(x).item<double>() == Approx(3.570714214271425));
    CHECK(norm(x, 1).item<double>() == Approx(7.5));
    CHECK(norm(x, INFINITY).item<double>() == Approx(2));
    CHECK_THAT(vals(norm(x, 2, {1})), approx({2.5, 2.5495097567963922}));
    CHECK_THAT(vals(norm(x, INFINITY, {0})), approx({2, 1.5, 2}));
    CHECK(norm(x, 2, {1}, true).shape() == Shape{2, 1});
    CHECK_THAT(grad_of([](const Tensor& a) { return norm(a); }, x),
               approx({0, -0.42008402520840293, 0.5601120336112039, 0.5601120336112039, 0.14002800840280097,
                       -0.42008402520840293}));
    CHECK_THAT(grad_of([](const Tensor& a) { return norm(a, 1); }, x), approx({0, -1, 1, 1, 1, -1}));
    CHECK_THAT(grad_of([](const Tensor& a) { return norm(a, INFINITY); }, x), approx({0, 0, 0.5, 0.5, 0, 0}));
    CHECK_THAT(grad_of([](const Tensor& a) { return norm(a, INFINITY, {0}); }, x), approx({0, -1, 1, 1, 0, 0}));
    for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
        INFO("p = " << p);
        const Tensor z = zeros({3}, kFloat64).requires_grad_();
        norm(z, p).backward();
        CHECK_THAT(vals(z.grad()), approx({0, 0, 0}));
    }
    CHECK(norm(x, 0).item<double>() == 5);  // the count of non-zeros, as torch
    CHECK_THROWS_WITH(norm(x, NAN), Catch::Contains("norm: invalid p nan"));
    const Tensor p = param({3, 4}, -2, 2, 5);
    REQUIRE_GRADCHECK([](auto& v) { return norm(v[0]); }, {p}, "norm 2");
    REQUIRE_GRADCHECK([](auto& v) { return norm(v[0], 1, {1}); }, {p}, "norm 1");
    REQUIRE_GRADCHECK([](auto& v) { return norm(v[0].transpose(0, 1), 3, {0}, true); }, {p}, "norm 3 permuted");
    REQUIRE_GRADCHECK([](auto& v) { return norm(v[0], INFINITY, {-1}); }, {p}, "norm inf");
}

TEST_CASE("fmt prints a Shape as a list", "[new_ops]") {
    CHECK(fmt::format("{}", zeros({2, 3}).shape()) == "[2, 3]");
    CHECK(fmt::format("{}", zeros({}).shape()) == "[]");
    CHECK(fmt::format("{:>8}", Shape{4}) == "     [4]");
}

TEST_CASE("stack and concat promote mixed dtypes as torch.cat does", "[new_ops]") {
    const Tensor f = tensor({1.5, 2.5}).requires_grad_();  // float32
    const Tensor i = from_vector(std::vector<std::int64_t>{3, 4}, {2});
    const Tensor s = stack({f, i});
    CHECK(s.dtype() == kFloat32);
    CHECK(s.to_vector<float>() == std::vector<float>{1.5f, 2.5f, 3, 4});
    s.sum().backward();
    CHECK(f.grad().dtype() == kFloat32);
    CHECK(f.grad().to_vector<float>() == std::vector<float>{1, 1});
    const Tensor d = tensor({1.0}, kFloat64);
    CHECK(concat({f, d}, 0).dtype() == kFloat64);
    const Tensor b = from_vector(std::vector<std::int64_t>{1}, {1}).to(kBool);
    CHECK(concat({b, i}, 0).dtype() == kInt64);
    CHECK(concat({b, b}, 0).dtype() == kBool);
    // the gradient through the promotion, in double
    const Tensor a = param({2, 3}, -2, 2);
    const Tensor c = randn({2, 3}, kFloat32);
    REQUIRE_GRADCHECK([&](auto& v) { return stack({v[0], c}, 1) * stack({v[0], v[0]}, 1); }, {a}, "stack promoted");
}

TEST_CASE("a dtype prints with fmt and NaN prints without a sign", "[new_ops]") {
    CHECK(fmt::format("{}", kFloat32) == "float32");
    CHECK(fmt::format("{:>8}", kInt64) == "   int64");
    const Tensor z = tensor({0.0}) / tensor({0.0});
    CHECK(fmt::format("{}", z).find("nan") != std::string::npos);
    CHECK(fmt::format("{}", z).find("-nan") == std::string::npos);
    CHECK(fmt::format("{}", -z).find("-nan") == std::string::npos);
}
