// Module: registration, names, modes, dtype conversion, printing and state_dict save/load.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"
#include "optim/sgd.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

namespace {

// The tree the seeds print for MultiHeadAttention(100, 100, 100, 100, 5, 0.5) (copied from
// shared/seeds/000_6adb6c83073e253e.txt).
const char* const kSeedTree = R"(MultiHeadAttention(
  (attention): DotProductAttention(
    (dropout): Dropout(p=0.5, inplace=False)
  )
  (W_q): Linear(in_features=100, out_features=100, bias=False)
  (W_k): Linear(in_features=100, out_features=100, bias=False)
  (W_v): Linear(in_features=100, out_features=100, bias=False)
  (W_o): Linear(in_features=100, out_features=100, bias=False)
))";

// A module made of parameters and children, as a user would write one.
class TwoLayer : public Module {
public:
    TwoLayer() : Module("TwoLayer") {
        register_parameter("scale", ones({3}));
        first = register_module("first", std::make_shared<Linear>(2, 3));
        drop = register_module("drop", std::make_shared<Dropout>(0.25));
        second = register_module("second", std::make_shared<Linear>(3, 1, false));
    }
    Tensor forward(const Tensor& x) {
        return second->forward(drop->forward(first->forward(x) * parameter("scale")));
    }
    std::shared_ptr<Linear> first;
    std::shared_ptr<Dropout> drop;
    std::shared_ptr<Linear> second;
};

std::vector<std::string> names_of(const Module& m) {
    std::vector<std::string> names;
    for (const auto& [name, p] : m.named_parameters()) names.push_back(name);
    return names;
}

std::string temp_path(const char* name) { return std::string("/tmp/xgrad_test_nn_") + name; }

}  // namespace

TEST_CASE("named_parameters are dotted, own parameters first, then children in order", "[module]") {
    TwoLayer m;
    CHECK(names_of(m) == std::vector<std::string>{"scale", "first.weight", "first.bias", "second.weight"});
    CHECK(m.parameters().size() == 4);
    CHECK(m.parameters()[1].is_same(m.first->weight()));
    CHECK(m.num_parameters() == 3 + 6 + 3 + 3);
    const auto children = m.named_children();
    REQUIRE(children.size() == 3);
    CHECK(children[0].first == "first");
    CHECK(children[1].first == "drop");
    CHECK(children[2].second.get() == m.second.get());
    CHECK(m.children().size() == 3);
    for (const auto& p : m.parameters()) CHECK(p.requires_grad());

    MultiHeadAttention mha(3, 2, 4, 4, 2, 0.0, true);
    CHECK(names_of(mha) == std::vector<std::string>{"W_q.weight", "W_q.bias", "W_k.weight", "W_k.bias",
                                                    "W_v.weight", "W_v.bias", "W_o.weight", "W_o.bias"});
}

TEST_CASE("register_parameter and register_module reject bad names and non-leaves", "[module]") {
    struct Bad : Module {
        Bad() : Module("Bad") {}
        void add(const std::string& name, const Tensor& t) { register_parameter(name, t); }
        void add_child(const std::string& name) { register_module(name, std::make_shared<ReLU>()); }
    } m;
    m.add("w", ones({2}));
    CHECK(m.parameter("w").requires_grad());
    CHECK_THROWS_WITH(m.add("w", ones({2})), Catch::Contains("Bad") && Catch::Contains("already registered"));
    CHECK_THROWS_WITH(m.add("a.b", ones({2})), Catch::Contains("without '.'"));
    CHECK_THROWS_WITH(m.add("sum", m.parameter("w") * 2.0),
                      Catch::Contains("leaf") && Catch::Contains("mul"));
    m.add_child("act");
    CHECK_THROWS_WITH(m.add_child("act"), Catch::Contains("already registered"));
    CHECK_THROWS_WITH(m.parameter("nothing"), Catch::Contains("Bad: no parameter named 'nothing'"));
}

TEST_CASE("train and eval recurse into every descendant", "[module]") {
    TransformerEncoderBlock block(8, 8, 8, 8, {8}, 8, 16, 2, 0.1);
    CHECK(block.is_training());
    block.eval();
    CHECK_FALSE(block.is_training());
    CHECK_FALSE(block.attention()->attention()->is_training());
    for (const auto& c : block.children()) CHECK_FALSE(c->is_training());
    block.train();
    CHECK(block.attention()->W_o()->is_training());
}

