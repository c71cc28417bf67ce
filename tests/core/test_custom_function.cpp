// Custom autograd functions (autograd::Function, as LibTorch's torch::autograd::Function): the
// examples of PyTorch's "Extending torch.autograd" written in xgrad, then each part of the
// context, the errors, and how a custom op meets the rest of the engine.
#include <cmath>
#include <memory>

#include "core/autocast.hpp"
#include "core/autograd.hpp"
#include "core/node.hpp"
#include "core/runtime/dnnl.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using autograd::AutogradContext;
using autograd::Function;
using autograd::variable_list;

namespace {

// y = eˣ, saving its output: dy/dx = y. The backward is in ops, so it is differentiable again
// (through the saved output, whose graph leads back to x through Exp itself).
struct Exp : Function<Exp> {
    static constexpr const char* name = "Exp";
    static Tensor forward(AutogradContext* ctx, const Tensor& x) {
        Tensor y = exp(x);
        ctx->save_for_backward({y});
        return y;
    }
    static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
        Tensor y = ctx->get_saved_variables()[0];
        return {grad_outputs[0] * y};
    }
};

// y = c·x with c a number kept in saved_data; backward returns one gradient per argument,
// undefined for the number.
struct MulConstant : Function<MulConstant> {
    static constexpr const char* name = "MulConstant";
    static Tensor forward(AutogradContext* ctx, const Tensor& x, double c) {
        ctx->saved_data["c"] = c;
        return x * c;
    }
    static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
        return {grad_outputs[0] * ctx->saved_data["c"].to_double(), Tensor()};
    }
};

// (sin x, cos x): two outputs, gradient g0·cos x − g1·sin x. Records what backward received.
struct SinCos : Function<SinCos> {
    static constexpr const char* name = "SinCos";
    static inline bool materialize = true;
    static inline std::vector<bool> received;  // whether each grad_outputs entry was defined
    static variable_list forward(AutogradContext* ctx, const Tensor& x) {
        ctx->set_materialize_grads(materialize);
        ctx->save_for_backward({x});
        return {sin(x), cos(x)};
    }
    static variable_list backward(AutogradContext* ctx, variable_list g) {
        received = {g[0].defined(), g[1].defined()};
        Tensor x = ctx->get_saved_variables()[0];
        Tensor gx;
        if (g[0].defined()) gx = g[0] * cos(x);
        if (g[1].defined()) gx = gx.defined() ? gx - g[1] * sin(x) : -(g[1] * sin(x));
        return {gx};
    }
};

// A backward that reports a chosen mistake.
enum class Mistake { none, count, shape, dtype, non_tensor };
struct Faulty : Function<Faulty> {
    static constexpr const char* name = "Faulty";
    static inline Mistake mistake = Mistake::none;
    static Tensor forward(AutogradContext*, const Tensor& x, double scale) { return x * scale; }
    static variable_list backward(AutogradContext*, variable_list g) {
        switch (mistake) {
        case Mistake::count: return {g[0]};
        case Mistake::shape: return {g[0].sum(), Tensor()};
        case Mistake::dtype: return {g[0].to(kFloat32), Tensor()};
        case Mistake::non_tensor: return {g[0], g[0]};
        default: return {g[0] * 3.0, Tensor()};
        }
    }
};

}  // namespace

TEST_CASE("custom Exp: values, gradient, op name, saved output", "[autograd][custom]") {
    Tensor x = tensor({0.0, 1.0, -2.0}, kFloat64).requires_grad_();
    Tensor y = Exp::apply(x);
    CHECK(y.op_name() == "Exp");
    CHECK(y.requires_grad());
    CHECK_FALSE(y.is_leaf());
    CHECK_THAT(vals(y), approx({1.0, std::exp(1.0), std::exp(-2.0)}));
    y.sum().backward();
    CHECK_THAT(vals(x.grad()), approx({1.0, std::exp(1.0), std::exp(-2.0)}));
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& in) { return Exp::apply(in[0]); }, {param({2, 3})}, "Exp");
}

