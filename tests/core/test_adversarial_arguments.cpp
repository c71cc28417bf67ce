// Floating arguments that are not finite, passed to every public function that takes one, as
// a careless or hostile user would: each of NaN, inf and -inf is refused at entry with an Error
// that names the function and the argument, where it has no meaning (a correction, p, eps, a
// probability, a gain, a tolerance, a learning rate, a schedule factor), and keeps its IEEE
// meaning where torch keeps one (pow's exponent, clamp bounds, norm's p = ±inf, max_norm = inf).
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "helpers.hpp"
#include "nn/nn.hpp"
#include "optim/optim.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Contains;

namespace {

struct Call {
    std::string function;  // what the message must name: the call the user made
    std::string argument;  // and the argument
    std::function<void(double)> run;
};

Tensor leaf() { return zeros({2}).requires_grad_(); }

}  // namespace

TEST_CASE("var and std refuse a correction that is not finite", "[adversarial][arguments]") {
    const Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, -5.0, 6.0}}, TensorOptions(kFloat64).requires_grad(true));
    for (double c : {kNaN, kInf, -kInf}) {
        INFO("correction " << c);
        for (const std::vector<long>& axes : std::vector<std::vector<long>>{{}, {0}, {1}, {0, 1}}) {
            CHECK_THROWS_WITH(var(x, axes, Correction{c}), Contains("var: invalid correction") &&
                                                                Contains("(expected a finite number)"));
            CHECK_THROWS_WITH(xgrad::std(x, axes, Correction{c}, true),
                              Contains("std: invalid correction") && Contains("(expected a finite number)"));
        }
    }
    // Every finite correction keeps torch's meaning: N − c ≤ 0 divides by 0.
    CHECK(var(x, {}, Correction{6}).item<double>() == kInf);
    CHECK(var(x, {}, Correction{-1e300}).item<double>() < 1e-290);
    CHECK(std::isfinite(var(x, {1}, Correction{0.5}).sum().item<double>()));
}

TEST_CASE("every floating argument with no meaning as NaN or inf is refused, naming the call and the argument",
          "[adversarial][arguments]") {
    using namespace xgrad::nn;
    using namespace xgrad::optim;
    const Tensor x23 = ones({2, 3});
    const Tensor q = ones({1, 2, 4});
    const std::vector<Call> calls{
        {"var", "correction", [&](double v) { var(x23, {1}, Correction{v}); }},
        {"std", "correction", [&](double v) { xgrad::std(x23, {}, Correction{v}); }},
        {"layer_norm", "eps", [&](double v) { layer_norm(x23, {3}, Tensor(), Tensor(), v); }},
        {"add_layer_norm", "eps", [&](double v) { add_layer_norm(x23, x23, {3}, Tensor(), Tensor(), v); }},
        {"matmul_t", "alpha", [&](double v) { matmul_t(x23, x23, false, true, v); }},
        {"head_attention_weights", "scale", [&](double v) { head_attention_weights(q, q, 2, v); }},
        {"arange", "start", [](double v) { arange(v, 5.0); }},
        {"arange", "end", [](double v) { arange(0.0, v); }},
        {"arange", "step", [](double v) { arange(0.0, 5.0, v); }},
        {"uniform", "low", [](double v) { uniform({3}, v, 1.0); }},
        {"uniform", "high", [](double v) { uniform({3}, 0.0, v); }},
        {"gradcheck", "eps",
         [](double v) {
             GradcheckOptions o;
             o.eps = v;
             gradcheck([](const std::vector<Tensor>& a) { return a[0]; }, {ones({1}, kFloat64).requires_grad_()}, o);
         }},
        {"gradcheck", "atol",
         [](double v) {
             GradcheckOptions o;
             o.atol = v;
             gradcheck([](const std::vector<Tensor>& a) { return a[0]; }, {ones({1}, kFloat64).requires_grad_()}, o);
         }},
        {"gradcheck", "rtol",
         [](double v) {
             GradcheckOptions o;
             o.rtol = v;
             gradcheck([](const std::vector<Tensor>& a) { return a[0]; }, {ones({1}, kFloat64).requires_grad_()}, o);
         }},
        {"init.uniform_", "a", [](double v) { init::uniform_(zeros({2, 3}), v, 1.0); }},
        {"init.uniform_", "b", [](double v) { init::uniform_(zeros({2, 3}), 0.0, v); }},
        {"init.normal_", "mean", [](double v) { init::normal_(zeros({2, 3}), v, 1.0); }},
        {"init.normal_", "std", [](double v) { init::normal_(zeros({2, 3}), 0.0, v); }},
        {"init.xavier_uniform_", "gain", [](double v) { init::xavier_uniform_(zeros({2, 3}), v); }},
        {"init.xavier_normal_", "gain", [](double v) { init::xavier_normal_(zeros({2, 3}), v); }},
        {"init.kaiming_uniform_", "a", [](double v) { init::kaiming_uniform_(zeros({2, 3}), v); }},
        {"init.kaiming_normal_", "a", [](double v) { init::kaiming_normal_(zeros({2, 3}), v); }},
        {"init.calculate_gain", "negative_slope",
         [](double v) { init::calculate_gain(init::Nonlinearity::leaky_relu, v); }},
        {"Dropout", "p", [](double v) { Dropout d(v); }},
        {"LayerNorm", "eps", [](double v) { LayerNorm l(Shape{3}, v); }},
        {"SGD", "learning rate", [](double v) { SGD o({leaf()}, v); }},
        {"SGD", "momentum", [](double v) { SGD o({leaf()}, SGDOptions(0.1).momentum(v)); }},
        {"SGD", "dampening", [](double v) { SGD o({leaf()}, SGDOptions(0.1).momentum(0.9).dampening(v)); }},
        {"SGD", "weight_decay", [](double v) { SGD o({leaf()}, SGDOptions(0.1).weight_decay(v)); }},
        {"Adam", "learning rate", [](double v) { Adam o({leaf()}, AdamOptions(v)); }},
        {"Adam", "beta1", [](double v) { Adam o({leaf()}, AdamOptions().betas({v, 0.999})); }},
        {"Adam", "beta2", [](double v) { Adam o({leaf()}, AdamOptions().betas({0.9, v})); }},
        {"Adam", "eps", [](double v) { Adam o({leaf()}, AdamOptions().eps(v)); }},
        {"Adam", "weight_decay", [](double v) { Adam o({leaf()}, AdamOptions().weight_decay(v)); }},
        {"AdamW", "weight_decay", [](double v) { AdamW o({leaf()}, AdamWOptions().weight_decay(v)); }},
        {"SGD", "learning rate",
         [](double v) {
             SGD o({leaf()}, 0.1);
             o.set_lr(v);
         }},
        {"StepLR", "gamma",
         [](double v) {
             SGD o({leaf()}, 0.1);
             StepLR s(o, 1, v);
         }},
        {"WarmupCosineLR", "min_lr",
         [](double v) {
             SGD o({leaf()}, 0.1);
             WarmupCosineLR s(o, 1, 5, v);
         }},
    };
    for (const Call& c : calls)
        for (double bad : {kNaN, kInf, -kInf}) {
            INFO(c.function << " " << c.argument << " = " << bad);
            try {
                c.run(bad);
                FAIL("accepted");
            } catch (const Error& e) {
                const std::string m = e.what();
                INFO(m);
                CHECK(m.rfind(c.function + ":", 0) == 0);  // the message starts with the call
                CHECK(m.find(c.argument) != std::string::npos);
            }
        }
}

