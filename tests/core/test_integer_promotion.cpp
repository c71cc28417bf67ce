// Integer and bool inputs of the unary math ops, as torch 1.13: exp, log, sqrt, sin, cos, tanh and
// sigmoid compute in float32 (exp(arange(3)) is float32), neg, abs, sign, relu, clamp and pow
// with integer numbers keep the integer dtype, and gelu, softmax and mean refuse integers.
// Expected values are torch's, pasted (x = tensor([-2, 0, 1, 3, 40]), b = tensor([True, False])).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/creation.hpp"
#include "core/ops.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Contains;

namespace {

Tensor ints() { return tensor({-2, 0, 1, 3, 40}); }
Tensor mask() { return tensor({true, false}); }
std::vector<std::int64_t> int_vals(const Tensor& t) { return t.to_vector<std::int64_t>(); }

struct FloatingCase {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::vector<double> of_ints, of_mask;
};

// torch.<op>(x) and torch.<op>(b), printed to 9 digits (float32's round trip).
const std::vector<FloatingCase> kFloatingCases{
    {"exp", [](const Tensor& t) { return exp(t); },
     {0.135335281, 1, 2.71828175, 20.085537, 2.3538527e+17}, {2.71828175, 1}},
    {"log", [](const Tensor& t) { return log(t); }, {kNaN, -kInf, 0, 1.09861231, 3.68887949}, {0, -kInf}},
    {"sqrt", [](const Tensor& t) { return sqrt(t); }, {kNaN, 0, 1, 1.73205078, 6.3245554}, {1, 0}},
    {"sin", [](const Tensor& t) { return sin(t); },
     {-0.909297407, 0, 0.841470957, 0.141120002, 0.745113134}, {0.841470957, 0}},
    {"cos", [](const Tensor& t) { return cos(t); },
     {-0.416146845, 1, 0.540302336, -0.989992499, -0.666938066}, {0.540302336, 1}},
    {"tanh", [](const Tensor& t) { return tanh(t); },
     {-0.964027584, 0, 0.761594176, 0.995054781, 1}, {0.761594176, 0}},
    {"sigmoid", [](const Tensor& t) { return sigmoid(t); },
     {0.119202919, 0.5, 0.731058598, 0.952574134, 1}, {0.731058598, 0.5}},
};

// float32 values to float32's precision (the kernels may round differently from torch's by an ulp).
const Tolerance kAsFloat32{1e-6, 0};

}  // namespace

TEST_CASE("exp, log, sqrt, sin, cos, tanh and sigmoid of int64 and bool compute in float32 as torch",
          "[integer-promotion]") {
    for (const FloatingCase& c : kFloatingCases) {
        INFO(c.name);
        const Tensor yi = c.op(ints()), yb = c.op(mask());
        CHECK(yi.dtype() == kFloat32);
        CHECK(yb.dtype() == kFloat32);
        check_close_or_both_nan(vals(yi), c.of_ints, kAsFloat32);
        check_close_or_both_nan(vals(yb), c.of_mask, kAsFloat32);
        // The same float32 kernel as on the cast input, bit for bit: the cast is at entry only.
        check_close_or_both_nan(vals(yi), vals(c.op(ints().to(kFloat32))), Tolerance{0, 0});
        // An integer tensor cannot require grad, and the result of the cast does not either.
        CHECK_FALSE(yi.requires_grad());
        CHECK(yi.is_leaf());
    }
}

TEST_CASE("a ported positional line: exp(arange(0, d, 2) * -(log(10000.0) / d)) and sin(positions)",
          "[integer-promotion]") {
    // d2l / nanoGPT: div_term = torch.exp(torch.arange(0, 4, 2) * (-math.log(10000.0) / 4)) gives
    // [1, 0.00999999978]; torch.sin(torch.arange(3)) gives [0, 0.841470957, 0.909297407].
    const Tensor div_term = exp(arange(0, 4, 2) * (-std::log(10000.0) / 4));
    CHECK(div_term.dtype() == kFloat32);
    check_close_or_both_nan(vals(div_term), {1, 0.00999999978}, kAsFloat32);
    const Tensor s = sin(arange(3));
    CHECK(s.dtype() == kFloat32);
    check_close_or_both_nan(vals(s), {0, 0.841470957, 0.909297407}, kAsFloat32);
    CHECK(arange(3).exp().dtype() == kFloat32);
    CHECK(arange(3).log().dtype() == kFloat32);
}

TEST_CASE("integer inputs under no_grad and beside a float that requires grad", "[integer-promotion]") {
    {
        NoGradGuard guard;
        const Tensor y = exp(ints());
        CHECK(y.dtype() == kFloat32);
        CHECK_FALSE(y.requires_grad());
    }
    // The promoted integer is a constant in a graph that reaches w: w gets exp(x), as torch's
    // (w * torch.exp(x)).sum().backward() with x = [0, 1], w = [1, 1].
    const Tensor w = ones({2}).requires_grad_();
    (w * exp(tensor({0, 1}))).sum().backward();
    check_close_or_both_nan(vals(w.grad()), {1, 2.71828175}, kAsFloat32);
    // The float paths keep their dtype and their gradient.
    const Tensor x = tensor({0.5, 2.0}, kFloat64).requires_grad_();
    const Tensor y = sqrt(x);
    CHECK(y.dtype() == kFloat64);
    CHECK(y.requires_grad());
}

