// Second derivatives of the products (matmul, bmm, matmul_t) and of the head-attention ops:
// gradgradcheck in float64 on every layout, second derivatives against PyTorch 1.13, and under
// autocast the second order in bfloat16 against float64.
#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "../autocast_helpers.hpp"
#include "core/autograd.hpp"
#include "core/grad_ops.hpp"
#include "core/random.hpp"
#include "core/runtime/blas.hpp"
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

// The masks the attention ops take, for batch 2, 3 queries and 4 keys.
std::vector<std::pair<std::string, AttentionMask>> masks() {
    const Tensor attend = tensor({{{1.0, 0.0, 1.0, 1.0}, {1.0, 1.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 0.0}},
                                  {{0.0, 1.0, 1.0, 0.0}, {1.0, 1.0, 1.0, 1.0}, {0.0, 0.0, 1.0, 0.0}}}) > 0.5;
    return {{"every key", AttentionMask()},
            {"valid_lens (batch,)", AttentionMask::valid_lens(from_vector(std::vector<std::int64_t>{3, 1}, {2}))},
            {"valid_lens (batch, queries)",
             AttentionMask::valid_lens(from_vector(std::vector<std::int64_t>{1, 4, 0, 2, 3, 4}, {2, 3}))},
            {"causal", AttentionMask::causal()},
            {"bool mask", AttentionMask::attend_where(attend)},
            {"shared bool mask", AttentionMask::attend_where(attend[0])}};
}

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

TEST_CASE("gradgradcheck: head_attention_weights with one and three heads under every mask kind",
          "[gradgrad][attention]") {
    for (std::size_t H : {1, 3})
        for (const auto& [name, mask] : masks()) {
            CAPTURE(H, name);
            const Tensor q = param({2, 3, 2 * H}, -1, 1, 31), k = param({2, 4, 2 * H}, -1, 1, 32);
            const AttentionMask m = mask;
            REQUIRE_GRADGRADCHECK([H, m](const std::vector<Tensor>& x) { return head_attention_weights(x[0], x[1], H, 0.8, m); },
                                  {q, k}, "head_attention_weights");
        }
}

TEST_CASE("gradgradcheck: head_attention_combine, and both head ops composed", "[gradgrad][attention]") {
    for (std::size_t H : {1, 3}) {
        CAPTURE(H);
        const Tensor w = param({2 * H, 3, 4}, 0.1, 1, 33), v = param({2, 4, 2 * H}, -1, 1, 34);
        REQUIRE_GRADGRADCHECK([H](const std::vector<Tensor>& x) { return head_attention_combine(x[0], x[1], H); },
                              {w, v}, "head_attention_combine");
        const AttentionMask mask = masks()[2].second;  // per-query lengths, a row with none
        const Tensor q = param({2, 3, 2 * H}, -1, 1, 35), k = param({2, 4, 2 * H}, -1, 1, 36);
        REQUIRE_GRADGRADCHECK(
            [H, mask](const std::vector<Tensor>& x) {
                return head_attention_combine(head_attention_weights(x[0], x[1], H, 0.6, mask), x[2], H);
            },
            {q, k, v}, "attention");
    }
}

TEST_CASE("gradgradcheck: the head ops' backward ops are differentiable again", "[gradgrad][attention]") {
    // Third order through the attention ops: gradgradcheck of their backward ops themselves.
    const std::size_t H = 2;
    const Tensor q = param({2, 3, 4}, -1, 1, 37), k = param({2, 4, 4}, -1, 1, 38), v = param({2, 4, 4}, -1, 1, 39);
    const Tensor g = param({4, 3, 4}, -1, 1, 40), go = param({2, 3, 4}, -1, 1, 41);
    const AttentionMask mask = masks()[4].second;  // bool mask
    REQUIRE_GRADGRADCHECK(
        [mask](const std::vector<Tensor>& x) {
            const ResolvedMask m = mask.resolve("test", 2, 3, 4);
            const Tensor w = head_attention_weights(x[1], x[2], H, 0.7, m);
            const auto d = head_attention_weights_backward(x[0], w, x[1], x[2], H, 0.7, m);
            return d.queries.sum() * 0.5 + (d.keys * d.keys).sum();
        },
        {g, q, k}, "head_attention_weights_backward");
    const Tensor w = param({4, 3, 4}, 0.1, 1, 42);
    REQUIRE_GRADGRADCHECK(
        [](const std::vector<Tensor>& x) {
            const auto d = head_attention_combine_backward(x[0], x[1], x[2], H);
            return (d.weights * d.weights).sum() + (d.values * x[2]).sum();
        },
        {go, w, v}, "head_attention_combine_backward");
}

