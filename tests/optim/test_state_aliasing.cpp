// What an optimizer and a schedule hand out, written through: the parameters and the state
// buffers alias (as torch's), the numbers come as copies (as the doc comments say).
#include "helpers.hpp"
#include "optim/adam.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/sgd.hpp"

using namespace xgrad;
using namespace xgrad::optim;
using namespace xgrad::test;

TEST_CASE("Optimizer::parameters() are the parameters themselves", "[optim][alias]") {
    Tensor w = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    SGD opt({w}, SGDOptions(0.1));
    CHECK(opt.parameters()[0].is_same(w));
    {
        NoGradGuard no_grad;
        opt.parameters()[0].mul_(3);
    }
    CHECK_THAT(vals(w), approx({3.0, 6.0}));
}

TEST_CASE("an optimizer's state_dict buffers alias its state, its numbers are copies", "[optim][alias][state]") {
    Tensor w = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Adam opt({w}, AdamOptions(0.1));
    w.set_grad(ones({2}, kFloat64));
    opt.step();
    const NamedTensors state = opt.state_dict();
    const Tensor exp_avg = find_entry(state, "state.0.exp_avg");
    CHECK_THAT(vals(exp_avg), approx({0.1, 0.1}));  // (1 − β1)·g
    // A later step shows in the entry...
    opt.step();
    CHECK_THAT(vals(exp_avg), approx({0.19, 0.19}));
    // ...and a write through it is what the next step reads: m = 0 and g = 0 leave m at 0.
    exp_avg.zero_();
    find_entry(state, "state.0.exp_avg_sq").fill_(1.0);
    w.grad().zero_();
    opt.step();
    CHECK_THAT(vals(find_entry(opt.state_dict(), "state.0.exp_avg")), approx({0.0, 0.0}));
    // The numbers: writing them changes nothing, as their doc says.
    find_entry(state, "adam.lr").fill_(5.0);
    find_entry(state, "state.0.step").fill_(100);
    CHECK(opt.lr() == 0.1);
    CHECK(find_entry(opt.state_dict(), "state.0.step").item<std::int64_t>() == 3);

    Tensor v = tensor({1.0}, kFloat64).requires_grad_();
    SGD sgd({v}, SGDOptions(0.1).momentum(0.9));
    v.set_grad(ones({1}, kFloat64));
    sgd.step();
    find_entry(sgd.state_dict(), "state.0.momentum_buffer").fill_(10.0);
    sgd.step();  // buffer = 0.9·10 + 1 = 10; v = 0.9 − 0.1·10
    CHECK(v.item<double>() == Approx(-0.1));
}

TEST_CASE("a schedule's state_dict holds copies of its numbers", "[optim][alias][lr]") {
    Tensor w = tensor({1.0}, kFloat64).requires_grad_();
    SGD opt({w}, SGDOptions(0.1));
    StepLR sched(opt, 1, 0.5);
    sched.step();
    NamedTensors state = sched.state_dict();
    find_entry(state, "last_epoch").fill_(7);
    CHECK(sched.last_epoch() == 1);
    CHECK(opt.lr() == 0.05);
}
