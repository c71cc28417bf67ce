// Linear, Dropout, Embedding, LayerNorm and the positional encodings.
#include <cmath>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

namespace {

// weight (3, 2) = [[1, 2], [3, 4], [5, 6]], bias = [0.5, -1, 0]
std::shared_ptr<Linear> hand_linear() {
    auto lin = std::make_shared<Linear>(2, 3);
    lin->load_state_dict({{"weight", tensor({{1, 2}, {3, 4}, {5, 6}})}, {"bias", tensor({0.5, -1, 0})}});
    return lin;
}

}  // namespace

// --- Linear ---------------------------------------------------------------------------------

TEST_CASE("Linear computes x·Wᵀ + b on the last axis of any rank", "[linear]") {
    auto lin = hand_linear();
    CHECK_THAT(vals(lin->forward(tensor({{1., 0.}, {0., 1.}}))), approx({1.5, 2, 5, 2.5, 3, 6}));
    const Tensor y1 = (*lin)(tensor({1., 1.}));
    CHECK(y1.shape() == Shape{3});
    CHECK_THAT(vals(y1), approx({3.5, 6, 11}));
    const Tensor y3 = lin->forward(tensor({{{1., 0.}}, {{1., 1.}}}));
    CHECK(y3.shape() == Shape{2, 1, 3});
    CHECK_THAT(vals(y3), approx({1.5, 2, 5, 3.5, 6, 11}));
    CHECK(lin->forward(zeros({2, 3, 4, 2})).shape() == Shape{2, 3, 4, 3});
}

TEST_CASE("Linear is initialised uniformly within ±1/sqrt(in_features), from the generator", "[linear]") {
    Generator gen(3);
    Linear lin(16, 50, true, gen);
    CHECK(lin.weight().shape() == Shape{50, 16});
    CHECK(lin.bias().shape() == Shape{50});
    CHECK(lin.weight().dtype() == kFloat32);
    for (const Tensor& p : {lin.weight(), lin.bias()}) {
        const auto v = vals(p);
        CHECK(*std::max_element(v.begin(), v.end()) <= 0.25);
        CHECK(*std::min_element(v.begin(), v.end()) >= -0.25);
    }
    const auto w = vals(lin.weight());
    CHECK(*std::max_element(w.begin(), w.end()) > 0.24);  // spread over the whole range
    CHECK(*std::min_element(w.begin(), w.end()) < -0.24);
    Generator again(3);
    CHECK(vals(Linear(16, 50, true, again).weight()) == w);
    CHECK_FALSE(Linear(2, 2, false).bias().defined());
}

TEST_CASE("Linear passes gradcheck for inputs, weight and bias", "[linear][gradcheck]") {
    const bool bias = GENERATE(true, false);
    const Shape shape = GENERATE(Shape{3}, Shape{4, 3}, Shape{2, 5, 3}, Shape{1, 1, 3});
    Linear lin(3, 2, bias);
    lin.to(kFloat64);
    REQUIRE_MODULE_GRADCHECK(
        lin, {param(shape)}, [&](auto& x) { return lin.forward(x[0]); }, "Linear");
}

TEST_CASE("Linear rejects an input whose last axis is not in_features", "[linear][bad]") {
    Linear lin(100, 100, false);
    CHECK_THROWS_WITH(lin.forward(ones({2, 4, 99})), Catch::Contains("Linear") &&
                                                         Catch::Contains("in_features = 100") &&
                                                         Catch::Contains("(2, 4, 99)"));
    CHECK_THROWS_WITH(Linear(0, 3), Catch::Contains("Linear") && Catch::Contains("positive"));
}

// --- Dropout --------------------------------------------------------------------------------

