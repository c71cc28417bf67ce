// Masked softmax and the attention layers: d2l's worked examples, values from PyTorch, gradient
// checks in double, and one test for each kind of bad input.
#include <cmath>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

namespace {

const double third = 1.0 / 3;

// d2l's example inputs: keys = ones(2, 10, 2), values = arange(40).reshape(1, 10, 4) repeated
// to batch 2, valid_lens = [2, 6].
Tensor d2l_keys() { return ones({2, 10, 2}); }
Tensor d2l_values() {
    const Tensor one = reshape(arange(40.0), {1, 10, 4});
    return concat({one, one}, 0);
}

// The deterministic values of the PyTorch reference script: sin(0.7·k + phase), k row-major.
Tensor det(const Shape& shape, double phase, double scale = 1.0) {
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<double> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = scale * std::sin(0.7 * static_cast<double>(k) + phase);
    return from_vector(v, shape, kFloat64);
}

// MultiHeadAttention(3, 2, 4, 4, 2, 0, bias=True) in float64 with parameter k set to
// det(shape, k, 0.5), as the reference script does in PyTorch.
std::shared_ptr<MultiHeadAttention> reference_mha() {
    auto m = std::make_shared<MultiHeadAttention>(3, 2, 4, 4, 2, 0.0, true);
    m->to(kFloat64);
    NamedTensors state;
    double phase = 0;
    for (const auto& [name, p] : m->named_parameters())
        state.emplace_back(name, det(p.shape(), phase++, 0.5));
    m->load_state_dict(state);
    m->eval();
    return m;
}

}  // namespace

// --- masked_softmax -------------------------------------------------------------------------

TEST_CASE("masked_softmax reproduces d2l's examples", "[masked_softmax]") {
    const Tensor X = zeros({2, 2, 4});
    CHECK_THAT(vals(masked_softmax(X, lens({2, 3}))),
               approx({.5, .5, 0, 0, .5, .5, 0, 0, third, third, third, 0, third, third, third, 0}));
    CHECK_THAT(vals(masked_softmax(X, lens2({1, 3, 2, 4}, 2))),
               approx({1, 0, 0, 0, third, third, third, 0, .5, .5, 0, 0, .25, .25, .25, .25}));
    // Floating lengths with whole values act like integers.
    CHECK_THAT(vals(masked_softmax(X, tensor({2.0, 3.0}))), approx(vals(masked_softmax(X, lens({2, 3})))));
}

TEST_CASE("masked_softmax: length 0 gives a uniform row, length ≥ keys a plain softmax", "[masked_softmax]") {
    const Tensor X = tensor({{{1, 2, 3, 4}}, {{4, 1, 0, 2}}}, kFloat64);
    const auto zero = vals(masked_softmax(X, lens({0, 0})));
    CHECK_THAT(zero, approx(std::vector<double>(8, 0.25)));
    CHECK_THAT(vals(masked_softmax(X, lens({4, 7}))), approx(vals(softmax(X, -1))));
    CHECK_THAT(vals(masked_softmax(X, Tensor())), approx(vals(softmax(X, -1))));
}

TEST_CASE("masked_softmax sends no gradient to masked positions", "[masked_softmax]") {
    Tensor X = param({2, 3, 4}, -1, 1, 5);
    const Tensor y = masked_softmax(X, lens2({1, 4, 0, 2, 3, 4}, 2));
    (y * param({2, 3, 4}, 0.5, 1.5, 6).detach()).sum().backward();
    const auto g = vals(X.grad());
    const int valid[2][3] = {{1, 4, 0}, {2, 3, 4}};
    for (int b = 0; b < 2; ++b)
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 4; ++j)
                if (j >= valid[b][i]) CHECK(g[(b * 3 + i) * 4 + j] == 0.0);
    CHECK(g[4] != 0.0);  // an unmasked one does get a gradient
}

