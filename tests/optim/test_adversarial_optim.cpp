// Hostile input to the optimizers and schedules: every hyper-parameter at NaN, ±inf and out of
// range, wherever it can enter (constructor, set_lr, load_state_dict, schedules); NaN
// gradients; parameters whose dtype or shape changed under the optimizer.
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "helpers.hpp"
#include "nn/linear.hpp"
#include "optim/adam.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/sgd.hpp"

using namespace xgrad;
using namespace xgrad::optim;
using namespace xgrad::test;

namespace {

// The non-finite values every hyper-parameter must refuse.
const std::vector<double> kNonFinite = {kNaN, kInf, -kInf};

// "invalid <what> <value>" as the messages spell it (fmt prints nan, inf, -inf).
std::string invalid(const std::string& optimizer, const std::string& what, double v) {
    return fmt::format("{}: invalid {} {}", optimizer, what, v);
}

using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

// One of each optimizer, with every kind of state switched on.
std::vector<std::pair<std::string, Make>> stateful_optimizers() {
    return {
        {"SGD", [](std::vector<Tensor> p) { return std::make_unique<SGD>(std::move(p), SGDOptions(0.1).momentum(0.9)); }},
        {"SGD nesterov",
         [](std::vector<Tensor> p) {
             return std::make_unique<SGD>(std::move(p), SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.1));
         }},
        {"Adam", [](std::vector<Tensor> p) { return std::make_unique<Adam>(std::move(p), AdamOptions(0.1)); }},
        {"Adam amsgrad",
         [](std::vector<Tensor> p) {
             return std::make_unique<Adam>(std::move(p), AdamOptions(0.1).amsgrad(true).weight_decay(0.1));
         }},
        {"AdamW", [](std::vector<Tensor> p) { return std::make_unique<AdamW>(std::move(p), AdamWOptions(0.1)); }},
    };
}

// Every state_dict entry's values, to compare a state before and after a refused call.
std::vector<std::pair<std::string, std::vector<double>>> snapshot(const Optimizer& opt) {
    return state_values(opt.state_dict());
}

}  // namespace

TEST_CASE("SGD refuses non-finite and negative hyper-parameters in its constructor", "[optim-hostile]") {
    const std::vector<Tensor> ps = {param({2})};
    auto sgd = [&](SGDOptions o) { SGD opt(ps, o); };
    for (double v : kNonFinite) {
        INFO("value " << v);
        CHECK_THROWS_WITH(sgd(SGDOptions(v)), Catch::Contains(invalid("SGD", "learning rate", v)));
        CHECK_THROWS_WITH(sgd(SGDOptions(0.1).momentum(v)), Catch::Contains(invalid("SGD", "momentum", v)));
        CHECK_THROWS_WITH(sgd(SGDOptions(0.1).momentum(0.9).dampening(v)),
                          Catch::Contains(invalid("SGD", "dampening", v)));
        CHECK_THROWS_WITH(sgd(SGDOptions(0.1).weight_decay(v)), Catch::Contains(invalid("SGD", "weight_decay", v)));
    }
    CHECK_THROWS_WITH(sgd(SGDOptions(kInf)), Catch::Contains("(expected a finite number)"));
    CHECK_THROWS_WITH(sgd(SGDOptions(-1e-300)), Catch::Contains("(expected lr >= 0)"));
    CHECK_THROWS_WITH(sgd(SGDOptions(0.1).momentum(-1e-300)), Catch::Contains("(expected momentum >= 0)"));
    CHECK_THROWS_WITH(sgd(SGDOptions(0.1).weight_decay(-1e-300)), Catch::Contains("(expected weight_decay >= 0)"));
    // The edges torch accepts stay accepted: zeros, the largest finite values, negative
    // dampening (torch does not check it).
    CHECK_NOTHROW(sgd(SGDOptions(0.0).momentum(0.0).weight_decay(0.0)));
    CHECK_NOTHROW(sgd(SGDOptions(std::numeric_limits<double>::max()).momentum(1e300).dampening(-2)));
}

