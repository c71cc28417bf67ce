// linear(x, W, b) attacked as a class: every shape of input and bias torch 1.13 takes or
// refuses, every dtype and mixture of them, every subset of {x, W, b} requiring a gradient with
// in-place writes between forward and backward, NaN and infinity, thread counts, and
// nn::Linear without a bias. Torch's values and refusals were found with PyTorch 1.13.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../helpers.hpp"
#include "core/autocast.hpp"
#include "core/autograd.hpp"
#include "core/creation.hpp"
#include "core/runtime/blas.hpp"
#include "core/ops.hpp"
#include "nn/linear.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Matchers::Contains;

namespace {

Tensor data(const Shape& shape, std::uint64_t seed, Dtype dtype = kFloat64) {
    return param(shape, -1, 1, seed).detach().to(dtype);
}

// The three arguments, each a fresh leaf requiring a gradient when its bit of `mask` is set
// (1: x, 2: W, 4: b).
struct Args {
    Tensor x, W, b;
};
Args args(const Shape& xs, const Shape& ws, const Shape& bs, unsigned mask) {
    Args a{data(xs, 11), data(ws, 12), data(bs, 13)};
    if (mask & 1) a.x.requires_grad_(true);
    if (mask & 2) a.W.requires_grad_(true);
    if (mask & 4) a.b.requires_grad_(true);
    return a;
}

const char* kSubsetNames[] = {"", "x", "W", "x W", "b", "x b", "W b", "x W b"};

}  // namespace

// --- shapes -------------------------------------------------------------------------------

TEST_CASE("linear takes the bias shapes that broadcast to its result, as torch's add_", "[linear][adversarial]") {
    struct Case {
        Shape x, b;
    };
    // Each accepted by torch 1.13 with the result of the product's shape (x (..., 4), W (5, 4)).
    const std::vector<Case> ok{{{4}, {5}},          {{4}, {}},           {{4}, {1}},           {{3, 4}, {5}},
                               {{3, 4}, {1, 5}},    {{3, 4}, {}},        {{3, 4}, {3, 5}},     {{3, 4}, {1}},
                               {{2, 3, 4}, {5}},    {{2, 3, 4}, {1, 5}}, {{2, 3, 4}, {}},      {{2, 3, 4}, {1}},
                               {{2, 2, 3, 4}, {5}}, {{2, 2, 3, 4}, {3, 5}}, {{2, 2, 3, 4}, {2, 3, 5}},
                               {{2, 2, 3, 4}, {1, 1, 5}}, {{2, 2, 3, 4}, {2, 1, 3, 5}}, {{0, 4}, {5}},
                               {{0, 4}, {1, 5}},    {{0, 4}, {}}};
    const Tensor W = data({5, 4}, 2);
    for (const Case& c : ok) {
        INFO("x " << shape_str(c.x) << " b " << shape_str(c.b));
        const Tensor x = data(c.x, 1), b = data(c.b, 3);
        const Tensor y = linear(x, W, b);
        const Tensor want = (c.x.size() == 1 ? matmul(W, x) : matmul_t(x, W, false, true)) + b;
        REQUIRE(y.shape() == want.shape());
        REQUIRE(max_abs_diff(y, want) <= 1e-15);
    }
}

TEST_CASE("linear refuses a bias that would grow or not fit its result, naming the bias", "[linear][adversarial]") {
    struct Case {
        Shape x, b;
    };
    // torch 1.13 refuses each: "output with shape [5] doesn't match the broadcast shape [1, 5]",
    // addmm's "expand(...)", or a size mismatch.
    const std::vector<Case> bad{{{4}, {1, 5}},       {{4}, {3, 5}},       {{4}, {4}},        {{4}, {5, 1}},
                                {{3, 4}, {2, 3, 5}}, {{3, 4}, {1, 1, 5}}, {{3, 4}, {4}},     {{3, 4}, {5, 1}},
                                {{3, 4}, {6, 5}},    {{2, 3, 4}, {4}},    {{2, 3, 4}, {5, 1}},
                                {{2, 3, 4}, {1, 2, 3, 5}}, {{2, 2, 3, 4}, {5, 1}}, {{0, 4}, {3, 5}},
                                {{3, 0}, {2, 3, 5}}};
    for (const Case& c : bad) {
        INFO("x " << shape_str(c.x) << " b " << shape_str(c.b));
        const Tensor x = data(c.x, 1), W = data({5, c.x.back()}, 2), b = data(c.b, 3);
        REQUIRE_THROWS_AS(linear(x, W, b), Error);
        REQUIRE_THROWS_WITH(linear(x, W, b), Contains("linear") && Contains("bias") && Contains(shape_str(c.b)));
    }
}