TEST_CASE("masked_softmax passes gradcheck for none, 1-D and 2-D valid_lens", "[masked_softmax][gradcheck]") {
    const Tensor X = param({2, 3, 4}, -2, 2);
    REQUIRE_GRADCHECK([](auto& x) { return masked_softmax(x[0], Tensor()); }, {X}, "masked_softmax none");
    for (const Tensor& l :
         {lens({2, 4}), lens({0, 3}), lens2({1, 4, 0, 4, 2, 3}, 2), lens2({4, 4, 4, 1, 1, 1}, 2)})
        REQUIRE_GRADCHECK([&](auto& x) { return masked_softmax(x[0], l); }, {X}, "masked_softmax");
    const Tensor one = param({1, 1, 5}, -2, 2, 3);
    REQUIRE_GRADCHECK([](auto& x) { return masked_softmax(x[0], lens({3})); }, {one},
                      "masked_softmax batch 1");
}

TEST_CASE("masked_softmax (fused for lengths and causal) equals softmax of masked_fill", "[masked_softmax]") {
    // The reference composition: scores of masked keys set to -1e6, then a plain softmax.
    const auto reference = [](const Tensor& X, const Tensor& keep) {
        return softmax(masked_fill(X, logical_not(keep), -1e6), -1);
    };
    const Tensor key = reshape(arange(5.0), {1, 1, 5});
    const Tensor g = det({2, 3, 5}, 0.3);
    for (Dtype dt : {kFloat32, kFloat64}) {
        const auto check = [&](const AttentionMask& mask, const Tensor& keep) {
            const Tensor X = det({2, 3, 5}, 1.0, 3.0).to(dt).requires_grad_(true);
            const Tensor R = det({2, 3, 5}, 1.0, 3.0).to(dt).requires_grad_(true);
            const Tensor y = masked_softmax(X, mask), want = reference(R, keep);
            CHECK_THAT(vals(y), approx(vals(want), 1e-6));
            (y * g.to(dt)).sum().backward();
            (want * g.to(dt)).sum().backward();
            CHECK_THAT(vals(X.grad()), approx(vals(R.grad()), 1e-6));
        };
        // valid lengths (batch,) incl. 0 (uniform row) and ≥ keys; (batch, queries)
        check(AttentionMask::valid_lens(lens({0, 7})), lt(key, reshape(tensor({0.0, 7.0}), {2, 1, 1})));
        check(AttentionMask::valid_lens(lens2({1, 5, 0, 2, 3, 4}, 2)),
              lt(key, reshape(tensor({1.0, 5, 0, 2, 3, 4}), {2, 3, 1})));
        // causal, 3 queries over 5 keys: query i keeps keys j <= i + 2
        check(AttentionMask::causal(), le(key, reshape(tensor({2.0, 3, 4}), {1, 3, 1})));
    }
}

TEST_CASE("transpose_qkv and transpose_output are d2l's reshape-permute-reshape", "[mha]") {
    const Tensor X = param({2, 3, 4}, -1, 1, 5);  // batch 2, 3 steps, 2 heads of 2
    const Tensor want = reshape(permute(reshape(X, {2, 3, 2, 2}), {0, 2, 1, 3}), {4, 3, 2});
    CHECK(transpose_qkv(X, 2).shape() == Shape{4, 3, 2});
    CHECK_THAT(vals(transpose_qkv(X, 2)), approx(vals(want)));
    CHECK_THAT(vals(transpose_output(transpose_qkv(X, 2), 2)), approx(vals(X)));
    REQUIRE_GRADCHECK([](auto& x) { return transpose_qkv(x[0], 2); }, {X}, "transpose_qkv");
    const Tensor H = param({4, 3, 2}, -1, 1, 6);
    REQUIRE_GRADCHECK([](auto& x) { return transpose_output(x[0], 2); }, {H}, "transpose_output");
    CHECK_THROWS_WITH(transpose_qkv(ones({2, 3, 5}), 2),
                      Catch::Contains("transpose_qkv") && Catch::Contains("(2, 3, 5)"));
    CHECK_THROWS_WITH(transpose_output(ones({3, 3, 2}), 2),
                      Catch::Contains("transpose_output") && Catch::Contains("(3, 3, 2)"));
}

TEST_CASE("sequence_mask replaces entries past each length", "[masked_softmax]") {
    // d2l: sequence_mask(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([1, 2]))
    CHECK_THAT(vals(sequence_mask(tensor({{1, 2, 3}, {4, 5, 6}}), lens({1, 2}))), approx({1, 0, 0, 4, 5, 0}));
    // d2l: sequence_mask(torch.ones(2, 3, 4), torch.tensor([1, 2]), value=-1)
    std::vector<double> expected;
    for (int b = 0; b < 2; ++b)
        for (int t = 0; t < 3; ++t)
            for (int k = 0; k < 4; ++k) expected.push_back(t < b + 1 ? 1 : -1);
    CHECK_THAT(vals(sequence_mask(ones({2, 3, 4}), lens({1, 2}), -1)), approx(expected));
}