TEST_CASE("the head ops' backward ops refuse arguments that do not fit their forward", "[gradgrad][attention][errors]") {
    const Tensor q = param({2, 3, 4}), k = param({2, 5, 4}), v = param({2, 5, 4});
    const ResolvedMask m = AttentionMask().resolve("test", 2, 3, 5);
    const Tensor w = head_attention_weights(q, k, 2, 0.5, m);
    CHECK_THROWS_WITH(head_attention_weights_backward(zeros({4, 3, 4}, kFloat64), w, q, k, 2, 0.5, m),
                      Catch::Contains("head_attention_weights_backward: grad must have the shape of the forward's "
                                      "result (4, 3, 5), got (4, 3, 4)"));
    CHECK_THROWS_WITH(head_attention_weights_backward(w, w.to(kFloat32), q, k, 2, 0.5, m),
                      Catch::Contains("head_attention_weights_backward: dtypes differ"));
    CHECK_THROWS_WITH(head_attention_combine_backward(zeros({2, 3}, kFloat64), w, v, 2),
                      Catch::Contains("head_attention_combine_backward: grad") && Catch::Contains("(2, 3)"));
}

TEST_CASE("second derivatives of multi-head attention match PyTorch 1.13", "[gradgrad][attention]") {
    // Constants from /usr/bin/python3 with torch 1.13 (float64), d2l's composition: heads viewed
    // as (batch·H, n, d), s = q_h @ k_hᵀ · 0.6, masked_fill(~keep, -1e6), softmax, @ v_h, heads
    // merged; gq = autograd.grad(Σ out⊙R, q, create_graph=True), then autograd.grad(Σ gq⊙U, [q, k, v]).
    const std::size_t H = 2;
    const Tensor q = constant({-0.51, 0.68, -0.31, -0.83, -0.91, 0.22, -0.79, -0.78, -0.69, 0.16, 0.12, -0.42,
                               0.15, -0.29, 0.54, -0.98}, {2, 2, 4}).requires_grad_();
    const Tensor k = constant({0.33, -0.0, 0.42, 0.1, 0.88, -0.23, 0.27, 0.13, -0.32, 0.84, 0.23, 0.1, -0.83,
                               0.94, -0.5, -0.09, -0.69, 0.52, 0.2, -0.1, -0.74, -0.67, 0.2, 0.25},
                              {2, 3, 4}).requires_grad_();
    const Tensor v = constant({-0.62, 0.77, 0.34, 0.33, 0.15, -0.69, -0.65, -0.73, 0.64, -0.14, 0.93, 0.38, 0.43,
                               -0.1, -0.81, -0.96, 0.9, -0.84, 0.84, -0.19, -0.22, 0.66, 0.58, 0.8},
                              {2, 3, 4}).requires_grad_();
    const Tensor R = constant({0.45, 0.24, -0.46, -0.8, 0.7, 0.19, 0.33, -0.11, 0.66, -0.99, -0.44, -0.48, 0.55,
                               -0.2, 0.25, -0.06}, {2, 2, 4});
    const Tensor U = constant({0.47, -0.03, -0.76, 0.71, 0.77, 0.33, -0.36, -0.44, -0.95, 0.39, 0.51, -0.55, 0.67,
                               -0.48, 0.21, -0.34}, {2, 2, 4});
    struct Expected {
        std::string name;
        AttentionMask mask;
        std::vector<double> gq, hq, hk, hv;
    };
    const Tensor attend = tensor({{{1.0, 0.0, 1.0}, {1.0, 1.0, 0.0}}, {{0.0, 1.0, 1.0}, {1.0, 1.0, 1.0}}}) > 0.5;
    const std::vector<Expected> cases = {
        {"every key", AttentionMask(),
         {-0.04687100078117114, 0.04944907595937217, -0.004451844695507287, 0.005837896020350609,
          -0.06814791867539591, 0.07953854996107801, -0.001477111319302107, -0.0012403408568428444,
          0.010271874728826347, 0.2535213406680634, -0.11796310471145494, -0.0391504316889003,
          0.0034500093380684937, 0.12760212442508156, 0.027591892688614644, 0.001298863453402232},
         {-0.0009941315849977944, 0.00031280578105705945, 0.000541515231722246, 9.958021998615716e-05,
          0.0014355485891374216, -0.0021567370512704915, -5.4946818842523205e-05, -9.01434420146188e-06,
          0.0009420650969434452, -0.04930935846750098, 0.007432079303929412, 0.0027545189307824364,
          -0.00042867732019397954, 0.01712580670883899, -0.00043416191396780814, -0.0003815314777107134},
         {-0.07351304378330553, -0.020669110474523196, 0.04811966340153746, -0.047741373088144363,
          -0.022932609496519048, -0.006673291765994751, -0.13380089344265322, 0.1538345252449472,
          0.09644565327982459, 0.02734240224051795, 0.08568123004111576, -0.10609315215680287,
          0.0201158549701672, -0.010050220541542917, 0.07672783407900576, -0.07543209920744191,
          -0.12701348606968343, 0.034411073031954814, -0.018622914355621092, 0.015253677081611341,
          0.10689763109951621, -0.024360852490411894, -0.05810491972338466, 0.06017842212583058},
         {0.012142669622403535, 0.005412526498390372, 0.006159447040821576, 0.015584573353284881,
          0.05661341287189253, 0.021134693856200266, -0.0035622306720438685, -0.0066583749143366965,
          -0.06875608249429607, -0.026547220354590645, -0.0025972163687777053, -0.008926198438948176,
          0.005167687361694283, -0.05360818373503418, 0.012738095497281568, 0.017993590708785766,
          -0.010677980085242001, 0.0013095668850865451, -0.011967694103654001, -0.01940455633549478,
          0.005510292723547659, 0.05229861684994768, -0.0007704013936275659, 0.0014109656267090116}},
        {"valid_lens [2, 3]", AttentionMask::valid_lens(from_vector(std::vector<std::int64_t>{2, 3}, {2})),
         {-0.00031628524033424613, 0.0001322647368670494, -0.02932526860300578, 0.005865053720601157,
          0.021002663216418124, -0.008782931890502124, 0.00472340429034351, -0.0009446808580687023,
          0.010271874728826347, 0.2535213406680634, -0.11796310471145494, -0.0391504316889003,
          0.0034500093380684937, 0.12760212442508156, 0.027591892688614644, 0.001298863453402232},
         {-6.563830390006588e-06, 2.7448745267298335e-06, 1.5426236060307977e-05, -3.085247212061421e-06,
          0.0007176704992492204, -0.00030011675423149286, -3.2979988079242383e-06, 6.595997615848346e-07,
          0.0009420650969434452, -0.04930935846750098, 0.007432079303929412, 0.0027545189307824364,
          -0.00042867732019397954, 0.01712580670883899, -0.00043416191396780814, -0.0003815314777107134},
         {-0.027952116387030847, -0.012897802770541153, 0.13723067919760196, -0.15272979955163415,
          0.027952116387030854, 0.012897802770541152, -0.13723067919760196, 0.15272979955163415, 0.0, 0.0, 0.0, 0.0,
          0.0201158549701672, -0.010050220541542917, 0.07672783407900576, -0.07543209920744191,
          -0.12701348606968343, 0.034411073031954814, -0.018622914355621092, 0.015253677081611341,
          0.10689763109951621, -0.024360852490411894, -0.05810491972338466, 0.06017842212583058},
         {-0.05312849667049785, -0.01903279540313027, 0.007317350985007576, 0.016907970601679492,
          0.053128496670497835, 0.019032795403130263, -0.007317350985007581, -0.016907970601679496, 0.0, 0.0, 0.0,
          0.0, 0.005167687361694283, -0.05360818373503418, 0.012738095497281568, 0.017993590708785766,
          -0.010677980085242001, 0.0013095668850865451, -0.011967694103654001, -0.01940455633549478,
          0.005510292723547659, 0.05229861684994768, -0.0007704013936275659, 0.0014109656267090116}},
        {"bool mask", AttentionMask::attend_where(attend),
         {-0.03161284224006657, 0.04085351920254757, 0.008872129576424262, 0.0, 0.021002663216418124,
          -0.008782931890502124, 0.00472340429034351, -0.0009446808580687023, 0.016645063484652473,
          0.39615251093472925, 0.0, -0.01890520911910277, 0.0034500093380684937, 0.12760212442508156,
          0.027591892688614644, 0.001298863453402232},
         {-0.001658345161648628, 0.0021430922088997656, -1.3581185235790703e-05, 2.56650983018053e-19,
          0.0007176704992492204, -0.00030011675423149286, -3.2979988079242383e-06, 6.595997615848346e-07,
          -0.0001944495041335207, -0.0046278981983777865, -1.6263032587282567e-19, 9.623225151381677e-05,
          -0.00042867732019397954, 0.01712580670883899, -0.00043416191396780814, -0.0003815314777107134},
         {-0.04977366361042272, -0.013164496041426057, -0.04678516036622205, 0.019374906042163405,
          0.028216310040591205, 0.012888666129550563, 0.011318800836436022, 0.01383816965787309,
          0.021557353569831517, 0.00027582991187549265, 0.03546635952978602, -0.033213075700036496,
          0.009216104344185114, -0.007932123628861046, -0.007942642901523514, 0.012793949769200756,
          -0.2520397220622854, 0.08429767304677965, 0.035039637256651615, -0.04182765047256776,
          0.24282361771810027, -0.0763655494179186, -0.0270969943551281, 0.029033700703367006},
         {-0.014756249703153448, 0.0014324029794534083, 0.007942532707375653, 0.017995243162319628,
          0.035518265317061856, 0.009640672014631075, 0.00201795701618864, -0.0006726523387295466,
          -0.020762015613908405, -0.011073074994084482, -0.009960489723564295, -0.01732259082359008,
          -0.04035385436939363, 0.014674128861597684, -0.0030787125566437597, 0.0007388910135945022,
          0.028210799376067262, -0.05702360230687735, -0.007909982312142473, -0.014977961653845838,
          0.012143054993326304, 0.042349473445279714, 0.010988694868786232, 0.014239070640251336}},
    };
    for (const auto& c : cases) {
        CAPTURE(c.name);
        const Tensor out = head_attention_combine(head_attention_weights(q, k, H, 0.6, c.mask), v, H);
        const Tensor gq = autograd::grad({(out * R).sum()}, {q}, {}, std::nullopt, true)[0];
        CHECK_THAT(vals(gq), near(c.gq));
        const auto h = autograd::grad({(gq * U).sum()}, {q, k, v});
        CHECK_THAT(vals(h[0]), near(c.hq));
        CHECK_THAT(vals(h[1]), near(c.hk));
        CHECK_THAT(vals(h[2]), near(c.hv));
    }
}