TEST_CASE("neg, abs, sign, relu keep int64 as torch, and bool as torch does", "[integer-promotion]") {
    CHECK(int_vals(neg(ints())) == std::vector<std::int64_t>{2, 0, -1, -3, -40});
    CHECK(int_vals(abs(ints())) == std::vector<std::int64_t>{2, 0, 1, 3, 40});
    CHECK(int_vals(sign(ints())) == std::vector<std::int64_t>{-1, 0, 1, 1, 1});
    const Tensor r = relu(ints());
    CHECK(r.dtype() == kInt64);
    CHECK(int_vals(r) == std::vector<std::int64_t>{0, 0, 1, 3, 40});
    // torch.relu(tensor([-2**63, 4])) is [0, 4].
    CHECK(int_vals(relu(tensor({std::numeric_limits<std::int64_t>::min(), std::int64_t{4}}))) ==
          std::vector<std::int64_t>{0, 4});
    // torch.sign(b) is b; abs, neg and relu refuse bool.
    const Tensor sb = sign(mask());
    CHECK(sb.dtype() == kBool);
    CHECK(sb.to_vector<bool>() == std::vector<bool>{true, false});
    CHECK_THROWS_WITH(relu(mask()), Contains("relu") && Contains("bool"));
    CHECK_THROWS_WITH(neg(mask()), Contains("neg") && Contains("bool"));
    CHECK_THROWS_WITH(abs(mask()), Contains("abs") && Contains("bool"));
}

TEST_CASE("clamp takes torch's result_type of the tensor and its bounds", "[integer-promotion]") {
    // torch.clamp(x, 0, 2) is int64 [0, 0, 1, 2, 2]; torch.clamp(x, min=0.5) is float32.
    const Tensor c = clamp(ints(), 0, 2);
    CHECK(c.dtype() == kInt64);
    CHECK(int_vals(c) == std::vector<std::int64_t>{0, 0, 1, 2, 2});
    const Tensor f = clamp(ints(), 0.5);
    CHECK(f.dtype() == kFloat32);
    CHECK(vals(f) == std::vector<double>{0.5, 0.5, 1, 3, 40});
    // min > max: everything is max, as torch's clamp(x, 2, 1).
    CHECK(int_vals(clamp(ints(), 2, 1)) == std::vector<std::int64_t>{1, 1, 1, 1, 1});
    CHECK(int_vals(clamp(ints(), std::nullopt, 1)) == std::vector<std::int64_t>{-2, 0, 1, 1, 1});
    // torch.clamp(b, min=0) is int64 [1, 0]; clamp(b, max=0.5) is float32 [0.5, 0]; bool
    // bounds on a bool tensor are refused ("clamp_min_cpu" not implemented for 'Bool').
    const Tensor cb = clamp(mask(), 0);
    CHECK(cb.dtype() == kInt64);
    CHECK(int_vals(cb) == std::vector<std::int64_t>{1, 0});
    CHECK(vals(clamp(mask(), std::nullopt, 0.5)) == std::vector<double>{0.5, 0});
    CHECK_THROWS_WITH(clamp(mask(), true), Contains("clamp") && Contains("bool"));
    // In place: an int64 tensor takes integer bounds; a floating one would change its dtype.
    const Tensor x = ints();
    x.clamp_(0, 3);
    CHECK(int_vals(x) == std::vector<std::int64_t>{0, 0, 1, 3, 3});
    CHECK_THROWS_WITH(ints().clamp_(0.5), Contains("clamp_"));
    // A float tensor is clamped as before, whichever way the bounds are written.
    CHECK(clamp(tensor({-1.0, 5.0}), 0, 2).dtype() == kFloat32);
    CHECK(vals(clamp(tensor({-1.0, 5.0}), 0, 2)) == std::vector<double>{0, 2});
}

TEST_CASE("pow of int64 and bool by a number as torch's x ** p", "[integer-promotion]") {
    // x ** 2 is int64 [4, 0, 1, 9, 1600]; x ** 0.5 is float32; b ** 2 is int64 [1, 0].
    const Tensor sq = pow(ints(), 2);
    CHECK(sq.dtype() == kInt64);
    CHECK(int_vals(sq) == std::vector<std::int64_t>{4, 0, 1, 9, 1600});
    CHECK(int_vals(ints().pow(0)) == std::vector<std::int64_t>{1, 1, 1, 1, 1});
    const Tensor r = pow(ints(), 0.5);
    CHECK(r.dtype() == kFloat32);
    check_close_or_both_nan(vals(r), {kNaN, 0, 1, 1.73205081, 6.32455540}, kAsFloat32);
    CHECK(pow(ints(), 2.0).dtype() == kFloat32);
    const Tensor pb = pow(mask(), 2);
    CHECK(pb.dtype() == kInt64);
    CHECK(int_vals(pb) == std::vector<std::int64_t>{1, 0});
    // torch.tensor([3, -2]) ** 41 wraps: [-420491770248316829, -2199023255552].
    CHECK(int_vals(pow(tensor({3, -2}), 41)) == std::vector<std::int64_t>{-420491770248316829, -2199023255552});
    // "Integers to negative integer powers are not allowed."; b ** True is refused too.
    CHECK_THROWS_WITH(pow(ints(), -1), Contains("pow") && Contains("negative integer powers"));
    CHECK_THROWS_WITH(pow(mask(), true), Contains("pow") && Contains("bool"));
}

TEST_CASE("gelu, softmax, log_softmax and mean refuse integers as torch", "[integer-promotion]") {
    for (const Tensor& t : {ints(), mask()}) {
        CHECK_THROWS_AS(gelu(t), Error);
        CHECK_THROWS_WITH(gelu(t), Contains("gelu"));
        CHECK_THROWS_WITH(softmax(t, 0), Contains("softmax"));
        CHECK_THROWS_WITH(log_softmax(t, 0), Contains("log_softmax"));
        CHECK_THROWS_WITH(mean(t), Contains("mean"));
    }
}