TEST_CASE("Dropout in training keeps about 1-p of the elements, scaled by 1/(1-p)", "[dropout]") {
    Generator gen(11);
    Dropout drop(0.3, gen);
    const Tensor x = ones({200, 500}, kFloat64);
    const auto y = vals(drop.forward(x));
    std::size_t kept = 0;
    for (double v : y) {
        if (v != 0) {
            ++kept;
            CHECK(v == Approx(1 / 0.7).epsilon(1e-12));
        }
    }
    CHECK(static_cast<double>(kept) / y.size() == Approx(0.7).margin(0.005));
}

TEST_CASE("Dropout passes the gradient through the kept elements only", "[dropout]") {
    Generator gen(5);
    Dropout drop(0.5, gen);
    Tensor x = ones({50}, TensorOptions(kFloat64).requires_grad(true));
    const Tensor y = drop.forward(x);
    y.sum().backward();
    CHECK(vals(x.grad()) == vals(y));  // dy/dx = mask/(1-p), and x = 1
}

TEST_CASE("Dropout is the identity in eval mode and with p = 0", "[dropout]") {
    Dropout drop(0.5);
    drop.eval();
    const Tensor x = rand({4, 5});
    CHECK(vals(drop.forward(x)) == vals(x));
    Dropout none(0.0);
    CHECK(vals(none(x)) == vals(x));
}

TEST_CASE("Dropout masks repeat with the seed", "[dropout]") {
    Generator g1(42), g2(42);
    Dropout a(0.5, g1), b(0.5, g2);
    const Tensor x = ones({64});
    CHECK(vals(a(x)) == vals(b(x)));
    manual_seed(9);
    const auto first = vals(Dropout(0.5)(x));
    manual_seed(9);
    CHECK(vals(Dropout(0.5)(x)) == first);
    CHECK(vals(Dropout(0.5)(x)) != first);  // the stream moves on
}

TEST_CASE("Dropout rejects p outside 0 <= p < 1", "[dropout][bad]") {
    for (double p : {-0.1, 1.0, 1.5, std::nan("")})
        CHECK_THROWS_WITH(Dropout(p), Catch::Contains("Dropout") && Catch::Contains("p must be in [0, 1)"));
}

// --- Embedding ------------------------------------------------------------------------------

TEST_CASE("Embedding looks up rows for ids of any shape", "[embedding]") {
    Embedding emb(5, 3);
    const Tensor w = emb.weight();
    const Tensor ids = from_vector(std::vector<std::int64_t>{4, 0, 4, 2, 1, 3}, {2, 3});
    const Tensor y = emb(ids);
    CHECK(y.shape() == Shape{2, 3, 3});
    const auto wv = vals(w), yv = vals(y);
    const std::int64_t order[] = {4, 0, 4, 2, 1, 3};
    for (std::size_t i = 0; i < 6; ++i)
        for (std::size_t j = 0; j < 3; ++j) CHECK(yv[i * 3 + j] == wv[order[i] * 3 + j]);
}

TEST_CASE("Embedding is initialised N(0, 1)", "[embedding]") {
    Generator gen(4);
    Embedding emb(200, 100, gen);
    const auto v = vals(emb.weight());
    double mean = 0, sq = 0;
    for (double x : v) mean += x;
    mean /= v.size();
    for (double x : v) sq += (x - mean) * (x - mean);
    CHECK(mean == Approx(0).margin(0.02));
    CHECK(std::sqrt(sq / v.size()) == Approx(1).margin(0.02));
}

TEST_CASE("Embedding passes gradcheck, repeated ids included", "[embedding][gradcheck]") {
    Embedding emb(4, 3);
    emb.to(kFloat64);
    const Tensor ids = from_vector(std::vector<std::int64_t>{1, 3, 1, 1, 0}, {5});
    REQUIRE_MODULE_GRADCHECK(
        emb, {}, [&](auto&) { return emb.forward(ids); }, "Embedding");
    const Tensor ids2 = from_vector(std::vector<std::int64_t>{2, 2, 0, 3}, {2, 2});
    REQUIRE_MODULE_GRADCHECK(
        emb, {}, [&](auto&) { return emb.forward(ids2); }, "Embedding 2-D ids");
}

