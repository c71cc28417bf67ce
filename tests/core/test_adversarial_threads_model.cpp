// One model, several threads: backward passes from several threads into the leaves they share
// accumulate as torch's do (the gradient is the sum of theirs), one graph gone through by two
// backward passes at once is refused with a message instead of freed under the other, and the
// model's and the optimiser's own state never races. Never a crash or a mixed-up result.
//
// Catch2's assertions are not thread-safe: the threads record what they saw, the test thread
// checks it after joining them. Under ThreadSanitizer (tools/check --tsan) these tests are the
// race detector's input.
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "concurrently.hpp"
#include "helpers.hpp"
#include "nn/linear.hpp"
#include "nn/multi_head_attention.hpp"
#include "optim/adam.hpp"
#include "optim/clip_grad.hpp"
#include "optim/sgd.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

// A Linear, a ReLU and a MultiHeadAttention (no dropout: the gradients are the same on any
// thread), on (batch, steps, 8) inputs.
struct Model {
    std::shared_ptr<nn::Linear> lin;
    std::shared_ptr<nn::MultiHeadAttention> mha;
    Model() {
        Generator g(7);
        lin = std::make_shared<nn::Linear>(8, 16, true, g);
        mha = std::make_shared<nn::MultiHeadAttention>(16, 16, 16, 16, 4, 0.0, false, g);
    }
    std::vector<Tensor> parameters() const {
        std::vector<Tensor> ps = lin->parameters();
        for (const Tensor& p : mha->parameters()) ps.push_back(p);
        return ps;
    }
    Tensor forward(const Tensor& x) const {
        const Tensor h = relu(lin->forward(x));
        return mha->forward(h, h, h);
    }
    Tensor loss(const Tensor& x) const {
        const Tensor y = forward(x);
        return mean(y * y);
    }
    void zero_grad() const {
        for (Tensor p : parameters()) p.zero_grad();
    }
    std::vector<std::vector<float>> grads() const {
        std::vector<std::vector<float>> out;
        for (const Tensor& p : parameters()) out.push_back(p.has_grad() ? p.grad().to_vector<float>() : std::vector<float>{});
        return out;
    }
};

Tensor batch(std::uint64_t seed) {
    Generator g(seed);
    return uniform({3, 5, 8}, -1, 1, kFloat32, g);
}


std::vector<std::vector<float>> sum_of(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    auto out = a;
    for (std::size_t i = 0; i < out.size(); ++i)
        for (std::size_t j = 0; j < out[i].size(); ++j) out[i][j] += b[i][j];
    return out;
}

}  // namespace

TEST_CASE("two threads' backward into one model: every gradient is the sum of theirs, bit for bit",
          "[threads][threads-model]") {
    Model model;
    const Tensor xa = batch(1), xb = batch(2);
    model.loss(xa).backward();
    const auto ga = model.grads();
    model.zero_grad();
    model.loss(xb).backward();
    const auto gb = model.grads();
    model.zero_grad();
    // Two float32 terms add the same in either order: the sum is exact whatever thread is first.
    const auto expected = sum_of(ga, gb);
    for (int round = 0; round < 400; ++round) {
        INFO("round " << round);
        const auto errors = test_threads::run_together({[&] { model.loss(xa).backward(); }, [&] { model.loss(xb).backward(); }});
        CHECK(errors[0].empty());
        CHECK(errors[1].empty());
        CHECK(model.grads() == expected);
        model.zero_grad();
    }
}

TEST_CASE("four threads' backward into one model, over and over: the gradient is four times one, hooks run once a pass",
          "[threads][threads-model]") {
    Model model;
    const Tensor x = batch(3);
    // g + g + g + g in any order is the same float: each of 4 threads adds the same gradient.
    std::vector<std::vector<float>> expected;
    for (int k = 0; k < 4; ++k) model.loss(x).backward();
    expected = model.grads();
    model.zero_grad();
    for (int round = 0; round < 100; ++round) {
        INFO("round " << round);
        std::vector<std::function<void()>> jobs(4, [&] { model.loss(x).backward(); });
        const auto errors = test_threads::run_together(jobs);
        for (const auto& e : errors) CHECK(e.empty());
        CHECK(model.grads() == expected);
        model.zero_grad();
    }
    // Several backward passes per thread, accumulating: 4 threads x 5 passes = 20 gradients,
    // and a post-accumulate hook that runs once per pass, on that pass's thread, and may read
    // the gradient (the lock is not held around it).
    std::vector<std::vector<float>> twenty;
    for (int k = 0; k < 20; ++k) model.loss(x).backward();
    twenty = model.grads();
    model.zero_grad();
    Tensor w = model.lin->weight();
    std::atomic<int> calls{0};
    const auto id = w.register_post_accumulate_grad_hook([&](Tensor& p) {
        ++calls;
        (void)p.grad();
    });
    std::vector<std::function<void()>> jobs(4, [&] {
        for (int k = 0; k < 5; ++k) model.loss(x).backward();
    });
    for (const auto& e : test_threads::run_together(jobs)) CHECK(e.empty());
    w.remove_post_accumulate_grad_hook(id);
    CHECK(calls == 20);
    // 20 equal terms summed in another order may round differently: compare with a tolerance.
    const auto got = model.grads();
    REQUIRE(got.size() == twenty.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        std::vector<double> want(twenty[i].begin(), twenty[i].end());
        std::vector<double> have(got[i].begin(), got[i].end());
        CHECK_THAT(have, approx(want, 1e-5));
    }
}

