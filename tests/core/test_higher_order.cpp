// Second derivatives: backward(create_graph) and autograd::grad, as torch.autograd.grad with
// create_graph=True, and gradgradcheck on the elementwise ops.
#include <cmath>

#include "core/autograd.hpp"
#include "core/autograd_function.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("d²/dx² of x³ is 6x, through autograd::grad twice", "[autograd][higher]") {
    Tensor x = tensor({1.0, -2.0, 0.5}, kFloat64).requires_grad_();
    Tensor y = (x * x * x).sum();
    auto [dx] = std::array<Tensor, 1>{autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0]};
    CHECK(dx.requires_grad());
    CHECK_THAT(vals(dx), approx({3.0, 12.0, 0.75}));
    Tensor d2 = autograd::grad({dx.sum()}, {x})[0];
    CHECK_FALSE(d2.requires_grad());
    CHECK_THAT(vals(d2), approx({6.0, -12.0, 3.0}));
    // autograd::grad hands the gradients back and adds into no .grad().
    CHECK_FALSE(x.has_grad());
}

TEST_CASE("backward with create_graph gives a gradient with a graph", "[autograd][higher]") {
    Tensor x = tensor({2.0, 3.0}, kFloat64).requires_grad_();
    (x.pow(3.0)).sum().backward({}, std::nullopt, /*create_graph=*/true);
    REQUIRE(x.grad().requires_grad());
    CHECK_THAT(vals(x.grad()), approx({12.0, 27.0}));
    // Differentiate the gradient: d/dx Σ 3x² = 6x, added into the same leaf's .grad() (which
    // already holds 3x², as torch would have it).
    Tensor g = x.grad();
    x.zero_grad();
    g.sum().backward();
    CHECK_THAT(vals(x.grad()), approx({12.0, 18.0}));
}

TEST_CASE("a gradient that does not depend on a graph does not require grad", "[autograd][higher]") {
    Tensor a = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = (a + 1.0).sum();
    Tensor g = autograd::grad({y}, {a}, {}, std::nullopt, true)[0];
    CHECK_THAT(vals(g), approx({1.0, 1.0}));
    CHECK_FALSE(g.requires_grad());
}

TEST_CASE("autograd::grad refuses what torch refuses", "[autograd][higher][errors]") {
    Tensor a = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor b = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = (a * a).sum();
    CHECK_THROWS_WITH(autograd::grad({y}, {b}, {}, true), Catch::Contains("input 0") && Catch::Contains("allow_unused"));
    auto unused = autograd::grad({y}, {a, b}, {}, true, false, /*allow_unused=*/true);
    CHECK(unused[0].defined());
    CHECK_FALSE(unused[1].defined());
    CHECK_THROWS_WITH(autograd::grad({y}, {tensor({1.0})}), Catch::Contains("does not require grad"));
    CHECK_THROWS_WITH(autograd::grad({a * 2.0}, {a}), Catch::Contains("one-element"));
    CHECK_THROWS_WITH(autograd::grad({y}, {a}, {ones({2}, kFloat64)}), Catch::Contains("gradient must match"));
}

TEST_CASE("a Hessian-vector product by double backward", "[autograd][higher]") {
    // f(x) = Σ sin(x_i)·x_j over all pairs = sin(x)ᵀ 1 1ᵀ x; H v checked against finite
    // differences of the gradient.
    Tensor x = param({4}, -1.0, 1.0, 3);
    Tensor v = tensor({0.3, -0.2, 0.5, 0.1}, kFloat64);
    auto grad_of = [&](const Tensor& at) {
        Tensor xi = at.detach().requires_grad_();
        Tensor f = sin(xi).sum() * xi.sum();
        return autograd::grad({f}, {xi})[0];
    };
    Tensor f = sin(x).sum() * x.sum();
    Tensor g = autograd::grad({f}, {x}, {}, std::nullopt, true)[0];
    Tensor hv = autograd::grad({(g * v).sum()}, {x})[0];
    const double eps = 1e-6;
    Tensor up = grad_of(x.detach() + v * eps), down = grad_of(x.detach() - v * eps);
    CHECK_THAT(vals(hv), approx(vals((up - down) / (2 * eps)), 1e-6));
}

