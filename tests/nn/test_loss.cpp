// Losses: values by hand and from torch, gradients by gradcheck, bad targets.
#include <cmath>
#include <cstdio>

#include "helpers.hpp"
#include "nn/functional.hpp"
#include "nn/loss.hpp"

using namespace xgrad;
using namespace xgrad::nn;
using namespace xgrad::test;

namespace {

// logsumexp(1, 2, 3) − 3 and logsumexp(1, 1, 1) − 1 = log 3.
const double lse123 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
const double ce0 = lse123 - 3;
const double ce1 = std::log(3.0);

Tensor targets(std::vector<std::int64_t> v, Shape shape) { return from_vector(v, shape); }

// (2, 3, 4) logits and (2, 3) targets for the sequence cases.
Tensor sequence_logits(Dtype dtype = kFloat64) {
    return tensor({{{0.2, -1.0, 0.5, 1.5}, {2.0, 0.0, -0.5, 0.3}, {0.1, 0.1, 0.1, 0.1}},
                   {{-2.0, 1.0, 0.0, 0.7}, {0.4, 0.9, -1.2, 3.0}, {1.1, -0.3, 0.8, -0.6}}},
                  dtype);
}

}  // namespace

TEST_CASE("cross_entropy of (N, C) logits matches hand-computed values", "[loss]") {
    const Dtype dtype = GENERATE(kFloat32, kFloat64);
    Tensor logits = tensor({{1, 2, 3}, {1, 1, 1}}, TensorOptions(dtype).requires_grad(true));
    Tensor y = targets({2, 0}, {2});
    CHECK_THAT(vals(cross_entropy(logits, y, Reduction::none)), approx({ce0, ce1}));
    CHECK_THAT(vals(cross_entropy(logits, y, Reduction::sum)), approx({ce0 + ce1}));
    Tensor loss = cross_entropy(logits, y);
    CHECK(loss.dim() == 0);
    CHECK(loss.dtype() == dtype);
    CHECK_THAT(vals(loss), approx({(ce0 + ce1) / 2}));
    // d mean / d logits = (softmax − one_hot) / N.
    loss.backward();
    const double e1 = std::exp(1.0 - lse123), e2 = std::exp(2.0 - lse123), e3 = std::exp(3.0 - lse123);
    CHECK_THAT(vals(logits.grad()), approx({e1 / 2, e2 / 2, (e3 - 1) / 2, (1.0 / 3 - 1) / 2, 1.0 / 6, 1.0 / 6}));
}

TEST_CASE("cross_entropy skips ignore_index and averages over the rest", "[loss]") {
    Tensor logits = tensor({{1, 2, 3}, {1, 1, 1}}, kFloat64);
    CHECK_THAT(vals(cross_entropy(logits, targets({2, -100}, {2}), Reduction::none)), approx({ce0, 0}));
    CHECK_THAT(vals(cross_entropy(logits, targets({2, -100}, {2}))), approx({ce0}));
    CHECK_THAT(vals(cross_entropy(logits, targets({2, 1}, {2}), Reduction::mean, 1)), approx({ce0}));
    // Every target ignored: 0 / 0, as torch.
    CHECK(std::isnan(cross_entropy(logits, targets({-100, -100}, {2})).item<double>()));
}

