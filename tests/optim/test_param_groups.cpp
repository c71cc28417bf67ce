// Parameter groups (torch's param_groups): per-group options step exactly as separately
// configured optimizers, torch's AdamW decay / no-decay numbers, add_param_group's refusals,
// schedules per group, and state round trips with their refusals.
#include <algorithm>
#include <filesystem>
#include <memory>

#include "core/io/npz.hpp"
#include "helpers.hpp"
#include "nn/linear.hpp"
#include "optim/adam.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/sgd.hpp"

using namespace xgrad;
using namespace xgrad::optim;
using namespace xgrad::test;

namespace {

Tensor leaf(const std::vector<double>& v, const Shape& shape, Dtype dtype = kFloat64) {
    return from_vector(v, shape, TensorOptions(dtype).requires_grad(true));
}

// w (2, 3) and b (2,), nanoGPT's two kinds of parameter, and their gradients for three steps.
const std::vector<double> W = {0.5, -1.0, 2.0, 0.25, 1.5, -0.75};
const std::vector<double> B = {0.1, -0.2};
const std::vector<std::vector<double>> GW = {{0.1, -0.2, 0.3, -0.4, 0.5, -0.6},
                                             {1.0, 0.001, -0.5, 0.2, -2.0, 0.05},
                                             {-0.05, 0.0005, 0.02, 0.6, 0.1, -1.0}};
const std::vector<std::vector<double>> GB = {{0.5, -0.5}, {2.0, -1.0}, {0.25, 1.0}};

// Gives each tensor its step-s gradient exactly: d(sum(p * g))/dp = g.
void set_grads(const std::vector<Tensor>& ws, const std::vector<Tensor>& bs, std::size_t s) {
    Tensor loss;
    for (const Tensor& w : ws) {
        Tensor term = (w * from_vector(GW[s], {2, 3}, w.dtype())).sum();
        loss = loss.defined() ? loss + term : term;
    }
    for (const Tensor& b : bs) loss = loss + (b * from_vector(GB[s], {2}, b.dtype())).sum();
    loss.backward();
}

}  // namespace

TEST_CASE("per-group options step exactly as separately configured optimizers", "[optim][param-groups]") {
    for (Dtype dtype : {kFloat32, kFloat64}) {
        INFO(dtype_name(dtype));
        Tensor w1 = leaf(W, {2, 3}, dtype), b1 = leaf(B, {2}, dtype);  // in one grouped optimizer
        Tensor w2 = leaf(W, {2, 3}, dtype), b2 = leaf(B, {2}, dtype);  // in two separate ones
        SECTION("AdamW: decay and no-decay, lr and amsgrad apart") {
            AdamW grouped({{{w1}, AdamWOptions().weight_decay(0.1)},
                           {{b1}, AdamWOptions(1e-2).weight_decay(0.0).amsgrad(true)}},
                          AdamWOptions(3e-2).betas({0.9, 0.95}));
            AdamW decay({w2}, AdamWOptions(3e-2).betas({0.9, 0.95}).weight_decay(0.1));
            AdamW no_decay({b2}, AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(0.0).amsgrad(true));
            for (std::size_t s = 0; s < 3; ++s) {
                grouped.zero_grad(), decay.zero_grad(), no_decay.zero_grad();
                set_grads({w1, w2}, {b1, b2}, s);
                grouped.step(), decay.step(), no_decay.step();
                CHECK(w1.to_vector<double>() == w2.to_vector<double>());
                CHECK(b1.to_vector<double>() == b2.to_vector<double>());
            }
        }
        SECTION("Adam: L2 decay in one group only") {
            Adam grouped({{{w1}, AdamOptions().weight_decay(0.5)}, {{b1}}}, AdamOptions(0.1));
            Adam a({w2}, AdamOptions(0.1).weight_decay(0.5)), b({b2}, AdamOptions(0.1));
            for (std::size_t s = 0; s < 3; ++s) {
                grouped.zero_grad(), a.zero_grad(), b.zero_grad();
                set_grads({w1, w2}, {b1, b2}, s);
                grouped.step(), a.step(), b.step();
                CHECK(w1.to_vector<double>() == w2.to_vector<double>());
                CHECK(b1.to_vector<double>() == b2.to_vector<double>());
            }
        }
        SECTION("SGD: nesterov momentum and decay against plain SGD") {
            SGD grouped({{{w1}, SGDOptions().momentum(0.9).nesterov(true).weight_decay(1e-2)}, {{b1}, SGDOptions(0.5)}},
                        SGDOptions(0.1));
            SGD a({w2}, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-2)), b({b2}, SGDOptions(0.5));
            for (std::size_t s = 0; s < 3; ++s) {
                grouped.zero_grad(), a.zero_grad(), b.zero_grad();
                set_grads({w1, w2}, {b1, b2}, s);
                grouped.step(), a.step(), b.step();
                CHECK(w1.to_vector<double>() == w2.to_vector<double>());
                CHECK(b1.to_vector<double>() == b2.to_vector<double>());
            }
        }
    }
}