namespace {

// max |got − want| / max |want|, got float32 and want float64.
double relative_error(const Tensor& got, const Tensor& want) {
    return max(abs(got.to(kFloat64) - want)).item<double>() / max(abs(want)).item<double>();
}

}  // namespace

TEST_CASE("autocast: a second derivative through the bfloat16 products runs in bfloat16, right to its precision",
          "[gradgrad][autocast]") {
    // The policy (ops_matmul.cpp, ops_attention.cpp): a product's gradients of every order run
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
    SECTION("head_attention_weights and head_attention_combine") {
        // heads of 32 queries, 32 keys and 32 features: 2^15 multiply-adds each, bfloat16
        const std::size_t H = 2;
        const Tensor q = randn({2, 32, 32 * H}, {}, gen).requires_grad_(), k = randn({2, 32, 32 * H}, {}, gen).requires_grad_();
        const Tensor v = randn({2, 32, 32 * H}, {}, gen).requires_grad_();
        const Tensor R = randn({2, 32, 32 * H}, {}, gen), U = randn({2, 32, 32 * H}, {}, gen);
        const AttentionMask mask = AttentionMask::valid_lens(from_vector(std::vector<std::int64_t>{32, 20}, {2}));
        auto hessian_u = [&](const Tensor& q, const Tensor& k, const Tensor& v, bool guard_in_backward) {
            std::optional<AutocastGuard> guard;
            if (q.dtype() == kFloat32) guard.emplace(kBFloat16, allow());
            const Tensor out = head_attention_combine(head_attention_weights(q, k, H, 0.125, mask), v, H);
            if (!guard_in_backward) guard.reset();
            const Tensor gq = autograd::grad({(out * R.to(q.dtype())).sum()}, {q}, {}, std::nullopt, true)[0];
            return autograd::grad({(gq * U.to(q.dtype())).sum()}, {q, k, v});
        };
        const auto inside = hessian_u(q, k, v, true), after = hessian_u(q, k, v, false);
        const auto want = hessian_u(rounded64(q).requires_grad_(), rounded64(k).requires_grad_(),
                                    rounded64(v).requires_grad_(), false);
        for (std::size_t i = 0; i < 3; ++i) {
            CAPTURE(i);
            CHECK(inside[i].to_vector<float>() == after[i].to_vector<float>());
            CHECK(relative_error(inside[i], want[i]) < 1e-2);
        }
    }
}