TEST_CASE("linear with empty axes: the bias broadcast, or an empty result, as torch", "[linear][adversarial]") {
    // in_features 0, any rank: every row is the bias (torch: F.linear(randn(2, 3, 0), randn(5, 0), b)).
    const Tensor b = data({5}, 3);
    for (const Shape& xs : {Shape{0}, Shape{3, 0}, Shape{2, 3, 0}}) {
        INFO("x " << shape_str(xs));
        Tensor x = data(xs, 1).requires_grad_(true), W = data({5, 0}, 2).requires_grad_(true);
        const Tensor bb = b.detach().requires_grad_(true);
        const Tensor y = linear(x, W, bb);
        Shape want = xs;
        want.back() = 5;
        REQUIRE(y.shape() == want);
        REQUIRE(max_abs_diff(y, b.expand(want)) == 0);
        // Without a bias the product alone: zeros.
        REQUIRE(max_abs_diff(linear(x, W), zeros(want, kFloat64)) == 0);
        // Gradients: empty for x and W, the summed gradient for b.
        y.sum().backward();
        REQUIRE(x.grad().shape() == xs);
        REQUIRE(W.grad().shape() == Shape{5, 0});
        REQUIRE(max_abs_diff(bb.grad(), full({5}, static_cast<double>(y.numel() / 5), kFloat64)) == 0);
    }
    // A batch of 0 and out_features 0, of every rank: empty results, empty or zero gradients.
    for (const Shape& xs : {Shape{0, 4}, Shape{0, 3, 4}, Shape{2, 0, 4}}) {
        INFO("x " << shape_str(xs));
        const Tensor x = data(xs, 1).requires_grad_(true), W = data({5, 4}, 2).requires_grad_(true);
        const Tensor bb = data({5}, 3).requires_grad_(true);
        const Tensor y = linear(x, W, bb);
        Shape want = xs;
        want.back() = 5;
        REQUIRE(y.shape() == want);
        y.sum().backward();
        REQUIRE(max_abs_diff(W.grad(), zeros({5, 4}, kFloat64)) == 0);
        REQUIRE(max_abs_diff(bb.grad(), zeros({5}, kFloat64)) == 0);
        REQUIRE(x.grad().shape() == xs);
    }
    for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
        const Tensor y = linear(data(xs, 1), data({0, 4}, 2), zeros({0}, kFloat64));
        Shape want = xs;
        want.back() = 0;
        REQUIRE(y.shape() == want);
    }
}

