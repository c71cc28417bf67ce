// layer_norm, the fused op (core/ops_norm.cpp): its gradients by finite differences, its
// values and gradients against the composition it replaced, its refusals, and its edges
// (empty tensors, one-element rows, NaN and inf rows, float64, every affine combination).
// add_layer_norm, the same with a residual sum fused in, the same way and against
// layer_norm(x + y).
#include <cmath>
#include <functional>
#include <limits>

#include "../autocast_helpers.hpp"
#include "core/node.hpp"
#include "helpers.hpp"
#include "nn/layer_norm.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

// The composition nn::LayerNorm ran before the fused op: torch's definition, op by op.
Tensor composed(const Tensor& x, std::size_t k, const Tensor& w, const Tensor& b, double eps) {
    std::vector<long> axes;
    for (std::size_t i = 0; i < k; ++i) axes.push_back(-static_cast<long>(i) - 1);
    const Tensor centred = x - mean(x, axes, true);
    const Tensor var = mean(centred * centred, axes, true);
    Tensor y = centred * pow(var + eps, -0.5);
    if (w.defined()) y = y * w;
    if (b.defined()) y = y + b;
    return y;
}

Tensor leaf(const Shape& shape, Dtype d, std::uint64_t seed, double lo = -2, double hi = 2) {
    Generator gen(seed);
    return uniform(shape, lo, hi, d, gen).requires_grad_();
}

Shape tail(const Shape& s, std::size_t k) { return Shape(s.end() - static_cast<long>(k), s.end()); }

// Values within `tol` of each other, NaN where the other has NaN.
#define CHECK_CLOSE(got, want, tol)                                                        \
    do {                                                                                   \
        const std::vector<double> g_ = (got).to_vector<double>(), w_ = (want).to_vector<double>(); \
        REQUIRE(g_.size() == w_.size());                                                   \
        for (std::size_t i_ = 0; i_ < g_.size(); ++i_) {                                   \
            INFO("element " << i_ << ": " << g_[i_] << " vs " << w_[i_]);                 \
            CHECK(std::isnan(g_[i_]) == std::isnan(w_[i_]));                               \
            if (!std::isnan(w_[i_])) CHECK(std::abs(g_[i_] - w_[i_]) <= (tol) * (1 + std::abs(w_[i_]))); \
        }                                                                                  \
    } while (0)

}  // namespace

TEST_CASE("layer_norm passes gradcheck with and without weight and bias", "[layer_norm]") {
    for (const Shape& shape : {Shape{3, 4, 5}, Shape{5}, Shape{2, 1}, Shape{1, 3}})
        for (std::size_t k = 1; k <= std::min<std::size_t>(2, shape.size()); ++k)
            for (int affine = 0; affine < 4; ++affine) {
                INFO(shape_str(shape) << " k=" << k << " affine=" << affine);
                const Shape ns = tail(shape, k);
                std::vector<Tensor> in{param(shape, -1, 1, 1)};
                if (affine & 1) in.push_back(param(ns, 0.5, 1.5, 2));
                if (affine & 2) in.push_back(param(ns, -1, 1, 3));
                REQUIRE_GRADCHECK(
                    [&](const std::vector<Tensor>& v) {
                        const Tensor w = affine & 1 ? v[1] : Tensor();
                        const Tensor b = affine & 2 ? v[affine & 1 ? 2 : 1] : Tensor();
                        return layer_norm(v[0], ns, w, b, 1e-5);
                    },
                    in, "layer_norm");
            }
}

TEST_CASE("layer_norm equals the composed ops in values and gradients", "[layer_norm]") {
    for (Dtype d : {kFloat32, kFloat64})
        for (const Shape& shape : {Shape{4, 8}, Shape{2, 3, 16}, Shape{600, 64}, Shape{3, 1}})
            for (double eps : {1e-5, 0.0, 0.5}) {
                INFO(dtype_name(d) << " " << shape_str(shape) << " eps=" << eps);
                const double tol = d == kFloat32 ? 2e-5 : 1e-12;
                const Shape ns = tail(shape, 1);
                Tensor x1 = leaf(shape, d, 4), w1 = leaf(ns, d, 5), b1 = leaf(ns, d, 6);
                Tensor x2 = x1.detach().requires_grad_(), w2 = w1.detach().requires_grad_(),
                       b2 = b1.detach().requires_grad_();
                Tensor up = leaf(shape, d, 7).detach();
                Tensor y1 = layer_norm(x1, ns, w1, b1, eps), y2 = composed(x2, 1, w2, b2, eps);
                (y1 * up).sum().backward();
                (y2 * up).sum().backward();
                // eps 0 on a one-element row is 0/0 on both sides: NaN in the same places.
                CHECK_CLOSE(y1, y2, tol);
                CHECK_CLOSE(x1.grad(), x2.grad(), tol * 10);
                CHECK_CLOSE(w1.grad(), w2.grad(), tol * 10);
                CHECK_CLOSE(b1.grad(), b2.grad(), tol);
            }
}