TEST_CASE("bmm computes d2l's attention pooling example", "[bmm]") {
    // weights = ones((2, 10)) * 0.1; values = arange(20.0).reshape((2, 10))
    const Tensor weights = ones({2, 10}) * 0.1;
    const Tensor values = reshape(arange(20.0), {2, 10});
    const Tensor pooled = bmm(unsqueeze(weights, 1), unsqueeze(values, -1));
    CHECK(pooled.shape() == Shape{2, 1, 1});
    CHECK_THAT(vals(pooled), approx({4.5, 14.5}, 1e-5));
}

TEST_CASE("bmm passes gradcheck", "[bmm][gradcheck]") {
    REQUIRE_GRADCHECK([](auto& x) { return bmm(x[0], x[1]); },
                      (std::vector<Tensor>{param({2, 3, 4}), param({2, 4, 5}, -1, 1, 2)}), "bmm");
    REQUIRE_GRADCHECK([](auto& x) { return bmm(x[0], x[1]); },
                      (std::vector<Tensor>{param({1, 1, 3}), param({1, 3, 2}, -1, 1, 2)}), "bmm batch 1");
}

// --- DotProductAttention and AdditiveAttention ----------------------------------------------

TEST_CASE("AdditiveAttention reproduces d2l's example", "[attention]") {
    const Tensor queries = randn({2, 1, 20});
    AdditiveAttention attention(2, 20, 8, 0.1);
    attention.eval();
    const Tensor out = attention.forward(queries, d2l_keys(), d2l_values(), lens({2, 6}));
    CHECK(out.shape() == Shape{2, 1, 4});
    CHECK_THAT(vals(out), approx({2, 3, 4, 5, 10, 11, 12, 13}, 1e-5));
    const auto w = vals(attention.attention_weights());
    CHECK(attention.attention_weights().shape() == Shape{2, 1, 10});
    CHECK_THAT(std::vector<double>(w.begin(), w.begin() + 10),
               approx({.5, .5, 0, 0, 0, 0, 0, 0, 0, 0}, 1e-6));
    CHECK(to_string(attention) == R"(AdditiveAttention(
  (W_k): Linear(in_features=2, out_features=8, bias=False)
  (W_q): Linear(in_features=20, out_features=8, bias=False)
  (w_v): Linear(in_features=8, out_features=1, bias=False)
  (dropout): Dropout(p=0.1, inplace=False)
))");
}

TEST_CASE("DotProductAttention reproduces d2l's example", "[attention]") {
    const Tensor queries = randn({2, 1, 2});
    DotProductAttention attention(0.5);
    attention.eval();
    const Tensor out = attention.forward(queries, d2l_keys(), d2l_values(), lens({2, 6}));
    CHECK_THAT(vals(out), approx({2, 3, 4, 5, 10, 11, 12, 13}, 1e-5));
    const auto w = vals(attention.attention_weights());
    const double s = 1.0 / 6;
    CHECK_THAT(std::vector<double>(w.begin() + 10, w.end()), approx({s, s, s, s, s, s, 0, 0, 0, 0}, 1e-6));
}

TEST_CASE("DotProductAttention over queries and keys without features weighs the kept keys alike", "[attention]") {
    // d = 0: every score sums nothing; the scale 1/√d would be infinite, so it is not used
    DotProductAttention attention(0.0);
    const Tensor out = attention.forward(rand({2, 3, 0}), rand({2, 4, 0}), rand({2, 4, 2}), lens({2, 4}));
    CHECK(out.shape() == Shape{2, 3, 2});
    const auto w = vals(attention.attention_weights());
    CHECK_THAT(std::vector<double>(w.begin(), w.begin() + 4), approx({0.5, 0.5, 0, 0}, 1e-6));
    CHECK_THAT(std::vector<double>(w.begin() + 12, w.begin() + 16), approx({0.25, 0.25, 0.25, 0.25}, 1e-6));
}

