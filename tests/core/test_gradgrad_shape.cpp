// Second derivatives through the shape and index ops: gradgradcheck on each (their gradients
// are ops too: slice_backward, index_select_backward, gather_backward, ...), and Hessian-vector
// products compared with torch 1.13.
#include <cmath>

#include "core/autograd.hpp"
#include "core/creation.hpp"
#include "core/grad_ops.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using indexing::Ellipsis;
using indexing::None;
using indexing::Slice;

namespace {

using Fn = std::function<Tensor(const Tensor&)>;

// f(x) = op(x) ⊙ op(x): a shape op is linear, so its own second derivative is zero and checks
// nothing; the product makes the gradient depend on x through the op and its backward.
GradcheckFn squared(Fn op) {
    return [op](const std::vector<Tensor>& x) {
        const Tensor y = op(x[0]);
        return y * y;
    };
}

Tensor ids(std::vector<std::int64_t> v, Shape shape) { return from_vector(v, shape); }

}  // namespace

TEST_CASE("gradgradcheck: permute, transpose, squeeze and unsqueeze", "[autograd][higher][gradgradcheck][shape]") {
    const Tensor x = param({2, 3, 4}, -1.0, 1.0, 21);
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return permute(t, {2, 0, 1}); }), {x}, "permute");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return t.permute({-1, -3, -2}); }), {x}, "permute, negative axes");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return transpose(t, 0, 2); }), {x}, "transpose");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return transpose(t, -1, -2); }), {x}, "transpose, negative axes");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return squeeze(unsqueeze(t, -2), 2); }), {x}, "unsqueeze, squeeze");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return t.reshape({4, -1}); }), {x}, "reshape");
}

TEST_CASE("gradgradcheck: concat, slice, stack, split and chunk", "[autograd][higher][gradgradcheck][shape]") {
    const Tensor a = param({2, 3, 4}, -1.0, 1.0, 22);
    const Tensor b = param({2, 1, 4}, -1.0, 1.0, 23);
    const Tensor c = param({2, 3, 4}, -1.0, 1.0, 24);
    auto cat = [](long axis) {
        return [axis](const std::vector<Tensor>& x) {
            const Tensor y = concat({x[0], x[1], x[0]}, axis);  // x[0] twice: its two slices add
            return y * y;
        };
    };
    REQUIRE_GRADGRADCHECK(cat(1), {a, b}, "concat");
    REQUIRE_GRADGRADCHECK(cat(-2), {a, b}, "concat, negative axis");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return slice(t, 2, 1, 3); }), {a}, "slice");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return slice(t, -1, 0, 4, 3); }), {a}, "slice, step 3");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return slice(t, 1, -2, -1); }), {a}, "slice, negative bounds");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return slice(t, 1, 3, 3); }), {a}, "slice, empty");
    auto stacked = [](long axis) {
        return [axis](const std::vector<Tensor>& x) {
            const Tensor y = stack({x[0], x[1]}, axis);
            return y * y;
        };
    };
    REQUIRE_GRADGRADCHECK(stacked(0), {a, c}, "stack");
    REQUIRE_GRADGRADCHECK(stacked(-1), {a, c}, "stack, negative axis");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) {
        const auto p = split(x[0], std::vector<long>{1, 3}, -1);
        return p[0] * p[1];  // (2, 3, 1) · (2, 3, 3): both pieces, broadcast
    }, {a}, "split by sizes");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) {
        const auto p = split(x[0], 2, 1);  // pieces of 2 and 1 rows
        return p[0].sum({1}) * p[1].sum({1});
    }, {a}, "split by size");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) {
        const auto p = chunk(x[0], 2, -1);
        return p[0] * p[1];
    }, {a}, "chunk");
}