TEST_CASE("layer_norm propagates NaN and inf rows as the composed ops and leaves other rows", "[layer_norm]") {
    for (Dtype d : {kFloat32, kFloat64})
        for (double bad : {std::numeric_limits<double>::quiet_NaN(), double(INFINITY), -double(INFINITY)}) {
            INFO(dtype_name(d) << " " << bad);
            std::vector<double> v = leaf({3, 4}, kFloat64, 8).to_vector<double>();
            v[5] = bad;  // row 1
            Tensor x1 = from_vector(v, {3, 4}, d).requires_grad_(), x2 = from_vector(v, {3, 4}, d).requires_grad_();
            Tensor w = leaf({4}, d, 9);
            Tensor y1 = layer_norm(x1, {4}, w), y2 = composed(x2, 1, w, Tensor(), 1e-5);
            y1.sum().backward();
            y2.sum().backward();
            CHECK_CLOSE(y1, y2, 1e-5);
            CHECK_CLOSE(x1.grad(), x2.grad(), 1e-4);
            const std::vector<double> y = y1.to_vector<double>();
            for (std::size_t i = 0; i < 12; ++i) CHECK(std::isnan(y[i]) == (i / 4 == 1));
        }
}

TEST_CASE("float32 layer_norm keeps float64's answer on rows far from zero and near float's limits", "[layer_norm]") {
    // float32 normalises in float: the row mean rounded to float alone would shift a row at 1e6
    // with spread 0.1 by up to a quarter of its spread; rows near FLT_MAX would overflow in
    // x − mean, and a subnormal spread with eps 0 has an rstd above FLT_MAX.
    const float big = 3e38f;
    const std::vector<std::pair<std::vector<double>, double>> rows = {
        // Means between float's neighbours there (their ulps 2^-10, 2^-4 and 2).
        {{1e4 + 0.5, 1e4 - 1.25, 1e4 + 0.75, 1e4 + 1.0009765625}, 1e-5},
        {{1e6 + 0.0625, 1e6, 1e6 - 0.125, 1e6 + 0.1875}, 1e-5},
        {{-3e7 + 2, -3e7 - 6, -3e7 + 4, -3e7 + 2}, 1e-5},
        {{big, -big, big, -big / 3}, 1e-5},
        {{-big, -big, big, 1.0}, 1e-5},
        {{1e-40, -1e-40, 3e-40, 0.0}, 0.0},
        {{1e-30, -1e-30, 3e-30, 0.0}, 0.0},
    };
    for (const auto& [row, eps] : rows) {
        INFO(row[0] << " " << row[1] << " eps=" << eps);
        // The float32 values, and float64's answer on exactly those values, rounded once.
        Tensor x = from_vector(row, {1, 4}, kFloat32).requires_grad_();
        Tensor x64 = x.detach().to(kFloat64).requires_grad_();
        Tensor w = tensor({0.5, -1.0, 2.0, 1.5}), w64 = w.to(kFloat64);
        Tensor up = tensor({{1.0, -2.0, 0.5, 3.0}});
        Tensor y = layer_norm(x, {4}, w, Tensor(), eps), y64 = layer_norm(x64, {4}, w64, Tensor(), eps);
        CHECK_CLOSE(y, y64.to(kFloat32), 1e-6);
        for (double v : vals(y)) CHECK(std::isfinite(v));
        (y * up).sum().backward();
        (y64 * up.to(kFloat64)).sum().backward();
        // (A subnormal spread's gradient, rstd ~ 1e40, is beyond float32 in float64's answer too.)
        if (std::abs(row[0]) > 1e-35) CHECK_CLOSE(x.grad(), x64.grad().to(kFloat32), 1e-5);
        // And the residual form, with the sum split between x and y.
        Tensor half = from_vector(row, {1, 4}, kFloat32) * 0.5f;
        Tensor z = add_layer_norm(half, from_vector(row, {1, 4}, kFloat32) - half, {4}, w, Tensor(), eps);
        CHECK_CLOSE(z, layer_norm(half + (from_vector(row, {1, 4}, kFloat32) - half), {4}, w, Tensor(), eps), 0.0);
    }
}