TEST_CASE("DotProductAttention keeps the weights from before dropout", "[attention]") {
    DotProductAttention attention(0.5);
    const Tensor out = attention.forward(rand({3, 4, 5}), rand({3, 6, 5}), rand({3, 6, 2}), lens({1, 6, 3}));
    CHECK(out.shape() == Shape{3, 4, 2});
    const Tensor sums = sum(attention.attention_weights(), {-1});
    CHECK_THAT(vals(sums), approx(std::vector<double>(12, 1.0), 1e-6));
}

TEST_CASE("DotProductAttention passes gradcheck", "[attention][gradcheck]") {
    auto [batch, tq, tk, d, dv] =
        GENERATE(table<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t>({
            {2, 3, 4, 5, 2},
            {1, 1, 3, 2, 3},
            {3, 2, 2, 4, 1},
        }));
    DotProductAttention attention(0.0);
    const std::vector<Tensor> qkv = {param({batch, tq, d}), param({batch, tk, d}, -1, 1, 2),
                                     param({batch, tk, dv}, -1, 1, 3)};
    std::vector<Tensor> masks = {Tensor(), full({batch}, 2.0, kFloat64)};
    std::vector<std::int64_t> per_query;
    for (std::size_t k = 0; k < batch * tq; ++k) per_query.push_back(static_cast<std::int64_t>(k % (tk + 1)));
    masks.push_back(lens2(per_query, batch));
    for (const Tensor& l : masks)
        REQUIRE_GRADCHECK([&](auto& x) { return attention.forward(x[0], x[1], x[2], l); }, qkv,
                          "DotProductAttention");
}

TEST_CASE("AdditiveAttention passes gradcheck for inputs and parameters", "[attention][gradcheck]") {
    AdditiveAttention attention(3, 2, 4, 0.0);
    attention.to(kFloat64);
    const std::vector<Tensor> qkv = {param({2, 3, 2}), param({2, 4, 3}, -1, 1, 2),
                                     param({2, 4, 5}, -1, 1, 3)};
    for (const Tensor& l : {Tensor(), lens({1, 3}), lens2({1, 4, 0, 2, 3, 4}, 2)})
        REQUIRE_MODULE_GRADCHECK(
            attention, qkv, [&](auto& x) { return attention.forward(x[0], x[1], x[2], l); },
            "AdditiveAttention");
}

// --- MultiHeadAttention ---------------------------------------------------------------------

TEST_CASE("MultiHeadAttention runs the seeds' check", "[mha]") {
    const std::size_t num_hiddens = 100, num_heads = 5;
    auto attention = std::make_shared<MultiHeadAttention>(num_hiddens, num_hiddens, num_hiddens, num_hiddens,
                                                          num_heads, 0.5);
    attention->eval();
    const std::size_t batch_size = 2, num_queries = 4, num_kvpairs = 6;
    const Tensor valid_lens = lens({3, 2});
    const Tensor X = ones({batch_size, num_queries, num_hiddens});
    const Tensor Y = ones({batch_size, num_kvpairs, num_hiddens});
    CHECK(attention->forward(X, Y, Y, valid_lens).shape() == Shape{2, 4, 100});
    CHECK(attention->attention_weights_copy().shape() == Shape{2, 5, 4, 6});
}

