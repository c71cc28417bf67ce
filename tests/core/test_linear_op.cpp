// linear(x, W, b): torch.nn.functional.linear, the bias fused as the product's starting value.
// Its values (torch's), gradients of first and second order, the forms that fall back to a
// product and an add (1-D input, broadcasting bias, no bias), empty shapes, and its errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "../helpers.hpp"
#include "core/autograd.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Matchers::Contains;

namespace {
// x = sin(arange(24).reshape(2, 3, 4)·0.37 − 3.1), W = cos(arange(20).reshape(5, 4)·0.53 + 0.2)
// and b in float32, as torch 1.13 made them.
const std::vector<float> kX{-0x1.54a12cp-5f, -0x1.99abd0p-2f, -0x1.68a88ap-1f, -0x1.d3aaecp-1f, -0x1.ff615ep-1f,
                            -0x1.e5e14ep-1f, -0x1.8a9e46p-1f, -0x1.f3e4aep-2f, -0x1.1dc8b6p-3f, 0x1.d2e5e4p-3f,
                            0x1.2118d6p-1f,  0x1.a65770p-1f,  0x1.f26c92p-1f,  0x1.fb0c1ep-1f,  0x1.bf0b42p-1f,
                            0x1.468910p-1f,  0x1.43a9e6p-2f,  -0x1.8c660ap-5f, -0x1.a00e96p-2f, -0x1.6b2068p-1f,
                            -0x1.d513b6p-1f, -0x1.ff8a42p-1f, -0x1.e4c4c2p-1f, -0x1.8862cep-1f};
const std::vector<float> kW{0x1.f5cb4ap-1f,  0x1.7d8780p-1f,  0x1.392812p-2f,  -0x1.bd57acp-3f, -0x1.5cb35ap-1f,
                            -0x1.ea6316p-1f, -0x1.f184acp-1f, -0x1.702334p-1f, -0x1.137d86p-2f, 0x1.04e28cp-2f,
                            0x1.6ad6b8p-1f,  0x1.efad58p-1f,  0x1.ec8238p-1f,  0x1.6233f2p-1f,  0x1.dad5c8p-3f,
                            -0x1.2ab700p-2f, -0x1.78711cp-1f, -0x1.f43c6ep-1f, -0x1.e6c5d0p-1f, -0x1.53bedep-1f};
const std::vector<float> kB{0.5f, -1.25f, 3.0f, 1e-3f, -7.5f};
// torch.nn.functional.linear(x, W, b)
const std::vector<float> kY{
    0x1.279654p-3f,  0x1.016838p-1f,  0x1.869910p+0f,  -0x1.b37828p-3f, -0x1.736010p+2f, -0x1.50ca74p+0f,
    0x1.706920p+0f,  0x1.010a24p+1f,  -0x1.a70ea2p+0f, -0x1.32088cp+2f, 0x1.0d87a4p-1f,  -0x1.41eeb8p+1f,
    0x1.12d6bcp+2f,  -0x1.5d1bdep-4f, -0x1.1689dep+3f, 0x1.290240p+1f,  -0x1.0ac90cp+2f, 0x1.0e80a0p+2f,
    0x1.a390e2p+0f,  -0x1.4df8d6p+3f, 0x1.9b7d0cp-1f,  -0x1.073f8ap-1f, 0x1.ed969ap+0f,  0x1.897b38p-2f,
    -0x1.b5015cp+2f, -0x1.43eb52p+0f, 0x1.cd4d50p+0f,  0x1.943a3ep+0f,  -0x1.9142f6p+0f, -0x1.1c4258p+2f};

Tensor f32(const std::vector<float>& v, const IntList& shape) {
    return from_vector(std::vector<double>(v.begin(), v.end()), shape, kFloat32);
}
}  // namespace

TEST_CASE("linear(x, W, b) gives torch's float32 values, as matmul_t and an add", "[linear-op]") {
    const Tensor x = f32(kX, {2, 3, 4}), W = f32(kW, {5, 4}), b = f32(kB, {5});
    const Tensor y = linear(x, W, b);
    REQUIRE(y.shape() == Shape{2, 3, 5});
    const auto got = y.to_vector<float>();
    for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(kY[i]).epsilon(4e-7));
    // The same sums as the product followed by the add, to rounding.
    REQUIRE(max_abs_diff(y, matmul_t(x, W, false, true) + b) <= 1e-6);
    // A 1-D input and no bias go through the product alone.
    const Tensor x1 = f32(std::vector<float>(kX.begin(), kX.begin() + 4), {4});
    const auto y1 = linear(x1, W, b).to_vector<float>();
    REQUIRE(y1.size() == 5);
    for (std::size_t i = 0; i < 5; ++i) REQUIRE(y1[i] == Approx(kY[i]).epsilon(4e-7));
    REQUIRE(max_abs_diff(linear(x, W), matmul_t(x, W, false, true)) == 0);
    // A bias that broadcasts, (1, 5), is added after the product, as torch's addmm broadcasts it.
    REQUIRE(max_abs_diff(linear(x, W, b.reshape({1, 5})), y) <= 1e-6);
}