TEST_CASE("Adam and AdamW refuse non-finite and out-of-range hyper-parameters in their constructors",
          "[optim-hostile]") {
    const std::vector<Tensor> ps = {param({2})};
    auto adam = [&](AdamOptions o) { Adam opt(ps, o); };
    auto adamw = [&](AdamWOptions o) { AdamW opt(ps, o); };
    for (double v : kNonFinite) {
        INFO("value " << v);
        CHECK_THROWS_WITH(adam(AdamOptions(v)), Catch::Contains(invalid("Adam", "learning rate", v)));
        CHECK_THROWS_WITH(adam(AdamOptions().eps(v)), Catch::Contains(invalid("Adam", "eps", v)));
        CHECK_THROWS_WITH(adam(AdamOptions().weight_decay(v)), Catch::Contains(invalid("Adam", "weight_decay", v)));
        CHECK_THROWS_WITH(adam(AdamOptions().betas({v, 0.999})), Catch::Contains(invalid("Adam", "beta1", v)));
        CHECK_THROWS_WITH(adam(AdamOptions().betas({0.9, v})), Catch::Contains(invalid("Adam", "beta2", v)));
        CHECK_THROWS_WITH(adamw(AdamWOptions(v)), Catch::Contains(invalid("AdamW", "learning rate", v)));
        CHECK_THROWS_WITH(adamw(AdamWOptions().eps(v)), Catch::Contains(invalid("AdamW", "eps", v)));
        CHECK_THROWS_WITH(adamw(AdamWOptions().weight_decay(v)), Catch::Contains(invalid("AdamW", "weight_decay", v)));
        CHECK_THROWS_WITH(adamw(AdamWOptions().betas({v, 0.999})), Catch::Contains(invalid("AdamW", "beta1", v)));
        CHECK_THROWS_WITH(adamw(AdamWOptions().betas({0.9, v})), Catch::Contains(invalid("AdamW", "beta2", v)));
    }
    for (double beta : {-1e-300, 1.0, 1.0000001, 2.0}) {
        INFO("beta " << beta);
        CHECK_THROWS_WITH(adam(AdamOptions().betas({beta, 0.999})), Catch::Contains("(expected 0 <= beta1 < 1)"));
        CHECK_THROWS_WITH(adam(AdamOptions().betas({0.9, beta})), Catch::Contains("(expected 0 <= beta2 < 1)"));
    }
    CHECK_THROWS_WITH(adam(AdamOptions().eps(-1e-300)), Catch::Contains("(expected eps > 0)"));
    CHECK_THROWS_WITH(adam(AdamOptions().eps(kInf)), Catch::Contains("invalid eps inf (expected a finite number)"));
    CHECK_THROWS_WITH(adamw(AdamWOptions().weight_decay(-1e-300)), Catch::Contains("(expected weight_decay >= 0)"));
    CHECK_NOTHROW(adam(AdamOptions(0.0).betas({0.0, 0.0}).weight_decay(0.0)));
    CHECK_NOTHROW(adamw(AdamWOptions(0.0).betas({0.0, 0.0}).weight_decay(0.0)));
}

TEST_CASE("set_lr refuses a non-finite or negative lr and keeps the old one", "[optim-hostile]") {
    for (const auto& [name, make] : stateful_optimizers()) {
        INFO(name);
        auto opt = make({param({3})});
        const double before = opt->lr();
        for (double v : {kNaN, kInf, -kInf, -1e-300, -1.0}) {
            INFO("lr " << v);
            CHECK_THROWS_WITH(opt->set_lr(v), Catch::Contains(invalid(opt->name(), "learning rate", v)));
            CHECK(opt->lr() == before);
        }
        opt->set_lr(0.0);
        CHECK(opt->lr() == 0.0);
    }
}