// The float pass's range check (fits in ops_norm.cpp) bounds x̂ and the row statistics, not
// x̂·weight (forward) nor g·weight (backward): a weight near float's limits overflows in float
// where float64's answer, rounded once, is finite, and the row must be redone in double.
TEST_CASE("float32 layer_norm keeps float64's finite answer with weights near float's limits", "[layer_norm]") {
    SECTION("forward: x̂·weight above FLT_MAX, brought back by the bias") {
        Tensor x = tensor({{0.0, 0.0, 0.0, 1.0}}, kFloat32);
        Tensor w = tensor({1.0, 1.0, 1.0, 3e38}, kFloat32), b = tensor({0.0, 0.0, 0.0, -3e38}, kFloat32);
        for (double eps : {0.0, 1e-5}) {
            Tensor y = layer_norm(x, {4}, w, b, eps);
            Tensor y64 = layer_norm(x.to(kFloat64), {4}, w.to(kFloat64), b.to(kFloat64), eps).to(kFloat32);
            for (double v : vals(y64)) REQUIRE(std::isfinite(v));
            CHECK_CLOSE(y, y64, 1e-6);
            CHECK_CLOSE(add_layer_norm(x * 0.5f, x * 0.5f, {4}, w, b, eps), y64, 1e-6);
        }
    }
    SECTION("backward: g·weight above FLT_MAX with the row sums cancelling") {
        // s1 = mean(g·w) and s2 = mean(g·w·x̂) are 0, so the row passes the range check.
        Tensor x = tensor({{0.0, 0.0, 1e30, 1e30}}, kFloat32).requires_grad_();
        Tensor x64 = x.detach().to(kFloat64).requires_grad_();
        Tensor w = full({4}, 1e30, kFloat32), up = tensor({{1e30, -1e30, -1e30, 1e30}}, kFloat32);
        (layer_norm(x, {4}, w) * up).sum().backward();
        (layer_norm(x64, {4}, w.to(kFloat64)) * up.to(kFloat64)).sum().backward();
        const Tensor want = x64.grad().to(kFloat32);
        for (double v : vals(want)) REQUIRE(std::isfinite(v));
        CHECK_CLOSE(x.grad(), want, 1e-6);
    }
}

TEST_CASE("layer_norm on empty tensors and one-element rows", "[layer_norm]") {
    // No rows: an empty result, and weight and bias gradients of zero.
    Tensor x = zeros({0, 5}, TensorOptions(kFloat64).requires_grad(true));
    Tensor w = leaf({5}, kFloat64, 10), b = leaf({5}, kFloat64, 11);
    Tensor y = layer_norm(x, {5}, w, b);
    CHECK(y.shape() == Shape{0, 5});
    y.sum().backward();
    CHECK(x.grad().shape() == Shape{0, 5});
    CHECK(vals(w.grad()) == std::vector<double>(5, 0.0));
    CHECK(vals(b.grad()) == std::vector<double>(5, 0.0));
    // Empty rows: nothing to normalise.
    Tensor e = zeros({3, 0}, TensorOptions(kFloat32).requires_grad(true));
    Tensor ye = layer_norm(e, {0});
    CHECK(ye.shape() == Shape{3, 0});
    ye.sum().backward();
    CHECK(e.grad().shape() == Shape{3, 0});
    // One element per row: x − mean is 0, the output is the bias and x gets no gradient.
    Tensor one = leaf({4, 1}, kFloat32, 12);
    Tensor bias = leaf({1}, kFloat32, 13);
    Tensor y1 = layer_norm(one, {1}, Tensor(), bias);
    CHECK(vals(y1) == std::vector<double>(4, vals(bias)[0]));
    (y1 * leaf({4, 1}, kFloat32, 14).detach()).sum().backward();
    CHECK(vals(one.grad()) == std::vector<double>(4, 0.0));
}