TEST_CASE("MultiHeadAttention matches the d2l code run in PyTorch", "[mha]") {
    auto m = reference_mha();
    const Tensor q = det({2, 3, 2}, 10), k = det({2, 5, 3}, 20), v = det({2, 5, 4}, 30);
    // The d2l MultiHeadAttention of the seeds, in float64, parameters and inputs from det();
    // m(q, k, v, torch.tensor([[1, 3, 5], [2, 2, 4]])).flatten()
    CHECK_THAT(vals(m->forward(q, k, v, lens2({1, 3, 5, 2, 2, 4}, 2))),
               approx({0.5162233044700713, 0.22999553471007778,  0.7372297731157265, -0.16040877795653005,
                       0.5121876693741075, 0.21418467276577496,  0.7710601029099904, -0.20834930106091512,
                       0.5000206997511896, 0.21230064300646706,  0.7867774223923176, -0.23608369040495789,
                       0.6667723409562674, 0.017314198990477703, 0.9874669485460477, -0.419285556549471,
                       0.5733880471723017, 0.13836514210802625,  0.8527374364012829, -0.28644618708664626,
                       0.5349338880729884, 0.17308737505788746,  0.8257594682940748, -0.2703299315235915}));
    // m.attention.attention_weights.reshape(2, 2, 3, 5)[0, 1, 2]: batch 0, head 1, query 2
    const auto w = vals(m->attention_weights_copy());
    CHECK_THAT(std::vector<double>(w.begin() + 25, w.begin() + 30),
               approx({0.18763264975289654, 0.18780457276057635, 0.24911700697679992, 0.18711956735352034,
                       0.18832620315620685}));
    // m(q, k, v, torch.tensor([2, 4])).flatten()
    CHECK_THAT(vals(m->forward(q, k, v, lens({2, 4}))),
               approx({0.6114780547513006, 0.09329059515329191,   0.8995879190948219, -0.32965878306183805,
                       0.5975597570404336, 0.10544651500398072,   0.8905990582962957, -0.3248756919894624,
                       0.6945455713977924, -0.013582096779514607, 1.0179160783413093, -0.4457689614735091,
                       0.6134187897917145, 0.08824722503914134,   0.9071511360420349, -0.33886787689766285,
                       0.5785372189141849, 0.1288318225582507,    0.8655532779804632, -0.3010636120376189,
                       0.5349338880729884, 0.17308737505788746,   0.8257594682940748, -0.2703299315235915}));
}

TEST_CASE("MultiHeadAttention: a bool mask (true = attend) and causal agree with valid_lens", "[mha]") {
    auto m = reference_mha();
    const Tensor q = det({2, 3, 2}, 10), k = det({2, 5, 3}, 20), v = det({2, 5, 4}, 30);
    const Tensor by_lens = m->forward(q, k, v, lens2({1, 3, 5, 2, 2, 4}, 2));
    // The same keys, as a (batch, queries, keys) mask: key j is attended iff j < length.
    std::vector<double> keep;
    for (int length : {1, 3, 5, 2, 2, 4})
        for (int j = 0; j < 5; ++j) keep.push_back(j < length);
    const Tensor mask = gt(from_vector(keep, {2, 3, 5}), 0.5);
    CHECK_THAT(vals(m->forward(q, k, v, AttentionMask::attend_where(mask))), approx(vals(by_lens), 1e-12));

    // A (queries, keys) mask is shared by the batch.
    std::vector<double> shared;
    for (int length : {1, 3, 5})
        for (int j = 0; j < 5; ++j) shared.push_back(j < length);
    CHECK_THAT(vals(m->forward(q, k, v, AttentionMask::attend_where(gt(from_vector(shared, {3, 5}), 0.5)))),
               approx(vals(m->forward(q, k, v, lens2({1, 3, 5, 1, 3, 5}, 2))), 1e-12));

    // causal with 3 queries and 5 keys: bottom-right aligned, query i sees keys j ≤ i + 2.
    CHECK_THAT(vals(m->forward(q, k, v, AttentionMask::causal())),
               approx(vals(m->forward(q, k, v, lens2({3, 4, 5, 3, 4, 5}, 2))), 1e-12));
    const Tensor kq = det({2, 3, 3}, 40), vq = det({2, 3, 4}, 50);
    CHECK_THAT(vals(m->forward(q, kq, vq, AttentionMask::causal())),
               approx(vals(m->forward(q, kq, vq, lens2({1, 2, 3, 1, 2, 3}, 2))), 1e-12));
    CHECK_THAT(vals(m->forward(q, k, v, AttentionMask())), approx(vals(m->forward(q, k, v)), 1e-12));
    // A length beyond the 5 keys means every key, as in d2l.
    CHECK_THAT(vals(m->forward(q, k, v, lens({2, 9}))),
               approx(vals(m->forward(q, k, v, lens({2, 5}))), 1e-12));
}