TEST_CASE("gradgradcheck: the elementwise ops are twice differentiable", "[autograd][higher][gradgradcheck]") {
    Tensor a = param({2, 3}, 0.2, 1.5, 11);
    Tensor b = param({2, 3}, 0.2, 1.5, 12);
    Tensor row = param({3}, 0.5, 1.5, 13);
    auto un = [](Tensor (*f)(const Tensor&)) { return [f](const std::vector<Tensor>& x) { return f(x[0]); }; };
    REQUIRE_GRADGRADCHECK(un(exp), {a}, "exp");
    REQUIRE_GRADGRADCHECK(un(log), {a}, "log");
    REQUIRE_GRADGRADCHECK(un(sqrt), {a}, "sqrt");
    REQUIRE_GRADGRADCHECK(un(tanh), {a}, "tanh");
    REQUIRE_GRADGRADCHECK(un(sigmoid), {a}, "sigmoid");
    REQUIRE_GRADGRADCHECK(un(gelu), {a}, "gelu");
    REQUIRE_GRADGRADCHECK(un(sin), {a}, "sin");
    REQUIRE_GRADGRADCHECK(un(cos), {a}, "cos");
    REQUIRE_GRADGRADCHECK(un(abs), {a}, "abs");
    REQUIRE_GRADGRADCHECK(un(relu), {a}, "relu");
    REQUIRE_GRADGRADCHECK(un(neg), {a}, "neg");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return pow(x[0], 3.5); }, {a}, "pow");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return clamp(x[0], 0.5, 1.2); }, {a}, "clamp");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return x[0] * 2.5 + 1.0; }, {a}, "scalar mul, add");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return 2.0 / x[0] - x[0] / 3.0; }, {a}, "rdiv, div");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return 1.0 - x[0]; }, {a}, "rsub");
    for (const Tensor& other : {b, row}) {
        REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return x[0] * x[1]; }, {a, other}, "mul");
        REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return x[0] / x[1]; }, {a, other}, "div");
        REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return x[0] + x[1]; }, {a, other}, "add");
        REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return x[0] - x[1]; }, {a, other}, "sub");
        REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return maximum(x[0], x[1]) * x[0]; }, {a, other}, "maximum");
        REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return minimum(x[0], x[1]) * x[1]; }, {a, other}, "minimum");
    }
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return sum_to(x[0] * x[0], {1, 3}); }, {a}, "sum_to");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return expand(x[0] * x[0], {2, 3}); }, {row}, "expand");
}

TEST_CASE("gradgradcheck fails a wrong second derivative", "[autograd][higher][gradgradcheck]") {
    // Right at first order, wrong at second: a hook hands on the gradient cut from its graph,
    // so the first derivative no longer depends on the gradient flowing in.
    Tensor a = param({3}, 0.5, 1.5, 5);
    auto f = [](const std::vector<Tensor>& x) {
        Tensor y = x[0] * x[0];
        if (y.requires_grad()) y.register_hook([](const Tensor& g) { return g.detach(); });
        return y;
    };
    CHECK(gradcheck(f, {a}).passed);
    const auto r = gradgradcheck(f, {a});
    CHECK_FALSE(r.passed);
    CHECK_THAT(r.report, Catch::Contains("the gradient of f"));
}

namespace {
// A custom op whose backward works on raw values, so it says it is once_differentiable.
struct RawSquare : autograd::Function<RawSquare> {
    static constexpr bool once_differentiable = true;
    static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
        ctx->save_for_backward({x});
        return x * x;
    }
    static autograd::variable_list backward(autograd::AutogradContext* ctx, autograd::variable_list grads) {
        const Tensor x = ctx->get_saved_variables()[0];
        std::vector<double> g = grads[0].to_vector<double>(), v = x.to_vector<double>();
        for (std::size_t i = 0; i < g.size(); ++i) g[i] *= 2 * v[i];
        return {from_vector(g, x.shape(), x.dtype())};
    }
};
}  // namespace

TEST_CASE("a gradient that cannot be differentiated again refuses, naming its op", "[autograd][higher][errors]") {
    Tensor x = param({3}, -1.0, 1.0, 9);
    Tensor y = RawSquare::apply(x * 3.0).sum();
    // First order, with or without create_graph, is right.
    Tensor g = autograd::grad({y}, {x}, {}, std::nullopt, true)[0];
    CHECK_THAT(vals(g), approx(vals(x.detach() * 18.0)));
    // Differentiating that gradient throws instead of giving 0.
    CHECK_THROWS_WITH(autograd::grad({g.sum()}, {x}), Catch::Contains("RawSquare") && Catch::Contains("once_differentiable"));
    CHECK_THROWS_WITH(gradgradcheck([](const std::vector<Tensor>& in) { return RawSquare::apply(in[0]); }, {x}),
                      Catch::Contains("RawSquare"));
}