TEST_CASE("linear's gradients pass gradcheck and gradgradcheck in double", "[linear-op][gradcheck][gradgrad]") {
    const Tensor x = param({2, 3, 4}, -1, 1, 1), W = param({5, 4}, -1, 1, 2), b = param({5}, -1, 1, 3);
    const auto f = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
    REQUIRE_GRADCHECK(f, {x, W, b}, "linear(x, W, b)");
    REQUIRE_GRADGRADCHECK(f, {x, W, b}, "linear(x, W, b)");
    // 2-D input, and one input at a time requiring grad.
    const Tensor x2 = param({6, 4}, -1, 1, 4);
    REQUIRE_GRADCHECK(f, {x2, W, b}, "linear(x 2-D, W, b)");
    REQUIRE_GRADGRADCHECK(f, {x2, W, b}, "linear(x 2-D, W, b)");
    REQUIRE_GRADCHECK([&](const std::vector<Tensor>& in) { return linear(x2.detach(), W.detach(), in[0]); }, {b},
                      "linear: bias only");
    REQUIRE_GRADCHECK([&](const std::vector<Tensor>& in) { return linear(in[0], W.detach(), b.detach()); }, {x2},
                      "linear: input only");
}

TEST_CASE("linear's gradients are the product's and the summed gradient", "[linear-op]") {
    const Tensor x = param({2, 3, 4}, -1, 1, 5), W = param({5, 4}, -1, 1, 6), b = param({5}, -1, 1, 7);
    const Tensor g = param({2, 3, 5}, -1, 1, 8).detach();
    const auto grads = autograd::grad({linear(x, W, b)}, {x, W, b}, {g});
    REQUIRE(max_abs_diff(grads[0], matmul(g, W.detach())) <= 1e-15);
    REQUIRE(max_abs_diff(grads[1], matmul_t(g.reshape({6, 5}), x.detach().reshape({6, 4}), true, false)) <= 1e-14);
    REQUIRE(max_abs_diff(grads[2], sum(g, {0, 1})) <= 1e-15);
}

TEST_CASE("linear with empty axes gives the bias or nothing, as torch", "[linear-op]") {
    const Tensor W = param({5, 0}).detach(), b = param({5}).detach();
    // in_features 0: x·Wᵀ is zeros, so every row is the bias.
    const Tensor y = linear(zeros({3, 0}, kFloat64), W, b);
    REQUIRE(y.shape() == Shape{3, 5});
    for (std::size_t r = 0; r < 3; ++r) REQUIRE(max_abs_diff(y.index({static_cast<long>(r)}), b) == 0);
    REQUIRE(linear(zeros({0, 4}, kFloat64), param({5, 4}).detach(), b).shape() == Shape{0, 5});
    REQUIRE(linear(zeros({2, 4}, kFloat64), param({0, 4}).detach(), zeros({0}, kFloat64)).shape() == Shape{2, 0});
}

TEST_CASE("linear refuses a bad weight, input or bias naming linear", "[linear-op]") {
    const Tensor x = param({2, 4}).detach(), W = param({5, 4}).detach(), b = param({5}).detach();
    REQUIRE_THROWS_WITH(linear(x, param({4}).detach(), b), Contains("linear: weight must be 2-D"));
    REQUIRE_THROWS_WITH(linear(param({2, 3}).detach(), W, b), Contains("linear: input must have last axis in_features = 4"));
    REQUIRE_THROWS_WITH(linear(zeros({}, kFloat64), W, b), Contains("linear: input must have last axis"));
    REQUIRE_THROWS_AS(linear(x, W, param({4}).detach()), Error);  // (2, 5) + (4,) does not broadcast
    REQUIRE_THROWS_AS(linear(x.to(kFloat32), W, b), Error);       // dtypes differ
    REQUIRE_THROWS_AS(linear(Tensor(), W, b), Error);
}

TEST_CASE("linear keeps x and W only for the gradients that read them, as torch's addmm", "[linear-op][version]") {
    const Tensor x = param({2, 4}).detach(), W = param({5, 4}).detach(), b = param({5}, -1, 1, 2);
    // Only the bias trains: its gradient reads neither x nor W, so x may change before backward.
    const Tensor y = linear(x, W, b).sum();
    x.add_(1.0);
    y.backward();
    REQUIRE(max_abs_diff(b.grad(), full({5}, 2.0, kFloat64)) == 0);
    // W's gradient reads x: writing x first is refused, naming linear.
    const Tensor Wg = param({5, 4}, -1, 1, 9);
    const Tensor y2 = linear(x, Wg, b).sum();
    x.add_(1.0);
    REQUIRE_THROWS_WITH(y2.backward(), Contains("saved for backward by 'linear'"));
}
