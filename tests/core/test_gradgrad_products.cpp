// Second derivatives of the products (matmul, bmm, matmul_t): gradgradcheck in float64 on
// every layout, second derivatives against PyTorch 1.13, and under autocast the second order in
// bfloat16 against float64.
#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "../autocast_helpers.hpp"
#include "core/autograd.hpp"
#include "core/random.hpp"
#include "core/runtime/dnnl.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Fn product(bool ta, bool tb, double alpha) {
    return [=](const std::vector<Tensor>& x) { return matmul_t(x[0], x[1], ta, tb, alpha); };
}

// PyTorch's values to 1e-9, absolute (approx() would also allow 1e-6 relative).
auto near(std::vector<double> expected) { return Catch::Matchers::Approx(std::move(expected)).margin(1e-9).epsilon(0); }

// A float64 constant of `shape` from `values` (no gradient).
Tensor constant(std::vector<double> values, const Shape& shape) { return from_vector(values, shape, kFloat64); }

}  // namespace

TEST_CASE("gradgradcheck: matmul in 2-D, with 1-D operands and batched with broadcasting", "[gradgrad][products]") {
    auto mm = [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); };
    REQUIRE_GRADGRADCHECK(mm, {param({3, 4}, -1, 1, 1), param({4, 2}, -1, 1, 2)}, "matmul 2-D");
    REQUIRE_GRADGRADCHECK(mm, {param({4}, -1, 1, 3), param({4, 2}, -1, 1, 4)}, "matmul vector·matrix");
    REQUIRE_GRADGRADCHECK(mm, {param({3, 4}, -1, 1, 5), param({4}, -1, 1, 6)}, "matmul matrix·vector");
    REQUIRE_GRADGRADCHECK(mm, {param({4}, -1, 1, 7), param({4}, -1, 1, 8)}, "matmul vector·vector");
    REQUIRE_GRADGRADCHECK(mm, {param({4}, -1, 1, 9), param({2, 4, 3}, -1, 1, 10)}, "matmul vector·batch");
    REQUIRE_GRADGRADCHECK(mm, {param({2, 3, 4}, -1, 1, 11), param({4}, -1, 1, 12)}, "matmul batch·vector (stacked)");
    // (..., M, K)·(K, N) runs as one stacked gemm; its right operand's gradient sums the batches
    // inside the gemm, a shared left operand's in beta = 1 products.
    REQUIRE_GRADGRADCHECK(mm, {param({2, 3, 4}, -1, 1, 13), param({4, 2}, -1, 1, 14)}, "matmul batch·matrix");
    REQUIRE_GRADGRADCHECK(mm, {param({3, 4}, -1, 1, 15), param({2, 4, 2}, -1, 1, 16)}, "matmul matrix·batch");
    REQUIRE_GRADGRADCHECK(mm, {param({2, 1, 3, 4}, -1, 1, 17), param({3, 4, 2}, -1, 1, 18)}, "matmul broadcast both");
    REQUIRE_GRADGRADCHECK(mm, {param({1, 3, 4}, -1, 1, 19), param({2, 4, 2}, -1, 1, 20)}, "matmul batch of one");
}

TEST_CASE("gradgradcheck: bmm", "[gradgrad][products]") {
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return bmm(x[0], x[1]); },
                          {param({2, 3, 4}, -1, 1, 21), param({2, 4, 2}, -1, 1, 22)}, "bmm");
}

TEST_CASE("gradgradcheck: matmul_t with every pair of transpose flags and alpha", "[gradgrad][products]") {
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            CAPTURE(ta, tb);
            const Shape sa = ta ? Shape{4, 3} : Shape{3, 4}, sb = tb ? Shape{2, 4} : Shape{4, 2};
            REQUIRE_GRADGRADCHECK(product(ta, tb, 0.7), {param(sa, -1, 1, 23), param(sb, -1, 1, 24)}, "matmul_t 2-D");
            // batched, each operand broadcast over the other's batch axes
            Shape ba = {2, 1}, bb = {3};
            ba.insert(ba.end(), sa.begin(), sa.end());
            bb.insert(bb.end(), sb.begin(), sb.end());
            REQUIRE_GRADGRADCHECK(product(ta, tb, -1.3), {param(ba, -1, 1, 25), param(bb, -1, 1, 26)}, "matmul_t batched");
            // a 2-D right operand: one stacked gemm when A is not transposed
            REQUIRE_GRADGRADCHECK(product(ta, tb, 0.5), {param(ba, -1, 1, 27), param(sb, -1, 1, 28)}, "matmul_t stacked");
        }
}