TEST_CASE("one attention module run on two threads at once gives each thread its own result",
          "[threads][threads-model]") {
    // The module keeps the last attention weights; each forward goes on with its own, never
    // with the ones another thread stored meanwhile.
    Model model;
    const Tensor xa = batch(4), xb = batch(5);
    const auto alone_a = model.forward(xa).to_vector<float>();
    const auto alone_b = model.forward(xb).to_vector<float>();
    const auto weights_b = model.mha->attention()->attention_weights().to_vector<float>();
    (void)model.forward(xa);
    const auto weights_a = model.mha->attention()->attention_weights().to_vector<float>();
    std::atomic<int> wrong{0}, wrong_weights{0};
    auto run = [&](const Tensor& x, const std::vector<float>& alone) {
        for (int i = 0; i < 2000; ++i) {
            if (model.forward(x).to_vector<float>() != alone) ++wrong;
            const auto w = model.mha->attention()->attention_weights().to_vector<float>();
            if (w != weights_a && w != weights_b) ++wrong_weights;
        }
    };
    const auto errors = test_threads::run_together({[&] { run(xa, alone_a); }, [&] { run(xb, alone_b); }});
    CHECK(errors[0].empty());
    CHECK(errors[1].empty());
    CHECK(wrong == 0);
    CHECK(wrong_weights == 0);
}

// [value-race]: the parameters' values race here by design (a step writes them while another
// thread's forward reads them, as in torch): tools/check --tsan leaves it out.
TEST_CASE("threads training one model with zero_grad, backward and a shared optimiser never crash",
          "[threads][threads-model][value-race]") {
    // torch's rule: a step writes the parameters in place, so a graph another thread recorded
    // before it that saved one is refused at its backward (the version counter). Each pass
    // either trains or says so; the optimiser's own calls run one after the other.
    Model model;
    optim::Adam opt(model.parameters(), optim::AdamOptions(1e-3));
    std::atomic<int> trained{0}, refused{0};
    std::vector<std::string> unexpected;
    std::mutex unexpected_mutex;  // guards `unexpected`
    auto train = [&](std::uint64_t seed) {
        const Tensor x = batch(seed);
        for (int i = 0; i < 200; ++i) {
            try {
                opt.zero_grad();
                model.loss(x).backward();
                optim::clip_grad_norm(model.parameters(), 1.0);
                opt.step();
                ++trained;
            } catch (const Error& e) {
                const std::string what = e.what();
                if (what.find("was modified in place after it was saved for backward") != std::string::npos)
                    ++refused;
                else {
                    const std::lock_guard<std::mutex> lock(unexpected_mutex);
                    unexpected.push_back(what);
                }
            }
        }
    };
    const auto errors = test_threads::run_together({[&] { train(6); }, [&] { train(7); }, [&] { train(8); }});
    for (const auto& e : errors) CHECK(e.empty());
    CHECK(unexpected.empty());
    for (const auto& u : unexpected) INFO(u);
    CHECK(trained + refused == 600);
    CHECK(trained > 0);
    for (const Tensor& p : model.parameters())
        for (float v : p.to_vector<float>()) REQUIRE(std::isfinite(v));
    // The optimiser's step counts are whole: no step was lost or counted twice.
    const NamedTensors state = opt.state_dict();
    for (const auto& [name, t] : state)
        if (name == "state.0.step") CHECK(t.item<std::int64_t>() <= trained.load());
}

TEST_CASE("one optimiser stepped from several threads at once counts every step", "[threads][threads-model]") {
    // The state (created at the first step, counted at each) is one thread's at a time.
    // A new optimiser each round: its first steps, which make the state, race too.
    Model model;
    model.loss(batch(9)).backward();
    for (int round = 0; round < 200; ++round) {
        const bool sgd = round % 2 == 1;
        INFO((sgd ? "SGD" : "Adam") << ", round " << round);
        std::unique_ptr<optim::Optimizer> opt;
        if (sgd)
            opt = std::make_unique<optim::SGD>(model.parameters(), optim::SGDOptions(1e-4).momentum(0.9));
        else
            opt = std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions(1e-4));
        std::vector<std::function<void()>> jobs(4, [&] {
            for (int i = 0; i < 5; ++i) {
                opt->step();
                if (i == 2) (void)opt->state_dict();
            }
        });
        for (const auto& e : test_threads::run_together(jobs)) CHECK(e.empty());
        const NamedTensors state = opt->state_dict();
        std::size_t buffers = 0;
        for (const auto& [name, t] : state) {
            if (name.rfind("state.", 0) == 0) ++buffers;
            if (name.find(".step") != std::string::npos && name.rfind("state.", 0) == 0)
                CHECK(t.item<std::int64_t>() == 20);
        }
        // every parameter stepped: Adam keeps step, exp_avg and exp_avg_sq, SGD its momentum
        CHECK(buffers == model.parameters().size() * (sgd ? 1 : 3));
    }
    for (const Tensor& p : model.parameters())
        for (float v : p.to_vector<float>()) REQUIRE(std::isfinite(v));
}