TEST_CASE("AdamW with decay and no-decay groups gives torch's values", "[optim][param-groups]") {
    // torch 1.13: AdamW([{'params': [w], 'weight_decay': 0.1}, {'params': [b], 'weight_decay': 0.0}],
    //                   lr=3e-2, betas=(0.9, 0.95)), three steps with the gradients GW, GB
    struct Case {
        Dtype dtype;
        std::vector<double> w, b;
        double tolerance;
    };
    const Case cases[] = {
        {kFloat64,
         {0.42409367403600245, -0.92521802459282487, 1.9671516986652287, 0.27402764218336562, 1.4853249929241059,
          -0.67171244868804292},
         {0.021056564181600543, -0.13739432913973651},
         1e-15},
        {kFloat32,
         {0.42409363389015198, -0.92521804571151733, 1.9671516418457031, 0.27402764558792114, 1.4853248596191406,
          -0.67171233892440796},
         {0.021056568250060081, -0.13739433884620667},
         1e-6}};
    for (const Case& c : cases) {
        INFO(dtype_name(c.dtype));
        Tensor w = leaf(W, {2, 3}, c.dtype), b = leaf(B, {2}, c.dtype);
        AdamW opt({{{w}, AdamWOptions().weight_decay(0.1)}, {{b}, AdamWOptions().weight_decay(0.0)}},
                  AdamWOptions(3e-2).betas({0.9, 0.95}));
        for (std::size_t s = 0; s < 3; ++s) {
            opt.zero_grad();
            set_grads({w}, {b}, s);
            opt.step();
        }
        CHECK_THAT(w.to_vector<double>(), Catch::Matchers::Approx(c.w).epsilon(c.tolerance).margin(c.tolerance));
        CHECK_THAT(b.to_vector<double>(), Catch::Matchers::Approx(c.b).epsilon(c.tolerance).margin(c.tolerance));
    }
}

TEST_CASE("a group's options override the defaults only in the fields they set", "[optim][param-groups]") {
    Tensor w = leaf(W, {2, 3}), b = leaf(B, {2});
    AdamW opt({{{w}}, {{b}, AdamWOptions().weight_decay(0.0)}}, AdamWOptions(3e-4).betas({0.9, 0.95}));
    REQUIRE(opt.num_param_groups() == 2);
    REQUIRE(opt.param_groups().size() == 2);
    const AdamWOptions& g0 = opt.param_groups()[0].options();
    const AdamWOptions& g1 = opt.param_groups()[1].options();
    CHECK(g0.lr() == 3e-4);
    CHECK(g0.weight_decay() == 1e-2);  // AdamW's own default, through the defaults
    CHECK(g1.lr() == 3e-4);
    CHECK(g1.weight_decay() == 0.0);
    CHECK(g1.betas() == std::pair<double, double>(0.9, 0.95));
    CHECK(opt.param_groups()[1].params().size() == 1);
    CHECK(opt.param_groups()[1].params()[0].is_same(b));
    CHECK(opt.parameters().size() == 2);
    CHECK(opt.group_of(1) == 1);
    CHECK(opt.defaults().lr() == 3e-4);
    CHECK(opt.lr() == 3e-4);  // shared by both groups

    SECTION("per-group lr, read and set") {
        for (auto& group : opt.param_groups()) group.options().lr(1e-3);
        CHECK(opt.lr(0) == 1e-3);
        opt.set_lr(1, 5e-4);
        CHECK(opt.lr(1) == 5e-4);
        CHECK_THROWS_WITH(opt.lr(), Catch::Contains("AdamW.lr: parameter groups 0 and 1 have different learning rates"));
        CHECK_THROWS_WITH(opt.options(), Catch::Contains("AdamW.options: the optimizer has 2 parameter groups"));
        CHECK_THROWS_WITH(opt.lr(2), Catch::Contains("AdamW.lr: there is no parameter group 2 (the optimizer has 2)"));
        CHECK_THROWS_WITH(opt.set_lr(2, 0.1), Catch::Contains("there is no parameter group 2"));
        CHECK_THROWS_WITH(opt.set_lr(0, -1.0), Catch::Contains("invalid learning rate -1"));
        CHECK_THROWS_WITH(opt.param_groups().at(2), Catch::Contains("there is no group 2"));
        opt.set_lr(0.25);  // every group, as `for g in opt.param_groups: g['lr'] = 0.25`
        CHECK(opt.lr(0) == 0.25);
        CHECK(opt.lr(1) == 0.25);
    }
    SECTION("a group with lr 0 stands still while the other trains") {
        opt.param_groups()[1].options().lr(0.0);
        set_grads({w}, {b}, 0);
        opt.step();
        CHECK(b.to_vector<double>() == B);
        CHECK(w.to_vector<double>() != W);
    }
    SECTION("an option made invalid through param_groups is refused at step, naming the group, nothing moved") {
        opt.param_groups()[1].options().betas({0.9, 1.0});
        set_grads({w}, {b}, 0);
        CHECK_THROWS_WITH(opt.step(), Catch::Contains("AdamW: invalid beta2 1") &&
                                          Catch::Contains("in parameter group 1"));
        CHECK(w.to_vector<double>() == W);
        CHECK(opt.state_dict().size() == 1 + 1 + 2 * 7);  // no state: nothing was stepped
    }
}