TEST_CASE("MultiHeadAttention exposes per-head weights as (batch, heads, queries, keys)", "[mha]") {
    MultiHeadAttention m(6, 6, 6, 6, 3, 0.0);
    m.forward(rand({2, 4, 6}), rand({2, 5, 6}), rand({2, 5, 6}), lens({2, 5}));
    const Tensor w = m.attention_weights_copy();
    REQUIRE(w.shape() == Shape{2, 3, 4, 5});
    const auto v = vals(w);
    for (std::size_t h = 0; h < 3; ++h)
        for (std::size_t i = 0; i < 4; ++i) {
            const std::size_t row = (0 * 3 + h) * 4 + i;  // batch 0 has length 2 in every head
            CHECK(v[row * 5 + 2] == 0.0);
            CHECK(v[row * 5 + 0] + v[row * 5 + 1] == Approx(1.0));
        }
}

TEST_CASE("MultiHeadAttention passes gradcheck, bias on and off, sizes all different", "[mha][gradcheck]") {
    const bool bias = GENERATE(false, true);
    MultiHeadAttention m(3, 2, 5, 4, 2, 0.0, bias);  // key_size 3, query_size 2, value_size 5
    m.to(kFloat64);
    const std::vector<Tensor> qkv = {param({2, 3, 2}), param({2, 4, 3}, -1, 1, 2),
                                     param({2, 4, 5}, -1, 1, 3)};
    for (const Tensor& l : {Tensor(), lens({1, 3}), lens2({1, 4, 0, 2, 3, 4}, 2)})
        REQUIRE_MODULE_GRADCHECK(
            m, qkv, [&](auto& x) { return m.forward(x[0], x[1], x[2], l); }, "MultiHeadAttention");
    MultiHeadAttention one(3, 3, 3, 6, 3, 0.0, bias);
    one.to(kFloat64);
    const Tensor x = param({1, 2, 3});
    REQUIRE_MODULE_GRADCHECK(
        one, {x}, [&](auto& in) { return one.forward(in[0], in[0], in[0], AttentionMask::causal()); },
        "MultiHeadAttention batch 1, causal self-attention");
}

// --- bad input: one test for each kind ------------------------------------------------------

TEST_CASE("bad input: num_hiddens not divisible by num_heads", "[mha][bad]") {
    CHECK_THROWS_WITH(MultiHeadAttention(10, 10, 10, 10, 3, 0.0), Catch::Contains("MultiHeadAttention") &&
                                                                      Catch::Contains("num_hiddens (10)") &&
                                                                      Catch::Contains("num_heads (3)"));
    CHECK_THROWS_WITH(MultiHeadAttention(10, 10, 10, 10, 0, 0.0),
                      Catch::Contains("MultiHeadAttention") && Catch::Contains("num_heads must be positive"));
}

TEST_CASE("bad input: queries whose last axis is not query_size", "[mha][bad]") {
    MultiHeadAttention m(3, 2, 5, 4, 2, 0.0);
    CHECK_THROWS_WITH(
        m.forward(ones({2, 3, 3}), ones({2, 4, 3}), ones({2, 4, 5})),
        Catch::Contains(
            "MultiHeadAttention: queries must have last axis query_size = 2, got shape (2, 3, 3)"));
}

TEST_CASE("bad input: keys whose last axis is not key_size", "[mha][bad]") {
    MultiHeadAttention m(3, 2, 5, 4, 2, 0.0);
    CHECK_THROWS_WITH(
        m.forward(ones({2, 3, 2}), ones({2, 4, 5}), ones({2, 4, 5})),
        Catch::Contains("MultiHeadAttention: keys must have last axis key_size = 3, got shape (2, 4, 5)"));
    AdditiveAttention a(3, 2, 4, 0.0);
    CHECK_THROWS_WITH(a.forward(ones({2, 3, 2}), ones({2, 4, 4}), ones({2, 4, 5})),
                      Catch::Contains("AdditiveAttention: keys must have last axis key_size = 3"));
    DotProductAttention d(0.0);
    CHECK_THROWS_WITH(d.forward(ones({2, 3, 2}), ones({2, 4, 3}), ones({2, 4, 5})),
                      Catch::Contains("DotProductAttention") && Catch::Contains("(2, 3, 2)") &&
                          Catch::Contains("(2, 4, 3)"));
}

