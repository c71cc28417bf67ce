// layer_norm, the fused op (core/ops_norm.cpp): its gradients by finite differences, its
// values and gradients against the composition it replaced, its refusals, and its edges
// (empty tensors, one-element rows, NaN and inf rows, float64, every affine combination).
#include <cmath>
#include <limits>

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
