// Version counters: a tensor written in place after an op saved it for backward makes that
// backward refuse to run, naming the op, instead of computing gradients from the new values.
// One case per writer: set_data, mutable_data_ptr, an optimiser step, load_state_dict, Module::to.
#include <functional>

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
    CHECK_THROWS_WITH(y.backward(), STALE("mul") && Catch::Contains("(version 0 -> 1, last through set_data())"));
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
    // The input requires grad, so its gradient reads the weight (with a data input only the
    // weight's gradient is wanted, which reads x, not W: then nothing is stale, as in torch).
    const Tensor x = ones({4, 3}).requires_grad_();
    Tensor out = layer.forward(x).sum();
    layer.load_state_dict(state);
    CHECK_THROWS_WITH(out.backward(), STALE("linear"));

    Tensor out2 = layer.forward(ones({4, 3})).sum();
    layer.to(kFloat64);
    CHECK_THROWS(out2.backward());  // a changed dtype or a changed version: either way a clear error
}

TEST_CASE("data_ptr on a non-const tensor counts as a write and const_data_ptr does not", "[autograd][version]") {
    Tensor x = tensor({1.0f, 2.0f}).requires_grad_();
    Tensor w = tensor({3.0f, 4.0f});
    Tensor y = (x * w).sum();
    (void)w.const_data_ptr<float>();
    const Tensor& cw = w;
    (void)cw.data_ptr<float>();
    CHECK(w.version() == 0);
    w.data_ptr<float>()[1] = -4;  // dy/dx would silently become (3, -4)
    CHECK(w.version() == 1);
    CHECK_THROWS_WITH(y.backward(), STALE("mul") && Catch::Contains("last through data_ptr()") &&
                                        Catch::Contains("read with const_data_ptr()"));
}

TEST_CASE("every writer of a saved tensor is caught and names itself", "[autograd][version]") {
    // One graph per writer: matmul saves both inputs, so a write to either is stale.
    auto check_writer = [](const char* name, const std::function<void(Tensor&)>& write) {
        INFO(name);
        Tensor a = tensor({{1.0, 2.0}, {3.0, 4.0}}, kFloat64).requires_grad_();
        Tensor b = tensor({5.0, 6.0}, kFloat64).reshape({2, 1}).detach().requires_grad_();
        Tensor y = matmul(a, b).sum();
        write(b);
        CHECK_THROWS_WITH(y.backward(), STALE("matmul") && Catch::Contains("its input 1"));
        CHECK_FALSE(a.has_grad());
        CHECK_FALSE(b.has_grad());
    };
    check_writer("set_data", [](Tensor& t) { t.set_data(t.detach()); });  // same values still count
    check_writer("data_ptr", [](Tensor& t) { (void)t.data_ptr<double>(); });
    check_writer("mutable_data_ptr", [](Tensor& t) { (void)t.mutable_data_ptr<double>(); });
    check_writer("under no-grad", [](Tensor& t) {
        NoGradGuard no_grad;
        t.mutable_data_ptr<double>()[0] = 0;
    });
    check_writer("SGD step", [](Tensor& t) {
        t.set_grad(ones_like(t));
        optim::SGD(std::vector<Tensor>{t}, optim::SGDOptions(0.1)).step();
        t.zero_grad();
    });
    check_writer("Adam step", [](Tensor& t) {
        t.set_grad(ones_like(t));
        optim::Adam(std::vector<Tensor>{t}, optim::AdamOptions(0.1)).step();
        t.zero_grad();
    });
}

TEST_CASE("writes to a tensor an op did not save are allowed as in torch", "[autograd][version]") {
    // add, sub, neg, a scalar product, clone and a cast need only shapes: their inputs may change.
    Tensor a = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor b = tensor({3.0, 4.0}, kFloat64).requires_grad_();
    Tensor c = tensor({5.0, 6.0}, kFloat64);
    Tensor y = ((a + b) * c - (-b) * 2.0 + a.clone().to(kFloat32).to(kFloat64)).sum();
    a.mutable_data_ptr<double>()[0] = 100;
    b.set_data(tensor({7.0, 8.0}, kFloat64));
    y.backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>{6, 7});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{7, 8});
    // c was saved by the mul: writing it is refused.
    Tensor z = ((a + b) * c).sum();
    c.mutable_data_ptr<double>()[0] = 0;
    CHECK_THROWS_WITH(z.backward(), STALE("mul") && Catch::Contains("its input 1"));
}

TEST_CASE("an op's saved output is checked and an unsaved one is not", "[autograd][version]") {
    for (const char* op : {"exp", "sqrt", "tanh", "sigmoid"}) {
        INFO(op);
        Tensor x = tensor({0.5, 1.5}, kFloat64).requires_grad_();
        Tensor y = std::string(op) == "exp" ? exp(x) : std::string(op) == "sqrt" ? sqrt(x)
                 : std::string(op) == "tanh" ? tanh(x) : sigmoid(x);
        Tensor loss = y.sum();
        y.mutable_data_ptr<double>()[0] = 7;
        CHECK_THROWS_WITH(loss.backward(), Catch::Contains(std::string("saved for backward by '") + op + "'") &&
                                               Catch::Contains("its output"));
    }
    Tensor x = tensor({0.5, 1.5}, kFloat64).requires_grad_();
    Tensor y = x + 1.0;  // add's output is not read by its backward
    Tensor loss = (y * 3.0).sum();
    y.mutable_data_ptr<double>()[0] = 7;
    loss.backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 3});
}