TEST_CASE("gradgradcheck: a product's gradient is differentiable again through both operands", "[gradgrad][products]") {
    // Third order: gradgradcheck of a function that is itself a product's gradient.
    auto grad_of_product = [](const std::vector<Tensor>& x) {
        // gradgradcheck also runs f on plain tensors, without gradients: the inner gradient
        // needs its graph all the same.
        AutoGradMode on(true);
        const Tensor a = x[0].requires_grad() ? x[0] : x[0].detach().requires_grad_();
        const Tensor y = matmul_t(a, x[1], false, true, 0.9);
        return autograd::grad({(y * y).sum()}, {a}, {}, std::nullopt, true)[0];
    };
    REQUIRE_GRADGRADCHECK(grad_of_product, {param({2, 3, 4}, -1, 1, 29), param({2, 4}, -1, 1, 30)}, "d/da of matmul_t");
}

TEST_CASE("second derivatives of matmul and matmul_t match PyTorch 1.13", "[gradgrad][products]") {
    // Constants from /usr/bin/python3 with torch 1.13 (float64): L = Σ (a@b)²⊙w,
    // ga = autograd.grad(L, a, create_graph=True), then autograd.grad(Σ ga⊙v, [a, b]).
    const Tensor a = constant({-0.88, -0.55, -0.53, -0.65, 0.11, -0.78}, {2, 3}).requires_grad_();
    const Tensor b = constant({0.84, -0.81, 0.42, 0.08, 0.83, 0.05}, {3, 2}).requires_grad_();
    const Tensor w = constant({-0.93, -0.43, 0.55, -0.65}, {2, 2});
    const Tensor v = constant({-0.05, 0.46, -0.88, 0.89, 0.9, 0.1}, {2, 3});
    const Tensor y = matmul(a, b);
    const Tensor ga = autograd::grad({(y * y * w).sum()}, {a}, {}, std::nullopt, true)[0];
    CHECK_THAT(vals(ga), near({2.6505664199999996, 1.0573798799999998, 2.14929348, -0.5374089000000001,
                                 -0.5816216000000001, -1.0796531000000003}));
    const auto h = autograd::grad({(ga * v).sum()}, {a, b});
    CHECK_THAT(vals(h[0]), near({0.92813886, 0.45017999999999997, 0.89273706, 0.4387196999999998,
                                   0.6253388000000001, 1.1453053}));
    CHECK_THAT(vals(h[1]), near({-3.06643166, -1.0654942600000004, -0.3755274400000002, -0.7269362800000001,
                                   -4.04219784, -0.21616282000000014}));

    // y = 0.7·aᵀ·bᵀ with a (2,1,3,2) and b (3,4,3) broadcast to (2,3,...): torch's
    // 0.7 * a.transpose(-1,-2) @ b.transpose(-1,-2); gb = grad(Σ y²⊙w2, b), then grad(Σ gb⊙vb, [a, b]).
    const Tensor a2 = constant({0.28, -0.48, -0.28, -0.37, -0.47, 0.7, 0.16, 0.44, 0.69, -0.09, -0.28, -0.35},
                               {2, 1, 3, 2}).requires_grad_();
    const Tensor b2 = constant({0.16, 0.79, 0.75, -0.21, -0.04, 0.33, -0.87, 0.44, 0.83, 0.84, -0.37, -0.83,
                                0.88, 0.0, 0.37, 0.96, -0.86, -0.53, 0.19, -0.88, 0.13, 0.54, 0.69, -0.68,
                                -0.4, 0.68, 0.28, -0.48, 0.74, -0.37, 0.96, -0.73, -0.0, 0.68, 0.53, -0.81},
                               {3, 4, 3}).requires_grad_();
    const Tensor w2 = constant({-0.44, -0.45, 0.72, 0.31, 0.85, 0.68, -0.41, 0.12, 0.53, 0.52, -0.87, -0.88,
                                -0.67, -0.92, -0.76, 0.7, -0.97, 0.9, -0.78, 0.99, 0.85, 0.73, 0.32, -0.39,
                                0.79, 0.46, 0.9, 0.68, -0.72, 0.92, 0.06, -0.82, 0.29, 0.44, -0.31, -0.89,
                                -0.62, -0.88, 0.47, -0.3, -0.16, 0.8, -0.29, -0.04, -0.56, -0.65, 0.61, -0.29},
                               {2, 3, 2, 4});
    const Tensor vb = constant({0.57, 0.14, -0.78, -0.62, 0.26, -0.31, 0.2, -0.97, -0.12, 0.49, -0.26, 0.71,
                                -0.37, 0.89, -0.78, 0.27, -0.95, -0.09, 0.14, -0.79, 0.55, 0.84, 0.7, 0.45,
                                -0.42, -0.34, -0.67, -0.39, 0.01, 0.53, 0.69, -0.5, -0.59, 1.0, 0.34, 0.45},
                               {3, 4, 3});
    const Tensor y2 = matmul_t(a2, b2, true, true, 0.7);
    const Tensor gb = autograd::grad({(y2 * y2 * w2).sum()}, {b2}, {}, std::nullopt, true)[0];
    CHECK_THAT(vals(gb), near({0.12791696959999999, 0.06406375639999998, -0.1594746748, -0.17796372719999998,
                                 -0.1416897328, 0.20352525339999997, -0.016383796800000076, 0.2361834888,
                                 0.04739991480000011, -0.12345502959999999, 0.07628351359999999,
                                 0.00039422459999996495, -0.10815762160000002, -0.028853630400000024,
                                 0.1092456078, -0.3941577247999999, -0.31309965119999994, 0.3844588999999998,
                                 0.11297408639999998, 0.2702867146, -0.14514952479999998, 0.10056015199999999,
                                 -0.12372622499999986, -0.13669967079999995, 0.13372139200000005,
                                 -0.20947009999999994, -0.16440593680000004, 0.17140352879999995,
                                 0.40366973219999996, -0.23295104699999997, 0.07173141359999995, 0.1658003984,
                                 -0.0018415669999999607, -0.15634555439999998, -0.27418407660000005,
                                 0.159650085}));
    const auto h2 = autograd::grad({(gb * vb).sum()}, {a2, b2});
    CHECK_THAT(vals(h2[0]), near({-0.25560122839999994, -0.4941515543999997, 0.15679657000000008,
                                    0.07075027680000001, -0.25295767840000005, -1.2998376411999997,
                                    -0.26922125859999996, -0.4114167400000001, -0.7555380167999998,
                                    -0.04913678840000008, 0.4511075632000001, -0.8753717895999997}));
    CHECK_THAT(vals(h2[1]), near({0.1812297535999999, 0.5768270984, -0.3712244311999999, -0.044991525599999985,
                                    0.05858843759999999, 0.010002026999999976, 0.030797323200000032,
                                    -0.4178194621999999, -0.033046383999999984, -0.059337628, -0.143594794,
                                    0.10040149979999999, -0.1907693088, -0.018219023200000045, 0.2621729908,
                                    -0.0064361696000000135, -0.15814699039999996, -0.05017564719999998,
                                    0.23843333359999994, 0.31291265739999996, -0.3652428149999999,
                                    0.06806821279999999, -0.24526750079999995, -0.10121332199999994,
                                    -0.03776194800000002, 0.13781838, 0.0585269622, -0.20482509599999998,
                                    -0.188423669, 0.39231693199999995, 0.10267354159999995, 0.1792953414,
                                    -0.025088617399999957, -0.09378647039999999, -0.03469197060000001,
                                    0.11798031839999998}));
}