TEST_CASE("custom Exp is twice differentiable: its backward is written in ops", "[autograd][custom][higher]") {
    Tensor x = tensor({0.5, -1.0}, kFloat64).requires_grad_();
    Tensor y = Exp::apply(x).sum();
    Tensor dx = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    REQUIRE(dx.requires_grad());
    Tensor d2 = autograd::grad({dx.sum()}, {x})[0];
    CHECK_THAT(vals(d2), approx({std::exp(0.5), std::exp(-1.0)}, 1e-12));
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return Exp::apply(in[0]); }, {param({2, 3})}, "Exp");
}

namespace {
// x·y², a two-input op whose backward is in ops: checked by gradcheck and gradgradcheck.
struct MulSquare : Function<MulSquare> {
    static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& y) {
        ctx->save_for_backward({x, y});
        return x * y * y;
    }
    static variable_list backward(AutogradContext* ctx, variable_list g) {
        auto s = ctx->get_saved_variables();
        Tensor gx = ctx->needs_input_grad(0) ? g[0] * s[1] * s[1] : Tensor();
        Tensor gy = ctx->needs_input_grad(1) ? g[0] * 2.0 * s[0] * s[1] : Tensor();
        return {gx, gy};
    }
};
}  // namespace

TEST_CASE("custom two-input op passes gradcheck and gradgradcheck", "[autograd][custom][higher]") {
    auto f = [](const std::vector<Tensor>& in) { return MulSquare::apply(in[0], in[1]); };
    REQUIRE_GRADCHECK(f, {param({3, 2}, -1, 1, 1), param({3, 2}, -1, 1, 2)}, "MulSquare");
    REQUIRE_GRADGRADCHECK(f, {param({3, 2}, -1, 1, 1), param({3, 2}, -1, 1, 2)}, "MulSquare");
    // Without a `name` member the function is called by its class's name.
    Tensor x = tensor({1.0}, kFloat64).requires_grad_();
    CHECK(MulSquare::apply(x, x).op_name() == "MulSquare");
}

TEST_CASE("custom MulConstant keeps a number in saved_data", "[autograd][custom]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = MulConstant::apply(x, 2.5);
    CHECK_THAT(vals(y), approx({2.5, 5.0}));
    (y * tensor({1.0, 3.0}, kFloat64)).sum().backward();
    CHECK_THAT(vals(x.grad()), approx({2.5, 7.5}));
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& in) { return MulConstant::apply(in[0], -1.5); }, {param({4})},
                      "MulConstant");
}

TEST_CASE("saved_data keeps numbers, strings, lists and any type", "[autograd][custom]") {
    struct Options {
        int k = 3;
    };
    autograd::SavedValue i = 7, d = 0.25, b = true, s = "mean", l = std::vector<long>{0, 2}, o = Options{};
    CHECK(i.to_int() == 7);
    CHECK(i.to_double() == 7.0);
    CHECK(i.get<int>() == 7);
    CHECK(d.to_double() == 0.25);
    CHECK(b.to_bool());
    CHECK(s.to_string() == "mean");
    CHECK(l.to_int_list() == std::vector<std::int64_t>{0, 2});
    CHECK(o.get<Options>().k == 3);
    CHECK_THROWS_WITH(d.to_int(), Catch::Contains("a double") && Catch::Contains("asked for an integer"));
    CHECK_THROWS_WITH(autograd::SavedValue().to_double(), Catch::Contains("nothing"));
    CHECK_THROWS_WITH(o.get<std::string>(), Catch::Contains("Options"));
}