TEST_CASE("load_state_dict refuses non-finite hyper-parameters and changes nothing", "[optim-hostile]") {
    for (const auto& [name, make] : stateful_optimizers()) {
        INFO(name);
        Tensor p = param({3});
        auto opt = make({p});
        p.set_grad(ones({3}, kFloat64));
        opt->step();
        const NamedTensors good = opt->state_dict();
        const auto before = snapshot(*opt);
        for (const auto& [key, value] : good) {
            if (value.dtype() != kFloat64 || value.dim() != 0 || key.rfind("state.", 0) == 0) continue;
            if (key.find("nesterov") != std::string::npos || key.find("amsgrad") != std::string::npos) continue;
            for (double v : kNonFinite) {
                INFO(key << " = " << v);
                NamedTensors bad = good;
                for (auto& [k, t] : bad)
                    if (k == key) t = tensor(v, kFloat64);
                CHECK_THROWS_WITH(opt->load_state_dict(bad), Catch::Contains(opt->name() + ": invalid"));
                CHECK(snapshot(*opt) == before);
            }
        }
    }
}

TEST_CASE("schedules refuse bad arguments, non-finite states and an lr that overflows", "[optim-hostile]") {
    SGD opt({param({2})}, 0.1);
    for (double v : {kNaN, kInf, -kInf, 0.0, -0.5}) {
        INFO("gamma " << v);
        CHECK_THROWS_WITH(StepLR(opt, 1, v), Catch::Contains("StepLR: invalid gamma"));
    }
    for (std::int64_t s : {std::int64_t(0), std::int64_t(-1), std::numeric_limits<std::int64_t>::min()})
        CHECK_THROWS_WITH(StepLR(opt, s), Catch::Contains("StepLR: invalid step_size"));
    CHECK_THROWS_WITH(WarmupCosineLR(opt, -1, 10), Catch::Contains("WarmupCosineLR: invalid warmup_steps -1"));
    CHECK_THROWS_WITH(WarmupCosineLR(opt, 0, -5), Catch::Contains("total_steps -5"));
    CHECK_THROWS_WITH(WarmupCosineLR(opt, 0, 0), Catch::Contains("total_steps 0"));
    for (double v : {kNaN, kInf, -kInf, -1.0, 0.2}) {
        INFO("min_lr " << v);
        CHECK_THROWS_WITH(WarmupCosineLR(opt, 1, 3, v), Catch::Contains("WarmupCosineLR: invalid min_lr"));
    }
    CHECK(opt.lr() == 0.1);

    SECTION("warm-up as long as the schedule, and warm-up 0 over one step, are fine") {
        WarmupCosineLR all_warmup(opt, 3, 3, 0.01);
        std::vector<double> lrs{opt.lr()};
        for (int i = 0; i < 4; ++i) {
            all_warmup.step();
            lrs.push_back(opt.lr());
        }
        CHECK_THAT(lrs, Catch::Matchers::Approx(std::vector<double>{0.1 / 3, 0.2 / 3, 0.1, 0.01, 0.01}));
        opt.set_lr(0.1);
        WarmupCosineLR one(opt, 0, 1);
        CHECK(opt.lr() == 0.1);
        one.step();
        CHECK(opt.lr() == 0.0);
    }
    SECTION("a StepLR growing past the largest double stops with an error, leaving the lr as it was") {
        opt.set_lr(1e300);
        StepLR grow(opt, 1, 1e5);
        grow.step();
        const double big = 1e300 * 1e5;
        CHECK(opt.lr() == big);
        CHECK_THROWS_WITH(grow.step(), Catch::Contains("StepLR: the lr at epoch 2 is inf"));
        CHECK(opt.lr() == big);
        CHECK(grow.last_epoch() == 1);
        CHECK(grow.get_last_lr() == big);
    }
    SECTION("a schedule's state with a non-finite or negative base_lr, or a negative epoch, is refused") {
        StepLR sched(opt, 2, 0.5);
        sched.step();
        const NamedTensors good = sched.state_dict();
        for (double v : {kNaN, kInf, -kInf, -1.0}) {
            INFO("base_lr " << v);
            NamedTensors bad = {good[0], {"base_lr", tensor(v, kFloat64)}};
            CHECK_THROWS_WITH(sched.load_state_dict(bad), Catch::Contains("'base_lr' must be a 0-d float64, finite"));
        }
        NamedTensors bad = {{"last_epoch", from_vector(std::vector<std::int64_t>{-3}, Shape{})}, good[1]};
        CHECK_THROWS_WITH(sched.load_state_dict(bad), Catch::Contains("'last_epoch' must be a 0-d int64 count >= 0"));
        CHECK(sched.last_epoch() == 1);
        CHECK(opt.lr() == 0.1);
    }
    SECTION("a restored state whose lr would overflow is refused whole") {
        opt.set_lr(1.0);
        StepLR grow(opt, 1, 10.0);
        const NamedTensors far = {{"last_epoch", from_vector(std::vector<std::int64_t>{400}, Shape{})},
                                  {"base_lr", tensor(2.0, kFloat64)}};
        CHECK_THROWS_WITH(grow.load_state_dict(far), Catch::Contains("StepLR: the lr at epoch 400 is inf"));
        CHECK(grow.base_lr() == 1.0);
        CHECK(grow.last_epoch() == 0);
        CHECK(opt.lr() == 1.0);
        // base_lr 0: every lr is 0, not 0·inf = NaN, however far gamma^k has overflowed.
        grow.load_state_dict({{"last_epoch", from_vector(std::vector<std::int64_t>{400}, Shape{})},
                              {"base_lr", tensor(0.0, kFloat64)}});
        CHECK(opt.lr() == 0.0);
        grow.step();
        CHECK(opt.lr() == 0.0);
        // The last epoch an int64 can count: one more step would wrap.
        WarmupCosineLR cosine(opt, 0, 10);
        cosine.load_state_dict({{"last_epoch", from_vector(std::vector<std::int64_t>{INT64_MAX}, Shape{})},
                                {"base_lr", tensor(0.5, kFloat64)}});
        CHECK(opt.lr() == 0.0);
        CHECK_THROWS_WITH(cosine.step(), Catch::Contains("WarmupCosineLR: step: the epoch count would overflow"));
    }
}

