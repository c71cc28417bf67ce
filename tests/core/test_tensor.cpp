// The handle, the engine and printing: accumulation, diamonds, graph freeing, modes.
#include <algorithm>
#include <limits>
#include <sstream>

#include "core/node.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("copies alias, clone does not", "[tensor]") {
    Tensor a = zeros({2});
    Tensor b = a;
    b.data_ptr<float>()[0] = 5;
    CHECK(a.to_vector<float>()[0] == 5);
    Tensor c = a.clone();
    c.data_ptr<float>()[0] = 7;
    CHECK(a.to_vector<float>()[0] == 5);
}

TEST_CASE("clone copies every dtype exactly and passes gradients through", "[tensor]") {
    Tensor i = from_vector(std::vector<std::int64_t>{1, 2, 3}, {3});
    CHECK(i.clone().to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 3});
    CHECK(gt(i, 1.5).clone().to_vector<bool>() == std::vector<bool>{false, true, true});
    CHECK(std::signbit(tensor(-0.0).clone().item<float>()));
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor c = x.clone();
    CHECK(c.op_name() == "clone");
    (c * 3.0).sum().backward();
    CHECK_THAT(vals(x.grad()), approx({3, 3}));
}

TEST_CASE("converting an input between forward and backward is a clear error", "[autograd][errors]") {
    Tensor w = tensor({{1.0, 2.0}}).requires_grad_();
    Tensor y = matmul(w, ones({2, 1})).sum();
    w.node().storage->data = xt::xarray<double>{{1.0, 2.0}};  // what Module::to(kFloat64) does in place
    CHECK_THROWS_WITH(y.backward(), Catch::Contains("changed dtype") && Catch::Contains("forward pass"));
    // The same when a backward reads the converted tensor's values before accumulating.
    Tensor a = tensor({1.0, 2.0}).requires_grad_();
    Tensor z = (a * tensor({3.0, 4.0})).sum();
    a.node().storage->data = xt::xarray<double>{1.0, 2.0};
    CHECK_THROWS_WITH(z.backward(), Catch::Contains("'mul'") && Catch::Contains("changed dtype"));
}

TEST_CASE("creation functions", "[tensor]") {
    CHECK(zeros({2, 3}).shape() == Shape{2, 3});
    CHECK(zeros({2, 3}).dtype() == kFloat32);
    CHECK(ones({2}, kFloat64).dtype() == kFloat64);
    CHECK_THAT(vals(full({3}, 2.5)), approx({2.5, 2.5, 2.5}));
    CHECK_THAT(vals(arange(5)), approx({0, 1, 2, 3, 4}));
    CHECK_THAT(vals(arange(1, 2, 0.25)), approx({1, 1.25, 1.5, 1.75}));
    CHECK_THAT(vals(eye(2)), approx({1, 0, 0, 1}));
    CHECK(tensor({{1, 2}, {3, 4}, {5, 6}}).shape() == Shape{3, 2});
    CHECK(tensor(3.0).shape() == Shape{});
    CHECK(tensor(3.0).item<float>() == 3.0f);
    CHECK_THROWS_WITH(tensor({{1, 2}, {3}}), Catch::Contains("ragged"));
    CHECK_THROWS_WITH(from_vector(std::vector<double>{1, 2, 3}, {2, 2}), Catch::Contains("(2, 2)") && Catch::Contains("3 values"));
    CHECK_THROWS_WITH(arange(0, 1, 0), Catch::Contains("arange"));
}