TEST_CASE("layer_norm refuses bad arguments with clear errors", "[layer_norm]") {
    Tensor x = leaf({2, 3}, kFloat32, 15);
    Tensor w = leaf({3}, kFloat32, 16);
    CHECK_THROWS_WITH(layer_norm(x, {3}, w.to(kFloat64)),
                      Catch::Contains("layer_norm: weight is float64 but the input is float32"));
    CHECK_THROWS_WITH(layer_norm(x, {3}, w, leaf({3}, kFloat64, 1)),
                      Catch::Contains("layer_norm: bias is float64 but the input is float32"));
    CHECK_THROWS_WITH(layer_norm(x, {3}, leaf({2, 3}, kFloat32, 1)),
                      Catch::Contains("layer_norm: weight must have the normalized shape (3,), got shape (2, 3)"));
    CHECK_THROWS_WITH(layer_norm(x, {3}, Tensor(), leaf({1}, kFloat32, 1)),
                      Catch::Contains("layer_norm: bias must have the normalized shape (3,)"));
    CHECK_THROWS_WITH(layer_norm(x, {2}), Catch::Contains("layer_norm: input must end with the normalized shape (2,), got shape (2, 3)"));
    CHECK_THROWS_WITH(layer_norm(x, {1, 2, 3}), Catch::Contains("must end with the normalized shape"));
    CHECK_THROWS_WITH(layer_norm(x, {}), Catch::Contains("layer_norm: normalized_shape must have at least one axis"));
    for (double eps : {-1e-5, std::numeric_limits<double>::quiet_NaN(), double(INFINITY)})
        CHECK_THROWS_WITH(layer_norm(x, {3}, w, Tensor(), eps), Catch::Contains("layer_norm: eps must be finite and >= 0"));
    CHECK_THROWS_WITH(layer_norm(tensor({1.0, 2.0}).to(kInt64), {2}),
                      Catch::Contains("layer_norm: expected a floating-point input") && Catch::Contains("int64"));
    CHECK_THROWS_WITH(layer_norm(Tensor(), {2}), Catch::Contains("layer_norm: input is an undefined tensor"));
}

TEST_CASE("nn::LayerNorm runs the fused op and keeps its own refusals", "[layer_norm]") {
    nn::LayerNorm ln({4});
    Tensor x = leaf({3, 4}, kFloat32, 17);
    Tensor y = ln(x);
    CHECK(y.op_name() == "layer_norm");
    CHECK_CLOSE(y, composed(x, 1, ln.weight(), ln.bias(), 1e-5), 1e-6);
    CHECK_THROWS_WITH(ln(leaf({3, 5}, kFloat32, 1)), Catch::Contains("LayerNorm: input must end with the normalized shape"));
    CHECK_THROWS_WITH(ln(x.to(kFloat64)), Catch::Contains("LayerNorm: input is float64"));
}

// --- add_layer_norm ----------------------------------------------------------------------

namespace {

// Bit for bit: the same sum rounded the same way goes through the same kernel.
#define CHECK_SAME(got, want)                                                                        \
    do {                                                                                             \
        const std::vector<double> g_ = (got).to_vector<double>(), w_ = (want).to_vector<double>();  \
        REQUIRE(g_.size() == w_.size());                                                             \
        for (std::size_t i_ = 0; i_ < g_.size(); ++i_) {                                             \
            INFO("element " << i_ << ": " << g_[i_] << " vs " << w_[i_]);                           \
            CHECK((g_[i_] == w_[i_] || (std::isnan(g_[i_]) && std::isnan(w_[i_]))));                \
        }                                                                                            \
    } while (0)

Tensor fresh(const Tensor& t) { return t.detach().clone().requires_grad_(); }

}  // namespace

TEST_CASE("add_layer_norm passes gradcheck in x and y with and without weight and bias", "[layer_norm][add_layer_norm]") {
    for (const Shape& shape : {Shape{3, 4, 5}, Shape{5}, Shape{2, 1}, Shape{1, 3}, Shape{2, 2, 3}})
        for (std::size_t k = 1; k <= std::min<std::size_t>(2, shape.size()); ++k)
            for (int affine = 0; affine < 4; ++affine) {
                INFO(shape_str(shape) << " k=" << k << " affine=" << affine);
                const Shape ns = tail(shape, k);
                std::vector<Tensor> in{param(shape, -1, 1, 21), param(shape, -1, 1, 22)};
                if (affine & 1) in.push_back(param(ns, 0.5, 1.5, 23));
                if (affine & 2) in.push_back(param(ns, -1, 1, 24));
                REQUIRE_GRADCHECK(
                    [&](const std::vector<Tensor>& v) {
                        const Tensor w = affine & 1 ? v[2] : Tensor();
                        const Tensor b = affine & 2 ? v[affine & 1 ? 3 : 2] : Tensor();
                        return add_layer_norm(v[0], v[1], ns, w, b, 1e-5);
                    },
                    in, "add_layer_norm");
            }
}