TEST_CASE("SGD takes lr from each group when the defaults have none, as torch's `required`", "[optim][param-groups]") {
    Tensor w = leaf(W, {2, 3}), b = leaf(B, {2});
    SGD opt({{{w}, SGDOptions(0.1)}, {{b}, SGDOptions(0.01)}}, SGDOptions().momentum(0.5));
    CHECK(opt.lr(0) == 0.1);
    CHECK(opt.param_groups()[1].options().momentum() == 0.5);
    CHECK_THROWS_WITH((SGD({{{w}, SGDOptions(0.1)}, {{b}}}, SGDOptions())),
                      Catch::Contains("parameter group didn't specify a value of required optimization parameter lr") &&
                          Catch::Contains("in parameter group 1"));
    CHECK_THROWS_WITH((SGD({{{w}, SGDOptions().momentum(0.5).nesterov(true).dampening(0.1)}}, SGDOptions(0.1))),
                      Catch::Contains("nesterov momentum requires") && Catch::Contains("in parameter group 0"));
    // defaults are checked even when every group overrides them, as torch
    CHECK_THROWS_WITH((SGD({{{w}, SGDOptions(0.1)}}, SGDOptions(-1.0))), Catch::Contains("invalid learning rate -1"));
}

TEST_CASE("add_param_group refuses what the constructor refuses, and a parameter already in a group",
          "[optim][param-groups]") {
    Tensor w = leaf(W, {2, 3}), b = leaf(B, {2}), other = leaf({1.0}, {1});
    Adam opt({{{w}}}, AdamOptions(0.1));
    const auto unchanged = [&] {
        CHECK(opt.num_param_groups() == 1);
        CHECK(opt.parameters().size() == 1);
        CHECK(opt.param_groups().size() == 1);
    };
    CHECK_THROWS_WITH(opt.add_param_group({{b, w}}),
                      Catch::Contains("Adam.add_param_group: parameter 1 of group 1 is already in parameter group 0 "
                                      "(its parameter 0): some parameters appear in more than one parameter group"));
    unchanged();
    CHECK_THROWS_WITH(opt.add_param_group({std::vector<Tensor>{}}),
                      Catch::Contains("Adam.add_param_group: parameter group 1 is empty"));
    unchanged();
    CHECK_THROWS_WITH(opt.add_param_group({{b, b}}), Catch::Contains("parameters 0 and 1 of group 1 are the same tensor"));
    unchanged();
    CHECK_THROWS_WITH(opt.add_param_group({{b * 2.0}}),
                      Catch::Contains("parameter 0 of group 1 is not a leaf (made by 'mul')"));
    unchanged();
    CHECK_THROWS_WITH(opt.add_param_group({{ones({2}, kInt64)}}), Catch::Contains("parameter 0 of group 1 is int64"));
    unchanged();
    CHECK_THROWS_WITH(opt.add_param_group({{Tensor()}}), Catch::Contains("parameter 0 of group 1 is an undefined tensor"));
    unchanged();
    CHECK_THROWS_WITH(opt.add_param_group({{b}, AdamOptions().eps(0)}),
                      Catch::Contains("Adam: invalid eps 0") && Catch::Contains("in parameter group 1"));
    unchanged();
    // the constructor's groups are checked alike
    CHECK_THROWS_WITH((Adam({{{w}}, {{b, w}}})), Catch::Contains("some parameters appear in more than one parameter group"));
    CHECK_THROWS_WITH((Adam(std::vector<Adam::Group>{})), Catch::Contains("Adam: got no parameter groups"));
    CHECK_THROWS_WITH((AdamW({{{w}}, {std::vector<Tensor>{}}})), Catch::Contains("AdamW: parameter group 1 is empty"));

    // accepted: the new group takes the defaults where it sets nothing, and trains from its first step
    opt.add_param_group({{b}, AdamOptions().weight_decay(0.5)});
    opt.add_param_group({{other}});
    CHECK(opt.num_param_groups() == 3);
    CHECK(opt.lr(1) == 0.1);
    CHECK(opt.param_groups()[1].options().weight_decay() == 0.5);
    set_grads({w}, {b}, 0);
    opt.step();
    CHECK(b.to_vector<double>() != B);
    CHECK(other.to_vector<double>() == std::vector<double>{1.0});  // no gradient: skipped
}