TEST_CASE("linear refuses a bad input or weight naming linear, the argument, expected and got", "[linear][adversarial]") {
    const Tensor x = data({3, 4}, 1), W = data({5, 4}, 2), b = data({5}, 3);
    // 0-d input (torch: "both arguments to matmul need to be at least 1D").
    REQUIRE_THROWS_WITH(linear(zeros({}, kFloat64), W, b), Contains("linear: input") && Contains("()"));
    // in_features differs (torch: "mat1 and mat2 shapes cannot be multiplied (3x3 and 4x5)").
    REQUIRE_THROWS_WITH(linear(data({3, 3}, 1), W, b),
                        Contains("linear: input") && Contains("in_features = 4") && Contains("(3, 3)"));
    REQUIRE_THROWS_WITH(linear(data({3}, 1), W), Contains("linear: input") && Contains("(3,)"));
    // A weight of 0, 1 or 3 axes (torch: "t() expects a tensor with <= 2 dimensions").
    for (const Shape& ws : {Shape{}, Shape{4}, Shape{1, 5, 4}}) {
        INFO("W " << shape_str(ws));
        REQUIRE_THROWS_WITH(linear(x, data(ws, 2), b), Contains("linear: weight must be 2-D") && Contains(shape_str(ws)));
        REQUIRE_THROWS_WITH(linear(x, data(ws, 2)), Contains("linear: weight must be 2-D"));
    }
    REQUIRE_THROWS_WITH(linear(Tensor(), W, b), Contains("linear") && Contains("input"));
    REQUIRE_THROWS_WITH(linear(x, Tensor(), b), Contains("linear") && Contains("weight"));
}

// --- dtypes -------------------------------------------------------------------------------

TEST_CASE("linear refuses mixed dtypes as torch does, naming the argument", "[linear][adversarial]") {
    const std::vector<Dtype> dtypes{kFloat32, kFloat64, kBFloat16};
    for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}})
        for (Dtype dx : dtypes)
            for (Dtype dw : dtypes)
                for (Dtype db : {kFloat32, kFloat64, kBFloat16, kInt64}) {
                    if (dx == dw && dw == db) continue;
                    INFO("x " << shape_str(xs) << " " << dtype_name(dx) << " W " << dtype_name(dw) << " b "
                              << dtype_name(db));
                    const Tensor x = data(xs, 1, dx), W = data({5, 4}, 2, dw), b = data({5}, 3, db);
                    // torch: "mat1 and mat2 must have the same dtype", "self and mat2 must have
                    // the same dtype" (2-D and 3-D); a 1-D input with another bias dtype is added
                    // in place by torch, refused here as every other mixture.
                    REQUIRE_THROWS_WITH(linear(x, W, b), Contains("linear") && Contains(dx == kBFloat16 ? "input" : dx != dw ? "weight" : "bias"));
                    if (dx != dw) REQUIRE_THROWS_WITH(linear(x, W), Contains("linear") && Contains(dx == kBFloat16 ? "input" : "weight"));
                }
}

TEST_CASE("linear of integer or boolean tensors is refused naming linear", "[linear][adversarial]") {
    for (Dtype d : {kInt64, kBool}) {
        INFO(dtype_name(d));
        const Tensor x = ones({3, 4}, d), W = ones({5, 4}, d), b = ones({5}, d);
        // torch 1.13 multiplies int64 (and refuses bool: "addmm_impl_cpu_" not implemented);
        // xgrad's products are float32 and float64 only.
        const std::string got = std::string("linear: input: expected a floating-point tensor (float32 or float64), got ") + std::string(dtype_name(d));
        REQUIRE_THROWS_WITH(linear(x, W, b), got);
        REQUIRE_THROWS_WITH(linear(x, W), got);
        REQUIRE_THROWS_WITH(linear(ones({4}, d), W, b), got);
    }
}

TEST_CASE("linear of bfloat16 tensors is refused in every form, saying how to go on", "[linear][adversarial]") {
    // torch 1.13 multiplies bfloat16 tensors; xgrad stores bfloat16 and multiplies it only under
    // autocast (float32 tensors rounded to bfloat16 inside the product).
    for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
        INFO("x " << shape_str(xs));
        const Tensor x = data(xs, 1, kBFloat16), W = data({5, 4}, 2, kBFloat16), b = data({5}, 3, kBFloat16);
        REQUIRE_THROWS_WITH(linear(x, W, b), Contains("linear: input") && Contains("bfloat16") && Contains("AutocastGuard"));
        REQUIRE_THROWS_WITH(linear(x, W), Contains("linear: input") && Contains("bfloat16") && Contains("AutocastGuard"));
    }
}

