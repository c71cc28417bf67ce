// Recurrent layers (nn/rnn.hpp): torch's weights from tests/data/npz/recurrent_torch.npz
// (tools/make_recurrent_fixture.py, torch 1.13, float64) give torch's outputs, final states and
// gradients; gradient checks in double; names, shapes, printing, lengths and argument checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "core/creation.hpp"
#include "core/io/npz.hpp"
#include "core/ops.hpp"
#include "core/sequence_ops.hpp"
#include "nn/rnn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

const std::map<std::string, Tensor>& fixture() {
    static const std::map<std::string, Tensor> arrays = [] {
        std::map<std::string, Tensor> m;
        for (auto& [n, t] : load_npz(std::string(XGRAD_TEST_DATA_DIR) + "/npz/recurrent_torch.npz")) m[n] = t;
        return m;
    }();
    return arrays;
}

Tensor fx(const std::string& name) {
    const auto it = fixture().find(name);
    INFO(name);
    REQUIRE(it != fixture().end());
    return it->second;
}

bool has(const std::string& name) { return fixture().count(name) != 0; }

// The torch module's state_dict stored under "case.".
NamedTensors torch_state(const std::string& name) {
    NamedTensors state;
    const std::string prefix = name + ".";
    for (const auto& [n, t] : fixture())
        if (n.compare(0, prefix.size(), prefix) == 0) state.emplace_back(n.substr(prefix.size()), t);
    return state;
}

void require_close(const Tensor& got, const Tensor& want, const std::string& what, double atol = 1e-10) {
    INFO(what << ": got shape " << shape_str(got.shape()) << ", torch's " << shape_str(want.shape()));
    REQUIRE(got.defined());
    REQUIRE(got.shape() == want.shape());
    INFO("largest difference " << max_abs_diff(got, want));
    REQUIRE(max_abs_diff(got, want) <= atol);
}

Tensor leaf(const Tensor& t) { return t.detach().requires_grad_(true); }

// Loads torch's state into `module` (float64), compares what it returns and the gradients of
// torch's loss sum(out⊙R_out) + sum(h_n⊙R_h) (+ sum(c_n⊙R_c)).
template <class M>
void check_against_torch(M& module, const std::string& name) {
    module.to(kFloat64);
    module.load_state_dict(torch_state(name));
    Tensor x = leaf(fx(name + ":x"));
    const bool initial = has(name + ":h0"), is_lstm = has(name + ":c_n");
    Tensor h0 = initial ? leaf(fx(name + ":h0")) : Tensor();
    Tensor c0 = initial && is_lstm ? leaf(fx(name + ":c0")) : Tensor();
    const Tensor lengths = has(name + ":lengths") ? fx(name + ":lengths") : Tensor();
    Tensor out, h_n, c_n;
    if constexpr (std::is_same_v<M, nn::LSTM>) {
        std::tuple<Tensor, Tensor> state;
        std::tie(out, state) = module(x, std::make_tuple(h0, c0), lengths);
        std::tie(h_n, c_n) = state;
    } else {
        std::tie(out, h_n) = module(x, h0, lengths);
    }
    require_close(out, fx(name + ":out"), name + " output");
    require_close(h_n, fx(name + ":h_n"), name + " h_n");
    Tensor loss = sum(out * fx(name + ":R_out")) + sum(h_n * fx(name + ":R_h"));
    if (is_lstm) {
        require_close(c_n, fx(name + ":c_n"), name + " c_n");
        loss = loss + sum(c_n * fx(name + ":R_c"));
    }
    loss.backward();
    require_close(x.grad(), fx(name + ":grad:x"), name + " grad x");
    if (initial) require_close(h0.grad(), fx(name + ":grad:h0"), name + " grad h0");
    if (c0.defined()) require_close(c0.grad(), fx(name + ":grad:c0"), name + " grad c0");
    for (const auto& [pname, p] : module.named_parameters())
        require_close(p.grad(), fx(name + ":grad:" + pname), name + " grad " + pname);
}

template <class Cell>
void check_cell_against_torch(Cell& cell, const std::string& name) {
    cell.to(kFloat64);
    cell.load_state_dict(torch_state(name));
    Tensor x = leaf(fx(name + ":x")), h = leaf(fx(name + ":h0"));
    Tensor loss;
    if constexpr (std::is_same_v<Cell, nn::LSTMCell>) {
        Tensor c = leaf(fx(name + ":c0"));
        auto [h1, c1] = cell(x, std::make_tuple(h, c));
        require_close(h1, fx(name + ":h1"), name + " h'");
        require_close(c1, fx(name + ":c1"), name + " c'");
        loss = sum(h1 * fx(name + ":R_h")) + sum(c1 * fx(name + ":R_c"));
        loss.backward();
        require_close(c.grad(), fx(name + ":grad:c0"), name + " grad c");
    } else {
        Tensor h1 = cell(x, h);
        require_close(h1, fx(name + ":h1"), name + " h'");
        loss = sum(h1 * fx(name + ":R_h"));
        loss.backward();
    }
    require_close(x.grad(), fx(name + ":grad:x"), name + " grad x");
    require_close(h.grad(), fx(name + ":grad:h0"), name + " grad h");
    for (const auto& [pname, p] : cell.named_parameters())
        require_close(p.grad(), fx(name + ":grad:" + pname), name + " grad " + pname);
}

}  // namespace