TEST_CASE("schedules scale each group from its own base lr", "[optim][param-groups]") {
    Tensor w = leaf(W, {2, 3}), b = leaf(B, {2});
    SGD opt({{{w}, SGDOptions(0.1)}, {{b}, SGDOptions(0.02)}}, SGDOptions());
    SECTION("StepLR") {
        StepLR sched(opt, 2, 0.5);
        CHECK(sched.base_lrs() == std::vector<double>{0.1, 0.02});
        for (int s = 0; s < 4; ++s) sched.step();
        CHECK(opt.lr(0) == 0.1 * 0.25);
        CHECK(opt.lr(1) == 0.02 * 0.25);
        CHECK(sched.get_last_lrs() == std::vector<double>{0.1 * 0.25, 0.02 * 0.25});
        CHECK(sched.get_last_lr() == 0.1 * 0.25);

        // a restored schedule sets each group's lr
        SGD other({{{w}, SGDOptions(1.0)}, {{b}, SGDOptions(1.0)}}, SGDOptions());
        StepLR restored(other, 2, 0.5);
        restored.load_state_dict(sched.state_dict());
        CHECK(other.lr(0) == opt.lr(0));
        CHECK(other.lr(1) == opt.lr(1));
        CHECK(restored.base_lrs() == sched.base_lrs());

        // a state for another number of groups is refused, naming both counts
        SGD single({w}, 0.1);
        StepLR one(single, 2, 0.5);
        CHECK_THROWS_WITH(one.load_state_dict(sched.state_dict()),
                          Catch::Contains("StepLR.load_state_dict: 'base_lr' holds 2 base lrs") &&
                              Catch::Contains("has 1 parameter group"));
        CHECK_THROWS_WITH(restored.load_state_dict(one.state_dict()),
                          Catch::Contains("'base_lr' holds 1 base lr") && Catch::Contains("has 2 parameter groups"));
        CHECK(other.lr(1) == opt.lr(1));
    }
    SECTION("WarmupCosineLR") {
        WarmupCosineLR sched(opt, 2, 10, 0.001);
        CHECK(opt.lr(0) == 0.1 / 2);
        CHECK(opt.lr(1) == 0.02 / 2);
        for (int s = 0; s < 12; ++s) sched.step();
        CHECK(opt.lr(0) == 0.001);
        CHECK(opt.lr(1) == 0.001);
        CHECK_THROWS_WITH(WarmupCosineLR(opt, 2, 10, 0.05), Catch::Contains("its lowest group's"));
    }
    SECTION("a group added after the schedule is refused at its step, not left unscheduled") {
        Tensor c = leaf({1.0}, {1});
        StepLR sched(opt, 2, 0.5);
        opt.add_param_group({{c}, SGDOptions(0.3)});
        CHECK_THROWS_WITH(sched.step(), Catch::Contains("StepLR.step: the optimizer has 3 parameter groups, the "
                                                        "schedule was made for 2"));
        CHECK(sched.last_epoch() == 0);
        CHECK(opt.lr(0) == 0.1);
    }
}