TEST_CASE("linear under autocast, on and off, equals its float32 value to bfloat16 rounding", "[linear][adversarial]") {
    AutocastOptions o;
    o.allow_emulation = true;
    const Tensor x = data({64, 64}, 1, kFloat32), W = data({48, 64}, 2, kFloat32), b = data({48}, 3, kFloat32);
    const Tensor plain = linear(x, W, b);
    Tensor on, off;
    {
        AutocastGuard guard(kBFloat16, o);
        on = linear(x, W, b);
        AutocastOptions no = o;
        no.enabled = false;
        AutocastGuard inner(kBFloat16, no);
        off = linear(x, W, b);
    }
    REQUIRE(on.dtype() == kFloat32);
    REQUIRE(max_abs_diff(off, plain) == 0);
    REQUIRE(max_abs_diff(on, plain) <= 0.1);
    REQUIRE(max_abs_diff(on, plain) > 0);
}

// --- gradients ----------------------------------------------------------------------------

TEST_CASE("linear passes gradcheck and gradgradcheck for every subset of x, W, b and every form", "[linear][adversarial][gradcheck][gradgrad]") {
    struct Form {
        Shape x, b;
        bool bias;
    };
    const std::vector<Form> forms{{{4}, {5}, true},       {{3, 4}, {5}, true},   {{2, 3, 4}, {5}, true},
                                  {{3, 4}, {1, 5}, true}, {{2, 3, 4}, {}, true}, {{3, 4}, {}, false},
                                  {{4}, {}, false},       {{2, 2, 3, 4}, {3, 5}, true}};
    for (const Form& form : forms)
        for (unsigned mask = 1; mask < 8; ++mask) {
            if (!form.bias && (mask & 4)) continue;
            INFO("x " << shape_str(form.x) << " b " << (form.bias ? shape_str(form.b) : "none") << " grads for "
                      << kSubsetNames[mask]);
            const Args a = args(form.x, {5, 4}, form.b, mask);
            std::vector<Tensor> in;
            for (const Tensor& t : {a.x, a.W, a.b})
                if (t.requires_grad()) in.push_back(t);
            const bool bias = form.bias;
            const auto f = [&](const std::vector<Tensor>& v) {
                std::size_t i = 0;
                const Tensor x = mask & 1 ? v[i++] : a.x;
                const Tensor W = mask & 2 ? v[i++] : a.W;
                const Tensor b = mask & 4 ? v[i++] : a.b;
                return bias ? linear(x, W, b) : linear(x, W);
            };
            REQUIRE_GRADCHECK(f, in, "linear");
            REQUIRE_GRADGRADCHECK(f, in, "linear");
        }
}

TEST_CASE("linear of one tensor as input and weight passes gradcheck", "[linear][adversarial][gradcheck][gradgrad]") {
    const Tensor A = data({4, 4}, 1).requires_grad_(true), b = data({4}, 2).requires_grad_(true);
    const auto f = [](const std::vector<Tensor>& v) { return linear(v[0], v[0], v[1]); };
    REQUIRE_GRADCHECK(f, {A, b}, "linear(A, A, b)");
    REQUIRE_GRADGRADCHECK(f, {A, b}, "linear(A, A, b)");
    // The gradient of sum(A·Aᵀ + b) is 2·ones·A... summed both ways: g·A + gᵀ·A.
    linear(A, A, b).sum().backward();
    const Tensor g = ones({4, 4}, kFloat64);
    REQUIRE(max_abs_diff(A.grad(), matmul(g, A.detach()) + matmul_t(g, A.detach(), true, false)) <= 1e-15);
}