TEST_CASE("GRU with torch's weights gives torch's outputs, states and gradients", "[recurrent]") {
    SECTION("two layers, bidirectional, initial state, variable lengths") {
        nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true));
        check_against_torch(gru, "gru");
    }
    SECTION("one layer, no initial state") {
        nn::GRU gru(3, 4);
        check_against_torch(gru, "gru_plain");
    }
}

TEST_CASE("LSTM with torch's weights gives torch's outputs, states and gradients", "[recurrent]") {
    SECTION("two layers, bidirectional, batch_first, initial state, variable lengths") {
        nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true).batch_first(true));
        check_against_torch(lstm, "lstm");
    }
    SECTION("no bias") {
        nn::LSTM lstm(nn::LSTMOptions(2, 3).bias(false));
        check_against_torch(lstm, "lstm_nobias");
    }
}

TEST_CASE("RNN with torch's weights gives torch's outputs, states and gradients", "[recurrent]") {
    SECTION("tanh, two layers, bidirectional, variable lengths") {
        nn::RNN rnn(nn::RNNOptions(3, 4).num_layers(2).bidirectional(true));
        check_against_torch(rnn, "rnn_tanh");
    }
    SECTION("relu, batch_first") {
        nn::RNN rnn(nn::RNNOptions(3, 4).nonlinearity("relu").batch_first(true));
        check_against_torch(rnn, "rnn_relu");
    }
}

TEST_CASE("The cells with torch's weights give torch's step and gradients", "[recurrent]") {
    nn::GRUCell gru(3, 4);
    check_cell_against_torch(gru, "gru_cell");
    nn::LSTMCell lstm(3, 4);
    check_cell_against_torch(lstm, "lstm_cell");
    nn::RNNCell rnn(nn::RNNCellOptions(3, 4).nonlinearity("relu"));
    check_cell_against_torch(rnn, "rnn_cell");
}

TEST_CASE("Recurrent layers name, shape and draw their parameters as torch", "[recurrent]") {
    nn::LSTM lstm(nn::LSTMOptions(3, 5).num_layers(2).bidirectional(true));
    std::vector<std::string> names;
    for (const auto& [n, p] : lstm.named_parameters()) names.push_back(n);
    CHECK(names == std::vector<std::string>{
                       "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse",
                       "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1",
                       "weight_hh_l1", "bias_ih_l1", "bias_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse",
                       "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
    CHECK(lstm.parameter("weight_ih_l0").shape() == Shape{20, 3});
    CHECK(lstm.parameter("weight_ih_l1").shape() == Shape{20, 10});
    CHECK(lstm.parameter("weight_hh_l1_reverse").shape() == Shape{20, 5});
    CHECK(lstm.parameter("bias_hh_l1").shape() == Shape{20});
    const double bound = 1.0 / std::sqrt(5.0);
    for (const auto& p : lstm.parameters())
        for (double v : vals(p)) REQUIRE((v >= -bound && v < bound));
    // torch's state loads unchanged, strictly: the names and shapes are torch's.
    nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true));
    CHECK_NOTHROW(gru.load_state_dict(torch_state("gru")));
    nn::GRUCell cell(3, 4, false);
    names.clear();
    for (const auto& [n, p] : cell.named_parameters()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"weight_ih", "weight_hh"});
    // The same generator seed gives the same draws.
    Generator g1(7), g2(7);
    CHECK(vals(nn::GRU(3, 4, 1, g1).parameter("weight_hh_l0")) == vals(nn::GRU(3, 4, 1, g2).parameter("weight_hh_l0")));
}

TEST_CASE("Recurrent layers print as torch's", "[recurrent]") {
    CHECK(nn::to_string(nn::GRU(10, 20, 2)) == "GRU(10, 20, num_layers=2)");
    CHECK(nn::to_string(nn::RNN(nn::RNNOptions(10, 20)
                                    .num_layers(2)
                                    .nonlinearity("relu")
                                    .dropout(0.5)
                                    .bidirectional(true)
                                    .batch_first(true)
                                    .bias(false))) ==
          "RNN(10, 20, num_layers=2, bias=False, batch_first=True, dropout=0.5, bidirectional=True)");
    CHECK(nn::to_string(nn::LSTM(nn::LSTMOptions(3, 4).dropout(0.25))) == "LSTM(3, 4, dropout=0.25)");
    CHECK(nn::to_string(nn::RNNCell(nn::RNNCellOptions(3, 4).nonlinearity("relu").bias(false))) ==
          "RNNCell(3, 4, bias=False, nonlinearity=relu)");
    CHECK(nn::to_string(nn::GRUCell(3, 4)) == "GRUCell(3, 4)");
    CHECK(nn::to_string(nn::LSTMCell(3, 4)) == "LSTMCell(3, 4)");
}