TEST_CASE("a two-output function with one output unused gets zeros for it", "[autograd][custom]") {
    Tensor x = tensor({0.3, -1.2}, kFloat64).requires_grad_();
    SinCos::materialize = true;
    auto out = SinCos::apply(x);
    REQUIRE(out.size() == 2);
    CHECK(out[0].op_name() == "SinCos");
    CHECK(out[1].op_name() == "SinCos");
    out[0].sum().backward();
    CHECK(SinCos::received == std::vector<bool>{true, true});  // the unused one materialised
    CHECK_THAT(vals(x.grad()), approx({std::cos(0.3), std::cos(-1.2)}, 1e-12));

    // Both outputs used, each weighted: d/dx Σ (2 sin x + 3 cos x) = 2 cos x − 3 sin x.
    x.zero_grad();
    auto both = SinCos::apply(x);
    (both[0] * 2.0 + both[1] * 3.0).sum().backward();
    CHECK_THAT(vals(x.grad()), approx({2 * std::cos(0.3) - 3 * std::sin(0.3), 2 * std::cos(-1.2) - 3 * std::sin(-1.2)},
                                      1e-12));
    REQUIRE_GRADCHECK(
        [](const std::vector<Tensor>& in) {
            auto o = SinCos::apply(in[0]);
            return o[0] * o[1] + o[1];
        },
        {param({5})}, "SinCos");
}

TEST_CASE("set_materialize_grads(false) hands undefined gradients for unused outputs", "[autograd][custom]") {
    Tensor x = tensor({0.3, -1.2}, kFloat64).requires_grad_();
    SinCos::materialize = false;
    auto out = SinCos::apply(x);
    out[1].sum().backward();
    SinCos::materialize = true;
    CHECK(SinCos::received == std::vector<bool>{false, true});
    CHECK_THAT(vals(x.grad()), approx({-std::sin(0.3), -std::sin(-1.2)}, 1e-12));
}

namespace {
// Counts which gradients backward computed: needs_input_grad lets it skip the others.
struct CountingMul : Function<CountingMul> {
    static inline int computed_a = 0, computed_b = 0;
    static inline std::vector<bool> seen_in_forward;
    static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
        seen_in_forward = {ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
        ctx->save_for_backward({a, b});
        return a * b;
    }
    static variable_list backward(AutogradContext* ctx, variable_list g) {
        auto s = ctx->get_saved_variables();
        Tensor ga, gb;
        if (ctx->needs_input_grad(0)) {
            ++computed_a;
            ga = g[0] * s[1];
        }
        if (ctx->needs_input_grad(1)) {
            ++computed_b;
            gb = g[0] * s[0];
        }
        return {ga, gb};
    }
};
}  // namespace

struct Probe : Function<Probe> {
    static Tensor forward(AutogradContext* ctx, const Tensor& x, double) {
        ctx->needs_input_grad(1);  // the double is not a tensor input
        return x;
    }
    static variable_list backward(AutogradContext*, variable_list g) { return {g[0], Tensor()}; }
};

TEST_CASE("needs_input_grad lets backward skip inputs that need no gradient", "[autograd][custom]") {
    Tensor a = tensor({2.0, 3.0}, kFloat64).requires_grad_();
    Tensor b = tensor({5.0, 7.0}, kFloat64);
    CountingMul::computed_a = CountingMul::computed_b = 0;
    CountingMul::apply(a, b).sum().backward();
    CHECK(CountingMul::seen_in_forward == std::vector<bool>{true, false});
    CHECK(CountingMul::computed_a == 1);
    CHECK(CountingMul::computed_b == 0);
    CHECK_THAT(vals(a.grad()), approx({5.0, 7.0}));
    CHECK_FALSE(b.has_grad());
    CHECK_THROWS_WITH(Probe::apply(tensor({1.0}), 2.0),
                      Catch::Contains("Probe") && Catch::Contains("needs_input_grad(1)") &&
                          Catch::Contains("1 tensor input"));
}

namespace {
// max over the last axis with its index: the index (int64) is never differentiable; a float
// copy of it marked non-differentiable does not require grad either.
struct MaxWithIndex : Function<MaxWithIndex> {
    static inline bool third_defined = false;
    static variable_list forward(AutogradContext* ctx, const Tensor& x) {
        Tensor idx = argmax(x, -1);
        Tensor idx_float = idx.to(kFloat64);
        ctx->mark_non_differentiable({idx_float});
        ctx->save_for_backward({idx});
        ctx->saved_data["n"] = x.size(-1);
        Tensor largest = (x * one_hot(idx, x.size(-1)).to(kFloat64)).sum({-1});
        return {largest, idx, idx_float};
    }
    static variable_list backward(AutogradContext* ctx, variable_list g) {
        third_defined = g[2].defined();
        Tensor idx = ctx->get_saved_variables()[0];
        Tensor hot = one_hot(idx, ctx->saved_data["n"].to_int()).to(kFloat64);
        return {hot * g[0].unsqueeze(-1)};
    }
};
}  // namespace

