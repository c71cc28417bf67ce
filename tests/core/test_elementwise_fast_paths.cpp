// The plain loops behind the elementwise ops a composed model runs: float32 exp, tanh, sigmoid
// and gelu on the SIMD kernels, masked_fill and where over broadcast masks, pow's squares and
// cubes as products, and dropout's mask in one pass; each against the generic form it replaces.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

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

namespace {

// Whether got[k] is want[k] bit for bit (NaN payloads and the sign of zero included).
template <class T> bool same_bits(const T& got, const T& want) {
    if constexpr (std::is_floating_point_v<T>) return std::memcmp(&got, &want, sizeof(T)) == 0;
    else return got == want;
}

// where(mask, x, y) against the element picked, x and y of dtype T, each full or 0-d.
template <class T> void check_where_bits(const Tensor& mask, const Tensor& x, const Tensor& y, const Shape& shape) {
    const std::vector<T> got = where(mask, x, y).template to_vector<T>();
    const std::vector<T> xs = x.expand(shape).template to_vector<T>();
    const std::vector<T> ys = y.expand(shape).template to_vector<T>();
    const std::vector<bool> ms = mask.expand(shape).template to_vector<bool>();
    REQUIRE(got.size() == xs.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
        INFO("element " << k);
        CHECK(same_bits<T>(got[k], ms[k] ? xs[k] : ys[k]));
    }
}

}  // namespace

TEST_CASE("where and masked_fill keep each operand's bits, every dtype, mask and operands full or broadcast", "[ops][where]") {
    // (3, 37): rows of a length that is no multiple of a vector; -0.0, NaN, infinities and
    // int64's extremes among the values
    const std::size_t rows = 3, cols = 37;
    const Shape shape{rows, cols};
    std::vector<double> va(rows * cols), vb(rows * cols);
    for (std::size_t i = 0; i < va.size(); ++i) va[i] = static_cast<double>(i) - 50.5, vb[i] = 1000.0 + static_cast<double>(i);
    va[3] = -0.0, va[4] = std::numeric_limits<double>::quiet_NaN(), va[5] = -std::numeric_limits<double>::infinity();
    vb[6] = -0.0, vb[7] = std::numeric_limits<double>::infinity();
    const Tensor full_mask = test::bool_tensor(shape, [](std::size_t k) { return (k * 7) % 3 == 0; });
    const Tensor row_mask = test::bool_tensor({cols}, [](std::size_t k) { return k % 2 == 0; });
    const Tensor a64 = from_vector(va, {static_cast<long>(rows), static_cast<long>(cols)}, kFloat64);
    const Tensor b64 = from_vector(vb, {static_cast<long>(rows), static_cast<long>(cols)}, kFloat64);
    const Tensor big = full({static_cast<long>(rows), static_cast<long>(cols)}, 9.2e18, kInt64);
    const Tensor small = full({static_cast<long>(rows), static_cast<long>(cols)}, -9.2e18, kInt64);
    for (Dtype d : {kFloat32, kFloat64, kInt64, kBool}) {
        Tensor a, b;
        if (d == kBool) a = gt(a64, 0.0), b = gt(b64, 1020.0);
        else if (d == kInt64) {
            const Tensor count = arange(static_cast<double>(rows * cols), kInt64).reshape({static_cast<long>(rows), static_cast<long>(cols)});
            a = where(gt(count, 60.0), big, sub(count, Scalar(std::int64_t{50}))), b = where(gt(count, 90.0), small, add(count, Scalar(std::int64_t{1000})));
        }
        else a = cast(a64, d), b = cast(b64, d);
        const Tensor s = a.narrow(0, 1, 1).narrow(1, 2, 1).reshape({});  // a 0-d operand
        for (const Tensor& mask : {full_mask, row_mask})
            for (int form = 0; form < 3; ++form) {
                INFO(dtype_name(d) << ", form " << form << ", mask of " << mask.dim() << " axes");
                const Tensor& x = form == 1 ? s : a;
                const Tensor& y = form == 2 ? s : b;
                if (d == kFloat32) check_where_bits<float>(mask, x, y, shape);
                if (d == kFloat64) check_where_bits<double>(mask, x, y, shape);
                if (d == kInt64) check_where_bits<std::int64_t>(mask, x, y, shape);
                if (d == kBool) check_where_bits<bool>(mask, x, y, shape);
            }
    }
    // masked_fill: the fill where the mask is set, a's bits elsewhere
    const Tensor a = cast(a64, kFloat32);
    const std::vector<float> out = masked_fill(a, row_mask, 7.0).to_vector<float>(), in = a.to_vector<float>();
    for (std::size_t k = 0; k < out.size(); ++k) CHECK(same_bits<float>(out[k], (k % cols) % 2 == 0 ? 7.0f : in[k]));
}