TEST_CASE("Recurrent layers pass gradcheck in double", "[recurrent][gradcheck]") {
    const Tensor lengths = from_vector(std::vector<std::int64_t>{3, 1}, {2});
    SECTION("GRU, bidirectional, two layers, lengths") {
        Generator gen(1);
        nn::GRU gru(nn::GRUOptions(2, 3).num_layers(2).bidirectional(true), gen);
        gru.to(kFloat64);
        REQUIRE_MODULE_GRADCHECK(gru, {param({3, 2, 2}, -1, 1, 2), param({4, 2, 3}, -1, 1, 3)},
                                 [&](const std::vector<Tensor>& in) {
                                     auto [out, h] = gru(in[0], in[1], lengths);
                                     return concat({reshape(out, {-1}), reshape(h, {-1})}, 0);
                                 },
                                 "GRU");
    }
    SECTION("LSTM, batch_first, lengths") {
        Generator gen(2);
        nn::LSTM lstm(nn::LSTMOptions(2, 3).batch_first(true).bidirectional(true), gen);
        lstm.to(kFloat64);
        REQUIRE_MODULE_GRADCHECK(lstm, {param({2, 3, 2}, -1, 1, 4), param({2, 2, 3}, -1, 1, 5), param({2, 2, 3}, -1, 1, 6)},
                                 [&](const std::vector<Tensor>& in) {
                                     auto [out, state] = lstm(in[0], std::make_tuple(in[1], in[2]), lengths);
                                     auto [h, c] = state;
                                     return concat({reshape(out, {-1}), reshape(h, {-1}), reshape(c, {-1})}, 0);
                                 },
                                 "LSTM");
    }
    SECTION("RNN tanh, two layers") {
        Generator gen(3);
        nn::RNN rnn(nn::RNNOptions(2, 3).num_layers(2), gen);
        rnn.to(kFloat64);
        REQUIRE_MODULE_GRADCHECK(rnn, {param({3, 2, 2}, -1, 1, 7)},
                                 [&](const std::vector<Tensor>& in) { return std::get<0>(rnn(in[0])); }, "RNN");
    }
}

TEST_CASE("Recurrent layers pass gradgradcheck in double", "[recurrent][gradcheck]") {
    const Tensor lengths = from_vector(std::vector<std::int64_t>{2, 1}, {2});
    SECTION("GRU") {
        Generator gen(4);
        nn::GRU gru(nn::GRUOptions(2, 2).bidirectional(true), gen);
        gru.to(kFloat64);
        REQUIRE_MODULE_GRADGRADCHECK(gru, {param({2, 2, 2}, -1, 1, 8), param({2, 2, 2}, -1, 1, 9)},
                                     [&](const std::vector<Tensor>& in) {
                                         auto [out, h] = gru(in[0], in[1], lengths);
                                         return concat({reshape(out, {-1}), reshape(h, {-1})}, 0);
                                     },
                                     "GRU");
    }
    SECTION("LSTM") {
        Generator gen(5);
        nn::LSTM lstm(2, 2, 1, gen);
        lstm.to(kFloat64);
        REQUIRE_MODULE_GRADGRADCHECK(lstm, {param({2, 2, 2}, -1, 1, 10)},
                                     [&](const std::vector<Tensor>& in) {
                                         auto [out, state] = lstm(in[0], std::tuple<Tensor, Tensor>{}, lengths);
                                         return concat({reshape(out, {-1}), reshape(std::get<1>(state), {-1})}, 0);
                                     },
                                     "LSTM");
    }
    SECTION("RNN relu cell") {
        Generator gen(6);
        nn::RNNCell cell(nn::RNNCellOptions(2, 3).nonlinearity("relu"), gen);
        cell.to(kFloat64);
        REQUIRE_MODULE_GRADGRADCHECK(cell, {param({2, 2}, -1, 1, 11), param({2, 3}, -1, 1, 12)},
                                     [&](const std::vector<Tensor>& in) { return cell(in[0], in[1]); }, "RNNCell");
    }
}