TEST_CASE("linear's graph runs twice with retain_graph and not at all under no_grad", "[linear][adversarial]") {
    const Args a = args({2, 3, 4}, {5, 4}, {5}, 7);
    const Tensor y = linear(a.x, a.W, a.b).sum();
    y.backward({}, true);
    const Tensor gx = a.x.grad().clone(), gW = a.W.grad().clone(), gb = a.b.grad().clone();
    y.backward();
    REQUIRE(max_abs_diff(a.x.grad(), gx * 2.0) == 0);
    REQUIRE(max_abs_diff(a.W.grad(), gW * 2.0) == 0);
    REQUIRE(max_abs_diff(a.b.grad(), gb * 2.0) == 0);
    {
        NoGradGuard guard;
        for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
            const Args c = args(xs, {5, 4}, {5}, 7);
            const Tensor z = linear(c.x, c.W, c.b);
            REQUIRE_FALSE(z.requires_grad());
            REQUIRE(max_abs_diff(z, linear(c.x.detach(), c.W.detach(), c.b.detach())) == 0);
        }
    }
}

namespace {
// Writes `which` (0: x, 1: W, 2: b) in place between forward and backward.
void write(const Args& a, int which) {
    NoGradGuard guard;
    const Tensor& t = which == 0 ? a.x : which == 1 ? a.W : a.b;
    t.mul_(2.0);
}

// y.backward(g) after a write: refused in words `refusal` when `refused`; else the gradients of
// a's tensors that `mask` asks for equal ref's, bit for bit (nothing read was written).
void expect_refused_or_unchanged(const Tensor& y, const Tensor& g, const Args& a, const Args& ref, unsigned mask,
                                 bool refused, const Catch::MatcherBase<std::string>& refusal) {
    if (refused) {
        REQUIRE_THROWS_WITH(y.backward(g), refusal);
        return;
    }
    REQUIRE_NOTHROW(y.backward(g));
    if (mask & 1) REQUIRE(max_abs_diff(a.x.grad(), ref.x.grad()) == 0);
    if (mask & 2) REQUIRE(max_abs_diff(a.W.grad(), ref.W.grad()) == 0);
    if (mask & 4) REQUIRE(max_abs_diff(a.b.grad(), ref.b.grad()) == 0);
}
}  // namespace

TEST_CASE("linear refuses an in-place write exactly when a requested gradient reads it, as torch", "[linear][adversarial][version]") {
    // torch 1.13 (mm, addmm, matmul, mv alike): x is saved only when W requires grad, W only when
    // x does; the bias never. Any other write leaves every gradient as it was.
    struct Form {
        Shape x, b;
        bool bias;
    };
    const std::vector<Form> forms{{{4}, {5}, true},       {{3, 4}, {5}, true}, {{2, 3, 4}, {5}, true},
                                  {{3, 4}, {1, 5}, true}, {{3, 4}, {}, false}, {{4}, {}, false}};
    for (const Form& form : forms)
        for (unsigned mask = 1; mask < 8; ++mask)
            for (int which = 0; which < 3; ++which) {
                if (!form.bias && ((mask & 4) || which == 2)) continue;
                INFO("x " << shape_str(form.x) << " b " << (form.bias ? shape_str(form.b) : "none") << " grads for "
                          << kSubsetNames[mask] << ", writing " << "xWb"[which]);
                const Args ref = args(form.x, {5, 4}, form.b, mask);
                const Tensor g = data(form.x.size() == 1 ? Shape{5} : [&] { Shape s = form.x; s.back() = 5; return s; }(), 9);
                const Tensor yr = form.bias ? linear(ref.x, ref.W, ref.b) : linear(ref.x, ref.W);
                yr.backward(g);
                const Args a = args(form.x, {5, 4}, form.b, mask);
                const Tensor y = form.bias ? linear(a.x, a.W, a.b) : linear(a.x, a.W);
                write(a, which);
                const bool refused = (which == 0 && (mask & 2)) || (which == 1 && (mask & 1));
                expect_refused_or_unchanged(y, g, a, ref, mask, refused,
                                            Contains("modified by an in-place") || Contains("saved for backward"));
            }
}

