// The plain loops behind the elementwise ops a composed model runs: float32 exp, tanh, sigmoid
// and gelu on the SIMD kernels, masked_fill and where over broadcast masks, pow's squares and
// cubes as products, and dropout's mask in one pass; each against the generic form it replaces.
#include <cmath>
#include <limits>

#include "core/creation.hpp"
#include "core/ops.hpp"
#include "helpers.hpp"

using namespace xgrad;

namespace {

// A (2, 3, 4, 5) float tensor of values in [-6, 6] with ±0 among them.
Tensor sample(Dtype d = kFloat32) {
    std::vector<double> v(120);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i) * 1.7) * 6.0;
    v[3] = 0.0, v[4] = -0.0;
    return cast(from_vector(v, {2, 3, 4, 5}, kFloat64), d);
}

}  // namespace

TEST_CASE("float32 exp, tanh, sigmoid and gelu agree with their float64 values", "[ops][elementwise]") {
    const Tensor x = sample(), xd = sample(kFloat64);
    struct Case {
        const char* name;
        Tensor (*f)(const Tensor&);
    };
    for (const Case& c : {Case{"exp", [](const Tensor& t) { return exp(t); }}, Case{"tanh", [](const Tensor& t) { return tanh(t); }},
                          Case{"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
                          Case{"gelu", [](const Tensor& t) { return gelu(t); }}}) {
        const std::vector<float> got = c.f(x).to_vector<float>();
        const std::vector<double> want = c.f(xd).to_vector<double>();
        for (std::size_t i = 0; i < got.size(); ++i) {
            INFO(c.name << " at " << i);
            CHECK(got[i] == Approx(want[i]).epsilon(1e-6).margin(1e-7));
        }
    }
}

TEST_CASE("float32 gelu's backward agrees with float64's, and gelu, tanh, sigmoid, exp pass gradcheck", "[ops][elementwise]") {
    const Tensor x = sample().requires_grad_(true), xd = sample(kFloat64).requires_grad_(true);
    gelu(x).sum().backward();
    gelu(xd).sum().backward();
    const std::vector<float> got = x.grad().to_vector<float>();
    const std::vector<double> want = xd.grad().to_vector<double>();
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(2e-6).margin(1e-7));
    const Tensor small = from_vector({-2.5, -0.3, 0.0, 0.7, 1.9}, {5}, kFloat64).requires_grad_(true);
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {small}, "gelu");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {small}, "gelu");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return tanh(in[0]) * sigmoid(in[0]) + exp(in[0]); }, {small},
                          "tanh sigmoid exp");
}

TEST_CASE("pow by 2 and 3 is the product, as torch computes it, with its gradient", "[ops][elementwise]") {
    const Tensor x = sample();
    const std::vector<float> xs = x.to_vector<float>(), sq = pow(x, 2.0).to_vector<float>(), cube = pow(x, 3.0).to_vector<float>();
    for (std::size_t i = 0; i < xs.size(); ++i) {
        CHECK(sq[i] == xs[i] * xs[i]);
        CHECK(cube[i] == xs[i] * xs[i] * xs[i]);
    }
    const Tensor small = from_vector({-2.5, -0.3, 0.0, 0.7, 1.9}, {5}, kFloat64).requires_grad_(true);
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return pow(in[0], 3.0); }, {small}, "pow 3");
}

TEST_CASE("masked_fill and where over broadcast masks: the values of the generic path", "[ops][where]") {
    const Tensor x = sample();
    // a causal (T, T) mask into (B, H, T, T), a leading one, a scalar, and a middle axis (generic)
    const Tensor scores = x.reshape({2, 3, 4, 5}).narrow(3, 0, 4);
    const Tensor causal = logical_not(tril(ones({4, 4}, kBool)));
    const Tensor filled = masked_fill(scores, causal, -std::numeric_limits<double>::infinity());
    const std::vector<float> in = scores.to_vector<float>(), out = filled.to_vector<float>();
    for (std::size_t i = 0; i < in.size(); ++i) {
        const std::size_t q = (i / 4) % 4, k = i % 4;
        CHECK(out[i] == (k > q ? -std::numeric_limits<float>::infinity() : in[i]));
    }
    const Tensor lead = gt(from_vector({1.0, -1.0}, {2, 1, 1, 1}, kFloat64), 0.0);
    const std::vector<float> by_lead = masked_fill(x, lead, 9.0).to_vector<float>(), xs = x.to_vector<float>();
    for (std::size_t i = 0; i < xs.size(); ++i) CHECK(by_lead[i] == (i < 60 ? 9.0f : xs[i]));
    const Tensor middle = gt(from_vector({1.0, -1.0, 1.0}, {3, 1, 1}, kFloat64), 0.0);  // (3, 1, 1) into (2, 3, 4, 5)
    const std::vector<float> by_middle = masked_fill(x, middle, 9.0).to_vector<float>();
    for (std::size_t i = 0; i < xs.size(); ++i) CHECK(by_middle[i] == ((i / 20) % 3 != 1 ? 9.0f : xs[i]));
    // where: cond (4, 5), a full, b a scalar tensor; and b full, a a trailing row
    const Tensor cond = gt(x.select(0, 0).select(0, 0), 0.0);
    const std::vector<float> w = where(cond, x, zeros({}, kFloat32)).to_vector<float>();
    for (std::size_t i = 0; i < xs.size(); ++i) CHECK(w[i] == (xs[i % 20] > 0 ? xs[i] : 0.0f));
    const Tensor row = from_vector({1.0, 2.0, 3.0, 4.0, 5.0}, {5}, kFloat32);
    const std::vector<float> w2 = where(cond, row, x).to_vector<float>();
    for (std::size_t i = 0; i < xs.size(); ++i) CHECK(w2[i] == (xs[i % 20] > 0 ? static_cast<float>(i % 5 + 1) : xs[i]));
    // gradients through the broadcast: where's a gets g where cond, summed to a's shape
    const Tensor a = from_vector({1.0, 2.0, 3.0, 4.0, 5.0}, {5}, kFloat64).requires_grad_(true);
    const Tensor b = cast(x, kFloat64).requires_grad_(true);
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]) * in[1]; }, {a, b}, "where");
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& in) { return masked_fill(in[0], middle, 0.0) * in[0]; }, {b},
                          "masked_fill");
}

TEST_CASE("dropout_mask is cast(ge(rand, p)) · 1/(1 − p) from the same draws", "[creation][dropout]") {
    for (Dtype d : {kFloat32, kFloat64})
        for (double p : {0.0, 0.1, 0.5, 0.9}) {
            Generator g1(42), g2(42);
            const Tensor mask = dropout_mask({7, 33}, p, d, g1);
            const Tensor want = cast(ge(rand({7, 33}, d, g2), full({}, p, d)), d) * (1.0 / (1.0 - p));
            CHECK(mask.dtype() == d);
            CHECK(mask.to_vector<double>() == want.to_vector<double>());
            CHECK(g1.next_double() == g2.next_double());  // as many draws
        }
    Generator g(1);
    CHECK_THROWS_WITH(dropout_mask({3}, 1.0, kFloat32, g), Catch::Contains("dropout_mask: p must be in [0, 1)"));
    CHECK_THROWS_WITH(dropout_mask({3}, 0.5, kBFloat16, g), Catch::Contains("dropout_mask: expected dtype float32 or float64"));
}