TEST_CASE("a grouped optimizer's state round-trips, through .npz too, and resumes bit for bit",
          "[optim][param-groups]") {
    const auto make = [](Tensor w, Tensor b) {
        return std::make_unique<AdamW>(
            std::vector<AdamW::Group>{{{w}, AdamWOptions().weight_decay(0.1).amsgrad(true)},
                                      {{b}, AdamWOptions(1e-2).weight_decay(0.0)}},
            AdamWOptions(3e-2));
    };
    Tensor w1 = leaf(W, {2, 3}), b1 = leaf(B, {2});
    auto opt = make(w1, b1);
    for (std::size_t s = 0; s < 2; ++s) {
        opt->zero_grad();
        set_grads({w1}, {b1}, s);
        opt->step();
    }
    const NamedTensors state = opt->state_dict();
    const auto has = [&](const std::string& key) {
        for (const auto& [k, t] : state)
            if (k == key) return true;
        return false;
    };
    CHECK(has("adamw.num_groups"));
    CHECK(has("adamw.param_groups.0.amsgrad"));
    CHECK(has("adamw.param_groups.1.lr"));
    CHECK(has("adamw.param_groups.1.params"));
    CHECK(has("state.0.max_exp_avg_sq"));
    CHECK_FALSE(has("state.1.max_exp_avg_sq"));
    CHECK_FALSE(has("adamw.lr"));

    const std::string path = (std::filesystem::temp_directory_path() / "xgrad_test_param_groups.npz").string();
    save_npz(path, state);
    Tensor w2 = leaf(w1.to_vector<double>(), {2, 3}), b2 = leaf(b1.to_vector<double>(), {2});
    // a fresh optimizer with other options: the state brings each group's
    auto resumed = std::make_unique<AdamW>(std::vector<AdamW::Group>{{{w2}, AdamWOptions().amsgrad(true)}, {{b2}}},
                                           AdamWOptions(0.5));
    resumed->load_state_dict(load_npz(path));
    std::filesystem::remove(path);
    CHECK(resumed->lr(1) == 1e-2);
    CHECK(resumed->param_groups()[0].options().weight_decay() == 0.1);
    opt->zero_grad(), resumed->zero_grad();
    set_grads({w1, w2}, {b1, b2}, 2);
    opt->step(), resumed->step();
    CHECK(w1.to_vector<double>() == w2.to_vector<double>());
    CHECK(b1.to_vector<double>() == b2.to_vector<double>());
}