TEST_CASE("zero_grad drops every gradient", "[module]") {
    TwoLayer m;
    m.eval();
    m.forward(ones({4, 2})).sum().backward();
    for (const auto& p : m.parameters()) CHECK(p.grad().defined());
    m.zero_grad();
    for (const auto& p : m.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("to(dtype) converts parameters in place and keeps the handles", "[module]") {
    TwoLayer m;
    const Tensor w = m.first->weight();
    const std::vector<double> before = vals(w);
    m.forward(ones({1, 2})).sum().backward();
    m.to(kFloat64);
    CHECK(w.dtype() == kFloat64);  // the handle taken before sees the conversion
    CHECK(m.first->weight().is_same(w));
    CHECK_THAT(vals(w), approx(before));
    CHECK_FALSE(w.grad().defined());
    for (const auto& p : m.parameters()) CHECK(p.dtype() == kFloat64);
    m.eval();
    CHECK(m.forward(ones({2, 2}, kFloat64)).dtype() == kFloat64);
    m.to(kFloat32);
    CHECK(w.dtype() == kFloat32);
    CHECK_THROWS_WITH(m.to(kInt64), Catch::Contains("TwoLayer") && Catch::Contains("int64"));
}

TEST_CASE("set_parameter swaps a handle by dotted name, checking shape and dtype", "[module]") {
    TwoLayer m;
    const Tensor replacement = zeros({3, 2});
    m.set_parameter("first.weight", replacement);
    CHECK(m.first->weight().is_same(replacement));
    CHECK_THROWS_WITH(m.set_parameter("first.weight", zeros({2, 3})), Catch::Contains("first.weight") &&
                                                                          Catch::Contains("(3, 2)") &&
                                                                          Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(m.set_parameter("first.nothing", zeros({3})), Catch::Contains("first.nothing"));
    CHECK_THROWS_WITH(m.set_parameter("third.weight", zeros({3})), Catch::Contains("third"));
}

TEST_CASE("MultiHeadAttention prints exactly the seeds' tree", "[module][print]") {
    auto attention = std::make_shared<MultiHeadAttention>(100, 100, 100, 100, 5, 0.5);
    attention->eval();
    CHECK(fmt::format("{}", *attention) == kSeedTree);
    CHECK(fmt::format("{}", attention) == kSeedTree);  // a shared_ptr prints the module too
    std::ostringstream os;
    os << *attention;
    CHECK(os.str() == kSeedTree);
}

TEST_CASE("layers print their extra_repr as PyTorch does", "[module][print]") {
    CHECK(to_string(Linear(100, 100, false)) == "Linear(in_features=100, out_features=100, bias=False)");
    CHECK(to_string(Linear(3, 4)) == "Linear(in_features=3, out_features=4, bias=True)");
    CHECK(to_string(Dropout(0.5)) == "Dropout(p=0.5, inplace=False)");
    CHECK(to_string(Dropout(0.0)) == "Dropout(p=0.0, inplace=False)");
    CHECK(to_string(Dropout(0.1)) == "Dropout(p=0.1, inplace=False)");
    CHECK(to_string(Embedding(10, 8)) == "Embedding(10, 8)");
    CHECK(to_string(LayerNorm({32})) == "LayerNorm((32,), eps=1e-05, elementwise_affine=True)");
    CHECK(to_string(LayerNorm({2, 2}, 1e-3)) == "LayerNorm((2, 2), eps=0.001, elementwise_affine=True)");
    CHECK(to_string(ReLU()) == "ReLU()");
    CHECK(to_string(PositionWiseFFN(4, 8, 4)) == R"(PositionWiseFFN(
  (dense1): Linear(in_features=4, out_features=8, bias=True)
  (relu): ReLU()
  (dense2): Linear(in_features=8, out_features=4, bias=True)
))");
    CHECK(to_string(AddNorm({4}, 0.5)) == R"(AddNorm(
  (dropout): Dropout(p=0.5, inplace=False)
  (ln): LayerNorm((4,), eps=1e-05, elementwise_affine=True)
))");
}

TEST_CASE("nested modules indent two spaces per level", "[module][print]") {
    TransformerEncoderBlock block(4, 4, 4, 4, {4}, 4, 8, 2, 0.5);
    CHECK(to_string(block) == R"(TransformerEncoderBlock(
  (attention): MultiHeadAttention(
    (attention): DotProductAttention(
      (dropout): Dropout(p=0.5, inplace=False)
    )
    (W_q): Linear(in_features=4, out_features=4, bias=False)
    (W_k): Linear(in_features=4, out_features=4, bias=False)
    (W_v): Linear(in_features=4, out_features=4, bias=False)
    (W_o): Linear(in_features=4, out_features=4, bias=False)
  )
  (addnorm1): AddNorm(
    (dropout): Dropout(p=0.5, inplace=False)
    (ln): LayerNorm((4,), eps=1e-05, elementwise_affine=True)
  )
  (ffn): PositionWiseFFN(
    (dense1): Linear(in_features=4, out_features=8, bias=True)
    (relu): ReLU()
    (dense2): Linear(in_features=8, out_features=4, bias=True)
  )
  (addnorm2): AddNorm(
    (dropout): Dropout(p=0.5, inplace=False)
    (ln): LayerNorm((4,), eps=1e-05, elementwise_affine=True)
  )
))");
}