TEST_CASE("add_layer_norm equals layer_norm of the sum in values and gradients", "[layer_norm][add_layer_norm]") {
    for (Dtype d : {kFloat32, kFloat64})
        for (const Shape& shape : {Shape{4, 8}, Shape{2, 3, 16}, Shape{600, 64}, Shape{3, 1}, Shape{5, 67}})
            for (int affine = 0; affine < 4; ++affine)
                for (double eps : {1e-5, 0.0}) {
                    INFO(dtype_name(d) << " " << shape_str(shape) << " affine=" << affine << " eps=" << eps);
                    const Shape ns = tail(shape, 1);
                    Tensor x1 = leaf(shape, d, 31), y1 = leaf(shape, d, 32, -5, 5);
                    Tensor w1 = affine & 1 ? leaf(ns, d, 33) : Tensor(), b1 = affine & 2 ? leaf(ns, d, 34) : Tensor();
                    Tensor x2 = fresh(x1), y2 = fresh(y1);
                    Tensor w2 = w1.defined() ? fresh(w1) : Tensor(), b2 = b1.defined() ? fresh(b1) : Tensor();
                    Tensor up = leaf(shape, d, 35).detach();
                    Tensor z1 = add_layer_norm(x1, y1, ns, w1, b1, eps), z2 = layer_norm(x2 + y2, ns, w2, b2, eps);
                    CHECK(z1.op_name() == "add_layer_norm");
                    CHECK(z1.dtype() == d);
                    (z1 * up).sum().backward();
                    (z2 * up).sum().backward();
                    CHECK_SAME(z1, z2);
                    CHECK_SAME(x1.grad(), x2.grad());
                    CHECK_SAME(y1.grad(), y2.grad());
                    if (w1.defined()) CHECK_SAME(w1.grad(), w2.grad());
                    if (b1.defined()) CHECK_SAME(b1.grad(), b2.grad());
                    // And against torch's definition op by op, which shares no code with either.
                    Tensor x3 = fresh(x1), y3 = fresh(y1);
                    Tensor z3 = composed(x3 + y3, 1, w1.defined() ? w1.detach() : Tensor(),
                                         b1.defined() ? b1.detach() : Tensor(), eps);
                    (z3 * up).sum().backward();
                    const double tol = d == kFloat32 ? 2e-5 : 1e-12;
                    CHECK_CLOSE(z1, z3, tol);
                    CHECK_CLOSE(x1.grad(), x3.grad(), tol * 10);
                }
}

TEST_CASE("add_layer_norm of a tensor with itself doubles its gradient", "[layer_norm][add_layer_norm]") {
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        Tensor x1 = leaf({3, 6}, d, 41), w1 = leaf({6}, d, 42);
        Tensor x2 = fresh(x1), w2 = fresh(w1);
        Tensor up = leaf({3, 6}, d, 43).detach();
        (add_layer_norm(x1, x1, {6}, w1) * up).sum().backward();
        (layer_norm(x2 + x2, {6}, w2) * up).sum().backward();
        CHECK_SAME(x1.grad(), x2.grad());
        CHECK_SAME(w1.grad(), w2.grad());
        // And twice what one operand alone receives.
        Tensor x3 = fresh(x1);
        (add_layer_norm(x3, x1.detach(), {6}, w1.detach()) * up).sum().backward();
        const std::vector<double> once = vals(x3.grad()), twice = vals(x1.grad());
        for (std::size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == 2 * once[i]);
    }
}