TEST_CASE("a NaN gradient propagates into the parameter, as in torch, without an error", "[optim-hostile]") {
    for (const auto& [name, make] : stateful_optimizers()) {
        for (double bad : {kNaN, kInf}) {
            INFO(name << " gradient " << bad);
            Tensor p = from_vector({1.0, 2.0, 3.0}, {3}, TensorOptions(kFloat32).requires_grad(true));
            auto opt = make({p});
            p.set_grad(from_vector({bad, 0.5, -0.5}, {3}, kFloat32));
            CHECK_NOTHROW(opt->step());
            const auto v = vals(p);
            CHECK(!std::isfinite(v[0]));  // NaN (or ±inf, for SGD's plain step of an infinite gradient)
            CHECK(std::isfinite(v[1]));
            CHECK(std::isfinite(v[2]));
        }
    }
}

TEST_CASE("parameter lists: none, the same twice, one that does not require grad", "[optim-hostile]") {
    Tensor w = param({2});
    for (const auto& [name, make] : stateful_optimizers()) {
        INFO(name);
        CHECK_THROWS_WITH(make({}), Catch::Contains("got an empty parameter list"));
        CHECK_THROWS_WITH(make({w, param({1}), w}), Catch::Contains("parameters 0 and 2 are the same tensor"));
        // A copy of the handle is the same tensor too.
        Tensor alias = w;
        CHECK_THROWS_WITH(make({w, alias}), Catch::Contains("parameters 0 and 1 are the same tensor"));
        // Without requires_grad it never gets a gradient from backward: accepted, skipped (torch).
        Tensor frozen = from_vector({1.0, 2.0}, {2}, kFloat64);
        auto opt = make({frozen, w});
        w.set_grad(ones({2}, kFloat64));
        opt->step();
        CHECK(vals(frozen) == std::vector<double>{1.0, 2.0});
        CHECK(vals(w) != vals(param({2})));
        w.zero_grad();
    }
}