TEST_CASE("A sequence with a length is the same sequence cut to that length", "[recurrent]") {
    Generator gen(11);
    nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true), gen);
    gru.to(kFloat64);
    const Tensor x = randn({5, 3, 3}, kFloat64, gen), h0 = randn({4, 3, 4}, kFloat64, gen);
    const std::vector<std::int64_t> len{5, 0, 2};
    auto [out, h_n] = gru(x, h0, from_vector(len, {3}));
    for (long b = 0; b < 3; ++b) {
        const long n = len[static_cast<std::size_t>(b)];
        const Tensor hb = slice(h0, 1, b, b + 1);
        if (n == 0) {
            // Nothing to read: the state is h0, the outputs 0.
            CHECK(max_abs_diff(slice(h_n, 1, b, b + 1), hb) == 0);
            CHECK(max_abs_diff(slice(out, 1, b, b + 1), zeros({5, 1, 8}, kFloat64)) == 0);
            continue;
        }
        auto [out_b, h_b] = gru(slice(slice(x, 1, b, b + 1), 0, 0, n), hb);
        CHECK(max_abs_diff(slice(slice(out, 1, b, b + 1), 0, 0, n), out_b) < 1e-14);
        CHECK(max_abs_diff(slice(h_n, 1, b, b + 1), h_b) < 1e-14);
        if (n < 5) CHECK(max_abs_diff(slice(slice(out, 1, b, b + 1), 0, n, 5), zeros({static_cast<std::size_t>(5 - n), 1, 8}, kFloat64)) == 0);
    }
}

TEST_CASE("Unbatched and batch_first inputs give the batched results", "[recurrent]") {
    Generator gen(12), gen2(12);
    nn::LSTM a(nn::LSTMOptions(3, 4).num_layers(2), gen);
    nn::LSTM b(nn::LSTMOptions(3, 4).num_layers(2).batch_first(true), gen2);
    const Tensor x = randn({5, 2, 3});
    auto [out, state] = a(x);
    auto [out_bf, state_bf] = b(transpose(x, 0, 1));
    CHECK(max_abs_diff(transpose(out_bf, 0, 1), out) == 0);
    CHECK(max_abs_diff(std::get<0>(state_bf), std::get<0>(state)) == 0);
    auto [out1, state1] = a(slice(x, 1, 1, 2).reshape({5, 3}));
    CHECK(out1.shape() == Shape{5, 4});
    CHECK(std::get<1>(state1).shape() == Shape{2, 4});
    CHECK(max_abs_diff(out1, slice(out, 1, 1, 2).reshape({5, 4})) < 1e-6);
    nn::GRUCell cell(3, 4);
    const Tensor h = cell(slice(x, 0, 0, 1).reshape({2, 3}));
    CHECK(max_abs_diff(cell(slice(x, 0, 0, 1).reshape({2, 3})[1]), h[1]) < 1e-6);
}

TEST_CASE("README's recurrent lines compile and run", "[recurrent]") {
    auto gru = std::make_shared<nn::GRU>(10, 20, 2);
    const Tensor x = randn({5, 3, 10}), h0 = zeros({2, 3, 20});
    auto [out, h_n] = (*gru)(x);
    CHECK(out.shape() == Shape{5, 3, 20});
    CHECK(h_n.shape() == Shape{2, 3, 20});
    auto lstm = std::make_shared<nn::LSTM>(nn::LSTMOptions(10, 20).num_layers(2).bidirectional(true));
    auto [out2, state] = (*lstm)(x, randn({4, 3, 20}), randn({4, 3, 20}));
    auto [h2, c2] = state;
    CHECK(out2.shape() == Shape{5, 3, 40});
    CHECK(c2.shape() == Shape{4, 3, 20});
    const Tensor lengths = from_vector(std::vector<std::int64_t>{5, 2, 4}, {3});
    CHECK(std::get<0>((*gru)(x, Tensor(), lengths)).shape() == Shape{5, 3, 20});
    CHECK(std::get<0>((*gru)(x, h0, lengths)).shape() == Shape{5, 3, 20});
    nn::LSTMCell cell(10, 20);
    Tensor h = zeros({3, 20}), c = zeros({3, 20});
    std::tie(h, c) = cell(slice(x, 0, 0, 1).reshape({3, 10}), h, c);
    CHECK(c.shape() == Shape{3, 20});
    CHECK(fmt::format("{}", gru) == "GRU(10, 20, num_layers=2)");
}

TEST_CASE("An empty batch gives empty outputs and gradients, as torch's", "[recurrent]") {
    nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true));
    Tensor x = randn({2, 0, 3}).requires_grad_(true);
    auto [out, state] = lstm(x);
    CHECK(out.shape() == Shape{2, 0, 8});
    CHECK(std::get<1>(state).shape() == Shape{4, 0, 4});
    (sum(out) + sum(std::get<0>(state))).backward();
    CHECK(x.grad().shape() == Shape{2, 0, 3});
    CHECK(max_abs_diff(lstm.parameter("weight_hh_l1").grad(), zeros({16, 4})) == 0);
    nn::GRUCell cell(3, 4);
    CHECK(cell(zeros({0, 3})).shape() == Shape{0, 4});
}

