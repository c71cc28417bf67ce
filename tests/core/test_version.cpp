// Version counters: a tensor written in place after an op saved it for backward makes that
// backward refuse to run, naming the op, instead of computing gradients from the new values.
// One case per writer: set_data, mutable_data_ptr, an optimiser step, load_state_dict, Module::to.
#include "helpers.hpp"
#include "nn/nn.hpp"
#include "optim/optim.hpp"

using namespace xgrad;
using namespace xgrad::test;

// The refusal's message, for an op (a macro: Catch's combined matchers keep pointers to their parts).
#define STALE(op)                                                                                       \
    Catch::Contains("was modified in place after it was saved for backward by '" op "'") &&            \
        Catch::Contains("clone it first, or call backward before changing it")

TEST_CASE("set_data between forward and backward is refused, whatever the new shape", "[autograd][version]") {
    Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
    Tensor w = tensor({10.0, 20.0, 30.0});
    Tensor y = (x * w).sum();
    CHECK(w.version() == 0);
    w.set_data(tensor({-1.0, -1.0, -1.0}));  // dy/dx would silently be -1 -1 -1
    CHECK(w.version() == 1);
    CHECK_THROWS_WITH(y.backward(), STALE("mul") && Catch::Contains("(version 0 -> 1)"));
    CHECK_FALSE(x.has_grad());  // nothing was delivered

    // A new shape once made a backward read past the end of its input.
    Tensor a = ones({1000}).requires_grad_();
    Tensor l = mse_loss(a, zeros({1000}));
    a.set_data(ones({1}));
    CHECK_THROWS_WITH(l.backward(), STALE("mse_loss") && Catch::Contains("input 0 (a leaf of shape (1,))"));
}

TEST_CASE("mutable_data_ptr bumps the version, const reads do not", "[autograd][version]") {
    Tensor x = tensor({1.0, 2.0}).requires_grad_();
    Tensor y = x.exp();  // exp's backward reads its own output
    const Tensor& cy = y;
    (void)cy.data_ptr<float>();
    CHECK(y.version() == 0);
    y.mutable_data_ptr<float>()[0] = 0;
    CHECK(y.version() == 1);
    CHECK_THROWS_WITH(y.sum().backward(), STALE("exp") && Catch::Contains("its output"));
}

TEST_CASE("an optimiser step on a retained graph makes its second backward refuse", "[autograd][version]") {
    Tensor w = tensor({1.0, 2.0}).requires_grad_();
    Tensor loss = (w * w).sum();
    optim::SGD opt({w}, optim::SGDOptions(0.1));
    loss.backward({}, /*retain_graph=*/true);
    opt.step();  // writes w in place
    CHECK_THROWS_WITH(loss.backward(), STALE("mul"));
    {
        NoGradGuard no_grad;  // writes stay allowed under no-grad; only the stale backward is refused
        opt.step();
    }
    Tensor fresh = (w * w).sum();  // a new forward pass sees the new values
    opt.zero_grad();
    fresh.backward();
    CHECK(w.grad().to_vector<double>() == std::vector<double>{2 * w.to_vector<double>()[0], 2 * w.to_vector<double>()[1]});
}

TEST_CASE("load_state_dict and Module::to between forward and backward are refused", "[autograd][version]") {
    manual_seed(0);
    nn::Linear layer(3, 2);
    const NamedTensors state = layer.state_dict();
    Tensor out = layer.forward(ones({4, 3})).sum();
    layer.load_state_dict(state);
    CHECK_THROWS_WITH(out.backward(), STALE("matmul_t"));

    Tensor out2 = layer.forward(ones({4, 3})).sum();
    layer.to(kFloat64);
    CHECK_THROWS(out2.backward());  // a changed dtype or a changed version: either way a clear error
}