TEST_CASE("matmul, bmm and matmul_t keep each operand only for the other's gradient, as torch's mm", "[linear][adversarial][version]") {
    // torch 1.13: a = randn(3, 4, requires_grad=True); y = a @ b; a.mul_(2) under no_grad;
    // y.sum().backward() runs (mm saves a only for b's gradient); writing b instead is refused.
    using Op = std::function<Tensor(const Tensor&, const Tensor&)>;
    struct Case {
        const char* name;
        Shape a, b;
        Op op;
    };
    const std::vector<Case> cases{
        {"matmul 2-D", {3, 4}, {4, 5}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
        {"matmul 1-D", {4}, {4, 5}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
        {"matmul batched", {2, 3, 4}, {1, 4, 5}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
        {"bmm", {2, 3, 4}, {2, 4, 5}, [](const Tensor& a, const Tensor& b) { return bmm(a, b); }},
        {"matmul_t", {4, 3}, {5, 4}, [](const Tensor& a, const Tensor& b) { return matmul_t(a, b, true, true, 0.5); }}};
    for (const Case& c : cases)
        for (unsigned mask = 1; mask < 4; ++mask)
            for (int which = 0; which < 2; ++which) {
                INFO(c.name << " grads for " << (mask == 1 ? "a" : mask == 2 ? "b" : "a b") << ", writing " << "ab"[which]);
                const auto make = [&] {
                    std::vector<Tensor> v{data(c.a, 1), data(c.b, 2)};
                    if (mask & 1) v[0].requires_grad_(true);
                    if (mask & 2) v[1].requires_grad_(true);
                    return v;
                };
                const std::vector<Tensor> ref = make();
                c.op(ref[0], ref[1]).sum().backward();
                const std::vector<Tensor> v = make();
                const Tensor y = c.op(v[0], v[1]).sum();
                {
                    NoGradGuard guard;
                    Tensor(v[which]).mul_(2.0);
                }
                if (mask & (2u >> which)) {  // the other operand's gradient reads the one written
                    REQUIRE_THROWS_WITH(y.backward(), Contains("modified in place"));
                    continue;
                }
                REQUIRE_NOTHROW(y.backward());
                for (int i = 0; i < 2; ++i)
                    if (mask & (1u << i)) REQUIRE(max_abs_diff(v[i].grad(), ref[i].grad()) == 0);
            }
    // Given requires_grad_() after the forward, an operand gets its gradient, or a refusal when the
    // other, which nothing saved, was written since.
    const Tensor a = data({3, 4}, 1), b = data({4, 5}, 2).requires_grad_(true);
    const Tensor y = matmul(a, b).sum();
    Tensor(a).requires_grad_(true);
    {
        NoGradGuard guard;
        Tensor(b).mul_(2.0);
    }
    REQUIRE_THROWS_WITH(y.backward(), Contains("its input 1 (of shape (4, 5)) was modified in place after the forward "
                                               "pass of 'matmul'") && Contains("requires_grad_() since"));
}

TEST_CASE("linear on oneDNN and under autocast refuses in-place writes only where a gradient reads them", "[linear][adversarial][version]") {
    // The forms that add the bias after a product (oneDNN's float32 engine, autocast's
    // bfloat16) keep torch's rule too: x for W's gradient, W for x's; under autocast the product
    // keeps bfloat16 copies instead, and reads neither again (as torch's autocast casts).
    struct EngineGuard {
        GemmEngine previous;
        explicit EngineGuard(GemmEngine e) : previous(gemm_engine()) { set_gemm_engine(e); }
        ~EngineGuard() { set_gemm_engine(previous); }
    };
    AutocastOptions o;
    o.allow_emulation = true;
    for (int mode = 0; mode < 2; ++mode)
        for (unsigned mask = 1; mask < 8; ++mask)
            for (int which = 0; which < 3; ++which) {
                INFO((mode == 0 ? "onednn" : "autocast") << " grads for " << kSubsetNames[mask] << ", writing "
                                                         << "xWb"[which]);
                EngineGuard engine(mode == 0 ? GemmEngine::OneDnn : gemm_engine());
                std::unique_ptr<AutocastGuard> autocast;
                if (mode == 1) autocast = std::make_unique<AutocastGuard>(kBFloat16, o);
                const auto make = [&] {
                    Args a{data({64, 64}, 11, kFloat32), data({48, 64}, 12, kFloat32), data({48}, 13, kFloat32)};
                    if (mask & 1) a.x.requires_grad_(true);
                    if (mask & 2) a.W.requires_grad_(true);
                    if (mask & 4) a.b.requires_grad_(true);
                    return a;
                };
                const Tensor g = data({64, 48}, 9, kFloat32);
                const Args ref = make();
                linear(ref.x, ref.W, ref.b).backward(g);
                const Args a = make();
                const Tensor y = linear(a.x, a.W, a.b);
                write(a, which);
                const bool refused = mode == 0 && ((which == 0 && (mask & 2)) || (which == 1 && (mask & 1)));
                expect_refused_or_unchanged(y, g, a, ref, mask, refused, Contains("modified in place"));
            }
}

TEST_CASE("linear's input given requires_grad_() after the forward gets its gradient, never a stale one", "[linear][adversarial][version]") {
    // xgrad asks which inputs need a gradient when backward runs (torch when the graph is made,
    // leaving x.grad None): a late x gets W's product, so a write to W, which nothing saved for
    // a W-only graph, is refused then rather than read.
    for (const Shape& xs : {Shape{3, 4}, Shape{2, 3, 4}, Shape{4}})
        for (bool bias : {true, false})
            for (bool written : {false, true}) {
                INFO("x " << shape_str(xs) << (bias ? " with" : " without") << " bias, W written: " << written);
                const Args ref = args(xs, {5, 4}, {5}, 3);
                (bias ? linear(ref.x, ref.W, ref.b) : linear(ref.x, ref.W)).sum().backward();
                const Args a = args(xs, {5, 4}, {5}, 2);
                const Tensor y = (bias ? linear(a.x, a.W, a.b) : linear(a.x, a.W)).sum();
                Tensor(a.x).requires_grad_(true);
                if (written) {
                    write(a, 1);
                    REQUIRE_THROWS_WITH(y.backward(), Contains("modified in place") && Contains("requires_grad_() since"));
                    continue;
                }
                y.backward();
                REQUIRE(max_abs_diff(a.x.grad(), ref.x.grad()) == 0);
                REQUIRE(max_abs_diff(a.W.grad(), ref.W.grad()) == 0);
            }
    // The same for the weight given requires_grad_() late, x written.
    for (const Shape& xs : {Shape{3, 4}, Shape{4}}) {
        const Args a = args(xs, {5, 4}, {5}, 1);
        const Tensor y = linear(a.x, a.W, a.b).sum();
        Tensor(a.W).requires_grad_(true);
        write(a, 0);
        REQUIRE_THROWS_WITH(y.backward(), Contains("modified in place") && Contains("requires_grad_() since"));
    }
}

// --- values -------------------------------------------------------------------------------

TEST_CASE("linear propagates NaN and infinity as torch, fused or not", "[linear][adversarial]") {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        // x row 0 zeros, row 1 ones; W row 0 has +inf, row 1 a NaN; b has NaN at 2, inf at 3.
        const Tensor x = from_vector(std::vector<double>{0, 0, 1, 1}, {2, 2}, d);
        const Tensor W = from_vector(std::vector<double>{inf, 1, nan, 1, 1, 1, 2, -inf}, {4, 2}, d);
        const Tensor b = from_vector(std::vector<double>{1, 2, nan, inf}, {4}, d);
        // torch 1.13: F.linear(x, W, b) =
        //   [[nan, nan, nan, nan],     0·inf, 0·nan, nan bias, 0·(-inf)
        //    [inf, nan, nan, -inf]]    inf+1+1, nan, nan, 2−inf+inf... = (1·2 + 1·(−inf)) + inf
        const std::vector<double> want{nan, nan, nan, nan, inf, nan, nan, nan};
        for (const Shape& xs : {Shape{2, 2}, Shape{1, 2, 2}}) {
            const Tensor y = linear(x.reshape(xs), W, b);
            check_close_or_both_nan(y.to_vector<double>(), want, {0, 0});
            check_close_or_both_nan((matmul_t(x.reshape(xs), W, false, true) + b).to_vector<double>(), want, {0, 0});
        }
        // The bias' NaN and inf survive with in_features 0 (the product is all zeros).
        const Tensor y0 = linear(zeros({2, 0}, d), zeros({4, 0}, d), b);
        check_close_or_both_nan(y0.to_vector<double>(), {1, 2, nan, inf, 1, 2, nan, inf}, {0, 0});
    }
}

TEST_CASE("child: linear's products split over the pool", "[.linear-threads-child]") {
    // Large enough for the gemm to split over the pool (2^21 multiply-adds), by rows (300 > 129)
    // and by columns (10 < 1000), with the bias prefilled: the float32 results and gradients
    // equal the float64 ones to float32 rounding, whatever the thread count. (The bits may
    // differ between thread counts: README, "Bit-identity across thread counts".)
    struct Case {
        Shape x;
        std::size_t out;
    };
    for (const Case& c : {Case{{3, 100, 257}, 129}, Case{{10, 257}, 1000}}) {
        INFO("x " << shape_str(c.x) << " out " << c.out);
        std::vector<Tensor> grads[2];
        Tensor ys[2];
        for (Dtype d : {kFloat32, kFloat64}) {
            const int k = d == kFloat32 ? 0 : 1;
            const Tensor x = data(c.x, 1, d).requires_grad_(true), W = data({c.out, 257}, 2, d).requires_grad_(true);
            const Tensor b = data({c.out}, 3, d).requires_grad_(true);
            ys[k] = linear(x, W, b);
            Shape gs = c.x;
            gs.back() = c.out;
            (ys[k] * data(gs, 4, d)).sum().backward();
            grads[k] = {x.grad(), W.grad(), b.grad()};
        }
        REQUIRE(max_abs_diff(ys[0].to(kFloat64), ys[1]) <= 2e-5);
        for (std::size_t i = 0; i < 3; ++i) REQUIRE(max_abs_diff(grads[0][i].to(kFloat64), grads[1][i]) <= 2e-4);
    }
}

TEST_CASE("linear's fused product is right when the gemm splits over 1 or 3 threads", "[linear][adversarial]") {
    const OnThreads runs = run_on_1_and_3_threads("[.linear-threads-child]");
    CHECK(runs.one.find("All tests passed") != std::string::npos);
    CHECK(runs.three.find("All tests passed") != std::string::npos);
}

// --- nn::Linear ---------------------------------------------------------------------------

TEST_CASE("nn::Linear without a bias: the product alone, no bias in its state", "[linear][adversarial]") {
    nn::Linear lin(4, 3, false);
    REQUIRE_FALSE(lin.bias().defined());
    const Tensor x = data({2, 4}, 1, kFloat32);
    REQUIRE(max_abs_diff(lin(x), matmul_t(x, lin.weight(), false, true)) == 0);
    const auto state = lin.state_dict();
    REQUIRE(state.size() == 1);
    REQUIRE(state[0].first == "weight");
    // A state with a bias is refused strictly and reported as unexpected otherwise.
    nn::Linear with(4, 3, true);
    REQUIRE_THROWS_WITH(lin.load_state_dict(with.state_dict()), Contains("bias"));
    const auto r = lin.load_state_dict(with.state_dict(), false);
    REQUIRE(r.unexpected_keys == std::vector<std::string>{"bias"});
    REQUIRE(max_abs_diff(lin.weight(), with.weight()) == 0);
    // And the other way: a bias-less state misses the bias.
    REQUIRE_THROWS_WITH(with.load_state_dict(nn::Linear(4, 3, false).state_dict()), Contains("bias"));
    // linear with an undefined bias equals no bias.
    REQUIRE(max_abs_diff(linear(x, lin.weight(), Tensor()), linear(x, lin.weight())) == 0);
}