TEST_CASE("Dropout between layers acts in training mode only", "[recurrent]") {
    Generator gen(13);
    nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).dropout(0.5), gen);
    const Tensor x = randn({4, 2, 3});
    gru.eval();
    const Tensor a = std::get<0>(gru(x)), b = std::get<0>(gru(x));
    CHECK(max_abs_diff(a, b) == 0);
    gru.train();
    manual_seed(1);
    const Tensor c = std::get<0>(gru(x));
    CHECK(max_abs_diff(a, c) > 1e-3);
    // One layer: nothing between layers, so dropout changes nothing (torch warns, and so do we not).
    nn::GRU one(nn::GRUOptions(3, 4).dropout(0.5), gen);
    CHECK(max_abs_diff(std::get<0>(one(x)), std::get<0>(one(x))) == 0);
}

TEST_CASE("Recurrent layers refuse bad arguments naming the call", "[recurrent]") {
    auto throws_with = [](auto&& f, const std::string& text) {
        try {
            f();
        } catch (const Error& e) {
            INFO(e.what());
            CHECK(std::string(e.what()).find(text) != std::string::npos);
            return;
        }
        FAIL("no Error: expected one containing " << text);
    };
    throws_with([] { nn::GRU(3, 0); }, "GRU: input_size and hidden_size must be positive");
    throws_with([] { nn::LSTM(nn::LSTMOptions(3, 4).num_layers(0)); }, "LSTM: num_layers must be positive");
    throws_with([] { nn::GRU(nn::GRUOptions(3, 4).dropout(1.5)); }, "GRU: dropout must be a number in [0, 1], got 1.5");
    throws_with([] { nn::GRU(nn::GRUOptions(3, 4).dropout(std::nan(""))); }, "GRU: dropout");
    throws_with([] { nn::RNN(nn::RNNOptions(3, 4).nonlinearity("gelu")); }, "RNN: nonlinearity must be");
    throws_with([] { nn::RNNCell(nn::RNNCellOptions(3, 4).nonlinearity("sigmoid")); }, "RNNCell: nonlinearity");
    nn::GRU gru(3, 4);
    throws_with([&] { gru(randn({2, 3, 5})); }, "GRU: input must have last axis input_size = 3");
    throws_with([&] { gru(randn({3})); }, "GRU: input must be 3-D");
    throws_with([&] { gru(randn({0, 2, 3})); }, "GRU: the input has no steps (T = 0, shape (0, 2, 3))");
    throws_with([&] { gru(randn({2, 3, 3}), randn({2, 3, 4})); }, "GRU: h0 must have shape (1, 3, 4), got (2, 3, 4)");
    throws_with([&] { gru(randn({2, 3, 3}, kFloat64)); }, "GRU: input is float64");
    throws_with([&] { gru(randn({2, 3, 3}), Tensor(), from_vector(std::vector<std::int64_t>{1, 2}, {2})); },
                "GRU: lengths must be int64 of shape (3,)");
    throws_with([&] { gru(randn({2, 3, 3}), Tensor(), from_vector(std::vector<std::int64_t>{1, 3, 2}, {3})); },
                "GRU: lengths[1] = 3 is outside [0, 2]");
    throws_with([&] { gru(randn({2, 3, 3}), Tensor(), from_vector(std::vector<std::int64_t>{1, -1, 2}, {3})); },
                "GRU: lengths[1] = -1");
    throws_with([&] { gru(randn({2, 3, 3}), Tensor(), ones({3})); }, "GRU: lengths must be int64");
    nn::LSTM lstm(3, 4);
    throws_with([&] { lstm(randn({2, 3, 3}), std::make_tuple(zeros({1, 3, 4}), Tensor())); },
                "LSTM: hx = (h0, c0) must give both or neither");
    throws_with([&] { lstm(randn({2, 3, 3}), std::make_tuple(zeros({1, 3, 4}), zeros({1, 2, 4}))); },
                "LSTM: c0 must have shape (1, 3, 4)");
    nn::LSTMCell cell(3, 4);
    throws_with([&] { cell(randn({2, 3}), std::make_tuple(zeros({2, 4}), Tensor())); }, "LSTMCell: hx = (h, c)");
    throws_with([&] { cell(randn({2, 2, 3})); }, "LSTMCell: input must be 2-D");
    nn::GRUCell gcell(3, 4);
    throws_with([&] { gcell(randn({2, 3}), zeros({3, 4})); }, "GRUCell: h must have shape (2, 4), got (3, 4)");
}