TEST_CASE("the optimizer state follows a module converted to float64 and back", "[optim-hostile]") {
    for (const auto& [name, make] : stateful_optimizers()) {
        INFO(name);
        Generator gen(7);
        nn::Linear layer(3, 2, true, gen);
        auto opt = make(layer.parameters());
        const Tensor x = uniform({4, 3}, -1, 1, kFloat32, gen);
        auto train_step = [&](Dtype dtype) {
            opt->zero_grad();
            sum(layer.forward(x.to(dtype)) * layer.forward(x.to(dtype))).backward();
            opt->step();
        };
        train_step(kFloat32);
        train_step(kFloat32);

        // The reference: a float64 copy of the model whose optimizer loads the float32 state
        // (load_state_dict converts), then one step with the same gradient.
        Generator gen2(7);
        nn::Linear twin(3, 2, true, gen2);
        twin.to(kFloat64);
        const auto tp = twin.parameters();
        for (std::size_t i = 0; i < tp.size(); ++i) tp[i].set_data(layer.parameters()[i].to(kFloat64));
        auto twin_opt = make(twin.parameters());
        twin_opt->load_state_dict(opt->state_dict());

        layer.to(kFloat64);
        REQUIRE_NOTHROW(train_step(kFloat64));  // was "array: tensor holds float32, asked for float64"
        twin_opt->zero_grad();
        sum(twin.forward(x.to(kFloat64)) * twin.forward(x.to(kFloat64))).backward();
        twin_opt->step();

        for (std::size_t i = 0; i < tp.size(); ++i) CHECK(vals(layer.parameters()[i]) == vals(tp[i]));
        for (const auto& [k, t] : opt->state_dict())
            if (k.rfind("state.", 0) == 0 && k.find(".step") == std::string::npos) CHECK(t.dtype() == kFloat64);
        CHECK(snapshot(*opt) == snapshot(*twin_opt));

        layer.to(kFloat32);
        REQUIRE_NOTHROW(train_step(kFloat32));
        for (const auto& [k, t] : opt->state_dict())
            if (k.rfind("state.", 0) == 0 && k.find(".step") == std::string::npos) CHECK(t.dtype() == kFloat32);
        for (const Tensor& p : layer.parameters())
            for (double v : vals(p)) CHECK(std::isfinite(v));
    }
}

TEST_CASE("a parameter that changed shape under the optimizer is refused, before anything moves",
          "[optim-hostile]") {
    for (const auto& [name, make] : stateful_optimizers()) {
        for (const Shape& shape : {Shape{5}, Shape{2}, Shape{}, Shape{0}, Shape{3, 1}}) {
            INFO(name << " new shape " << shape_str(shape));
            Tensor a = param({4}, -1, 1, 1);
            Tensor b = param({3}, -1, 1, 2);
            auto opt = make({a, b});
            a.set_grad(ones({4}, kFloat64));
            b.set_grad(ones({3}, kFloat64));
            opt->step();
            const auto state_before = snapshot(*opt);
            const auto a_before = vals(a);

            b.set_data(zeros(shape, kFloat64));  // e.g. a model's load_state_dict with another shape
            a.set_grad(ones({4}, kFloat64));
            b.set_grad(ones(shape, kFloat64));
            CHECK_THROWS_WITH(opt->step(), Catch::Contains(opt->name() + ".step: parameter 1 now has shape " +
                                                           shape_str(shape)) &&
                                               Catch::Contains("was made for shape (3,)") &&
                                               Catch::Contains("make a new optimizer"));
            CHECK(vals(a) == a_before);  // parameter 0, before the changed one, did not move
            CHECK(snapshot(*opt) == state_before);

            // Without a gradient the changed parameter is skipped, and the others step.
            b.zero_grad();
            CHECK_NOTHROW(opt->step());
            CHECK(vals(a) != a_before);

            // A fresh optimizer for the new shape works.
            auto fresh = make({a, b});
            b.set_grad(ones(shape, kFloat64));
            CHECK_NOTHROW(fresh->step());
        }
    }
}