TEST_CASE("bad input: values whose last axis is not value_size", "[mha][bad]") {
    MultiHeadAttention m(3, 2, 5, 4, 2, 0.0);
    CHECK_THROWS_WITH(
        m.forward(ones({2, 3, 2}), ones({2, 4, 3}), ones({2, 4, 6})),
        Catch::Contains(
            "MultiHeadAttention: values must have last axis value_size = 5, got shape (2, 4, 6)"));
}

TEST_CASE("bad input: keys and values of different lengths", "[mha][bad]") {
    MultiHeadAttention m(3, 2, 5, 4, 2, 0.0);
    CHECK_THROWS_WITH(m.forward(ones({2, 3, 2}), ones({2, 4, 3}), ones({2, 6, 5})),
                      Catch::Contains("MultiHeadAttention: keys and values must have the same length") &&
                          Catch::Contains("(2, 4, 3)") && Catch::Contains("(2, 6, 5)"));
    DotProductAttention d(0.0);
    CHECK_THROWS_WITH(d.forward(ones({2, 3, 2}), ones({2, 4, 2}), ones({2, 5, 2})),
                      Catch::Contains("DotProductAttention: keys and values must have the same length"));
}

TEST_CASE("bad input: queries, keys and values of different batch sizes or ranks", "[mha][bad]") {
    MultiHeadAttention m(4, 4, 4, 4, 2, 0.0);
    CHECK_THROWS_WITH(m.forward(ones({2, 3, 4}), ones({3, 4, 4}), ones({3, 4, 4})),
                      Catch::Contains("MultiHeadAttention") && Catch::Contains("batch size"));
    CHECK_THROWS_WITH(
        m.forward(ones({3, 4}), ones({2, 3, 4}), ones({2, 3, 4})),
        Catch::Contains("MultiHeadAttention: queries must be 3-D") && Catch::Contains("(3, 4)"));
}

TEST_CASE("bad input: valid_lens of the wrong batch size", "[mha][bad]") {
    MultiHeadAttention m(4, 4, 4, 4, 2, 0.0);
    CHECK_THROWS_WITH(
        m.forward(ones({2, 4, 4}), ones({2, 6, 4}), ones({2, 6, 4}), lens({3, 2, 1})),
        Catch::Contains("MultiHeadAttention: valid_lens must have shape (2,) or (2, 4), got (3,)"));
    CHECK_THROWS_WITH(
        m.forward(ones({2, 4, 4}), ones({2, 6, 4}), ones({2, 6, 4}), lens2({1, 2, 3, 4, 5, 6}, 2)),
        Catch::Contains("MultiHeadAttention: valid_lens must have shape (2,) or (2, 4), got (2, 3)"));
}

TEST_CASE("bad input: valid_lens of the wrong rank", "[mha][bad]") {
    MultiHeadAttention m(4, 4, 4, 4, 2, 0.0);
    CHECK_THROWS_WITH(
        m.forward(ones({2, 4, 4}), ones({2, 6, 4}), ones({2, 6, 4}), zeros({2, 4, 1})),
        Catch::Contains("MultiHeadAttention: valid_lens must have shape (2,) or (2, 4), got (2, 4, 1)"));
    CHECK_THROWS_WITH(masked_softmax(zeros({2, 2, 4}), tensor(2.0)),
                      Catch::Contains("masked_softmax: valid_lens must have shape (2,) or (2, 2), got ()"));
}

TEST_CASE("bad input: negative valid_lens", "[mha][bad]") {
    MultiHeadAttention m(4, 4, 4, 4, 2, 0.0);
    CHECK_THROWS_WITH(m.forward(ones({2, 4, 4}), ones({2, 6, 4}), ones({2, 6, 4}), lens({3, -1})),
                      Catch::Contains("MultiHeadAttention: valid_lens must be non-negative, got -1 at [1]"));
}

TEST_CASE("bad input: valid_lens that are not whole numbers", "[mha][bad]") {
    MultiHeadAttention m(4, 4, 4, 4, 2, 0.0);
    CHECK_THROWS_WITH(
        m.forward(ones({2, 4, 4}), ones({2, 6, 4}), ones({2, 6, 4}), tensor({3.0, 1.5})),
        Catch::Contains("MultiHeadAttention: valid_lens must be whole numbers, got 1.5 at [1]"));
    // inf once masked nothing (it was cast to an integer); NaN and inf are refused alike
    for (double bad : {INFINITY, -INFINITY, NAN})
        CHECK_THROWS_WITH(m.forward(ones({2, 4, 4}), ones({2, 6, 4}), ones({2, 6, 4}), tensor({3.0, bad})),
                          Catch::Contains("MultiHeadAttention: valid_lens must be whole numbers") &&
                              Catch::Contains("at [1]"));
    CHECK_THROWS_WITH(
        m.forward(ones({2, 4, 4}), ones({2, 6, 4}), ones({2, 6, 4}), gt(tensor({3.0, 1.5}), 2.0)),
        Catch::Contains("MultiHeadAttention: valid_lens") && Catch::Contains("bool"));
}