TEST_CASE("add_layer_norm with an operand that is also the weight or the bias passes gradcheck", "[layer_norm][add_layer_norm]") {
    // One row of the normalized shape, so that x or y may be the weight or the bias itself:
    // every path's gradient lands on the one leaf.
    using V = std::vector<Tensor>;
    const std::vector<std::pair<const char*, std::function<Tensor(const V&)>>> cases = {
        {"x is the weight", [](const V& v) { return add_layer_norm(v[0], v[1], {5}, v[0], Tensor()); }},
        {"y is the weight, x the bias", [](const V& v) { return add_layer_norm(v[0], v[1], {5}, v[1], v[0]); }},
        {"x y weight and bias one tensor", [](const V& v) { return add_layer_norm(v[0], v[0], {5}, v[0], v[0]); }},
    };
    for (const auto& [name, f] : cases) {
        INFO(name);
        REQUIRE_GRADCHECK(f, V{param({5}, 0.5, 1.5, 61), param({5}, -1, 1, 62)}, name);
    }
    // Written after the forward pass, the operand that is the weight is refused as the weight is.
    Tensor w = param({5}, 0.5, 1.5, 63);
    Tensor loss = add_layer_norm(w, w, {5}, w).sum();
    w.mutable_data_ptr<double>()[0] = 3;
    CHECK_THROWS_WITH(loss.backward(), Catch::Contains("add_layer_norm") && Catch::Contains("input 2"));
}

TEST_CASE("add_layer_norm gives a gradient only to the operands that ask", "[layer_norm][add_layer_norm]") {
    const Tensor up = leaf({2, 4}, kFloat64, 53).detach();
    for (int asks = 0; asks < 4; ++asks) {
        INFO("asks " << asks);
        Tensor x = leaf({2, 4}, kFloat64, 51), y = leaf({2, 4}, kFloat64, 52);
        if (!(asks & 1)) x = x.detach();
        if (!(asks & 2)) y = y.detach();
        Tensor w = leaf({4}, kFloat64, 54);
        Tensor z = add_layer_norm(x, y, {4}, w);
        (z * up).sum().backward();
        CHECK(x.has_grad() == bool(asks & 1));
        CHECK(y.has_grad() == bool(asks & 2));
        CHECK(w.has_grad());
        if (asks == 3) CHECK_SAME(x.grad(), y.grad());
    }
    // Nothing asks: a plain value without a graph.
    NoGradGuard no_grad;
    Tensor z = add_layer_norm(leaf({2, 4}, kFloat64, 51), leaf({2, 4}, kFloat64, 52), {4});
    CHECK_FALSE(z.requires_grad());
}

TEST_CASE("add_layer_norm propagates NaN and inf in either operand to its row only", "[layer_norm][add_layer_norm]") {
    const double inf = std::numeric_limits<double>::infinity();
    for (Dtype d : {kFloat32, kFloat64})
        for (int where = 0; where < 3; ++where)  // in x, in y, +inf in x against -inf in y
            for (double bad : {std::numeric_limits<double>::quiet_NaN(), inf, -inf}) {
                INFO(dtype_name(d) << " where=" << where << " " << bad);
                std::vector<double> vx = leaf({3, 4}, kFloat64, 61).to_vector<double>();
                std::vector<double> vy = leaf({3, 4}, kFloat64, 62).to_vector<double>();
                if (where != 1) vx[6] = bad;
                if (where == 1) vy[6] = bad;
                if (where == 2) vy[6] = -bad;
                Tensor x1 = from_vector(vx, {3, 4}, d).requires_grad_(), y1 = from_vector(vy, {3, 4}, d).requires_grad_();
                Tensor x2 = fresh(x1), y2 = fresh(y1);
                Tensor w = leaf({4}, d, 63);
                Tensor z1 = add_layer_norm(x1, y1, {4}, w), z2 = layer_norm(x2 + y2, {4}, w);
                z1.sum().backward();
                z2.sum().backward();
                CHECK_SAME(z1, z2);
                CHECK_SAME(x1.grad(), x2.grad());
                CHECK_SAME(y1.grad(), y2.grad());
                const std::vector<double> z = vals(z1);
                for (std::size_t i = 0; i < 12; ++i) CHECK(std::isnan(z[i]) == (i / 4 == 1));
            }
}

