// nn::init: torch's fans and gains exactly, the distributions loosely, and the in-place contract.
#include <cmath>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

namespace {

struct Stats {
    double mean = 0, std = 0, min = 1e300, max = -1e300;
};

Stats stats(const Tensor& t) {
    const auto v = vals(t);
    Stats s;
    for (double x : v) s.mean += x, s.min = std::min(s.min, x), s.max = std::max(s.max, x);
    s.mean /= double(v.size());
    for (double x : v) s.std += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(s.std / double(v.size()));
    return s;
}

Tensor weight(const Shape& shape, Dtype d = kFloat32) {
    Tensor w = zeros(shape, d);
    w.requires_grad_(true);
    return w;
}

}  // namespace

TEST_CASE("init fans and gains are torch's", "[init]") {
    // torch.nn.init._calculate_fan_in_and_fan_out
    CHECK(init::calculate_fan_in_and_fan_out(zeros({3, 5})) == std::pair<std::size_t, std::size_t>{5, 3});
    CHECK(init::calculate_fan_in_and_fan_out(zeros({4, 2, 3, 5})) == std::pair<std::size_t, std::size_t>{30, 60});
    CHECK(init::calculate_fan_in_and_fan_out(zeros({0, 7})) == std::pair<std::size_t, std::size_t>{7, 0});
    for (const Shape& s : {Shape{}, Shape{5}})
        CHECK_THROWS_WITH(init::calculate_fan_in_and_fan_out(zeros(s)),
                          Catch::Contains("fewer than 2 dimensions"));
    CHECK_THROWS_WITH(init::xavier_uniform_(weight({5})), Catch::Contains("fewer than 2 dimensions"));
    CHECK_THROWS_WITH(init::kaiming_normal_(weight({5})), Catch::Contains("fewer than 2 dimensions"));
    // torch.nn.init.calculate_gain
    using N = init::Nonlinearity;
    CHECK(init::calculate_gain(N::linear) == 1.0);
    CHECK(init::calculate_gain(N::conv2d) == 1.0);
    CHECK(init::calculate_gain(N::sigmoid) == 1.0);
    CHECK(init::calculate_gain(N::tanh) == Approx(5.0 / 3.0));
    CHECK(init::calculate_gain(N::relu) == Approx(std::sqrt(2.0)));
    CHECK(init::calculate_gain(N::leaky_relu) == Approx(std::sqrt(2.0 / (1 + 0.01 * 0.01))));
    CHECK(init::calculate_gain(N::leaky_relu, 0.2) == Approx(std::sqrt(2.0 / 1.04)));
    CHECK(init::calculate_gain(N::selu) == 0.75);
}