TEST_CASE("the xavier and kaiming initialisers name their own gain and slope", "[adversarial][arguments]") {
    using namespace xgrad::nn;
    // They used to report the bound made from them, under another name ("a must be finite").
    CHECK_THROWS_WITH(init::xavier_uniform_(zeros({2, 3}), kNaN),
                      Contains("init.xavier_uniform_: invalid gain nan (expected a finite gain >= 0)"));
    CHECK_THROWS_WITH(init::xavier_normal_(zeros({2, 3}), -1.0), Contains("init.xavier_normal_: invalid gain -1"));
    CHECK_THROWS_WITH(init::kaiming_uniform_(zeros({2, 3}), kInf), Contains("init.kaiming_uniform_: invalid a inf"));
    CHECK_THROWS_WITH(init::kaiming_normal_(zeros({2, 3}), kNaN), Contains("init.kaiming_normal_: invalid a nan"));
}

TEST_CASE("clip_grad_norm reads norm_type as torch's norms do", "[adversarial][arguments]") {
    using namespace xgrad::optim;
    auto with_grad = [](std::vector<double> g) {
        Tensor p = zeros({g.size()}, kFloat64).requires_grad_();
        (p * from_vector(g, {g.size()}, kFloat64)).sum().backward();
        return p;
    };
    // 1e300 is the max norm (torch's float order): Σ|g|^1e300 would be inf and zero the grads.
    Tensor p = with_grad({3.0, -4.0});
    CHECK(clip_grad_norm({p}, 2.0, 1e300) == 4.0);
    CHECK_THAT(vals(p.grad()), approx({1.5, -2.0}, 1e-6));
    // A norm_type that float rounds to 0 is refused, naming it as passed.
    CHECK_THROWS_WITH(clip_grad_norm({p}, 1.0, 1e-300), Contains("clip_grad_norm: invalid norm_type 1e-300"));
    CHECK_THROWS_WITH(clip_grad_norm({p}, kNaN), Contains("clip_grad_norm: invalid max_norm nan"));
    // max_norm = inf means never clip, as in torch.
    Tensor r = with_grad({3.0, -4.0});
    CHECK(clip_grad_norm({r}, kInf) == 5.0);
    CHECK(vals(r.grad()) == std::vector<double>{3.0, -4.0});
    // A NaN gradient gives a NaN inf-norm wherever it sits.
    for (std::size_t at = 0; at < 3; ++at) {
        std::vector<double> g{1.0, 2.0, 3.0};
        g[at] = kNaN;
        Tensor s = with_grad(g);
        CHECK(std::isnan(clip_grad_norm({s}, 1.0, kInf)));
    }
}

TEST_CASE("arguments that IEEE gives a meaning torch keeps are not refused", "[adversarial][arguments]") {
    const Tensor x = tensor({0.5, 2.0});
    CHECK(std::isnan(pow(x, kNaN).to_vector<double>()[0]));
    CHECK(pow(x, kInf).to_vector<double>() == std::vector<double>{0.0, kInf});
    CHECK(pow(x, -kInf).to_vector<double>() == std::vector<double>{kInf, 0.0});
    CHECK(clamp(x, -kInf, kInf).to_vector<double>() == std::vector<double>{0.5, 2.0});
    CHECK(norm(x, kInf).item<double>() == 2.0);
    CHECK(norm(x, -kInf).item<double>() == 0.5);
}
