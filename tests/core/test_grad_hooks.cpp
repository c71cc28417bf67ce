// Post-accumulate-grad hooks: called once per backward sweep per leaf, after every contribution
// of that sweep reached the leaf (what DistributedDataParallel relies on to start a bucket's
// all-reduce during backward), on the calling thread, and removable.
#include <thread>
#include <vector>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("post-accumulate-grad hook sees the leaf's final gradient of the sweep", "[autograd][hooks]") {
    // x reaches the loss by three paths (a diamond and a direct use): the hook must run once,
    // after all three, with dL/dx = 2·x·y + y + 3.
    Tensor x = tensor({1.0, 2.0}).requires_grad_();
    Tensor y = tensor({5.0, 7.0}).requires_grad_();
    std::vector<std::vector<double>> seen;
    std::vector<std::thread::id> threads;
    x.register_post_accumulate_grad_hook([&](Tensor& leaf) {
        seen.push_back(vals(leaf.grad()));
        threads.push_back(std::this_thread::get_id());
    });
    Tensor a = x * y;
    Tensor loss = (a * x + a + x * 3.0).sum();
    loss.backward();
    REQUIRE(seen.size() == 1);
    CHECK(seen[0] == std::vector<double>{2 * 1 * 5 + 5 + 3, 2 * 2 * 7 + 7 + 3});
    CHECK(threads[0] == std::this_thread::get_id());

    // A second sweep: the hook sees the accumulated gradient (both sweeps), once more.
    (x * 2.0).sum().backward();
    REQUIRE(seen.size() == 2);
    CHECK(seen[1] == std::vector<double>{18 + 2, 38 + 2});
}

TEST_CASE("post-accumulate-grad hook: not called without a gradient, removable, refused on non-leaves",
          "[autograd][hooks]") {
    Tensor x = tensor({1.0}).requires_grad_();
    Tensor unused = tensor({1.0}).requires_grad_();
    int calls_x = 0, calls_unused = 0;
    const auto id = x.register_post_accumulate_grad_hook([&](Tensor&) { ++calls_x; });
    unused.register_post_accumulate_grad_hook([&](Tensor&) { ++calls_unused; });
    (x * 2.0).sum().backward();
    CHECK(calls_x == 1);
    CHECK(calls_unused == 0);  // no path from the loss
    x.remove_post_accumulate_grad_hook(id);
    x.remove_post_accumulate_grad_hook(id);  // unknown ids are ignored
    x.remove_post_accumulate_grad_hook(12345);
    (x * 2.0).sum().backward();
    CHECK(calls_x == 1);

    // A hook that removes itself while running.
    std::uint64_t self = 0;
    int once = 0;
    self = x.register_post_accumulate_grad_hook([&](Tensor& leaf) {
        ++once;
        leaf.remove_post_accumulate_grad_hook(self);
    });
    (x * 2.0).sum().backward();
    (x * 2.0).sum().backward();
    CHECK(once == 1);

    Tensor y = x * 2.0;
    CHECK_THROWS_WITH(y.register_post_accumulate_grad_hook([](Tensor&) {}),
                      Catch::Contains("register_post_accumulate_grad_hook") && Catch::Contains("'mul' result"));
    Tensor c = tensor({1.0});
    CHECK_THROWS_WITH(c.register_post_accumulate_grad_hook([](Tensor&) {}), Catch::Contains("does not"));
    CHECK_THROWS_WITH(x.register_post_accumulate_grad_hook(nullptr), Catch::Contains("empty"));
}

TEST_CASE("post-accumulate-grad hook that throws ends the backward cleanly", "[autograd][hooks]") {
    Tensor x = tensor({1.0, 2.0}).requires_grad_();
    Tensor w = tensor({3.0, 4.0}).requires_grad_();
    bool fail = true;
    x.register_post_accumulate_grad_hook([&](Tensor&) {
        if (fail) throw Error("hook failed");
    });
    Tensor loss = (x * w).sum();
    CHECK_THROWS_WITH(loss.backward(Tensor(), /*retain_graph=*/true), Catch::Contains("hook failed"));
    // The sweep stopped; the next one starts clean (no half-delivered gradient left over).
    fail = false;
    x.zero_grad();
    w.zero_grad();
    loss.backward();
    CHECK(vals(x.grad()) == std::vector<double>{3.0, 4.0});
    CHECK(vals(w.grad()) == std::vector<double>{1.0, 2.0});
}