TEST_CASE("cross_entropy takes (N, C, d) logits with the class axis at 1 as torch", "[loss]") {
    Tensor logits = sequence_logits().requires_grad_();
    // torch.nn.functional.cross_entropy(L.permute(0, 2, 1), Y, reduction='none'), L the logits
    // above in float64 and Y = [[3, 0, 2], [1, 3, 0]]: the same line in xgrad.
    Tensor none = cross_entropy(logits.permute({0, 2, 1}), targets({3, 0, 2, 1, 3, 0}, {2, 3}), Reduction::none);
    CHECK(none.shape() == Shape{2, 3});
    CHECK_THAT(vals(none), approx({0.5437745368666252, 0.33654638095334416, 1.3862943611198906, 0.7694064617335771,
                                   0.19204544558184009, 0.7747726543869778}));
    // The same with Y = [[3, -100, 2], [1, 3, -100]], reduction mean, and its gradient.
    Tensor loss = cross_entropy(logits.permute({0, 2, 1}), targets({3, -100, 2, 1, 3, -100}, {2, 3}));
    CHECK_THAT(vals(loss), approx({0.7228802013254833}));
    loss.backward();
    CHECK_THAT(vals(logits.grad()),
               approx({0.03955477345026683, 0.011913668816718813, 0.053393359323516125, -0.10486180159050176, 0, 0, 0,
                       0, 0.0625, 0.0625, -0.1875, 0.0625, 0.005766437407547221, -0.1341780085354597,
                       0.04260852949533864, 0.08580304163257385, 0.01532392714132647, 0.02526488462856396,
                       0.0030938475318376076, -0.04368265930172807, 0, 0, 0, 0}));
}

TEST_CASE("cross_entropy is stable for large logits", "[loss]") {
    const Dtype dtype = GENERATE(kFloat32, kFloat64);
    Tensor logits = tensor({{1000, 0}, {-1000, 1000}}, TensorOptions(dtype).requires_grad(true));
    Tensor loss = cross_entropy(logits, targets({1, 1}, {2}), Reduction::none);
    CHECK_THAT(vals(loss), approx({1000, 0}));
    loss.sum().backward();
    CHECK_THAT(vals(logits.grad()), approx({1, -1, 0, 0}));
}

TEST_CASE("cross_entropy passes gradcheck", "[loss][gradcheck]") {
    auto [logits_shape, target_values] = GENERATE(table<Shape, std::vector<std::int64_t>>({
        {{1, 3}, {2}},
        {{4, 5}, {0, 4, -100, 2}},
        {{2, 4, 3}, {3, 0, 1, -100, 2, 2}},
        {{1, 6, 1}, {5}},
        {{3, 1}, {0, 0, 0}},
        {{2, 3, 2, 2}, {0, 1, 2, -100, 2, 2, 1, 0}},
        {{4}, {3}},
    }));
    Shape target_shape = logits_shape;
    target_shape.erase(target_shape.begin() + (logits_shape.size() == 1 ? 0 : 1));
    Tensor x = param(logits_shape, -2, 2);
    Tensor y = targets(target_values, target_shape);
    REQUIRE_GRADCHECK([](auto& v) { return cross_entropy(v[0], v[1], Reduction::none); }, {x, y}, "ce none");
    REQUIRE_GRADCHECK([](auto& v) { return cross_entropy(v[0], v[1]); }, {x, y}, "ce mean");
    REQUIRE_GRADCHECK([](auto& v) { return cross_entropy(v[0], v[1], Reduction::sum); }, {x, y}, "ce sum");
    // A permuted (class-last) input reaches the class axis through the permute's backward.
    if (logits_shape.size() == 3) {
        Tensor last = param({logits_shape[0], logits_shape[2], logits_shape[1]}, -2, 2, 3);
        REQUIRE_GRADCHECK([](auto& v) { return cross_entropy(v[0].permute({0, 2, 1}), v[1], Reduction::none); },
                          {last, y}, "ce permuted");
    }
}