TEST_CASE("Embedding rejects ids out of range or not int64", "[embedding][bad]") {
    Embedding emb(5, 3);
    CHECK_THROWS_WITH(emb(from_vector(std::vector<std::int64_t>{1, 5}, {2})),
                      Catch::Contains("Embedding") && Catch::Contains("[0, 5)") && Catch::Contains("got 5"));
    CHECK_THROWS_WITH(emb(from_vector(std::vector<std::int64_t>{-1}, {1})), Catch::Contains("got -1"));
    CHECK_THROWS_WITH(emb(tensor({1.0, 2.0})), Catch::Contains("Embedding") && Catch::Contains("int64"));
}

// --- LayerNorm ------------------------------------------------------------------------------

TEST_CASE("LayerNorm normalises over the last axes as torch does", "[layernorm]") {
    LayerNorm ln({4});
    CHECK(vals(ln.weight()) == std::vector<double>{1, 1, 1, 1});
    CHECK(vals(ln.bias()) == std::vector<double>{0, 0, 0, 0});
    ln.to(kFloat64);
    const Tensor x = tensor({{1., 2., 3., 4.}, {2., 0., -1., 5.}}, kFloat64);
    // torch.nn.LayerNorm(4)(x), float64
    CHECK_THAT(vals(ln(x)),
               approx({-1.341635419968927, -0.4472118066563091, 0.4472118066563089, 1.3416354199689269,
                       0.21821768240972717, -0.6546530472291814, -1.0910884120486357, 1.52752377686809}));

    LayerNorm ln2({2, 2}, 1e-3);
    ln2.to(kFloat64);
    ln2.load_state_dict({{"weight", tensor({{1., 2.}, {0.5, -1.}}, kFloat64)},
                         {"bias", tensor({{0., 1.}, {-1., 0.5}}, kFloat64)}});
    // torch.nn.LayerNorm([2, 2], eps=1e-3) with that weight and bias, on x.reshape(2, 2, 2)
    CHECK_THAT(vals(ln2(reshape(x, {2, 2, 2}))),
               approx({-1.3411044519645503, 0.10593036535696632, -0.7764825913392417, -0.8411044519645503,
                       0.2181971105482592, -0.3091826632895547, -1.5454927763706479, -1.027379773837814}));
}

TEST_CASE("LayerNorm passes gradcheck for input, weight and bias", "[layernorm][gradcheck]") {
    auto [normalized, shape] = GENERATE(table<Shape, Shape>({
        {{4}, {2, 4}},
        {{4}, {1, 3, 4}},
        {{2, 3}, {2, 2, 3}},
        {{5}, {5}},
    }));
    LayerNorm ln(normalized);
    ln.to(kFloat64);
    // Non-trivial affine parameters, so their gradients are not all alike.
    for (const auto& [name, p] : ln.named_parameters()) ln.set_parameter(name, param(p.shape(), 0.5, 1.5, 9));
    REQUIRE_MODULE_GRADCHECK(
        ln, {param(shape, -2, 2)}, [&](auto& x) { return ln(x[0]); }, "LayerNorm");
}

TEST_CASE("LayerNorm rejects an input that does not end with normalized_shape", "[layernorm][bad]") {
    LayerNorm ln({8});
    CHECK_THROWS_WITH(ln(ones({2, 3, 7})), Catch::Contains("LayerNorm") && Catch::Contains("(8,)") &&
                                               Catch::Contains("(2, 3, 7)"));
}

// --- positional encodings -------------------------------------------------------------------