TEST_CASE("a new shape or dtype is refused even for a tensor the op did not save", "[autograd][version]") {
    // Every backward builds its gradients to its inputs' current shapes: a set_data of another
    // shape under a max or a reshape would index out of bounds or mis-shape the gradient.
    auto refused = [](const char* name, const std::function<Tensor(const Tensor&)>& op, const Tensor& other) {
        INFO(name);
        Tensor x = tensor({{0.5, 1.5, -2.0}, {3.0, 0.0, 1.0}}, kFloat64).requires_grad_();
        Tensor y = op(x).sum();
        x.set_data(other);
        CHECK_THROWS_WITH(y.backward(), Catch::Contains("its input 0 (a leaf of shape") &&
                                            Catch::Contains("was given another shape or dtype by set_data() after "
                                                            "the forward pass of"));
        CHECK_FALSE(x.has_grad());
    };
    const Tensor longer = zeros({7, 9}, kFloat64);
    const Tensor as_float = zeros({2, 3}, kFloat32);
    for (const Tensor& other : {longer, as_float}) {
        refused("add", [](const Tensor& x) { return x + 1.0; }, other);
        refused("reshape", [](const Tensor& x) { return x.reshape({3, 2}); }, other);
        refused("permute", [](const Tensor& x) { return x.transpose(0, 1); }, other);
        refused("sum", [](const Tensor& x) { return x.sum({1}); }, other);
        refused("max", [](const Tensor& x) { return max(x, 1).values; }, other);
        refused("slice", [](const Tensor& x) { return slice(x, 1, 0, 2); }, other);
        refused("expand", [](const Tensor& x) { return expand(x.unsqueeze(0), Shape{4, 2, 3}); }, other);
        refused("concat", [](const Tensor& x) { return concat({x, x}, 0); }, other);
        refused("softmax", [](const Tensor& x) { return softmax(x, 1) * 2.0; }, other);
    }
    // The same values in the same layout are a value write: allowed for the ops that saved nothing.
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = (x.reshape({2, 1}) * 3.0).sum();
    x.set_data(tensor({5.0, 6.0}, kFloat64));
    y.backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 3});
}

TEST_CASE("a bool attention mask written after the forward pass is refused", "[autograd][version]") {
    // Lengths and causal masks are copied when resolved; a bool mask is read again by the
    // backward, so the fused kernels take it as an input whose writes are refused.
    manual_seed(0);
    Tensor x = randn({1, 2, 3}, kFloat64).requires_grad_();
    Tensor m = full({2, 3}, 1, kBool);
    Tensor loss = (masked_softmax(x, AttentionMask::attend_where(m)) * randn({1, 2, 3}, kFloat64)).sum();
    m.set_data(full({2, 3}, 0, kBool));
    CHECK_THROWS_WITH(loss.backward(), STALE("masked_softmax") && Catch::Contains("its input 1"));

    Tensor q = randn({2, 3, 4}, kFloat64).requires_grad_();
    Tensor mask = full({2, 3, 3}, 1, kBool);
    Tensor w = head_attention_weights(q, q, 2, 0.5, AttentionMask::attend_where(mask)).sum();
    (void)mask.data_ptr<bool>();
    CHECK_THROWS_WITH(w.backward(), STALE("head_attention_weights") && Catch::Contains("its input 2"));

    // Lengths were copied: a write to them after the forward pass changes nothing, as before.
    Tensor lens = tensor({1.0, 2.0}, kInt64);
    Tensor x2 = randn({2, 2, 3}, kFloat64).requires_grad_();
    Tensor y2 = (masked_softmax(x2, lens) * tensor({1.0, 2.0, 3.0}, kFloat64)).sum();
    lens.mutable_data_ptr<std::int64_t>()[0] = 3;
    y2.backward();
    const std::vector<double> g = x2.grad().to_vector<double>();
    CHECK(g[0] == 0);  // row 0 kept one key: its softmax is constant 1
}