TEST_CASE("cross_entropy rejects bad targets, naming them", "[loss][errors]") {
    Tensor logits = zeros({2, 3}, kFloat64);
    CHECK_THROWS_WITH(cross_entropy(logits, targets({0, 3}, {2})),
                      Catch::Contains("cross_entropy: target 3 at position (1,) is out of range for 3 classes"));
    CHECK_THROWS_WITH(cross_entropy(zeros({2, 3, 2}), targets({0, 1, 2, -1}, {2, 2})),
                      Catch::Contains("target -1 at position (1, 1)"));
    CHECK_THROWS_WITH(cross_entropy(logits, zeros({2}, kFloat64)),
                      Catch::Contains("cross_entropy: targets must be int64") && Catch::Contains("float64"));
    CHECK_THROWS_WITH(cross_entropy(logits, targets({0, 1, 2}, {3})),
                      Catch::Contains("targets of shape (3,) do not fit logits of shape (2, 3)") &&
                          Catch::Contains("expected targets of shape (2,)"));
    // The class-last (B, T, V) layout of a sequence model: the message says how to pass it.
    CHECK_THROWS_WITH(cross_entropy(zeros({2, 3, 4}), targets({0, 1, 0, 1, 0, 1}, {2, 3})),
                      Catch::Contains("targets of shape (2, 3) do not fit logits of shape (2, 3, 4)") &&
                          Catch::Contains("expected targets of shape (2, 4)") &&
                          Catch::Contains("permute({0, 2, 1})"));
    CHECK_THROWS_WITH(cross_entropy(zeros({2, 3, 4, 5}), targets({0, 1}, {2})),
                      Catch::Contains("expected targets of shape (2, 4, 5)"));
    CHECK_THROWS_WITH(cross_entropy(tensor(1.0), targets({0}, {})), Catch::Contains("class axis"));
    CHECK_THROWS_WITH(cross_entropy(zeros({2, 0}), targets({0, 0}, {2})), Catch::Contains("non-empty class axis"));
    CHECK_THROWS_WITH(cross_entropy(zeros({3}), targets({0, 0}, {2})),
                      Catch::Contains("expected targets of shape ()"));
    CHECK_THROWS_WITH(cross_entropy(Tensor(), targets({0}, {1})), Catch::Contains("cross_entropy"));
    CHECK_THROWS_WITH(cross_entropy(zeros({2, 3}, kInt64), targets({0, 1}, {2})),
                      Catch::Contains("cross_entropy") && Catch::Contains("int64"));
}

TEST_CASE("masked_softmax_ce_loss matches d2l's MaskedSoftmaxCELoss", "[loss]") {
    Tensor label = targets({3, 0, 2, 1, 3, 0}, {2, 3});
    // d2l's MaskedSoftmaxCELoss()(L, Y, valid_len) in torch, with L and Y as in the (B, T, V)
    // cross_entropy test: valid_len [2, 3] and [0, 1].
    CHECK_THAT(vals(masked_softmax_ce_loss(sequence_logits(), label, targets({2, 3}, {2}))),
               approx({0.29344030593998977, 0.578741520567465}));
    CHECK_THAT(vals(masked_softmax_ce_loss(sequence_logits(), label, targets({0, 1}, {2}))),
               approx({0.0, 0.256468820577859}));
    // valid_len may be float, as d2l sometimes passes it.
    CHECK_THAT(vals(masked_softmax_ce_loss(sequence_logits(kFloat32), label, tensor({2.0, 3.0}))),
               approx({0.29344030593998977, 0.578741520567465}));
}

TEST_CASE("d2l's MaskedSoftmaxCELoss ports verbatim", "[loss]") {
    // d2l: weights = sequence_mask(ones_like(label), valid_len);
    //      unweighted = CrossEntropyLoss(reduction='none')(pred.permute(0, 2, 1), label)
    //      return (unweighted * weights).mean(dim=1)
    const Tensor pred = sequence_logits(), label = targets({3, 0, 2, 1, 3, 0}, {2, 3});
    const Tensor valid_len = targets({2, 3}, {2});
    const Tensor weights = sequence_mask(ones_like(label).to(kFloat64), valid_len);
    const Tensor unweighted = cross_entropy(pred.permute({0, 2, 1}), label, Reduction::none);
    const Tensor ported = (unweighted * weights).mean({1});
    CHECK_THAT(vals(ported), approx({0.29344030593998977, 0.578741520567465}));
    MaskedSoftmaxCELoss loss;
    CHECK_THAT(vals(loss(pred, label, valid_len)), approx({0.29344030593998977, 0.578741520567465}));
}

TEST_CASE("masked_softmax_ce_loss passes gradcheck", "[loss][gradcheck]") {
    Tensor pred = param({3, 4, 5}, -2, 2);
    Tensor label = targets({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1}, {3, 4});
    Tensor valid_len = targets({4, 1, 2}, {3});
    REQUIRE_GRADCHECK([](auto& v) { return masked_softmax_ce_loss(v[0], v[1], v[2]); }, {pred, label, valid_len},
                      "masked_softmax_ce_loss");
}