TEST_CASE("The fused GRU and LSTM steps pass gradcheck and gradgradcheck", "[recurrent][gradcheck]") {
    const std::size_t B = 2, H = 3;
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& x) { return gru_cell(x[0], x[1], x[2]); },
                      {param({B, 3 * H}, -2, 2, 21), param({B, 3 * H}, -2, 2, 22), param({B, H}, -1, 1, 23)},
                      "gru_cell");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return gru_cell(x[0], x[1], x[2]); },
                          {param({B, 3 * H}, -2, 2, 21), param({B, 3 * H}, -2, 2, 22), param({B, H}, -1, 1, 23)},
                          "gru_cell");
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& x) { return lstm_cell(x[0], x[1]); },
                      {param({B, 4 * H}, -2, 2, 24), param({B, H}, -1, 1, 25)}, "lstm_cell");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return lstm_cell(x[0], x[1]); },
                          {param({B, 4 * H}, -2, 2, 24), param({B, H}, -1, 1, 25)}, "lstm_cell");
    // The same values as the steps written out in ops.
    const Tensor gi = param({B, 3 * H}, -2, 2, 26), gh = param({B, 3 * H}, -2, 2, 27), h = param({B, H}, -1, 1, 28);
    const auto i = split(gi, static_cast<long>(H), 1), j = split(gh, static_cast<long>(H), 1);
    const Tensor r = sigmoid(i[0] + j[0]), z = sigmoid(i[1] + j[1]), n = tanh(i[2] + r * j[2]);
    CHECK(max_abs_diff(gru_cell(gi, gh, h), (1.0 - z) * n + z * h) < 1e-15);
    const Tensor a = param({B, 4 * H}, -2, 2, 29), c = param({B, H}, -1, 1, 30);
    const auto g = split(a, static_cast<long>(H), 1);
    const Tensor c1 = sigmoid(g[1]) * c + sigmoid(g[0]) * tanh(g[2]);
    CHECK(max_abs_diff(lstm_cell(a, c), concat({sigmoid(g[3]) * tanh(c1), c1}, 1)) < 1e-15);
}

TEST_CASE("unbind gives the slices as one op, with stack for gradient", "[recurrent][gradcheck]") {
    const Tensor x = param({3, 2, 4}, -1, 1, 31);
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& in) { return unbind(in[0], 1)[1] * 2.0 + unbind(in[0], 1)[0]; },
                      {x}, "unbind");
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& in) { return unbind(in[0], -1)[3]; }, {x}, "unbind");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return unbind(in[0], 0)[2] * unbind(in[0], 0)[0]; },
                          {x}, "unbind");
    const auto parts = unbind(x, 0);
    REQUIRE(parts.size() == 3);
    CHECK(parts[1].shape() == Shape{2, 4});
    CHECK(vals(parts[2]) == vals(slice(x, 0, 2, 3)));
    CHECK(vals(unbind(x, 1)[1]) == vals(slice(x, 1, 1, 2)));
    const auto ints = unbind(from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}, {2, 3}), 1);
    REQUIRE(ints.size() == 3);
    CHECK(ints[2].dtype() == kInt64);
    CHECK(ints[2].to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 5});
    CHECK_THROWS_WITH(unbind(x, 3), Catch::Contains("unbind: axis 3 is out of range for a tensor of shape (3, 2, 4)"));
    CHECK_THROWS_WITH(gru_cell(param({2, 9}), param({2, 6}), param({2, 3})),
                      Catch::Contains("gru_cell: gh must have shape (2, 9), got (2, 6)"));
    CHECK_THROWS_WITH(lstm_cell(param({2, 7}), param({2, 3})), Catch::Contains("lstm_cell: gates must be (batch, 4·hidden)"));
}

TEST_CASE("In float32 the fused steps stay within float's rounding of torch's float64 results", "[recurrent]") {
    nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true));
    gru.load_state_dict(torch_state("gru"));  // float64 entries into float32 parameters
    auto [out, h_n] = gru(fx("gru:x").to(kFloat32), fx("gru:h0").to(kFloat32), fx("gru:lengths"));
    CHECK(max_abs_diff(out, fx("gru:out")) < 2e-6);
    CHECK(max_abs_diff(h_n, fx("gru:h_n")) < 2e-6);
    nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true).batch_first(true));
    lstm.load_state_dict(torch_state("lstm"));
    auto [out2, state] = lstm(fx("lstm:x").to(kFloat32), fx("lstm:h0").to(kFloat32), fx("lstm:c0").to(kFloat32),
                              fx("lstm:lengths"));
    CHECK(max_abs_diff(out2, fx("lstm:out")) < 2e-6);
    CHECK(max_abs_diff(std::get<1>(state), fx("lstm:c_n")) < 2e-6);
}