TEST_CASE("add_layer_norm on empty tensors and one-element rows", "[layer_norm][add_layer_norm]") {
    Tensor x = zeros({0, 5}, TensorOptions(kFloat64).requires_grad(true));
    Tensor y = zeros({0, 5}, TensorOptions(kFloat64).requires_grad(true));
    Tensor w = leaf({5}, kFloat64, 71), b = leaf({5}, kFloat64, 72);
    Tensor z = add_layer_norm(x, y, {5}, w, b);
    CHECK(z.shape() == Shape{0, 5});
    z.sum().backward();
    CHECK(x.grad().shape() == Shape{0, 5});
    CHECK(y.grad().shape() == Shape{0, 5});
    CHECK(vals(w.grad()) == std::vector<double>(5, 0.0));
    CHECK(vals(b.grad()) == std::vector<double>(5, 0.0));
    Tensor e = zeros({3, 0}, TensorOptions(kFloat32).requires_grad(true));
    Tensor ze = add_layer_norm(e, e, {0});
    CHECK(ze.shape() == Shape{3, 0});
    ze.sum().backward();
    CHECK(e.grad().shape() == Shape{3, 0});
    Tensor one = leaf({4, 1}, kFloat32, 73), other = leaf({4, 1}, kFloat32, 74);
    Tensor bias = leaf({1}, kFloat32, 75);
    Tensor z1 = add_layer_norm(one, other, {1}, Tensor(), bias);
    CHECK(vals(z1) == std::vector<double>(4, vals(bias)[0]));
    (z1 * leaf({4, 1}, kFloat32, 76).detach()).sum().backward();
    CHECK(vals(one.grad()) == std::vector<double>(4, 0.0));
    CHECK(vals(other.grad()) == std::vector<double>(4, 0.0));
}

TEST_CASE("add_layer_norm refuses bad arguments naming itself", "[layer_norm][add_layer_norm]") {
    Tensor x = leaf({2, 3}, kFloat32, 81), y = leaf({2, 3}, kFloat32, 82);
    Tensor w = leaf({3}, kFloat32, 83);
    CHECK_THROWS_WITH(add_layer_norm(Tensor(), y, {3}), Catch::Contains("add_layer_norm: x is an undefined tensor"));
    CHECK_THROWS_WITH(add_layer_norm(x, Tensor(), {3}), Catch::Contains("add_layer_norm: y is an undefined tensor"));
    // No broadcasting, either way round, even where + would broadcast.
    for (const Shape& other : {Shape{3}, Shape{1, 3}, Shape{2, 2}, Shape{1, 2, 3}, Shape{}}) {
        INFO(shape_str(other));
        const std::string want = "add_layer_norm: x and y must have the same shape (no broadcasting), got ";
        CHECK_THROWS_WITH(add_layer_norm(x, leaf(other, kFloat32, 1), {3}),
                          Catch::Contains(want + "(2, 3) and " + shape_str(other)));
        CHECK_THROWS_WITH(add_layer_norm(leaf(other, kFloat32, 1), x, {3}),
                          Catch::Contains(want + shape_str(other) + " and (2, 3)"));
    }
    CHECK_THROWS_WITH(add_layer_norm(x, y.to(kFloat64), {3}),
                      Catch::Contains("add_layer_norm: y is float64 but x is float32; convert one with .to()"));
    CHECK_THROWS_WITH(add_layer_norm(x.to(kInt64), y.to(kInt64), {3}),
                      Catch::Contains("add_layer_norm: expected a floating-point x") && Catch::Contains("int64"));
    CHECK_THROWS_WITH(add_layer_norm(x.to(kBool), y.to(kBool), {3}),
                      Catch::Contains("add_layer_norm: expected a floating-point x") && Catch::Contains("bool"));
    CHECK_THROWS_WITH(add_layer_norm(x.to(kBFloat16), y.to(kBFloat16), {3}),
                      Catch::Contains("add_layer_norm: expected a floating-point tensor") && Catch::Contains("bfloat16"));
    CHECK_THROWS_WITH(add_layer_norm(x.to(kBFloat16), y.to(kBFloat16), {3}, w.to(kBFloat16)),
                      Catch::Contains("add_layer_norm:") && Catch::Contains("bfloat16"));
    CHECK_THROWS_WITH(add_layer_norm(x, y, {3}, w.to(kFloat64)),
                      Catch::Contains("add_layer_norm: weight is float64 but x and y are float32"));
    CHECK_THROWS_WITH(add_layer_norm(x, y, {3}, w, leaf({3}, kFloat64, 1)),
                      Catch::Contains("add_layer_norm: bias is float64 but x and y are float32"));
    CHECK_THROWS_WITH(add_layer_norm(x, y, {3}, leaf({2, 3}, kFloat32, 1)),
                      Catch::Contains("add_layer_norm: weight must have the normalized shape (3,), got shape (2, 3)"));
    CHECK_THROWS_WITH(add_layer_norm(x, y, {3}, Tensor(), leaf({1}, kFloat32, 1)),
                      Catch::Contains("add_layer_norm: bias must have the normalized shape (3,)"));
    CHECK_THROWS_WITH(add_layer_norm(x, y, {2}),
                      Catch::Contains("add_layer_norm: x must end with the normalized shape (2,), got shape (2, 3)"));
    CHECK_THROWS_WITH(add_layer_norm(x, y, {1, 2, 3}), Catch::Contains("add_layer_norm: x must end with the normalized shape"));
    CHECK_THROWS_WITH(add_layer_norm(x, y, {}), Catch::Contains("add_layer_norm: normalized_shape must have at least one axis"));
    for (double eps : {-1e-5, std::numeric_limits<double>::quiet_NaN(), double(INFINITY), -double(INFINITY)})
        CHECK_THROWS_WITH(add_layer_norm(x, y, {3}, w, Tensor(), eps), Catch::Contains("add_layer_norm: eps must be finite and >= 0"));
}