TEST_CASE("p.grad() aliases the stored gradient: writes through it reach the optimiser", "[autograd][grad]") {
    Tensor p = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    (p * p).sum().backward();
    p.grad() *= 0.5;  // d2l's grad_clipping: `param.grad[:] *= theta / norm`
    CHECK_THAT(vals(p.grad()), approx({1.0, 2.0}));
    Tensor g = p.grad();
    (p * p).sum().backward();  // accumulates in place: the handle taken before sees it
    CHECK_THAT(vals(g), approx({3.0, 6.0}));
    CHECK(g.is_same(p.grad()));
    p.mutable_grad() = tensor({7.0, 7.0}, kFloat64);
    CHECK_THAT(vals(p.grad()), approx({7.0, 7.0}));
    p.zero_grad();
    CHECK_FALSE(p.grad().defined());
}

TEST_CASE("two leaves fed by one gradient get gradients that do not alias", "[autograd][grad]") {
    Tensor a = tensor({1.0}, kFloat64).requires_grad_();
    Tensor b = tensor({1.0}, kFloat64).requires_grad_();
    Tensor seed = tensor({5.0}, kFloat64);
    (a + b).backward(seed);  // add hands the same gradient to both
    CHECK_FALSE(a.grad().is_same(b.grad()));
    a.grad() *= 2.0;
    CHECK(b.grad().item<double>() == 5.0);
    CHECK(seed.item<double>() == 5.0);  // the caller's gradient is never written
}

TEST_CASE("register_hook sees and may replace the gradient of any tensor", "[autograd][hooks]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor h = x * 3.0;
    std::vector<double> seen;
    const auto look = h.register_hook([&](const Tensor& g) { seen = vals(g); });
    h.register_hook([](const Tensor& g) { return g * 10.0; });
    (h * h).sum().backward({}, /*retain_graph=*/true);
    CHECK_THAT(seen, approx({6.0, 12.0}));
    CHECK_THAT(vals(x.grad()), approx({180.0, 360.0}));  // 2h · 10 · 3
    h.remove_hook(look);
    seen.clear();
    x.zero_grad();
    Tensor h2 = x * 3.0;
    (h2 * h).sum().backward();
    CHECK(seen.empty());
    // On a leaf: before accumulation.
    Tensor w = tensor({1.0}, kFloat64).requires_grad_();
    w.register_hook([](const Tensor& g) { return g * 0.0; });
    (w * 5.0).sum().backward();
    CHECK(w.grad().item<double>() == 0.0);
    CHECK_THROWS_WITH(tensor({1.0}).register_hook([](const Tensor&) {}), Catch::Contains("does not require grad"));
    Tensor z = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    z.register_hook([](const Tensor&) { return tensor({1.0}, kFloat64); });
    CHECK_THROWS_WITH((z * 2.0).sum().backward(), Catch::Contains("register_hook") && Catch::Contains("(2,)"));
}

TEST_CASE("autograd::grad runs only the part of the graph it needs", "[autograd][higher]") {
    Tensor a = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor w = tensor({3.0, 4.0}, kFloat64).requires_grad_();
    Tensor z = a * a;
    z.sum().backward();  // frees z's graph
    Tensor y = (z + w).sum();
    // w's gradient does not go through the freed part (torch gives [1, 1] too)...
    CHECK_THAT(vals(autograd::grad({y}, {w}, {}, true)[0]), approx({1.0, 1.0}));
    // ...a's does, and that is refused with the reason, not as an unused input.
    CHECK_THROWS_WITH(autograd::grad({y}, {a}), Catch::Contains("freed"));
}

namespace {
struct AddOneInPlace : autograd::Function<AddOneInPlace> {
    static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
        x.add_(1.0);
        ctx->mark_dirty({x});
        return x;
    }
    static autograd::variable_list backward(autograd::AutogradContext*, autograd::variable_list g) { return {g[0]}; }
};
}  // namespace

TEST_CASE("a custom in-place function's graph is freed with its tensors", "[custom][memory]") {
    std::weak_ptr<Node> seen;
    {
        Tensor w = tensor({1.0, 2.0}).requires_grad_();
        Tensor x = w * 2.0;
        AddOneInPlace::apply(x);
        CHECK_THAT(vals(x), approx({3.0, 5.0}));
        seen = x.node_ptr();
    }
    CHECK(seen.expired());  // no cycle through the function's context
}