TEST_CASE("a grouped state that does not fit is refused, naming what differs, the optimizer unchanged",
          "[optim][param-groups]") {
    Tensor w = leaf(W, {2, 3}), b = leaf(B, {2}), c = leaf({1.0, 2.0}, {2});
    SGD two({{{w}, SGDOptions(0.1).momentum(0.9)}, {{b, c}, SGDOptions(0.2).momentum(0.9)}}, SGDOptions());
    set_grads({w}, {b}, 0);
    (c * 1.0).sum().backward();
    two.step();
    const NamedTensors state = two.state_dict();
    const auto rejects = [](Optimizer& target, const NamedTensors& s, const std::string& what) {
        const NamedTensors before = target.state_dict();
        CHECK_THROWS_WITH(target.load_state_dict(s), Catch::Contains(what));
        CHECK(target.state_dict().size() == before.size());
    };
    SECTION("another number of groups, either way") {
        SGD one({w, b, c}, SGDOptions(0.1).momentum(0.9));
        rejects(one, state, "SGD.load_state_dict: the state has 2 parameter groups, this optimizer has 1");
        rejects(two, one.state_dict(), "SGD.load_state_dict: the state has 1 parameter group, this optimizer has 2");
        SGD three(std::vector<SGD::Group>{{{w}}, {{b}}, {{c}}}, SGDOptions(0.1));
        rejects(three, state, "the state has 2 parameter groups, this optimizer has 3");
    }
    SECTION("groups of other sizes") {
        SGD other({{{w, b}}, {{c}}}, SGDOptions(0.1).momentum(0.9));
        rejects(other, state, "SGD.load_state_dict: parameter group 0 has 1 parameters in the state, 2 in this optimizer");
    }
    SECTION("a parameter of another shape, named by its group") {
        Tensor b3 = leaf({1.0, 2.0, 3.0}, {3});
        SGD other({{{w}}, {{b3, c}}}, SGDOptions(0.1).momentum(0.9));
        rejects(other, state, "entry 'state.1.momentum_buffer' is float64 (2,), but parameter 1 (group 1's parameter 0) "
                              "is float64 (3,)");
    }
    SECTION("indices out of order, and a bad group option") {
        NamedTensors bad = state;
        for (auto& [k, t] : bad)
            if (k == "sgd.param_groups.1.params") t = from_vector(std::vector<std::int64_t>{2, 1}, {2});
        rejects(two, bad, "parameter group 1 lists parameter 2 as its parameter 0, expected 1");
        bad = state;
        for (auto& [k, t] : bad)
            if (k == "sgd.param_groups.1.lr") t = tensor(-1.0, kFloat64);
        rejects(two, bad, "invalid learning rate -1");
        rejects(two, bad, "in the state's parameter group 1");
        bad = state;
        for (auto& [k, t] : bad)
            if (k == "sgd.param_groups.0.params") t = tensor(0.0, kFloat64);
        rejects(two, bad, "entry 'sgd.param_groups.0.params' must be a 1-D int64 tensor");
    }
    CHECK(two.lr(1) == 0.2);
}

TEST_CASE("a single-group state keeps the layout from before groups, so old checkpoints load",
          "[optim][param-groups]") {
    Tensor w = leaf(W, {2, 3});
    Adam opt({w}, AdamOptions(0.1));
    // written by hand as a checkpoint from before parameter groups held it
    const NamedTensors old = {{"adam.num_params", from_vector(std::vector<std::int64_t>{1}, Shape{})},
                              {"adam.lr", tensor(0.05, kFloat64)},
                              {"adam.beta1", tensor(0.8, kFloat64)},
                              {"adam.beta2", tensor(0.99, kFloat64)},
                              {"adam.eps", tensor(1e-6, kFloat64)},
                              {"adam.weight_decay", tensor(0.0, kFloat64)},
                              {"adam.amsgrad", tensor(0.0, kFloat64)},
                              {"state.0.step", from_vector(std::vector<std::int64_t>{3}, Shape{})},
                              {"state.0.exp_avg", zeros({2, 3}, kFloat64)},
                              {"state.0.exp_avg_sq", zeros({2, 3}, kFloat64)}};
    opt.load_state_dict(old);
    CHECK(opt.lr() == 0.05);
    CHECK(opt.options().betas() == std::pair<double, double>(0.8, 0.99));
    std::vector<std::string> keys;
    for (const auto& [k, t] : opt.state_dict()) keys.push_back(k);
    std::vector<std::string> old_keys;
    for (const auto& [k, t] : old) old_keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    std::sort(old_keys.begin(), old_keys.end());
    CHECK(keys == old_keys);
}

TEST_CASE("README's port of nanoGPT's configure_optimizers compiles and groups as torch", "[optim][param-groups]") {
    auto model = std::make_shared<nn::Linear>(3, 2);
    std::vector<Tensor> decay, no_decay, head{leaf({1.0}, {1})};
    for (auto& [n, p] : model->named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    std::vector<optim::AdamW::Group> groups{{decay, optim::AdamWOptions().weight_decay(0.1)},
                                            {no_decay, optim::AdamWOptions().weight_decay(0.0)}};
    optim::AdamW opt(groups, optim::AdamWOptions(6e-4).betas({0.9, 0.95}));
    for (auto& g : opt.param_groups()) g.options().lr(1e-3);
    opt.add_param_group({head, optim::AdamWOptions(1e-2)});
    CHECK(opt.param_groups()[0].params()[0].is_same(model->weight()));
    CHECK(opt.param_groups()[1].options().weight_decay() == 0.0);
    CHECK(opt.param_groups()[1].options().betas() == std::pair<double, double>(0.9, 0.95));
    CHECK(opt.lr(1) == 1e-3);
    CHECK(opt.lr(2) == 1e-2);
}