TEST_CASE("PositionalEncoding has d2l's sin/cos table (d = 32)", "[positional]") {
    PositionalEncoding pe(32, 0.0, 1000);
    const Tensor P = pe.table();
    CHECK(P.shape() == Shape{1, 1000, 32});
    const auto v = vals(P);
    auto row = [&](std::size_t i, std::size_t from, std::size_t to) {
        return std::vector<double>(v.begin() + i * 32 + from, v.begin() + i * 32 + to);
    };
    std::vector<double> zero_row;
    for (int j = 0; j < 16; ++j) zero_row.insert(zero_row.end(), {0.0, 1.0});
    CHECK(row(0, 0, 32) == zero_row);
    // d2l's table in float32 (pe.P[0, i, 6:10], the columns d2l plots)
    CHECK_THAT(
        row(1, 6, 10),
        approx({0.17689219117164612, 0.9842302203178406, 0.0998334214091301, 0.9950041770935059}, 1e-6));
    CHECK_THAT(
        row(7, 6, 10),
        approx({0.9473307728767395, 0.32025688886642456, 0.6442176699638367, 0.7648422122001648}, 1e-6));
    CHECK_THAT(
        row(59, 6, 10),
        approx({-0.8757904767990112, -0.4826914966106415, -0.37387657165527344, 0.9274784922599792}, 1e-5));
    // The formula itself at a far position: P[i, 2j] = sin(i / 10000^(2j/d)).
    CHECK(v[999 * 32 + 10] == Approx(std::sin(999 / std::pow(10000.0, 10.0 / 32))).margin(1e-6));
    CHECK(v[999 * 32 + 11] == Approx(std::cos(999 / std::pow(10000.0, 10.0 / 32))).margin(1e-6));
}

TEST_CASE("PositionalEncoding adds the rows from the offset on", "[positional]") {
    PositionalEncoding pe(32, 0.5, 100);
    pe.eval();
    const auto table = vals(pe.table());
    const Tensor y = pe(ones({2, 3, 32}, kFloat64));
    CHECK(y.dtype() == kFloat64);
    const auto yv = vals(y);
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t k = 0; k < 3 * 32; ++k) CHECK(yv[b * 96 + k] == Approx(table[k] + 1));
    const auto shifted = vals(pe.forward(zeros({1, 2, 32}), 5));  // positions 5 and 6
    CHECK(shifted == std::vector<double>(table.begin() + 5 * 32, table.begin() + 7 * 32));

    pe.train();  // dropout applies in training
    const auto dropped = vals(pe(ones({4, 10, 32})));
    CHECK(std::count(dropped.begin(), dropped.end(), 0.0) > 100);
}

TEST_CASE("PositionalEncoding rejects a wrong width or too many positions", "[positional][bad]") {
    PositionalEncoding pe(32, 0.0, 10);
    CHECK_THROWS_WITH(pe(ones({2, 3, 31})), Catch::Contains("PositionalEncoding") &&
                                                Catch::Contains("num_hiddens = 32") &&
                                                Catch::Contains("(2, 3, 31)"));
    CHECK_THROWS_WITH(pe(ones({2, 11, 32})),
                      Catch::Contains("PositionalEncoding") && Catch::Contains("max_len = 10"));
    CHECK_THROWS_WITH(pe.forward(ones({2, 3, 32}), 8), Catch::Contains("max_len = 10"));
}

TEST_CASE("LearnedPositionalEmbedding adds learned rows from the offset on", "[positional]") {
    LearnedPositionalEmbedding pos(20, 4, 0.0);
    CHECK(pos.named_parameters()[0].first == "embedding.weight");
    const auto E = vals(pos.named_parameters()[0].second);
    const auto y = vals(pos.forward(zeros({2, 3, 4}), 2));
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t k = 0; k < 12; ++k) CHECK(y[b * 12 + k] == E[2 * 4 + k]);
    pos.to(kFloat64);
    REQUIRE_MODULE_GRADCHECK(
        pos, {param({2, 3, 4})}, [&](auto& x) { return pos.forward(x[0], 1); }, "LearnedPositionalEmbedding");
    CHECK_THROWS_WITH(pos(ones({1, 21, 4}, kFloat64)),
                      Catch::Contains("LearnedPositionalEmbedding") && Catch::Contains("max_len = 20"));
}
