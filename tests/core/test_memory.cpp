// The graph frees itself: no node outlives the handles that reach it (no shared_ptr cycle
// between nodes, closures and tensors). LeakSanitizer (tools/check --sanitize) checks the same
// on the whole suite at exit; these tests pin down when the memory goes.
#include <memory>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("intermediate nodes die with the last handle, with or without backward", "[memory]") {
    Tensor x = param({3, 4});
    std::weak_ptr<Node> mid, out;
    {
        Tensor h = tanh(x * 2.0);
        Tensor loss = softmax(h, 1).sum();
        mid = h.node_ptr();
        out = loss.node_ptr();
    }
    CHECK(mid.expired());  // forward only: dropping the loss frees the whole graph
    CHECK(out.expired());
    {
        Tensor h = tanh(x * 2.0);
        Tensor loss = (h * h).sum();
        mid = h.node_ptr();
        out = loss.node_ptr();
        loss.backward();
        h = Tensor();
        CHECK(mid.expired());  // backward released the graph: only the loss handle remained
    }
    CHECK(out.expired());
    CHECK(x.grad().defined());
}

TEST_CASE("a retained graph lives until its last handle goes, then frees", "[memory]") {
    Tensor x = param({2, 3});
    std::weak_ptr<Node> mid;
    {
        Tensor h = exp(x);
        mid = h.node_ptr();
        Tensor loss = (h * x).sum();
        h = Tensor();
        loss.backward(Tensor(), true);
        CHECK_FALSE(mid.expired());  // retain_graph keeps it for a second sweep
        loss.backward();
        CHECK(mid.expired());
    }
}