TEST_CASE("masked_softmax_ce_loss checks its shapes", "[loss][errors]") {
    CHECK_THROWS_WITH(masked_softmax_ce_loss(zeros({2, 3, 4}), targets({0, 0, 0, 0}, {2, 2}), targets({1, 1}, {2})),
                      Catch::Contains("masked_softmax_ce_loss") && Catch::Contains("(2, 3, 4), (2, 2) and (2,)"));
    CHECK_THROWS_WITH(masked_softmax_ce_loss(zeros({2, 1, 4}), targets({0, 0}, {2, 1}), targets({1, 1, 1}, {3})),
                      Catch::Contains("valid_len (B,)"));
}

TEST_CASE("mse_loss matches hand-computed values and passes gradcheck", "[loss][gradcheck]") {
    Tensor a = tensor({{1, 2}, {3, 4}}, kFloat64);
    Tensor b = tensor({{1.5, 0}, {3, 7}}, kFloat64);
    CHECK_THAT(vals(mse_loss(a, b, Reduction::none)), approx({0.25, 4, 0, 9}));
    CHECK_THAT(vals(mse_loss(a, b, Reduction::sum)), approx({13.25}));
    CHECK_THAT(vals(mse_loss(a, b)), approx({13.25 / 4}));

    const Shape shape = GENERATE(Shape{1}, Shape{3, 4}, Shape{2, 1, 3});
    Tensor x = param(shape, -1, 1, 1);
    Tensor y = param(shape, -1, 1, 2);
    REQUIRE_GRADCHECK([](auto& v) { return mse_loss(v[0], v[1]); }, {x, y}, "mse mean");
    REQUIRE_GRADCHECK([](auto& v) { return mse_loss(v[0], v[1], Reduction::sum); }, {x, y}, "mse sum");
    REQUIRE_GRADCHECK([](auto& v) { return mse_loss(v[0], v[1], Reduction::none); }, {x, y}, "mse none");
}

TEST_CASE("mse_loss in float32 sums a million terms without drift and scales its gradient", "[loss]") {
    // 1e6 squared differences of 0.1: a float accumulator would stop near 2^18 · 0.01 and lose
    // the rest; the fused loss sums in double.
    const Tensor x = full({1000, 1000}, 0.1, kFloat32).requires_grad_();
    const Tensor t = zeros({1000, 1000});
    const Tensor loss = mse_loss(x, t, Reduction::sum);
    CHECK(loss.item<float>() == Approx(1e6 * 0.1f * 0.1f).epsilon(1e-6));
    loss.backward();
    CHECK(x.grad().data_ptr<float>()[12345] == Approx(0.2f));
    CHECK(std::isnan(mse_loss(zeros({0, 3}), zeros({0, 3})).item<float>()));
}

TEST_CASE("mse_loss rejects mismatched shapes and dtypes", "[loss][errors]") {
    CHECK_THROWS_WITH(mse_loss(zeros({2, 3}), zeros({3})),
                      Catch::Contains("mse_loss: input of shape (2, 3) and target of shape (3,)"));
    CHECK_THROWS_WITH(mse_loss(zeros({2}), zeros({2}, kFloat64)),
                      Catch::Contains("mse_loss") && Catch::Contains("float32 and float64"));
}

TEST_CASE("cross_entropy keeps a well-fitted token's small loss exact in float32", "[loss]") {
    // loss = log(1 + e^-z + e^(0.5-z)): a difference of two near-equal numbers, worked in double.
    for (double z : {8.0, 12.0, 15.0, 20.0}) {
        INFO("z = " << z);
        const Tensor logits = tensor({{z, 0.0, 0.5}});  // float32
        const double expected = std::log1p(std::exp(-z) + std::exp(0.5 - z));
        const double got = cross_entropy(logits, from_vector(std::vector<std::int64_t>{0}, {1})).item<double>();
        CHECK(got == Approx(expected).epsilon(1e-6));
    }
}