TEST_CASE("The float32 steps are float32's rounding of the float64 ones", "[recurrent]") {
    // σ and tanh run as SIMD passes in float32: over a wide range of pre-activations (both sides
    // of tanh's 0.625 switch, near 0, and saturated) they stay within a few float ulps.
    Generator gen(40);
    const std::size_t B = 64, H = 37;  // not a multiple of the vector width
    const Tensor gi = uniform({B, 3 * H}, -9, 9, kFloat64, gen), gh = uniform({B, 3 * H}, -1, 1, kFloat64, gen);
    const Tensor h = uniform({B, H}, -1, 1, kFloat64, gen), small = uniform({B, 4 * H}, -1e-3, 1e-3, kFloat64, gen);
    auto rel = [](const Tensor& f, const Tensor& d) {
        const auto x = f.to_vector<double>(), y = d.to_vector<double>();
        double m = 0;
        for (std::size_t k = 0; k < x.size(); ++k) m = std::max(m, std::abs(x[k] - y[k]) / std::max(std::abs(y[k]), 1e-30));
        return m;
    };
    const Tensor gi32 = gi.to(kFloat32).to(kFloat64), gh32 = gh.to(kFloat32).to(kFloat64), h32 = h.to(kFloat32).to(kFloat64);
    CHECK(max_abs_diff(gru_cell(gi.to(kFloat32), gh.to(kFloat32), h.to(kFloat32)), gru_cell(gi32, gh32, h32)) < 1e-6);
    // Rows enough to be split over the pool's threads, each with its own scratch.
    const Tensor big_gi = uniform({600, 120}, -9, 9, kFloat32, gen), big_gh = uniform({600, 120}, -1, 1, kFloat32, gen);
    const Tensor big_h = uniform({600, 40}, -1, 1, kFloat32, gen);
    CHECK(max_abs_diff(gru_cell(big_gi, big_gh, big_h),
                       gru_cell(big_gi.to(kFloat64), big_gh.to(kFloat64), big_h.to(kFloat64))) < 1e-6);
    const Tensor a32 = uniform({B, 4 * H}, -9, 9, kFloat32, gen), c = h.to(kFloat32);
    CHECK(max_abs_diff(lstm_cell(a32, c), lstm_cell(a32.to(kFloat64), c.to(kFloat64))) < 1e-6);
    // Near 0 (tanh's polynomial) relative to the values: with c = 0, c' = σ(a_i)·tanh(a_g) has no
    // cancellation of its own, so any error past a few ulps would be tanh's or σ's.
    const Tensor small32 = small.to(kFloat32), c0 = zeros({B, H});
    CHECK(rel(lstm_cell(small32, c0), lstm_cell(small32.to(kFloat64), c0.to(kFloat64))) < 1e-6);
}

TEST_CASE("A GRU or LSTM direction runs as one fused sequence op", "[recurrent][gradcheck]") {
    Generator gen(7);
    nn::GRU gru(3, 4, 1, gen);
    nn::LSTM lstm(3, 4, 1, gen);
    const Tensor x = randn({5, 2, 3}, kFloat32, gen);
    CHECK(std::string(std::get<0>(gru(x)).op_name()) == "recurrent_sequence");
    CHECK(std::string(std::get<0>(lstm(x)).op_name()) == "recurrent_sequence");

    // The op alone, both cells, both directions, with and without lengths and b_hh.
    const std::vector<std::int64_t> lengths{3, 0};
    for (const bool reverse : {false, true})
        for (const bool cut : {false, true}) {
            const std::vector<std::int64_t> len = cut ? lengths : std::vector<std::int64_t>{};
            INFO("reverse " << reverse << ", lengths " << cut);
            REQUIRE_GRADCHECK([&](const std::vector<Tensor>& in) {
                const auto out = recurrent_sequence(SequenceCell::gru, in[0], in[1], Tensor(), in[2], in[3], len, reverse);
                return concat({reshape(out[0], {-1}), reshape(out[1], {-1})}, 0);
            }, {param({3, 2, 6}, -1, 1, 20), param({2, 2}, -1, 1, 21), param({6, 2}, -1, 1, 22), param({6}, -1, 1, 23)}, "gru sequence");
            REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& in) {
                const auto out = recurrent_sequence(SequenceCell::lstm, in[0], in[1], in[2], in[3], Tensor(), len, reverse);
                return concat({reshape(out[0], {-1}), reshape(out[1], {-1}), reshape(out[2], {-1})}, 0);
            }, {param({3, 2, 8}, -1, 1, 24), param({2, 2}, -1, 1, 25), param({2, 2}, -1, 1, 26), param({8, 2}, -1, 1, 27)}, "lstm sequence");
        }
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& in) {
        return recurrent_sequence(SequenceCell::gru, in[0], in[1], Tensor(), in[2], in[3], lengths, true)[0];
    }, {param({3, 2, 6}, -1, 1, 28), param({2, 2}, -1, 1, 29), param({6, 2}, -1, 1, 30), param({6}, -1, 1, 31)}, "gru sequence, reverse, lengths");

    const Tensor xi = zeros({3, 2, 6}), h = zeros({2, 2}), w = zeros({6, 2});
    CHECK_THROWS_WITH(recurrent_sequence(SequenceCell::gru, xi, h, Tensor(), zeros({6, 3}), Tensor(), {}, false),
                      Catch::Contains("recurrent_sequence: w_hh must have shape (6, 2), got (6, 3)"));
    CHECK_THROWS_WITH(recurrent_sequence(SequenceCell::gru, xi, h, Tensor(), w, Tensor(), {4, 0}, false),
                      Catch::Contains("recurrent_sequence: lengths[0] = 4 is outside [0, 3]"));
    CHECK_THROWS_WITH(recurrent_sequence(SequenceCell::lstm, xi, h, h, w, Tensor(), {}, false),
                      Catch::Contains("recurrent_sequence: xi must be (T, batch, 4·hidden), got (3, 2, 6)"));
    CHECK_THROWS_WITH(recurrent_sequence(SequenceCell::gru, zeros({0, 2, 6}), h, Tensor(), w, Tensor(), {}, false),
                      Catch::Contains("recurrent_sequence: xi has no steps"));
}