TEST_CASE("gradgradcheck: tril, triu, expand", "[autograd][higher][gradgradcheck][shape]") {
    const Tensor x = param({2, 3, 4}, -1.0, 1.0, 25);
    const Tensor row = param({1, 4}, -1.0, 1.0, 26);
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return tril(t); }), {x}, "tril");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return tril(t, -1); }), {x}, "tril, k = -1");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return triu(t, 1); }), {x}, "triu, k = 1");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return triu(t, -2); }), {x}, "triu, k = -2");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return expand(t, {2, 3, 4}); }), {row}, "expand, broadcast");
}

TEST_CASE("gradgradcheck: repeat_interleave, index_select, gather", "[autograd][higher][gradgradcheck][index]") {
    const Tensor x = param({3, 4}, -1.0, 1.0, 27);
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return repeat_interleave(t, 3, 0); }), {x}, "repeat_interleave");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return repeat_interleave(t, 2, -1); }), {x},
                          "repeat_interleave, negative axis");
    // Repeated indices: their gradients add, and so do the second derivatives.
    const Tensor rows = ids({2, 0, 2, 2}, {4});
    const Tensor grid = ids({3, 3, 0, 1, 1, 1}, {2, 3});
    REQUIRE_GRADGRADCHECK(squared([rows](const Tensor& t) { return index_select(t, 0, rows); }), {x}, "index_select");
    REQUIRE_GRADGRADCHECK(squared([grid](const Tensor& t) { return index_select(t, -1, grid); }), {x},
                          "index_select, 2-d index, negative axis");
    const Tensor picks = ids({1, 1, 1, 0, 2, 0, 2, 2}, {2, 4});
    const Tensor cols = ids({3, 0, 3, 1, 1, 1, 2, 3, 2}, {3, 3});
    REQUIRE_GRADGRADCHECK(squared([picks](const Tensor& t) { return gather(t, 0, picks); }), {x}, "gather, axis 0");
    REQUIRE_GRADGRADCHECK(squared([cols](const Tensor& t) { return gather(t, -1, cols); }), {x}, "gather, axis -1");
}

TEST_CASE("gradgradcheck: t[i] and t.index", "[autograd][higher][gradgradcheck][index]") {
    const Tensor x = param({3, 4, 5}, -1.0, 1.0, 28);
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return t[1]; }), {x}, "t[1]");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return t[-1][2]; }), {x}, "t[-1][2]");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return t.index({Slice(None, None, 2), None, Ellipsis, -2}); }),
                          {x}, "index with a step, None, Ellipsis");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return t.index({Slice(1, -1), 0, Slice(-3, None, 2)}); }), {x},
                          "index with negative bounds");
    // Two picks of overlapping parts: their gradients add.
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& v) { return v[0][0] * v[0].index({Slice(0, 1)}).squeeze(0); },
                          {x}, "two indexes of one tensor");
}

TEST_CASE("the shape ops' gradient ops are differentiable: each one's gradient is the op it undoes",
          "[autograd][higher][gradgradcheck][index]") {
    // Called directly (as an op's gradient formula calls them), with g as the variable.
    const Tensor g = param({2, 2, 4}, -1.0, 1.0, 29);
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return slice_backward(t, {2, 5, 4}, 1, 1, 3); }), {g},
                          "slice_backward");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return repeat_interleave_backward(t, {2, 1, 4}, 2, 1); }), {g},
                          "repeat_interleave_backward");
    const Tensor two = ids({2, 2}, {2});
    REQUIRE_GRADGRADCHECK(squared([two](const Tensor& t) { return index_select_backward(t, {2, 3, 4}, -2, two); }), {g},
                          "index_select_backward, a repeated index");
    const Tensor at = ids({0, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0}, {2, 2, 4});
    REQUIRE_GRADGRADCHECK(squared([at](const Tensor& t) { return gather_backward(t, {2, 2, 4}, 1, at); }), {g},
                          "gather_backward");
    REQUIRE_GRADGRADCHECK(squared([](const Tensor& t) { return index_backward(t, {3, 2, 2, 4}, {-1}); }), {g},
                          "index_backward");
}