TEST_CASE("init draws torch's distributions in place", "[init]") {
    Generator gen(7);
    // 256 x 128: fan_in 128, fan_out 256
    const Tensor w = weight({256, 128});
    const Tensor same = w;
    const auto v0 = w.version();

    init::xavier_uniform_(w, 1.0, gen);
    const double xa = std::sqrt(6.0 / (128 + 256));
    Stats s = stats(w);
    CHECK(s.max <= xa);
    CHECK(s.min >= -xa);
    CHECK(s.max > 0.95 * xa);
    CHECK(s.std == Approx(xa / std::sqrt(3.0)).epsilon(0.03));
    CHECK(w.is_same(same));
    CHECK(w.requires_grad());
    CHECK(w.is_leaf());
    CHECK(w.dtype() == kFloat32);
    CHECK(w.version() > v0);

    init::xavier_normal_(w, 2.0, gen);
    CHECK(stats(w).std == Approx(2.0 * std::sqrt(2.0 / (128 + 256))).epsilon(0.03));
    CHECK(std::abs(stats(w).mean) < 0.01);

    init::kaiming_uniform_(w, 0.0, init::Mode::fan_in, init::Nonlinearity::relu, gen);
    const double kb = std::sqrt(3.0) * std::sqrt(2.0) / std::sqrt(128.0);
    s = stats(w);
    CHECK(s.max <= kb);
    CHECK(s.max > 0.95 * kb);
    init::kaiming_normal_(w, 0.0, init::Mode::fan_out, init::Nonlinearity::relu, gen);
    CHECK(stats(w).std == Approx(std::sqrt(2.0) / std::sqrt(256.0)).epsilon(0.03));
    // torch's default: leaky_relu with a = √5 gives Linear's bound 1/√fan_in
    init::kaiming_uniform_(w, std::sqrt(5.0), init::Mode::fan_in, init::Nonlinearity::leaky_relu, gen);
    CHECK(stats(w).max == Approx(1.0 / std::sqrt(128.0)).epsilon(0.01));

    init::normal_(w, 3.0, 0.5, gen);
    CHECK(stats(w).mean == Approx(3.0).epsilon(0.01));
    CHECK(stats(w).std == Approx(0.5).epsilon(0.03));
    init::uniform_(w, -2.0, 1.0, gen);
    s = stats(w);
    CHECK(s.min >= -2.0);
    CHECK(s.max <= 1.0);
    CHECK(s.mean == Approx(-0.5).margin(0.02));
    init::constant_(w, 0.3);
    CHECK(vals(w) == std::vector<double>(256 * 128, double(0.3f)));
    init::zeros_(w);
    CHECK(stats(w).max == 0.0);
    init::ones_(w);
    CHECK(stats(w).min == 1.0);
    CHECK(w.is_same(same));

    // the same generator state gives the same values; float64 stays float64
    Generator g1(3), g2(3);
    const Tensor a = weight({4, 4}, kFloat64), b = weight({4, 4}, kFloat64);
    init::xavier_uniform_(a, 1.0, g1);
    init::xavier_uniform_(b, 1.0, g2);
    CHECK(vals(a) == vals(b));
    CHECK(a.dtype() == kFloat64);
}

TEST_CASE("init writes are seen by a stale graph and by modules", "[init]") {
    Linear lin(3, 2);
    // x requires grad, so its gradient reads the weight: forward saves it (torch's addmm too;
    // for a data input only W's gradient is wanted, which reads x, and nothing is saved stale).
    const Tensor x = ones({1, 3}).requires_grad_();
    const Tensor y = lin(x).sum();
    init::zeros_(lin.weight());  // in place after forward saved the weight for backward
    CHECK_THROWS_WITH(y.backward(), Catch::Contains("modified in place"));
    CHECK(vals(lin(x)) == vals(lin.bias()));
    // under no-grad: no graph is recorded by the write itself
    init::normal_(lin.weight());
    CHECK(lin.weight().is_leaf());
    CHECK_FALSE(lin.weight().has_grad());
}

TEST_CASE("init refuses what torch refuses", "[init]") {
    CHECK_THROWS_WITH(init::normal_(zeros({2, 2}, kInt64)), Catch::Contains("normal_") && Catch::Contains("int64"));
    CHECK_THROWS_WITH(init::xavier_uniform_(zeros({2, 2}, kInt64)), Catch::Contains("floating"));
    CHECK(vals(init::constant_(zeros({2}, kInt64), 3)) == std::vector<double>{3, 3});  // fill works on ints
    CHECK_THROWS_WITH(init::uniform_(weight({2, 2}), 1.0, 0.0), Catch::Contains("a <= b"));
    CHECK_THROWS_WITH(init::normal_(weight({2, 2}), 0.0, -1.0), Catch::Contains("std must be non-negative"));
    CHECK_THROWS_WITH(init::normal_(weight({2, 2}), std::nan(""), 1.0), Catch::Contains("finite"));
    CHECK_THROWS_WITH(init::zeros_(Tensor()), Catch::Contains("undefined"));
    // zero elements: a no-op, as torch
    const Tensor empty = weight({0, 3});
    CHECK(init::kaiming_uniform_(empty).numel() == 0);
    CHECK(init::xavier_normal_(weight({0, 0})).numel() == 0);
}