TEST_CASE("random tensors follow their seed", "[tensor]") {
    manual_seed(42);
    Tensor a = randn({100});
    manual_seed(42);
    Tensor b = randn({100});
    CHECK(a.to_vector<float>() == b.to_vector<float>());
    Generator g1(7), g2(7);
    CHECK(rand({10}, kFloat64, g1).to_vector<double>() == rand({10}, kFloat64, g2).to_vector<double>());
    Tensor u = uniform({10000}, -2, 3, kFloat64);
    auto v = u.to_vector<double>();
    CHECK(*std::min_element(v.begin(), v.end()) >= -2);
    CHECK(*std::max_element(v.begin(), v.end()) < 3);
    CHECK(mean(u).item<double>() == Approx(0.5).margin(0.05));
    Tensor n = randn({20000}, kFloat64);
    CHECK(mean(n).item<double>() == Approx(0).margin(0.03));
    CHECK(mean(n * n).item<double>() == Approx(1).margin(0.05));
    auto r = randint(3, 7, {1000}).to_vector<std::int64_t>();
    CHECK(*std::min_element(r.begin(), r.end()) == 3);
    CHECK(*std::max_element(r.begin(), r.end()) == 6);
    auto p = randperm(10).to_vector<std::int64_t>();
    std::sort(p.begin(), p.end());
    CHECK(p == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("randint covers ranges wider than 2^63 without overflow", "[tensor]") {
    const auto lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
    Generator gen(5);
    const auto v = randint(lo, hi, {1000}, gen).to_vector<std::int64_t>();
    CHECK(*std::max_element(v.begin(), v.end()) < hi);
    // Both halves of the range are drawn (a wrapped subtraction would squeeze them into one).
    CHECK(std::count_if(v.begin(), v.end(), [](std::int64_t x) { return x < 0; }) > 400);
    CHECK(std::count_if(v.begin(), v.end(), [](std::int64_t x) { return x > 0; }) > 400);
    const auto w = randint(-3, 2, {1000}, gen).to_vector<std::int64_t>();
    CHECK(*std::min_element(w.begin(), w.end()) == -3);
    CHECK(*std::max_element(w.begin(), w.end()) == 1);
}

TEST_CASE("a tensor used twice gets the sum of both gradients", "[autograd]") {
    Tensor x = tensor({3.0}, kFloat64).requires_grad_();
    Tensor y = x * x;  // dy/dx = 2x
    y.sum().backward();
    CHECK_THAT(vals(x.grad()), approx({6}));
}

TEST_CASE("a diamond graph accumulates along both paths", "[autograd]") {
    Tensor a = tensor({2.0}, kFloat64).requires_grad_();
    Tensor b = tensor({5.0}, kFloat64).requires_grad_();
    Tensor y = a * b;
    Tensor z = y + y * a;  // z = ab + a²b: dz/da = b + 2ab = 25, dz/db = a + a² = 6
    z.sum().backward();
    CHECK_THAT(vals(a.grad()), approx({25}));
    CHECK_THAT(vals(b.grad()), approx({6}));
}

TEST_CASE("a broadcast bias receives the summed gradient", "[autograd]") {
    Tensor x = ones({4, 3}, kFloat64);
    Tensor bias = zeros({3}, kFloat64).requires_grad_();
    (x + bias).sum().backward();
    CHECK_THAT(vals(bias.grad()), approx({4, 4, 4}));
}

TEST_CASE("gradients accumulate across backward calls until zero_grad", "[autograd]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    (x * 3.0).sum().backward();
    (x * 3.0).sum().backward();
    CHECK_THAT(vals(x.grad()), approx({6, 6}));
    x.zero_grad();
    CHECK(!x.grad().defined());
}

TEST_CASE("backward on a non-scalar needs a gradient of its shape", "[autograd][errors]") {
    Tensor x = ones({2, 3}, kFloat64).requires_grad_();
    Tensor y = x * 2.0;
    CHECK_THROWS_WITH(y.backward(), Catch::Contains("(2, 3)") && Catch::Contains("ones_like"));
    CHECK_THROWS_WITH(y.backward(ones({3, 2}, kFloat64)), Catch::Contains("expected float64 (2, 3)"));
    y.backward(full({2, 3}, 0.5, kFloat64));
    CHECK_THAT(vals(x.grad()), approx({1, 1, 1, 1, 1, 1}));
}

TEST_CASE("the graph is freed after backward unless retained", "[autograd][errors]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor loss = (x * x).sum();
    loss.backward({}, /*retain_graph=*/true);
    loss.backward();
    CHECK_THAT(vals(x.grad()), approx({4, 8}));
    CHECK_THROWS_WITH(loss.backward(), Catch::Contains("retain_graph"));
}

TEST_CASE("backward of something that needs no grad says why", "[autograd][errors]") {
    Tensor x = ones({2});
    CHECK_THROWS_WITH(x.sum().backward(), Catch::Contains("requires_grad_"));
}

TEST_CASE("leaves keep gradients, non-leaves only when retained", "[autograd]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor h = x * 2.0;
    Tensor k = x * 3.0;
    k.retain_grad();
    (h * k).sum().backward();
    CHECK(x.is_leaf());
    CHECK(!h.is_leaf());
    CHECK(!h.grad().defined());
    CHECK_THAT(vals(k.grad()), approx({2, 4}));       // d(h·k)/dk = h
    CHECK_THAT(vals(x.grad()), approx({12, 24}));     // 2·3x + 3·2x = 12x
    CHECK_THROWS_WITH(h.requires_grad_(false), Catch::Contains("leaf"));
}

TEST_CASE("NoGradGuard and detach cut the graph", "[autograd]") {
    Tensor x = ones({2}, kFloat64).requires_grad_();
    {
        NoGradGuard guard;
        CHECK(!grad_enabled());
        Tensor y = x * 2.0;
        CHECK(!y.requires_grad());
        CHECK(y.is_leaf());
    }
    CHECK(grad_enabled());
    Tensor d = (x * 2.0).detach();
    CHECK(!d.requires_grad());
    CHECK(d.is_leaf());
    CHECK((x * 2.0).requires_grad());
}

TEST_CASE("a very long chain neither overflows backward nor the destructor", "[autograd]") {
    Tensor x = tensor({1.0}, kFloat64).requires_grad_();
    {
        Tensor y = x;
        for (int i = 0; i < 200000; ++i) y = y * 1.0;
        y.sum().backward();
    }
    CHECK_THAT(vals(x.grad()), approx({1}));
    Tensor z = x;
    for (int i = 0; i < 200000; ++i) z = z + 0.0;
    // z goes out of scope with its whole graph still attached.
}

TEST_CASE("printing shows values, shape, dtype and the op", "[tensor][print]") {
    Tensor a = tensor({{1., 2.}, {3., 4.}});
    CHECK(fmt::format("{}", a) ==
          "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]], shape=(2, 2), dtype=float32)");
    Tensor x = tensor({1.5}, kFloat64).requires_grad_();
    CHECK(fmt::format("{}", x) == "tensor([1.5000], shape=(1,), dtype=float64, requires_grad=True)");
    CHECK(fmt::format("{}", x * x) == "tensor([2.2500], shape=(1,), dtype=float64, op=<mul>)");
    std::ostringstream os;
    os << tensor({1, 2}, kInt64);
    CHECK(os.str() == "tensor([1, 2], shape=(2,), dtype=int64)");
    const std::string big = to_string(zeros({2000}));
    CHECK(big.find("...") != std::string::npos);
    CHECK(big.size() < 200);
}

// A double draw just under 1 (u ≥ 1 - 2^-25) rounds to exactly 1.0f: with seed 0 the first
// such draw is number 14,717,065. rand promises [0, 1), as torch.rand.
TEST_CASE("float32 rand stays below 1 and uniform below high", "[tensor]") {
    Generator gen(0);
    float largest = 0;
    for (int chunk = 0; chunk < 16; ++chunk) {
        const Tensor u = rand({1 << 20}, kFloat32, gen);
        const float* p = u.const_data_ptr<float>();
        largest = std::max(largest, *std::max_element(p, p + (1 << 20)));
    }
    CHECK(largest < 1.0f);
    CHECK(largest > 0.99999f);
    Generator same(0);
    float top = -2;
    for (int chunk = 0; chunk < 16; ++chunk) {
        const Tensor u = uniform({1 << 20}, -1.0, 1.0, kFloat32, same);
        const float* p = u.const_data_ptr<float>();
        top = std::max(top, *std::max_element(p, p + (1 << 20)));
    }
    CHECK(top < 1.0f);
    CHECK(uniform({3}, 2.0, 2.0, kFloat32, gen).to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("set_data replaces the values behind every handle, keeping the leaf", "[tensor]") {
    Tensor p = ones({2, 3}).requires_grad_();
    Tensor alias = p;
    (p * 2.0).sum().backward();
    REQUIRE(p.has_grad());
    p.set_data(full({2, 3}, 5.0));  // same shape and dtype: the gradient stays
    CHECK(alias.to_vector<double>() == std::vector<double>(6, 5.0));
    CHECK(p.has_grad());
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
    p.set_data(zeros({4}, kFloat64));  // another shape and dtype: the old gradient cannot stay
    CHECK(alias.shape() == Shape{4});
    CHECK(alias.dtype() == kFloat64);
    CHECK_FALSE(p.has_grad());
    CHECK_THROWS_WITH(p.set_data(Tensor()), Catch::Contains("set_data: values is an undefined tensor"));
}

TEST_CASE("grad_ptr reads and writes the gradient in place", "[tensor]") {
    Tensor p = zeros({3}).requires_grad_();
    CHECK(p.grad_ptr<float>() == nullptr);
    float* g = p.mutable_grad_ptr<float>();  // made, as zeros
    CHECK(std::vector<float>(g, g + 3) == std::vector<float>(3, 0.0f));
    g[1] = 7;
    CHECK(p.grad().to_vector<double>() == std::vector<double>{0, 7, 0});
    (p * 1.0).sum().backward();  // accumulates into what is there
    CHECK(p.grad().to_vector<double>() == std::vector<double>{1, 8, 1});
    CHECK_THROWS_WITH(p.grad_ptr<double>(), Catch::Contains("grad_ptr: tensor holds float32, asked for float64"));
}