TEST_CASE("the shape ops' gradient ops refuse gradients of the wrong shape", "[autograd][index][errors]") {
    const Tensor g = zeros({2, 3}, kFloat64);
    CHECK_THROWS_WITH(slice_backward(g, {2, 5}, 1, 3, 2), Catch::Contains("slice_backward") && Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(repeat_interleave_backward(g, {2, 2}, 2, 1), Catch::Contains("repeat_interleave_backward"));
    CHECK_THROWS_WITH(index_select_backward(g, {2, 4}, 1, ids({0, 1}, {2})),
                      Catch::Contains("index_select_backward") && Catch::Contains("expected (2, 2)"));
    CHECK_THROWS_WITH(index_select_backward(g, {2, 4}, 1, ids({0, 1, 4}, {3})),
                      Catch::Contains("index_select_backward") && Catch::Contains("out of range"));
    CHECK_THROWS_WITH(gather_backward(g, {2, 4}, 1, ids({0, 1}, {1, 2})), Catch::Contains("gather_backward"));
    CHECK_THROWS_WITH(index_backward(g, {4, 2, 3}, {0, 0}), Catch::Contains("index_backward"));
}

namespace {

// Deterministic inputs the torch script below builds the same way: ((k·a) mod m)/m − off.
Tensor pattern(const Shape& shape, int a, int m, double off) {
    std::size_t n = 1;
    for (std::size_t s : shape) n *= s;
    std::vector<double> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = static_cast<double>((static_cast<int>(k) * a) % m) / m - off;
    return from_vector(v, shape, kFloat64);
}

// f = Σ sin(op(x)) ⊙ w; g = ∂f/∂x with create_graph; returns g and h = ∂(g·v)/∂x, a
// Hessian-vector product that runs through op, its gradient op and that op's gradient.
std::pair<Tensor, Tensor> hvp(const Fn& op) {
    Tensor x = pattern({2, 3, 4}, 37, 23, 0.45).requires_grad_();
    const Tensor v = pattern({2, 3, 4}, 5, 17, 0.5);
    const Tensor y = op(x);
    const Tensor w = pattern(y.shape(), 11, 13, 0.4);
    const Tensor f = (sin(y) * w).sum();
    Tensor g = autograd::grad({f}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    Tensor h = autograd::grad({(g * v).sum()}, {x})[0];
    return {g.detach(), h};
}

void check_close(const Tensor& got, const std::vector<double>& want) {
    const std::vector<double> v = vals(got);
    REQUIRE(v.size() == want.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
        INFO("flat index " << i);
        CHECK(std::abs(v[i] - want[i]) <= 1e-9);
    }
}

}  // namespace

// The expected values below come from torch 1.13 (float64), by this script:
//   def vals(shape, a, m, off):
//       n = math.prod(shape)
//       return torch.tensor([((k * a) % m) / float(m) - off for k in range(n)],
//                           dtype=torch.float64).reshape(shape)
//   x = vals((2, 3, 4), 37, 23, 0.45).requires_grad_(); v = vals((2, 3, 4), 5, 17, 0.5)
//   y = op(x); w = vals(tuple(y.shape), 11, 13, 0.4); f = (torch.sin(y) * w).sum()
//   g, = torch.autograd.grad(f, x, create_graph=True); h, = torch.autograd.grad((g * v).sum(), x)
TEST_CASE("second derivatives through shape and index ops match torch", "[autograd][higher][shape][index]") {
    SECTION("x.permute(-1, 0, 1)") {
        auto [g, h] = hvp([](const Tensor& x) { return x.permute({-1, 0, 1}); });
        check_close(g, {-0.3601788409410708, -0.31901721919100146, -0.23952451905595204, -0.15740305307540597,
                        0.44610218945112023, 0.48044706371414075, -0.3918529489941904, -0.31731584412376873,
                        0.2669547181843321, 0.3690833310289936, 0.4170736954504988, 0.5073735940292163,
                        0.13699543309644696, 0.19270401300608395, 0.2915558336605839, 0.3505373894504022,
                        -0.014746033343156174, 0.0612175252393362, 0.12107592452500965, 0.2139565757341904,
                        -0.16282191021155684, -0.08724865807403405, -0.015358121610826886, 0.05541212937554935});
        check_close(h, {0.08699310682224605, -0.01051152325919002, -0.005006698516976319, 0.023765418072275005,
                        -0.002196452703851785, -0.0060833375030932895, 0.02126111709056334, 0.026797079498210828,
                        0.01751109721144593, -0.0015343225972237957, 0.0698993782195543, 0.033672319119110825,
                        0.000591058624377226, -0.031125641219938476, 0.008011027222872722, -0.01023487557867992,
                        0.000903091416691459, -0.003138345586927352, 0.01382974480245407, -0.0021848103732465905,
                        -0.017638363514749726, -0.009750973180855882, 2.654387110194417e-05, 0.007085411415386555});
    }
    SECTION("torch.cat([x, x * x], -1)[..., 1:7:2]") {
        auto [g, h] = hvp([](const Tensor& x) { return slice(concat({x, x * x}, -1), -1, 1, 7, 2); });
        check_close(h, {0.0, -0.13318542717610668, 0.0, -0.062654284008725, 0.0, 0.00766755504898286, 0.0,
                        0.0012760514046767063, 0.0, 0.10993964415913528, 0.0, 0.033672319119110825, 0.0,
                        -0.08403688132774952, 0.0, -0.0017058125964466533, 0.0, -0.43347890745491935, 0.0,
                        0.004057504978886525, 0.0, 0.04052880928840328, 0.0, 0.015942175684619742});
    }
    SECTION("torch.gather(torch.index_select(x, 1, [2, 0, 2, 1]), -1, index with repeats)") {
        const Tensor rows = ids({2, 0, 2, 1}, {4});
        std::vector<std::int64_t> at = {3, 3, 0, 1, 2, 1, 0, 0, 0, 2, 3, 2};
        at.insert(at.end(), at.begin(), at.end());
        const Tensor picks = ids(at, {2, 4, 3});
        auto [g, h] = hvp([&](const Tensor& x) { return gather(index_select(x, 1, rows), -1, picks); });
        check_close(h, {0.0, -0.0010010974532561941, -0.00031291865731101993, 0.0, 0.0, 0.0, -0.006541882181711797,
                        -0.005104205618706825, 0.05161165493899854, 0.0, 0.0, 0.0029710869810980096, 0.0,
                        -0.040018681568492316, 0.0037946971055712883, 0.0, 0.0, 0.0, 0.043025872718746014,
                        -0.0021848103732465905, 0.04970811535974922, 0.0, 0.0, -0.07439681986155883});
    }
    SECTION("x[1, ::2, None].repeat_interleave(2, dim=-1)") {
        auto [g, h] = hvp([](const Tensor& x) { return repeat_interleave(x.index({1, Slice(None, None, 2), None}), 2, -1); });
        check_close(h, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.00019701954145907516,
                        -0.06225128243987693, -0.00505959614076172, -0.005543890938451623, 0.0, 0.0, 0.0, 0.0,
                        0.06093252850549905, -0.003250324393618627, 0.0011148425862816552, 0.08502493698463864});
    }
    SECTION("torch.stack([x.tril(1), x.triu(-1)], dim=-2).chunk(2, dim=1)[0]") {
        auto [g, h] = hvp([](const Tensor& x) { return chunk(stack({tril(x, 1), triu(x, -1)}, -2), 2, 1)[0]; });
        check_close(h, {0.0903389955461786, 0.00900987707930573, -0.0065712918035314176, -0.07345674676885001,
                        -0.0006059179872694581, 0.002147060295209396, -0.026985263999561162, -0.024244976688857413,
                        0.0, 0.0, 0.0, 0.0, 0.002823946760913414, -0.05113498200418464, 0.005902862164222007,
                        -0.0017058125964466533, -0.011740188416988963, 0.00549210477712287, -0.04148923440736222,
                        0.0017166367218366069, 0.0, 0.0, 0.0, 0.0});
    }
}