TEST_CASE("add_layer_norm stays float32 under autocast as layer_norm does", "[layer_norm][add_layer_norm][autocast]") {
    Tensor x = leaf({4, 8}, kFloat32, 91), y = leaf({4, 8}, kFloat32, 92), w = leaf({8}, kFloat32, 93);
    Tensor x2 = fresh(x), y2 = fresh(y), w2 = fresh(w);
    Tensor z1, l1;
    {
        AutocastGuard guard(kBFloat16, autocast_test::allow());
        z1 = add_layer_norm(x, y, {8}, w);
        l1 = layer_norm(x.detach() + y.detach(), {8}, w.detach());
    }
    CHECK(z1.dtype() == kFloat32);
    CHECK(l1.dtype() == kFloat32);
    Tensor z2 = add_layer_norm(x2, y2, {8}, w2);
    CHECK_SAME(z1, z2);
    CHECK_SAME(z1, l1);
    z1.sum().backward();
    z2.sum().backward();
    CHECK_SAME(x.grad(), x2.grad());
    CHECK_SAME(w.grad(), w2.grad());
}

TEST_CASE("nn::LayerNorm forward_residual runs add_layer_norm and keeps its own refusals", "[layer_norm][add_layer_norm]") {
    nn::LayerNorm ln({4});
    Tensor x = leaf({3, 4}, kFloat32, 101), r = leaf({3, 4}, kFloat32, 102);
    Tensor z = ln.forward_residual(x, r);
    CHECK(z.op_name() == "add_layer_norm");
    CHECK_SAME(z, ln(x + r));
    CHECK_THROWS_WITH(ln.forward_residual(leaf({3, 5}, kFloat32, 1), leaf({3, 5}, kFloat32, 1)),
                      Catch::Contains("LayerNorm: input must end with the normalized shape"));
    CHECK_THROWS_WITH(ln.forward_residual(x, leaf({3, 5}, kFloat32, 1)),
                      Catch::Contains("LayerNorm: residual must end with the normalized shape"));
    CHECK_THROWS_WITH(ln.forward_residual(x, leaf({1, 4}, kFloat32, 1)),
                      Catch::Contains("LayerNorm: residual must have the input's shape and dtype, (3, 4) float32, got (1, 4) float32"));
    CHECK_THROWS_WITH(ln.forward_residual(x, r.to(kFloat64)), Catch::Contains("LayerNorm: residual is float64"));
    CHECK_THROWS_WITH(ln.forward_residual(x.to(kFloat64), r), Catch::Contains("LayerNorm: input is float64"));
    CHECK_THROWS_WITH(ln.forward_residual(x, Tensor()), Catch::Contains("LayerNorm: residual is an undefined tensor"));
    CHECK_THROWS_WITH(ln.forward_residual(Tensor(), r), Catch::Contains("LayerNorm: input is an undefined tensor"));
    // Without affine parameters there is no module dtype: the op's own dtype check speaks.
    nn::LayerNorm bare({4}, 1e-5, false);
    CHECK_THROWS_WITH(bare.forward_residual(x, r.to(kFloat64)),
                      Catch::Contains("LayerNorm: residual must have the input's shape and dtype"));
}