TEST_CASE("mark_non_differentiable: an argmax-like output needs no gradient", "[autograd][custom]") {
    Tensor x = tensor({{1.0, 5.0, 2.0}, {7.0, 0.0, 3.0}}, kFloat64).requires_grad_();
    auto out = MaxWithIndex::apply(x);
    CHECK(out[0].requires_grad());
    CHECK_FALSE(out[1].requires_grad());
    CHECK(out[1].dtype() == kInt64);
    CHECK_FALSE(out[2].requires_grad());
    CHECK(out[1].to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
    (out[0] * tensor({2.0, 3.0}, kFloat64)).sum().backward();
    CHECK(MaxWithIndex::third_defined);  // materialised zeros for the non-differentiable output
    CHECK_THAT(vals(x.grad()), approx({0, 2, 0, 3, 0, 0}));
}

namespace {
// x += 1 in place, as a custom op: mark_dirty moves x's history onto the function.
struct AddOne : Function<AddOne> {
    static constexpr const char* name = "AddOne";
    static Tensor forward(AutogradContext* ctx, Tensor x) {
        x += 1.0;
        ctx->mark_dirty({x});
        return x;
    }
    static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};
// x *= 2 in place, saving the changed x (its output) for backward.
struct Double : Function<Double> {
    static constexpr const char* name = "Double";
    static Tensor forward(AutogradContext* ctx, Tensor x) {
        x *= 2.0;
        ctx->mark_dirty({x});
        ctx->save_for_backward({x});
        return x;
    }
    static variable_list backward(AutogradContext* ctx, variable_list g) {
        (void)ctx->get_saved_variables();
        return {g[0] * 2.0};
    }
};
}  // namespace

TEST_CASE("mark_dirty: an in-place custom op rebases the tensor's history", "[autograd][custom][inplace]") {
    Tensor a = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor x = a * 3.0;
    Tensor before = x + 10.0;  // read x before the write: add saves nothing, so it stays usable
    const auto v0 = x.version();
    Tensor y = AddOne::apply(x);
    CHECK(y.is_same(x));  // the same tensor, as torch returns the input it changed
    CHECK(x.op_name() == "AddOne");
    CHECK(x.version() > v0);
    CHECK_THAT(vals(x), approx({4.0, 7.0}));
    CHECK_THAT(vals(before), approx({13.0, 16.0}));
    (x * 2.0 + before).sum().backward();
    CHECK_THAT(vals(a.grad()), approx({9.0, 9.0}));  // 2·3 through AddOne, 3 through `before`

    // A saved dirty input is the output: held without a cycle, and still version-checked.
    Tensor b = tensor({1.0, -1.0}, kFloat64).requires_grad_();
    Tensor z = b * 1.0;
    Double::apply(z);
    (z * z).sum().backward();
    CHECK_THAT(vals(b.grad()), approx({8.0, -8.0}));  // d/db (2b)² = 8b
}

TEST_CASE("mark_dirty: an op that saved the old value is refused at backward", "[autograd][custom][inplace]") {
    Tensor a = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor x = a * 3.0;
    Tensor sq = x * x;  // mul saves x
    AddOne::apply(x);
    CHECK_THROWS_WITH(sq.sum().backward(), Catch::Contains("modified in place") && Catch::Contains("'mul'"));
}

TEST_CASE("mark_dirty on a leaf that requires grad is refused, as torch does", "[autograd][custom][inplace][errors]") {
    Tensor a = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    CHECK_THROWS_WITH(AddOne::apply(a), Catch::Contains("AddOne") && Catch::Contains("leaf") &&
                                            Catch::Contains("requires grad"));
    // Under NoGradGuard the write is allowed and nothing is recorded (torch's no_grad too).
    Tensor c = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    {
        NoGradGuard no_grad;
        AddOne::apply(c);
    }
    CHECK(c.is_leaf());
    CHECK_THAT(vals(c), approx({2.0, 3.0}));
    // A leaf that does not require grad becomes the function's output when another input does.
    struct AddInto : Function<AddInto> {
        static Tensor forward(AutogradContext* ctx, Tensor buf, const Tensor& w) {
            buf += w;
            ctx->mark_dirty({buf});
            return buf;
        }
        static variable_list backward(AutogradContext*, variable_list g) { return {g[0], g[0]}; }
    };
    Tensor buf = zeros({2}, kFloat64);
    Tensor w = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    AddInto::apply(buf, w);
    CHECK(buf.requires_grad());
    CHECK(buf.op_name() == "AddInto");
    (buf * buf).sum().backward();
    CHECK_THAT(vals(w.grad()), approx({2.0, 4.0}));
    // Marking a tensor that is not an input, or not returning the dirty input, is refused.
    struct NotInput : Function<NotInput> {
        static Tensor forward(AutogradContext* ctx, const Tensor& x) {
            Tensor y = x * 2.0;
            ctx->mark_dirty({y});
            return y;
        }
        static variable_list backward(AutogradContext*, variable_list g) { return g; }
    };
    CHECK_THROWS_WITH(NotInput::apply(w * 1.0), Catch::Contains("NotInput") && Catch::Contains("not an input"));
    struct NotReturned : Function<NotReturned> {
        static Tensor forward(AutogradContext* ctx, Tensor x) {
            x += 1.0;
            ctx->mark_dirty({x});
            return x * 2.0;
        }
        static variable_list backward(AutogradContext*, variable_list g) { return g; }
    };
    CHECK_THROWS_WITH(NotReturned::apply(w * 1.0), Catch::Contains("NotReturned") && Catch::Contains("returned"));
}

TEST_CASE("a backward with the wrong count, shape or dtype is refused, naming the function",
          "[autograd][custom][errors]") {
    auto run = [](Mistake m) {
        Faulty::mistake = m;
        Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
        Faulty::apply(x, 3.0).sum().backward();
        return x.grad();
    };
    CHECK_THAT(vals(run(Mistake::none)), approx({3.0, 3.0}));
    CHECK_THROWS_WITH(run(Mistake::count), Catch::Contains("Faulty backward") && Catch::Contains("returned 1 gradient") &&
                                               Catch::Contains("expected 2"));
    CHECK_THROWS_WITH(run(Mistake::shape), Catch::Contains("Faulty backward") && Catch::Contains("shape ()") &&
                                               Catch::Contains("input has shape (2,)"));
    CHECK_THROWS_WITH(run(Mistake::dtype), Catch::Contains("Faulty backward") && Catch::Contains("float32") &&
                                               Catch::Contains("float64"));
    CHECK_THROWS_WITH(run(Mistake::non_tensor), Catch::Contains("Faulty backward") &&
                                                    Catch::Contains("argument 1 of forward is not a tensor"));
    Faulty::mistake = Mistake::none;
}

TEST_CASE("a saved tensor written in place after forward is refused, naming the function",
          "[autograd][custom][errors]") {
    // A saved output.
    Tensor x = tensor({0.0, 1.0}, kFloat64).requires_grad_();
    Tensor y = Exp::apply(x);
    Tensor loss = y.sum();
    {
        NoGradGuard no_grad;
        y += 1.0;
    }
    CHECK_THROWS_WITH(loss.backward(), Catch::Contains("Exp backward") && Catch::Contains("saved tensor 0") &&
                                           Catch::Contains("output 0") && Catch::Contains("modified in place"));
    // A saved input.
    Tensor a = tensor({2.0, 3.0}, kFloat64).requires_grad_();
    Tensor b = tensor({5.0, 7.0}, kFloat64).requires_grad_();
    Tensor p = MulSquare::apply(a, b);
    {
        NoGradGuard no_grad;
        b *= 2.0;
    }
    CHECK_THROWS_WITH(p.sum().backward(), Catch::Contains("MulSquare backward") && Catch::Contains("saved tensor 1") &&
                                              Catch::Contains("an input") && Catch::Contains("version 0 -> 1"));
}

TEST_CASE("anomaly mode names the custom function, forward and backward", "[autograd][custom][anomaly]") {
    struct Sqrt : Function<Sqrt> {
        static Tensor forward(AutogradContext* ctx, const Tensor& x) {
            Tensor y = sqrt(x);
            ctx->save_for_backward({y});
            return y;
        }
        static variable_list backward(AutogradContext* ctx, variable_list g) {
            return {g[0] / (ctx->get_saved_variables()[0] * 2.0)};
        }
    };
    DetectAnomalyGuard anomaly;
    Tensor x = tensor({0.0, 4.0}, kFloat64).requires_grad_();
    Tensor y = Sqrt::apply(x);  // finite
    CHECK_THROWS_WITH(y.sum().backward(), Catch::Contains("Sqrt backward") && Catch::Contains("inf"));
    Tensor neg = tensor({-1.0, 4.0}, kFloat64).requires_grad_();
    CHECK_THROWS_WITH(Sqrt::apply(neg), Catch::Contains("Sqrt: produced nan in output 0"));
}

TEST_CASE("hooks see and replace the gradient through a custom function", "[autograd][custom][hooks]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = MulConstant::apply(x, 3.0);
    std::vector<double> seen;
    y.register_hook([&](const Tensor& g) {
        seen = vals(g);
        return g * 10.0;
    });
    (y * tensor({1.0, 2.0}, kFloat64)).sum().backward();
    CHECK(seen == std::vector<double>{1.0, 2.0});
    CHECK_THAT(vals(x.grad()), approx({30.0, 60.0}));

    // A hook on each output of a two-output function.
    Tensor z = tensor({0.5}, kFloat64).requires_grad_();
    auto out = SinCos::apply(z);
    out[1].register_hook([](const Tensor& g) { return g * 0.0; });
    (out[0] + out[1]).sum().backward();
    CHECK_THAT(vals(z.grad()), approx({std::cos(0.5)}, 1e-12));
}

namespace {
struct Counted : Function<Counted> {
    static inline int forwards = 0;
    static Tensor forward(AutogradContext* ctx, const Tensor& x) {
        ++forwards;
        CHECK_FALSE(grad_enabled());  // forward itself always runs without recording
        CHECK_FALSE(ctx->needs_input_grad(0));
        return x * 2.0;
    }
    static variable_list backward(AutogradContext*, variable_list g) { return {g[0] * 2.0}; }
};
}  // namespace

TEST_CASE("under NoGradGuard forward runs and nothing is recorded", "[autograd][custom]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y;
    {
        NoGradGuard no_grad;
        y = Counted::apply(x);
    }
    CHECK(Counted::forwards == 1);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    CHECK_THAT(vals(y), approx({2.0, 4.0}));
}

TEST_CASE("an input returned as it is becomes a new tensor, not the input", "[autograd][custom]") {
    struct Identity : Function<Identity> {
        static Tensor forward(AutogradContext*, const Tensor& x) { return x; }
        static variable_list backward(AutogradContext*, variable_list g) { return g; }
    };
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = Identity::apply(x);
    CHECK_FALSE(y.is_same(x));
    CHECK(x.is_leaf());
    CHECK(y.op_name() == "Identity");
    (y * 3.0).sum().backward();
    CHECK_THAT(vals(x.grad()), approx({3.0, 3.0}));
}

namespace {
// Σᵢ wᵢ·xsᵢ over a list of tensors, with weights as plain numbers and an optional bias.
struct WeightedSum : Function<WeightedSum> {
    static Tensor forward(AutogradContext* ctx, const std::vector<Tensor>& xs, std::vector<double> w,
                          const std::optional<Tensor>& bias) {
        ctx->saved_data["w"] = w;
        ctx->saved_data["has_bias"] = bias.has_value();
        Tensor s = xs[0] * w[0];
        for (std::size_t i = 1; i < xs.size(); ++i) s = s + xs[i] * w[i];
        return bias ? s + *bias : s;
    }
    static variable_list backward(AutogradContext* ctx, variable_list g) {
        auto w = ctx->saved_data["w"].to_double_list();
        variable_list out;
        for (double wi : w) out.push_back(g[0] * wi);
        out.push_back(Tensor());  // the weights
        // The bias: an undefined Tensor() when there was none (not a tensor argument then).
        out.push_back(ctx->saved_data["has_bias"].to_bool() ? g[0] : Tensor());
        return out;
    }
};
}  // namespace

TEST_CASE("a list of tensors, non-tensor arguments and an optional tensor", "[autograd][custom]") {
    Tensor a = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor b = tensor({3.0, 4.0}, kFloat64).requires_grad_();
    Tensor bias = tensor({0.5, 0.5}, kFloat64).requires_grad_();
    Tensor y = WeightedSum::apply(std::vector<Tensor>{a, b}, std::vector<double>{2.0, -1.0}, std::optional<Tensor>(bias));
    CHECK_THAT(vals(y), approx({-0.5, 0.5}));
    y.sum().backward();
    CHECK_THAT(vals(a.grad()), approx({2.0, 2.0}));
    CHECK_THAT(vals(b.grad()), approx({-1.0, -1.0}));
    CHECK_THAT(vals(bias.grad()), approx({1.0, 1.0}));
    a.zero_grad();
    Tensor y2 = WeightedSum::apply(std::vector<Tensor>{a, b}, std::vector<double>{2.0, -1.0}, std::optional<Tensor>());
    CHECK_THAT(vals(y2), approx({-1.0, 0.0}));
    y2.sum().backward();
    CHECK_THAT(vals(a.grad()), approx({2.0, 2.0}));
    REQUIRE_GRADCHECK(
        [](const std::vector<Tensor>& in) {
            return WeightedSum::apply(std::vector<Tensor>{in[0], in[1]}, std::vector<double>{0.5, 3.0},
                                      std::optional<Tensor>(in[2]));
        },
        {param({2, 2}, -1, 1, 1), param({2, 2}, -1, 1, 2), param({2, 2}, -1, 1, 3)}, "WeightedSum");
}

TEST_CASE("a saved output makes no reference cycle: the graph is freed with its tensors", "[autograd][custom][memory]") {
    std::weak_ptr<Node> fn;
    {
        Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
        Tensor y = Exp::apply(x);
        fn = y.node().parents[0].node_ptr();
        REQUIRE_FALSE(fn.expired());
        CHECK(fn.lock()->op == std::string("Exp"));
    }
    CHECK(fn.expired());  // never used in a backward
    {
        Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
        Tensor y = Exp::apply(x);
        fn = y.node().parents[0].node_ptr();
        y.sum().backward({}, /*retain_graph=*/true);
    }
    CHECK(fn.expired());  // after a backward that kept the graph
    {
        Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
        struct SaveBoth : Function<SaveBoth> {
            static variable_list forward(AutogradContext* ctx, const Tensor& x) {
                Tensor a = x * 2.0, b = x * 3.0;
                ctx->save_for_backward({a, b});
                return {a, b};
            }
            static variable_list backward(AutogradContext* ctx, variable_list g) {
                (void)ctx->get_saved_variables();
                return {g[0] * 2.0 + g[1] * 3.0};
            }
        };
        auto out = SaveBoth::apply(x);
        fn = out[0].node().parents[0].node_ptr();
    }
    CHECK(fn.expired());
}

TEST_CASE("a saved output whose handles were all dropped is still there for backward", "[autograd][custom]") {
    // y0 = 2x, saved; y1 = x², whose derivative 2x is y0: backward reads y0 after every handle on
    // it is gone (only y1 leads to the function).
    struct Pair : Function<Pair> {
        static variable_list forward(AutogradContext* ctx, const Tensor& x) {
            Tensor y0 = x * 2.0;
            ctx->save_for_backward({y0});
            return {y0, x * x};
        }
        static variable_list backward(AutogradContext* ctx, variable_list g) {
            Tensor y0 = ctx->get_saved_variables()[0];
            return {g[0] * 2.0 + g[1] * y0};
        }
    };
    Tensor x = tensor({1.5, -2.0}, kFloat64).requires_grad_();
    Tensor y1 = Pair::apply(x)[1];  // y0 is dropped at once
    y1.sum().backward();
    CHECK_THAT(vals(x.grad()), approx({3.0, -4.0}));
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return Pair::apply(in[0])[1]; }, {param({3})}, "Pair");
}