TEST_CASE("state_dict round-trips through an .npz file into fresh handles' values", "[module][state]") {
    manual_seed(1);
    MultiHeadAttention a(3, 2, 4, 4, 2, 0.0, true);
    manual_seed(2);
    MultiHeadAttention b(3, 2, 4, 4, 2, 0.0, true);
    const Tensor b_wq = b.W_q()->weight();
    REQUIRE(vals(a.W_q()->weight()) != vals(b_wq));

    const std::string path = temp_path("roundtrip.npz");
    save(a, path);
    load(b, path);
    std::remove(path.c_str());

    CHECK(b.W_q()->weight().is_same(b_wq));  // values copied into the existing handles
    const auto sa = a.state_dict();
    const auto sb = b.state_dict();
    REQUIRE(sa.size() == sb.size());
    for (std::size_t i = 0; i < sa.size(); ++i) {
        CHECK(sa[i].first == sb[i].first);
        CHECK(vals(sa[i].second) == vals(sb[i].second));
    }
    a.eval();
    b.eval();
    const Tensor q = rand({2, 3, 2}), k = rand({2, 5, 3}), v = rand({2, 5, 4});
    CHECK(vals(a.forward(q, k, v)) == vals(b.forward(q, k, v)));
}

TEST_CASE("state_dict holds the parameters themselves, as torch's (test_accessors.cpp writes through them)",
          "[module][state]") {
    Linear lin(2, 2);
    auto state = lin.state_dict();
    REQUIRE(state[0].first == "weight");
    CHECK(state[0].second.is_same(lin.weight()));
    // Loading a module's own state is a write, as torch's copy_: the version counts it.
    const auto v0 = lin.weight().version();
    const auto values = vals(lin.weight());
    lin.load_state_dict(state);
    CHECK(lin.weight().version() == v0 + 1);
    CHECK(vals(lin.weight()) == values);
}

TEST_CASE("a state whose entries alias the module's tensors under other names loads the values they had",
          "[module][state]") {
    Linear lin(2, 2, false);
    Linear other(2, 2, false);
    other.load_state_dict({{"weight", lin.weight()}});  // other.weight takes lin's values
    CHECK(vals(other.weight()) == vals(lin.weight()));
    // Two entries that are each other's tensors: both load what the other held before.
    Tensor a = tensor({1.0, 2.0}), b = tensor({3.0, 4.0});
    struct Pair : Module {
        Pair(Tensor x, Tensor y) : Module("Pair") {
            register_buffer("a", std::move(x));
            register_buffer("b", std::move(y));
        }
    } pair(a, b);
    pair.load_state_dict({{"a", pair.buffer("b")}, {"b", pair.buffer("a")}});
    CHECK(vals(pair.buffer("a")) == std::vector<double>{3, 4});
    CHECK(vals(pair.buffer("b")) == std::vector<double>{1, 2});
}

TEST_CASE("a mismatched load reports everything at once and changes nothing", "[module][state]") {
    MultiHeadAttention m(3, 2, 4, 4, 2, 0.0, true);
    NamedTensors before = m.state_dict();
    for (auto& entry : before) entry.second = entry.second.detach();  // a snapshot: the entries alias
    NamedTensors state = m.state_dict();
    state.erase(state.begin());                       // W_q.weight missing
    state[0].second = zeros({5});                     // W_q.bias: shape
    state[1].second = zeros({4, 3, 1});               // W_k.weight: shape
    state.emplace_back("W_x.weight", zeros({4, 4}));  // unexpected
    state[5].second = ones({4, 4});                   // W_o.weight: fine
    CHECK_THROWS_WITH(m.load_state_dict(state),
                      Catch::Contains("MultiHeadAttention") && Catch::Contains("missing: W_q.weight") &&
                          Catch::Contains("unexpected: W_x.weight") &&
                          Catch::Contains("W_q.bias: expected shape (4,), got (5,)") &&
                          Catch::Contains("W_k.weight: expected shape (4, 3), got (4, 3, 1)"));
    const auto after = m.state_dict();
    for (std::size_t i = 0; i < before.size(); ++i) CHECK(vals(before[i].second) == vals(after[i].second));

    NamedTensors twice = m.state_dict();
    twice.push_back(twice[0]);
    CHECK_THROWS_WITH(m.load_state_dict(twice), Catch::Contains("repeated: W_q.weight"));
}