TEST_CASE("layer_norm saves its input and weight and not its bias, relu its input", "[autograd][version]") {
    // Each writer in turn: x and the weight are read by the backward, the bias only for its shape.
    for (int which = 0; which < 3; ++which) {
        INFO("write to input " << which);
        Tensor x = tensor({{1.0, 2.0, 4.0}, {3.0, 5.0, 6.0}}, kFloat64).requires_grad_();
        Tensor w = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
        Tensor b = tensor({0.5, 0.5, 0.5}, kFloat64).requires_grad_();
        Tensor loss = (layer_norm(x, {3}, w, b) * tensor({1.0, -1.0, 2.0}, kFloat64)).sum();
        (void)(which == 0 ? x : which == 1 ? w : b).mutable_data_ptr<double>();
        if (which < 2) {
            CHECK_THROWS_WITH(loss.backward(), STALE("layer_norm") && Catch::Contains(which == 0 ? "its input 0" : "its input 1"));
        } else {
            loss.backward();
            CHECK(b.grad().to_vector<double>() == std::vector<double>{2, -2, 4});
        }
    }
    // Without a weight the bias is input 1, still unsaved.
    Tensor x = tensor({{1.0, 2.0}}, kFloat64).requires_grad_();
    Tensor b = tensor({0.0, 0.0}, kFloat64).requires_grad_();
    Tensor loss = layer_norm(x, {2}, Tensor(), b).sum();
    b.set_data(tensor({1.0, 1.0}, kFloat64));
    loss.backward();
    CHECK(b.grad().to_vector<double>() == std::vector<double>{1, 1});

    Tensor r = tensor({-1.0, 2.0}, kFloat64).requires_grad_();
    Tensor rl = relu(r).sum();
    r.mutable_data_ptr<double>()[0] = 3;
    CHECK_THROWS_WITH(rl.backward(), STALE("relu") && Catch::Contains("its input 0"));
}

TEST_CASE("add_layer_norm saves its own sum and the weight: x y and the bias may be written", "[autograd][version]") {
    // which: 0 x, 1 y, 2 weight, 3 bias; writing x or y leaves the gradients of the sum taken.
    auto run = [](int which, bool write) {
        Tensor x = tensor({{1.0, 2.0, 4.0}, {3.0, 5.0, 6.0}}, kFloat64).requires_grad_();
        Tensor y = tensor({{0.5, -1.0, 0.0}, {2.0, 0.0, 1.0}}, kFloat64).requires_grad_();
        Tensor w = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
        Tensor b = tensor({0.5, 0.5, 0.5}, kFloat64).requires_grad_();
        Tensor loss = (add_layer_norm(x, y, {3}, w, b) * tensor({1.0, -1.0, 2.0}, kFloat64)).sum();
        Tensor target = which == 0 ? x : which == 1 ? y : which == 2 ? w : b;
        if (write) target.mutable_data_ptr<double>()[0] = 100;
        loss.backward();
        return std::vector<std::vector<double>>{x.grad().to_vector<double>(), y.grad().to_vector<double>(),
                                                w.grad().to_vector<double>(), b.grad().to_vector<double>()};
    };
    const auto clean = run(0, false);
    for (int which = 0; which < 4; ++which) {
        INFO("write to input " << which);
        if (which == 2) {
            CHECK_THROWS_WITH(run(which, true), STALE("add_layer_norm") && Catch::Contains("its input 2"));
        } else {
            CHECK(run(which, true) == clean);
        }
    }
    // A new shape is refused for every input, saved or not.
    Tensor x = tensor({{1.0, 2.0}}, kFloat64).requires_grad_();
    Tensor y = tensor({{3.0, 0.0}}, kFloat64).requires_grad_();
    Tensor loss = add_layer_norm(x, y, {2}).sum();
    y.set_data(tensor({1.0, 1.0, 1.0}, kFloat64));
    CHECK_THROWS_WITH(loss.backward(), Catch::Contains("add_layer_norm") && Catch::Contains("input 1"));
    // Without a weight nothing of the caller's is read: the bias (input 2) may change too.
    Tensor x2 = tensor({{1.0, 2.0}}, kFloat64).requires_grad_();
    Tensor b2 = tensor({0.0, 0.0}, kFloat64).requires_grad_();
    Tensor loss2 = add_layer_norm(x2, x2, {2}, Tensor(), b2).sum();
    x2.mutable_data_ptr<double>()[0] = 7;
    b2.set_data(tensor({1.0, 1.0}, kFloat64));
    loss2.backward();
    CHECK(b2.grad().to_vector<double>() == std::vector<double>{1, 1});
}

TEST_CASE("a hook that writes a saved tensor during the backward sweep is refused", "[autograd][version]") {
    // The hook on a runs after the graph was checked and before B * B's backward reads b.
    for (const std::string writer : {"set_data()", "mutable_data_ptr()", "none"}) {
        INFO(writer);
        Tensor a = tensor({1.0, 2.0}).requires_grad_();
        Tensor b = tensor({3.0, 4.0}).requires_grad_();
        a.register_post_accumulate_grad_hook([&](Tensor&) {
            NoGradGuard no_grad;
            if (writer == "set_data()") b.set_data(tensor({100.0, 100.0}));
            if (writer == "mutable_data_ptr()") b.mutable_data_ptr<float>()[0] = 100.0f;
        });
        const Tensor loss = (b * b).sum() + (a * 1.0).sum();
        if (writer == "none") {
            loss.backward();
            CHECK(vals(b.grad()) == std::vector<double>{6.0, 8.0});
        } else {
            // Without the check the gradient was 2·100 where the forward used 3 and 4.
            CHECK_THROWS_WITH(loss.backward(), STALE("mul") && Catch::Contains("last through " + writer));
        }
    }
}