TEST_CASE("LSTM with proj_size gives torch's outputs, states, gradients, names and checks", "[recurrent][proj]") {
    SECTION("two layers, bidirectional, initial state, variable lengths") {
        nn::LSTM lstm(nn::LSTMOptions(3, 5).num_layers(2).bidirectional(true).proj_size(2));
        check_against_torch(lstm, "lstm_proj");
    }
    SECTION("one layer, batch_first, no initial state") {
        nn::LSTM lstm(nn::LSTMOptions(2, 4).batch_first(true).proj_size(3));
        check_against_torch(lstm, "lstm_proj_plain");
    }
    SECTION("names, shapes, draws and printing as torch's") {
        nn::LSTM lstm(nn::LSTMOptions(3, 5).num_layers(2).bidirectional(true).proj_size(2));
        std::vector<std::string> names;
        for (const auto& [n, p] : lstm.named_parameters()) names.push_back(n);
        CHECK(std::vector<std::string>(names.begin(), names.begin() + 6) ==
              std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0",
                                       "weight_ih_l0_reverse"});
        CHECK(names.size() == 20);
        CHECK(lstm.parameter("weight_hh_l0").shape() == Shape{20, 2});
        CHECK(lstm.parameter("weight_hr_l1_reverse").shape() == Shape{2, 5});
        CHECK(lstm.parameter("weight_ih_l1").shape() == Shape{20, 4});
        const double bound = 1.0 / std::sqrt(5.0);
        for (const auto& p : lstm.parameters())
            for (double v : vals(p)) REQUIRE((v >= -bound && v < bound));
        CHECK(nn::to_string(lstm) == "LSTM(3, 5, proj_size=2, num_layers=2, bidirectional=True)");
        auto [out, state] = lstm(randn({4, 3, 3}));
        CHECK(out.shape() == Shape{4, 3, 4});
        CHECK(std::get<0>(state).shape() == Shape{4, 3, 2});
        CHECK(std::get<1>(state).shape() == Shape{4, 3, 5});
        // Unbatched.
        auto [out1, state1] = lstm(randn({4, 3}));
        CHECK(out1.shape() == Shape{4, 4});
        CHECK(std::get<0>(state1).shape() == Shape{4, 2});
    }
    SECTION("torch's refusals") {
        CHECK_THROWS_WITH(nn::LSTM(nn::LSTMOptions(3, 5).proj_size(5)),
                          Catch::Contains("LSTM: proj_size must be smaller than hidden_size (5), got 5"));
        CHECK_THROWS_WITH(nn::GRU(nn::GRUOptions(3, 5).proj_size(2)),
                          Catch::Contains("GRU: proj_size is only supported for LSTM, not RNN or GRU"));
        CHECK_THROWS_WITH(nn::RNN(nn::RNNOptions(3, 5).proj_size(2)), Catch::Contains("RNN: proj_size is only"));
        nn::LSTM lstm(nn::LSTMOptions(3, 5).proj_size(2));
        CHECK_THROWS_WITH(lstm(randn({2, 3, 3}), zeros({1, 3, 5}), zeros({1, 3, 5})),
                          Catch::Contains("LSTM: h0 must have shape (1, 3, 2), got (1, 3, 5)"));
        CHECK_THROWS_WITH(lstm(randn({2, 3, 3}), zeros({1, 3, 2}), zeros({1, 3, 2})),
                          Catch::Contains("LSTM: c0 must have shape (1, 3, 5), got (1, 3, 2)"));
    }
    SECTION("gradgradcheck in double") {
        Generator gen(8);
        nn::LSTM lstm(nn::LSTMOptions(2, 3).proj_size(2), gen);
        lstm.to(kFloat64);
        const Tensor lengths = from_vector(std::vector<std::int64_t>{2, 1}, {2});
        REQUIRE_MODULE_GRADGRADCHECK(lstm, {param({2, 2, 2}, -1, 1, 13)},
                                     [&](const std::vector<Tensor>& in) {
                                         auto [out, state] = lstm(in[0], std::tuple<Tensor, Tensor>{}, lengths);
                                         return concat({reshape(out, {-1}), reshape(std::get<1>(state), {-1})}, 0);
                                     },
                                     "LSTM proj");
    }
}