TEST_CASE("loading a file that does not match names the file and the module", "[module][state]") {
    Linear small(2, 3);
    Linear other(2, 4);
    const std::string path = temp_path("mismatch.npz");
    save(small, path);
    const std::vector<double> before = vals(other.weight());
    CHECK_THROWS_WITH(load(other, path),
                      Catch::Contains(path) && Catch::Contains("Linear") &&
                          Catch::Contains("weight: expected shape (4, 2), got (3, 2)"));
    std::remove(path.c_str());
    CHECK(vals(other.weight()) == before);
}

TEST_CASE("a missing, empty, truncated, corrupted or foreign checkpoint names the file, loads nothing",
          "[module][state]") {
    Linear model(3, 2);
    const std::vector<double> weight = vals(model.weight()), bias = vals(model.bias());
    auto unchanged = [&] { return vals(model.weight()) == weight && vals(model.bias()) == bias; };

    Linear other(3, 2);
    const std::string good = temp_path("good.npz");
    save(other, good);
    std::string bytes;
    {
        std::ifstream in(good, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto write = [](const std::string& path, const std::string& content) {
        std::ofstream(path, std::ios::binary) << content;
        return path;
    };

    CHECK_THROWS_WITH(load(model, temp_path("absent.npz")),
                      Catch::Contains("absent.npz") && Catch::Contains("No such file"));
    CHECK(unchanged());
    CHECK_THROWS_WITH(load(model, write(temp_path("empty.npz"), "")), Catch::Contains("empty.npz"));
    CHECK(unchanged());
    CHECK_THROWS_WITH(load(model, write(temp_path("cut.npz"), bytes.substr(0, bytes.size() / 2))),
                      Catch::Contains("cut.npz"));
    CHECK(unchanged());
    std::string flipped = bytes;
    // A byte of the weight's values (after the member name and the 128-byte .npy header): only
    // the CRC-32 check can catch it.
    const std::size_t at = bytes.find("weight.npy") + 10 + 128 + 4;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x5a);
    CHECK_THROWS_WITH(load(model, write(temp_path("flipped.npz"), flipped)), Catch::Contains("flipped.npz"));
    CHECK(unchanged());
    save_npy(temp_path("foreign.npy"), ones({2, 3}));  // a .npy, not an archive
    CHECK_THROWS_WITH(load(model, temp_path("foreign.npy")), Catch::Contains("foreign.npy"));
    CHECK(unchanged());
    CHECK_THROWS_WITH(load(model, write(temp_path("text.npz"), "weight,bias\n1,2\n")), Catch::Contains("text.npz"));
    CHECK(unchanged());
    // Right names, one shape wrong: nothing at all is taken (not even the entry that fits).
    save_npz(temp_path("f64.npz"), {{"weight", zeros({2, 3})}, {"bias", zeros({3}, kFloat64)}});
    CHECK_THROWS_WITH(load(model, temp_path("f64.npz")),
                      Catch::Contains("f64.npz") && Catch::Contains("bias: expected shape (2,), got (3,)"));
    CHECK(unchanged());
    for (const char* f : {"good.npz", "empty.npz", "cut.npz", "flipped.npz", "foreign.npy", "text.npz", "f64.npz"})
        std::remove(temp_path(f).c_str());
}

// One Linear registered under two names (tied weights) once gave parameters() each tensor
// twice, so num_parameters counted it twice and every optimizer refused the list.
TEST_CASE("a tensor shared by two children is one parameter, saved under both names", "[module]") {
    class Tied : public Module {
    public:
        Tied() : Module("Tied") {
            auto shared = register_module("a", std::make_shared<Linear>(2, 3));
            register_module("b", shared);
        }
    };
    Tied m;
    const auto named = m.named_parameters();
    REQUIRE(named.size() == 2);  // torch: ["a.weight", "a.bias"]
    CHECK(named[0].first == "a.weight");
    CHECK(named[1].first == "a.bias");
    CHECK(m.parameters().size() == 2);
    CHECK(m.num_parameters() == 9);
    CHECK_NOTHROW(optim::SGD(m.parameters(), optim::SGDOptions(0.1)));
    const NamedTensors state = m.state_dict();  // torch keeps every name here
    REQUIRE(state.size() == 4);
    CHECK(state[2].first == "b.weight");
    CHECK_NOTHROW(m.load_state_dict(state));
}