TEST_CASE("reading and clearing gradients while other threads accumulate into them is safe",
          "[threads][threads-model]") {
    // grad(), has_grad(), set_grad() and zero_grad() take the lock backward adds under: the
    // handle never tears. What a reader sees is some whole gradient or none.
    Model model;
    const Tensor x = batch(10);
    model.loss(x).backward();
    const auto one = model.grads();
    model.zero_grad();
    std::atomic<bool> stop{false};
    std::atomic<int> bad_shape{0};
    const std::vector<Tensor> params = model.parameters();
    auto backward = [&] {
        for (int i = 0; i < 300; ++i) model.loss(x).backward();
    };
    auto meddle = [&] {
        Generator g(1);
        int i = 0;
        while (!stop.load()) {
            Tensor p = params[static_cast<std::size_t>(i++) % params.size()];
            const Tensor grad = p.grad();
            if (grad.defined() && grad.shape() != p.shape()) ++bad_shape;
            if (i % 3 == 0) p.zero_grad();
            if (i % 7 == 0) p.set_grad(zeros(p.shape()));
            if (i % 11 == 0) (void)p.has_grad();
        }
    };
    std::vector<std::string> errors;
    {
        std::thread m(meddle);
        errors = test_threads::run_together({backward, backward, backward});
        stop = true;
        m.join();
    }
    for (const auto& e : errors) CHECK(e.empty());
    CHECK(bad_shape == 0);
    // Afterwards the leaves accumulate as ever.
    model.zero_grad();
    model.loss(x).backward();
    CHECK(model.grads() == one);
}

TEST_CASE("two threads' backward through one shared graph: one runs, the other is refused by name",
          "[threads][threads-model]") {
    // h's graph (the Linear) is recorded once and shared; each thread's loss goes through it.
    // Freeing it under the other pass would crash: the second pass is refused instead, as
    // torch refuses a second backward through a freed graph. With retain_graph on both, both
    // run, and the gradients add up.
    Model model;
    const Tensor x = batch(12);
    auto loss_a = [](const Tensor& h) { return mean(h * h); };
    auto loss_b = [](const Tensor& h) { return sum(h * 3.0); };
    std::vector<std::vector<float>> ga, gb;
    {
        const Tensor h = relu(model.lin->forward(x));
        loss_a(h).backward();
        ga = model.grads();
        model.zero_grad();
        loss_b(relu(model.lin->forward(x))).backward();
        gb = model.grads();
        model.zero_grad();
    }
    int both_ran = 0;
    for (int round = 0; round < 200; ++round) {
        INFO("round " << round);
        const Tensor h = relu(model.lin->forward(x));
        const auto errors = test_threads::run_together({[&] { loss_a(h).backward(); }, [&] { loss_b(h).backward(); }});
        const int ran = (errors[0].empty() ? 1 : 0) + (errors[1].empty() ? 1 : 0);
        CHECK(ran == 1);
        for (const auto& e : errors)
            if (!e.empty())
                CHECK_THAT(e, Catch::Contains("in another backward() running at the same time") ||
                                  Catch::Contains("already freed by an earlier backward()"));
        const auto got = model.grads();
        CHECK((got == (errors[0].empty() ? ga : gb)));
        model.zero_grad();

        const Tensor kept = relu(model.lin->forward(x));
        const auto retained = test_threads::run_together({[&] { loss_a(kept).backward(Tensor(), true); },
                                            [&] { loss_b(kept).backward(Tensor(), true); }});
        if (retained[0].empty() && retained[1].empty()) ++both_ran;
        CHECK(retained[0].empty());
        CHECK(retained[1].empty());
        CHECK(model.grads() == sum_of(ga, gb));
        model.zero_grad();
    }
    CHECK(both_ran == 200);
}

TEST_CASE("a pass that keeps the graph and one that frees it, at once: never a crash", "[threads][threads-model]") {
    Model model;
    const Tensor x = batch(13);
    for (int round = 0; round < 200; ++round) {
        const Tensor h = relu(model.lin->forward(x));
        const auto errors = test_threads::run_together({[&] { mean(h * h).backward(Tensor(), true); },
                                          [&] { sum(h).backward(); }});
        for (const auto& e : errors)
            if (!e.empty())
                CHECK_THAT(e, Catch::Contains("in another backward() running at the same time") ||
                                  Catch::Contains("already freed by an earlier backward()"));
        model.zero_grad();
    }
}