TEST_CASE("cross_entropy over many rows gives each row's loss and gradient as that row alone", "[loss]") {
    // The rows are split over the pool: a row's result must not depend on the rows beside it.
    Generator gen(3);
    const long rows = 700, classes = 11;
    const Tensor logits = (randn({rows, classes}, {}, gen) * 4.0f).requires_grad_(true);
    std::vector<std::int64_t> t(rows);
    for (long r = 0; r < rows; ++r) t[r] = r % 13 == 0 ? -100 : (r * 7) % classes;  // some ignored
    const Tensor targets = from_vector(std::vector<double>(t.begin(), t.end()), {static_cast<std::size_t>(rows)}, kInt64);
    const Tensor all = cross_entropy(logits, targets, Reduction::none, -100);
    all.sum().backward();
    const auto loss = all.to_vector<float>(), grad = logits.grad().to_vector<float>();
    for (long r = 0; r < rows; r += 37) {
        const Tensor one = slice(logits.detach(), 0, r, r + 1).requires_grad_(true);
        const Tensor l = cross_entropy(one, slice(targets, 0, r, r + 1), Reduction::none, -100);
        l.sum().backward();
        CHECK(l.item<float>() == loss[r]);
        const auto g = one.grad().to_vector<float>();
        for (long c = 0; c < classes; ++c) CHECK(g[c] == grad[r * classes + c]);
    }
}

TEST_CASE("cross_entropy with the class axis in the middle: each position as that position alone", "[loss]") {
    // (N, C, d): a row's classes are d apart, and the rows of a chunk interleave in the gradient
    Generator gen(4);
    const long n = 40, classes = 11, d = 7;
    const Tensor logits = (randn({n, classes, d}, {}, gen) * 4.0f).requires_grad_(true);
    std::vector<double> t(n * d);
    for (long i = 0; i < n * d; ++i) t[i] = i % 17 == 0 ? -100 : (i * 5) % classes;
    const Tensor targets = from_vector(t, {static_cast<std::size_t>(n), static_cast<std::size_t>(d)}, kInt64);
    const Tensor all = cross_entropy(logits, targets, Reduction::none, -100);
    all.sum().backward();
    const auto loss = all.to_vector<float>(), grad = logits.grad().to_vector<float>();
    for (long i = 0; i < n; i += 9)
        for (long j = 0; j < d; j += 3) {
            const Tensor one = slice(slice(logits.detach(), 0, i, i + 1), 2, j, j + 1).requires_grad_(true);
            const Tensor l = cross_entropy(one, slice(slice(targets, 0, i, i + 1), 1, j, j + 1), Reduction::none, -100);
            l.sum().backward();
            CHECK(l.item<float>() == loss[i * d + j]);
            const auto g = one.grad().to_vector<float>();
            for (long c = 0; c < classes; ++c) CHECK(g[c] == grad[(i * classes + c) * d + j]);
        }
}

// Run by the test below in processes with different pool sizes: the losses in hexadecimal.
TEST_CASE("cross_entropy child: prints the mean and sum losses of many rows", "[.cross-entropy-threads-child]") {
    Generator gen(5);
    const Tensor logits = randn({5000, 11}, {}, gen) * 3.0f;
    std::vector<double> t(5000);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = i % 11 == 0 ? -100 : double((i * 7) % 11);
    const Tensor targets = from_vector(t, {t.size()}, kInt64);
    std::printf("mean %a\n", cross_entropy(logits, targets, Reduction::mean, -100).item<double>());
    std::printf("sum %a\n", cross_entropy(logits, targets, Reduction::sum, -100).item<double>());
}

TEST_CASE("cross_entropy's mean and sum are the same bits whatever the number of threads", "[loss]") {
    const auto [one, three] = run_on_1_and_3_threads("[.cross-entropy-threads-child]");
    INFO(one);
    REQUIRE(one.find("mean 0x") != std::string::npos);
    CHECK(one == three);
}