TEST_CASE("bad input: a mask of the wrong shape", "[mha][bad]") {
    MultiHeadAttention m(4, 4, 4, 4, 2, 0.0);
    const Tensor wrong = gt(ones({2, 6, 4}), 0.0);
    CHECK_THROWS_WITH(
        m.forward(ones({2, 4, 4}), ones({2, 6, 4}), ones({2, 6, 4}), AttentionMask::attend_where(wrong)),
        Catch::Contains("MultiHeadAttention: mask must have shape (2, 4, 6) or (4, 6), got (2, 6, 4)"));
}

TEST_CASE("bad input: a mask that is not bool", "[mha][bad]") {
    MultiHeadAttention m(4, 4, 4, 4, 2, 0.0);
    CHECK_THROWS_WITH(
        m.forward(ones({2, 4, 4}), ones({2, 6, 4}), ones({2, 6, 4}),
                  AttentionMask::attend_where(ones({2, 4, 6}))),
        Catch::Contains("MultiHeadAttention: mask must be a bool tensor (true = attend), got float32"));
}

TEST_CASE("bad input: a causal mask with fewer keys than queries", "[mha][bad]") {
    MultiHeadAttention m(4, 4, 4, 4, 2, 0.0);
    CHECK_THROWS_WITH(m.forward(ones({2, 4, 4}), ones({2, 3, 4}), ones({2, 3, 4}), AttentionMask::causal()),
                      Catch::Contains("MultiHeadAttention") && Catch::Contains("4 queries and 3 keys"));
}

TEST_CASE("bad input: masked_softmax of scores that are not 3-D", "[masked_softmax][bad]") {
    CHECK_THROWS_WITH(masked_softmax(zeros({2, 4}), lens({1, 2})),
                      Catch::Contains("masked_softmax: X must be 3-D") && Catch::Contains("(2, 4)"));
}

TEST_CASE("bad input: additive and dot-product attention inputs that do not fit", "[attention][bad]") {
    AdditiveAttention add(2, 20, 8, 0.0);  // key_size 2, query_size 20
    CHECK_THROWS_WITH(add.forward(ones({2, 1, 19}), ones({2, 10, 2}), ones({2, 10, 4}), lens({2, 6})),
                      Catch::Contains("AdditiveAttention: queries must have last axis query_size = 20") &&
                          Catch::Contains("(2, 1, 19)"));
    CHECK_THROWS_WITH(add.forward(ones({2, 1, 20}), ones({2, 10, 3}), ones({2, 10, 4}), lens({2, 6})),
                      Catch::Contains("AdditiveAttention: keys must have last axis key_size = 2") &&
                          Catch::Contains("(2, 10, 3)"));
    CHECK_THROWS_WITH(add.forward(ones({2, 1, 20}), ones({2, 10, 2}), ones({2, 10, 4}), lens({2, 6, 1})),
                      Catch::Contains("AdditiveAttention: valid_lens") && Catch::Contains("(3,)"));
    DotProductAttention dot(0.0);
    CHECK_THROWS_WITH(dot.forward(ones({2, 1, 3}), ones({2, 10, 2}), ones({2, 10, 4})),
                      Catch::Contains("DotProductAttention: queries and keys must have the same last axis") &&
                          Catch::Contains("(2, 1, 3)") && Catch::Contains("(2, 10, 2)"));
    CHECK_THROWS_WITH(DotProductAttention(1.0), Catch::Contains("Dropout: p must be in [0, 1), got 1"));
    CHECK_THROWS_WITH(AdditiveAttention(2, 2, 0, 0.0), Catch::Contains("Linear") && Catch::Contains("positive"));
}