TEST_CASE("a shape change before the first step needs nothing: state starts at the step", "[optim-hostile]") {
    for (const auto& [name, make] : stateful_optimizers()) {
        INFO(name);
        Tensor p = param({3});
        auto opt = make({p});
        p.set_data(zeros({2, 2}, kFloat32));
        p.set_grad(ones({2, 2}, kFloat32));
        CHECK_NOTHROW(opt->step());
        for (const auto& [k, t] : opt->state_dict())
            if (k.rfind("state.0.", 0) == 0 && k != "state.0.step") {
                CHECK(t.shape() == Shape{2, 2});
                CHECK(t.dtype() == kFloat32);
            }
    }
}

TEST_CASE("load_state_dict converts float buffers to the parameter's dtype, as torch", "[optim-hostile]") {
    for (const auto& [name, make] : stateful_optimizers()) {
        INFO(name);
        Tensor p32 = from_vector({0.5, -1.0, 2.0}, {3}, TensorOptions(kFloat32).requires_grad(true));
        auto opt32 = make({p32});
        p32.set_grad(from_vector({0.25, 1.0, -0.5}, {3}, kFloat32));
        opt32->step();

        Tensor p64 = p32.detach().to(kFloat64).requires_grad_();
        auto opt64 = make({p64});
        opt64->load_state_dict(opt32->state_dict());
        for (const auto& [k, t] : opt64->state_dict())
            if (k.rfind("state.0.", 0) == 0 && k != "state.0.step") CHECK(t.dtype() == kFloat64);
        // Converted exactly: the same values as the float32 state.
        CHECK(snapshot(*opt64) == snapshot(*opt32));
        // Integer buffers are still refused.
        NamedTensors bad = opt32->state_dict();
        for (auto& [k, t] : bad)
            if (k.rfind("state.0.", 0) == 0 && k != "state.0.step") t = zeros({3}, kInt64);
        CHECK_THROWS_WITH(opt64->load_state_dict(bad), Catch::Contains("is int64 (3,), but parameter 0 is float64"));
    }
}

TEST_CASE("a loaded Adam state with NaN moments or negative second moments is refused", "[optim-hostile]") {
    for (bool amsgrad : {false, true}) {
        Tensor w = from_vector({1.0, 2.0}, {2}, kFloat64).requires_grad_();
        Adam opt({w}, AdamOptions(0.1).amsgrad(amsgrad));
        w.set_grad(ones({2}, kFloat64));
        opt.step();
        const NamedTensors good = opt.state_dict();
        for (const char* buffer : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
            if (!amsgrad && std::string(buffer) == "max_exp_avg_sq") continue;
            for (double bad : {std::nan(""), double(INFINITY), -1.0}) {
                if (std::string(buffer) == "exp_avg" && bad == -1.0) continue;  // a first moment may be negative
                INFO(buffer << " " << bad << " amsgrad " << amsgrad);
                NamedTensors state = good;
                for (auto& [key, t] : state)
                    if (key == std::string("state.0.") + buffer) t = from_vector({bad, 0.5}, {2}, kFloat64);
                CHECK_THROWS_WITH(opt.load_state_dict(state), Catch::Contains(std::string("state.0.") + buffer) &&
                                                                  Catch::Contains("at flat index 0; expected finite"));
                opt.load_state_dict(good);  // the refused state changed nothing
            }
        }
    }
}

TEST_CASE("a loaded step count past 2^53 is refused before it can overflow", "[optim-hostile]") {
    Tensor w = from_vector({1.0, 2.0}, {2}, kFloat64).requires_grad_();
    Adam opt({w}, AdamOptions(0.1));
    w.set_grad(ones({2}, kFloat64));
    opt.step();
    NamedTensors state = opt.state_dict();
    for (std::int64_t bad : {std::numeric_limits<std::int64_t>::max(), (std::int64_t{1} << 53) + 1}) {
        for (auto& [key, t] : state)
            if (key == "state.0.step") t = from_vector(std::vector<std::int64_t>{bad}, {});
        CHECK_THROWS_WITH(opt.load_state_dict(state), Catch::Contains("must be a 0-d int64 count in [1, 2^53]"));
    }
}