TEST_CASE("second derivatives on oneDNN's float32 engine match float64", "[gradgrad][products][attention]") {
    // The oneDNN paths (the float32 engine where oneDNN wins, XGRAD_GEMM=onednn) run their
    // gradients of every order there too: a Hessian-vector product in float32 against float64.
    if (!dnnl::available()) return;
    struct OnOneDnn {
        GemmEngine previous = gemm_engine();
        OnOneDnn() { set_gemm_engine(GemmEngine::OneDnn); }
        ~OnOneDnn() { set_gemm_engine(previous); }
    };
    std::optional<OnOneDnn> on_onednn(std::in_place);
    Generator gen(23);
    const Tensor a = randn({2, 6, 5}, {}, gen).requires_grad_(), b = randn({5, 4}, {}, gen).requires_grad_();
    const Tensor q = randn({2, 5, 6}, {}, gen).requires_grad_(), k = randn({2, 7, 6}, {}, gen).requires_grad_();
    const Tensor v = randn({2, 7, 6}, {}, gen).requires_grad_();
    const AttentionMask mask = AttentionMask::valid_lens(from_vector(std::vector<std::int64_t>{7, 3}, {2}));
    auto hessian_v = [&](const std::vector<Tensor>& x) {
        const Tensor p = matmul(x[0], x[1]);
        const Tensor out = head_attention_combine(head_attention_weights(x[2], x[3], 3, 0.4, mask), x[4], 3);
        const Tensor loss = (p * p).sum() + (out * out).sum();
        const auto g = autograd::grad({loss}, x, {}, std::nullopt, true);
        Tensor gv = (g[0] * g[0]).sum();
        for (std::size_t i = 1; i < g.size(); ++i) gv = gv + (g[i] * g[i]).sum();
        return autograd::grad({gv}, x);
    };
    const auto got = hessian_v({a, b, q, k, v});
    std::vector<Tensor> x64;
    for (const Tensor& t : {a, b, q, k, v}) x64.push_back(t.to(kFloat64).detach().requires_grad_());
    on_onednn.reset();
    const auto want = hessian_v(x64);
    for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(relative_error(got[i], want[i]) < 1e-5);
    }
}