namespace {

// max |got − want| / max |want|, got float32 and want float64.
double relative_error(const Tensor& got, const Tensor& want) {
    return max(abs(got.to(kFloat64) - want)).item<double>() / max(abs(want)).item<double>();
}

}  // namespace

TEST_CASE("autocast: a second derivative through the bfloat16 products runs in bfloat16, right to its precision",
          "[gradgrad][autocast]") {
    // The policy (ops_matmul.cpp): a product's gradients of every order run
    // where its forward ran, in bfloat16 under autocast, reading the operands' copies rounded at
    // the forward pass, as torch runs the backward of an autocast op in its dtype. So a Hessian-
    // vector product is that of the bfloat16-rounded inputs, to bfloat16's precision, and the
    // same whether or not a guard is alive when the backward runs.
    if (!dnnl::available()) return;
    using autocast_test::allow;
    using autocast_test::rounded64;
    Generator gen(17);
    SECTION("matmul_t") {
        // 64·40·48 multiply-adds per product: bfloat16 (autocast::kMinMultiplyAdds is 2^15)
        const Tensor a = randn({64, 48}, {}, gen).requires_grad_(), b = randn({40, 48}, {}, gen).requires_grad_();
        const Tensor w = randn({64, 40}, {}, gen), v = randn({64, 48}, {}, gen);
        auto hessian_v = [&](const Tensor& x, const Tensor& y, bool guard_in_backward) {
            std::optional<AutocastGuard> guard;
            if (x.dtype() == kFloat32) guard.emplace(kBFloat16, allow());
            const Tensor p = matmul_t(x, y, false, true, 0.5);
            if (!guard_in_backward) guard.reset();
            const Tensor gx = autograd::grad({(p * p * w.to(x.dtype())).sum()}, {x}, {}, std::nullopt, true)[0];
            return autograd::grad({(gx * v.to(x.dtype())).sum()}, {x, y});
        };
        const auto inside = hessian_v(a, b, true), after = hessian_v(a, b, false);
        const auto want = hessian_v(rounded64(a).requires_grad_(), rounded64(b).requires_grad_(), false);
        for (std::size_t i = 0; i < 2; ++i) {
            CAPTURE(i);
            CHECK(inside[i].to_vector<float>() == after[i].to_vector<float>());
            CHECK(relative_error(inside[i], want[i]) < 1e-2);
        }
    }
}