TEST_CASE("autocast: forward runs under the autocast around apply", "[autograd][custom][autocast]") {
    if (!dnnl::available()) return;
    struct Product : Function<Product> {
        static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
            ctx->save_for_backward({a, b});
            return matmul(a, b);
        }
        static variable_list backward(AutogradContext* ctx, variable_list g) {
            auto s = ctx->get_saved_variables();
            return {matmul(g[0], s[1].transpose(0, 1)), matmul(s[0].transpose(0, 1), g[0])};
        }
    };
    // Large enough (2^15 multiply-adds) for the product to autocast; values that bfloat16 rounds.
    Generator gen(3);
    Tensor a = uniform({64, 32}, -1, 1, TensorOptions(kFloat32).requires_grad(true), gen);
    Tensor b = uniform({32, 32}, -1, 1, TensorOptions(kFloat32).requires_grad(true), gen);
    Tensor in_autocast, plain, custom;
    {
        AutocastOptions o;
        o.allow_emulation = true;
        AutocastGuard guard(kBFloat16, o);
        NoGradGuard no_grad;
        in_autocast = matmul(a, b);
    }
    {
        NoGradGuard no_grad;
        plain = matmul(a, b);
    }
    {
        AutocastOptions o;
        o.allow_emulation = true;
        AutocastGuard guard(kBFloat16, o);
        custom = Product::apply(a, b);
    }
    CHECK(vals(custom) == vals(in_autocast));
    CHECK(vals(custom) != vals(plain));
    // A forward that wants float32 inside an autocast region turns it off for itself.
    struct Float32Product : Function<Float32Product> {
        static Tensor forward(AutogradContext*, const Tensor& a, const Tensor& b) {
            AutocastGuard off(kBFloat16, AutocastOptions{false});
            return matmul(a, b);
        }
        static variable_list backward(AutogradContext*, variable_list) { return {Tensor(), Tensor()}; }
    };
    {
        AutocastOptions o;
        o.allow_emulation = true;
        AutocastGuard guard(kBFloat16, o);
        CHECK(vals(Float32Product::apply(a, b)) == vals(plain));
    }
    // backward outside the guard: float32, the product's exact gradient.
    custom.sum().backward();
    Tensor want;
    {
        NoGradGuard no_grad;
        want = matmul(ones({64, 32}, kFloat32), b.transpose(0, 1));
    }
    CHECK(a.grad().dtype() == kFloat32);
    CHECK(vals(a.grad()) == vals(want));
}

