// Learning-rate schedules against hand-computed sequences.
#include <cmath>

#include "helpers.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/sgd.hpp"

using namespace xgrad;
using namespace xgrad::optim;
using namespace xgrad::test;

namespace {

// get_last_lr() after construction and after each of `steps` steps; checks it is the optimizer's lr.
std::vector<double> lrs(LRScheduler& sched, const Optimizer& opt, int steps) {
    std::vector<double> out{sched.get_last_lr()};
    for (int i = 0; i < steps; ++i) {
        sched.step();
        CHECK(opt.lr() == sched.get_last_lr());
        out.push_back(sched.get_last_lr());
    }
    return out;
}

}  // namespace

TEST_CASE("StepLR multiplies by gamma every step_size steps", "[optim][lr]") {
    SGD opt({param({2})}, 0.1);
    StepLR sched(opt, 2, 0.5);
    CHECK_THAT(lrs(sched, opt, 6), approx({0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125}, 1e-15));
    CHECK(sched.last_epoch() == 6);
}

TEST_CASE("WarmupCosineLR warms up linearly, then follows a cosine down to min_lr", "[optim][lr]") {
    SGD opt({param({2})}, 1.0);
    WarmupCosineLR sched(opt, 2, 6, 0.1);
    // Warm-up: 1/2, 2/2. Then q = 0, 1/4, 1/2, 3/4, 1 and beyond:
    // 0.1 + 0.9·(1 + cos(πq))/2 = 1, 0.1 + 0.9·0.85355339, 0.55, 0.1 + 0.9·0.14644661, 0.1, 0.1.
    CHECK_THAT(lrs(sched, opt, 7),
               approx({0.5, 1.0, 1.0, 0.8681980515339464, 0.55, 0.23180194846605358, 0.1, 0.1}, 1e-15));
}

TEST_CASE("WarmupCosineLR without warm-up starts at the base lr", "[optim][lr]") {
    SGD opt({param({2})}, 0.2);
    WarmupCosineLR sched(opt, 0, 2);
    CHECK_THAT(lrs(sched, opt, 3), approx({0.2, 0.1, 0.0, 0.0}, 1e-15));
}

TEST_CASE("a restored schedule continues with the same learning rates", "[optim][lr]") {
    SGD opt({param({2})}, 1.0);
    WarmupCosineLR sched(opt, 3, 20, 0.01);
    for (int i = 0; i < 5; ++i) sched.step();
    const auto saved = sched.state_dict();

    SGD other({param({2})}, 1.0);
    WarmupCosineLR restored(other, 3, 20, 0.01);
    restored.load_state_dict(saved);
    CHECK(restored.last_epoch() == 5);
    CHECK(other.lr() == opt.lr());
    for (int i = 0; i < 4; ++i) {
        sched.step();
        restored.step();
        CHECK(other.lr() == opt.lr());
    }
    CHECK_THROWS_WITH(restored.load_state_dict({saved[0]}), Catch::Contains("missing entry 'base_lr'"));
    CHECK_THROWS_WITH(restored.load_state_dict({saved[0], saved[1], {"gamma", tensor(1.0, kFloat64)}}),
                      Catch::Contains("WarmupCosineLR.load_state_dict: unexpected entry 'gamma'"));
    CHECK_THROWS_WITH(restored.load_state_dict({{"last_epoch", tensor(1.0, kFloat64)}, saved[1]}),
                      Catch::Contains("'last_epoch' must be a 0-d int64"));
}

TEST_CASE("schedules reject bad arguments", "[optim][lr][errors]") {
    SGD opt({param({2})}, 0.1);
    CHECK_THROWS_WITH(StepLR(opt, 0), Catch::Contains("StepLR: invalid step_size 0"));
    CHECK_THROWS_WITH(StepLR(opt, 2, 0.0), Catch::Contains("StepLR: invalid gamma 0"));
    CHECK_THROWS_WITH(WarmupCosineLR(opt, 5, 3), Catch::Contains("WarmupCosineLR: invalid warmup_steps 5 and "
                                                                 "total_steps 3"));
    CHECK_THROWS_WITH(WarmupCosineLR(opt, 0, 0), Catch::Contains("total_steps 0"));
    CHECK_THROWS_WITH(WarmupCosineLR(opt, 1, 3, 0.5), Catch::Contains("invalid min_lr 0.5"));
    CHECK(opt.lr() == 0.1);  // failed constructions leave the lr alone
}