TEST_CASE("data-parallel training: gradients reach parameters through the post-accumulate hooks",
          "[autograd][custom]") {
    // DistributedDataParallel starts its all-reduce from each parameter's
    // post-accumulate-grad hook; a custom op's gradient lands there as any op's does.
    Tensor w = tensor({0.5, -1.0}, kFloat64).requires_grad_();
    std::vector<std::vector<double>> reduced;
    w.register_post_accumulate_grad_hook([&](Tensor& p) { reduced.push_back(vals(p.grad())); });
    Tensor x = tensor({2.0, 3.0}, kFloat64);
    Tensor loss = MulSquare::apply(x, w).sum();  // Σ x·w²: dL/dw = 2xw
    loss.backward();
    REQUIRE(reduced.size() == 1);
    CHECK_THAT(reduced[0], approx({2.0, -6.0}));
}

TEST_CASE("a long chain of custom ops is freed without deep recursion", "[autograd][custom][memory]") {
    // Each op's context holds its input: freeing the chain must not recurse through them.
    Tensor x = tensor({1.0}, kFloat64).requires_grad_();
    Tensor w = tensor({1.0}, kFloat64);
    Tensor y = x;
    for (int i = 0; i < 100000; ++i) y = MulSquare::apply(y, w);
    CHECK_THAT(vals(y), approx({1.0}));
    y = Tensor();  // would overflow the stack if each context freed the next recursively
    SUCCEED();
}
