// Sequential, ModuleList, ModuleDict; named_modules, apply, buffers; module(args...);
// load_state_dict's dtype conversion and strict = false. Expected trees and names are torch
// 1.13's output for the same models, pasted as literals.
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

namespace {

// Seed 003's AttentionHead and MultiHeadAttention (without their forward), as a user writes them.
class AttentionHead : public Module {
public:
    AttentionHead(std::size_t embed_dim, std::size_t head_dim) : Module("AttentionHead") {
        q = register_module("q", std::make_shared<Linear>(embed_dim, head_dim));
        k = register_module("k", std::make_shared<Linear>(embed_dim, head_dim));
        v = register_module("v", std::make_shared<Linear>(embed_dim, head_dim));
    }
    std::shared_ptr<Linear> q, k, v;
};

class SeedMHA : public Module {
public:
    SeedMHA(std::size_t embed_dim, std::size_t num_heads) : Module("MultiHeadAttention") {
        heads = register_module("heads", std::make_shared<ModuleList>());
        for (std::size_t h = 0; h < num_heads; ++h)
            heads->push_back(std::make_shared<AttentionHead>(embed_dim, embed_dim / num_heads));
        output_linear = register_module("output_linear", std::make_shared<Linear>(embed_dim, embed_dim));
    }
    std::shared_ptr<ModuleList> heads;
    std::shared_ptr<Linear> output_linear;
};

// torch 1.13: repr(MultiHeadAttention(8, 2)) of seed 003's classes
const char* const kSeedTree = R"(MultiHeadAttention(
  (heads): ModuleList(
    (0): AttentionHead(
      (q): Linear(in_features=8, out_features=4, bias=True)
      (k): Linear(in_features=8, out_features=4, bias=True)
      (v): Linear(in_features=8, out_features=4, bias=True)
    )
    (1): AttentionHead(
      (q): Linear(in_features=8, out_features=4, bias=True)
      (k): Linear(in_features=8, out_features=4, bias=True)
      (v): Linear(in_features=8, out_features=4, bias=True)
    )
  )
  (output_linear): Linear(in_features=8, out_features=8, bias=True)
))";

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
    std::vector<std::string> out;
    for (const auto& [n, t] : named) out.push_back(n);
    return out;
}

// torch's Net: a buffer of its own, a non-persistent one, and one in a child Sequential.
class Net : public Module {
public:
    Net() : Module("Net") {
        lin = register_module("lin", std::make_shared<Linear>(2, 2));
        register_buffer("running", zeros({2}));
        register_buffer("scratch", zeros({1}), false);
        sub = register_module("sub", std::make_shared<Sequential>(std::make_shared<Linear>(2, 2)));
    }
    void add_count() { sub->push_back("counter", std::make_shared<Counter>()); }
    struct Counter : Module, Callable<Counter> {
        Counter() : Module("Counter") { register_buffer("count", zeros({1}, kInt64)); }
        Tensor forward(const Tensor& x) { return x; }
    };
    std::shared_ptr<Linear> lin;
    std::shared_ptr<Sequential> sub;
};

std::string temp_path(const char* name) { return std::string("/tmp/xgrad_test_containers_") + name; }

}  // namespace

TEST_CASE("ModuleList gives torch's parameter names and printed tree", "[containers]") {
    SeedMHA m(8, 2);
    CHECK(to_string(m) == kSeedTree);
    CHECK(names_of(m.named_parameters()) ==
          std::vector<std::string>{"heads.0.q.weight", "heads.0.q.bias", "heads.0.k.weight", "heads.0.k.bias",
                                   "heads.0.v.weight", "heads.0.v.bias", "heads.1.q.weight", "heads.1.q.bias",
                                   "heads.1.k.weight", "heads.1.k.bias", "heads.1.v.weight", "heads.1.v.bias",
                                   "output_linear.weight", "output_linear.bias"});
    std::vector<std::string> modules;
    for (const auto& [n, mod] : m.named_modules()) modules.push_back(n);
    CHECK(modules == std::vector<std::string>{"", "heads", "heads.0", "heads.0.q", "heads.0.k", "heads.0.v",
                                              "heads.1", "heads.1.q", "heads.1.k", "heads.1.v", "output_linear"});
    CHECK(m.modules().size() == 11);
    CHECK(m.modules()[0] == &m);

    REQUIRE(m.heads->size() == 2);
    std::size_t seen = 0;
    for (const auto& h : *m.heads) {
        REQUIRE(h->as<AttentionHead>() != nullptr);
        ++seen;
    }
    CHECK(seen == 2);
    CHECK(&m.heads->at<AttentionHead>(1) == (*m.heads)[1].get());
    CHECK(m.heads->ptr<AttentionHead>(0)->q->out_features() == 4);
    CHECK_THROWS_WITH(m.heads->at<Linear>(0), Catch::Contains("ModuleList") && Catch::Contains("AttentionHead"));
    CHECK_THROWS_WITH((*m.heads)[2], Catch::Contains("ModuleList") && Catch::Contains("index 2"));
    CHECK(to_string(ModuleList()) == "ModuleList()");
    ModuleList both{std::make_shared<ReLU>(), std::make_shared<Linear>(1, 1)};
    both.extend(both);
    CHECK(both.size() == 4);
    both.append(std::make_shared<ReLU>());  // torch's name
    CHECK(both.named_children().back().first == "4");
    CHECK(both.num_parameters() == 2);  // shared modules: their parameters once
    CHECK(names_of(both.named_parameters()) == std::vector<std::string>{"1.weight", "1.bias"});
}

TEST_CASE("Sequential chains one-tensor modules with torch's names and tree", "[containers]") {
    auto net = std::make_shared<Sequential>(std::make_shared<Linear>(4, 8), std::make_shared<ReLU>(),
                                            std::make_shared<Dropout>(0.1), std::make_shared<Linear>(8, 1));
    CHECK(to_string(*net) == R"(Sequential(
  (0): Linear(in_features=4, out_features=8, bias=True)
  (1): ReLU()
  (2): Dropout(p=0.1, inplace=False)
  (3): Linear(in_features=8, out_features=1, bias=True)
))");
    CHECK(names_of(net->named_parameters()) ==
          std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias"});
    net->eval();
    const Tensor x = rand({5, 4});
    const Tensor by_hand = net->at<Linear>(3)(net->at<ReLU>(1)(net->at<Linear>(0)(x)));
    CHECK(vals((*net)(x)) == vals(by_hand));
    CHECK(net->size() == 4);
    std::vector<std::string> kinds;
    for (const auto& m : *net) kinds.push_back(m->name());
    CHECK(kinds == std::vector<std::string>{"Linear", "ReLU", "Dropout", "Linear"});
    net->push_back(std::make_shared<ReLU>());
    CHECK(net->named_children().back().first == "4");
    CHECK(to_string(Sequential()) == "Sequential()");
    CHECK(vals(Sequential()(x)) == vals(x));  // torch: an empty Sequential is the identity

    // gradient check through the chain, in double
    Sequential mlp(std::make_shared<Linear>(3, 4), std::make_shared<ReLU>(), std::make_shared<Linear>(4, 2));
    mlp.to(kFloat64);
    REQUIRE_MODULE_GRADCHECK(mlp, {param({2, 3}, -1, 1, 3)}, [&](auto& in) { return mlp(in[0]); }, "Sequential");

    // a module that does not take one tensor: add_module holds it, forward refuses to chain it
    Sequential blocks;
    blocks.add_module("block0", std::make_shared<AddNorm>(Shape{4}, 0.0));
    CHECK(blocks.named_children()[0].first == "block0");
    CHECK_THROWS_WITH(blocks(ones({1, 4})), Catch::Contains("Sequential") && Catch::Contains("block0") &&
                                                Catch::Contains("AddNorm"));
    CHECK_THROWS_WITH(blocks.add_module("block0", std::make_shared<ReLU>()), Catch::Contains("already registered"));
    CHECK_THROWS_WITH(blocks.push_back("a.b", std::make_shared<ReLU>()), Catch::Contains("without '.'"));
    CHECK_THROWS_WITH(blocks.push_back(std::shared_ptr<ReLU>()), Catch::Contains("null"));
}

static_assert(takes_one_tensor_v<Linear> && takes_one_tensor_v<PositionalEncoding> &&
              takes_one_tensor_v<TransformerEncoderBlock>);
static_assert(!takes_one_tensor_v<AddNorm> && !takes_one_tensor_v<MultiHeadAttention> &&
              !takes_one_tensor_v<ModuleList>);

TEST_CASE("ModuleDict keeps insertion order and replaces in place as torch", "[containers]") {
    // torch: d = ModuleDict({"b": Linear(2, 3), "a": ReLU()}); d["c"] = LayerNorm(3); d["b"] = Linear(2, 5)
    ModuleDict d{{"b", std::make_shared<Linear>(2, 3)}, {"a", std::make_shared<ReLU>()}};
    d.insert("c", std::make_shared<LayerNorm>(Shape{3}));
    d.insert("b", std::make_shared<Linear>(2, 5));
    CHECK(to_string(d) == R"(ModuleDict(
  (b): Linear(in_features=2, out_features=5, bias=True)
  (a): ReLU()
  (c): LayerNorm((3,), eps=1e-05, elementwise_affine=True)
))");
    CHECK(d.keys() == std::vector<std::string>{"b", "a", "c"});
    CHECK(names_of(d.named_parameters()) ==
          std::vector<std::string>{"b.weight", "b.bias", "c.weight", "c.bias"});
    CHECK(d.at<Linear>("b").out_features() == 5);
    CHECK(d.contains("a"));
    CHECK_THROWS_WITH(d["z"], Catch::Contains("no key 'z'") && Catch::Contains("b, a, c"));
    const auto popped = d.pop("a");
    CHECK(popped->name() == "ReLU");
    CHECK(d.keys() == std::vector<std::string>{"b", "c"});
    CHECK(d.named_children().size() == 2);
    d.insert("a", popped);
    CHECK(d.keys() == std::vector<std::string>{"b", "c", "a"});
    CHECK_THROWS_WITH(d.insert("x.y", popped), Catch::Contains("without '.'"));
    CHECK_THROWS_WITH(d.pop("zz"), Catch::Contains("no key 'zz'"));
    std::size_t n = 0;
    for (const auto& [key, m] : d) n += key.size() + (m ? 1 : 0);
    CHECK(n == 6);
}

TEST_CASE("Buffers: persistent in state_dict, in torch's order, converted by to()", "[containers][buffers]") {
    Net n;
    n.add_count();
    // torch: ['running', 'lin.weight', 'lin.bias', 'sub.count', 'sub.0.weight', 'sub.0.bias'] for its
    // Net; our counter is a child of sub rather than a buffer of sub itself
    std::vector<std::string> keys;
    for (const auto& [k, t] : n.state_dict()) keys.push_back(k);
    CHECK(keys == std::vector<std::string>{"running", "lin.weight", "lin.bias", "sub.0.weight", "sub.0.bias",
                                           "sub.counter.count"});
    CHECK(names_of(n.named_buffers()) == std::vector<std::string>{"running", "scratch", "sub.counter.count"});
    CHECK(n.buffers().size() == 3);
    CHECK(n.parameters().size() == 4);  // buffers are not parameters
    CHECK_FALSE(n.buffer("running").requires_grad());
    CHECK_THROWS_WITH(n.buffer("nope"), Catch::Contains("Net") && Catch::Contains("no buffer named 'nope'"));

    // to(): floating buffers follow the parameters, integer ones stay, handles are kept
    const Tensor running = n.buffer("running");
    n.to(kFloat64);
    CHECK(running.dtype() == kFloat64);
    CHECK(n.buffer("running").is_same(running));
    CHECK(n.buffer("scratch").dtype() == kFloat64);
    CHECK(n.named_buffers()[2].second.dtype() == kInt64);

    // load_state_dict writes persistent buffers and leaves the others
    NamedTensors state = n.state_dict();
    state[0].second = full({2}, 7.0, kFloat64);
    state[5].second = full({1}, 3.0, kInt64);
    n.load_state_dict(state);
    CHECK(vals(n.buffer("running")) == std::vector<double>{7, 7});
    CHECK(vals(n.named_buffers()[2].second) == std::vector<double>{3});
    const auto version = n.buffer("running").version();
    state[0].second = full({2}, 8.0, kFloat32);  // converted as copy_ does, version bumped
    n.load_state_dict(state);
    CHECK(n.buffer("running").dtype() == kFloat64);
    CHECK(n.buffer("running").version() > version);

    // one namespace for parameters, buffers and children
    struct Clash : Module {
        Clash() : Module("Clash") {
            register_parameter("w", zeros({1}));
            CHECK_THROWS_WITH(register_buffer("w", zeros({1})),
                              Catch::Contains("'w' is already registered as a parameter"));
            register_buffer("b", zeros({1}));
            CHECK_THROWS_WITH(register_module("b", std::make_shared<ReLU>()),
                              Catch::Contains("'b' is already registered as a buffer"));
            CHECK_THROWS_WITH(register_buffer("u", Tensor()), Catch::Contains("undefined"));
            // a buffer is kept out of the graph
            Tensor p = ones({1});
            p.requires_grad_(true);
            CHECK_FALSE(register_buffer("g", p * 2.0).requires_grad());
        }
    } clash;
}

TEST_CASE("named_modules lists a shared module once and apply visits children first", "[containers]") {
    auto shared = std::make_shared<Linear>(2, 2);
    Sequential s(shared, std::make_shared<ReLU>(), shared);
    std::vector<std::string> names;
    for (const auto& [n, m] : s.named_modules()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"", "0", "1"});  // torch: ['', '0', '1']
    const Sequential& cs = s;
    CHECK(cs.named_modules().size() == 3);

    // torch: Net().apply(...) visits ['Linear', 'Linear', 'Sequential', 'Net']
    Net n;
    std::vector<std::string> order;
    n.apply([&](Module& m) { order.push_back(m.name()); });
    CHECK(order == std::vector<std::string>{"Linear", "Linear", "Sequential", "Net"});

    // the usual use: initialise every Linear
    n.apply([](Module& m) {
        if (auto* lin = m.as<Linear>()) init::constant_(lin->weight(), 0.5);
    });
    CHECK(vals(n.lin->weight()) == std::vector<double>(4, 0.5));
    CHECK(vals(n.sub->at<Linear>(0).weight()) == std::vector<double>(4, 0.5));
}

TEST_CASE("every module is callable with its forward's arguments", "[containers]") {
    MultiHeadAttention mha(4, 4, 4, 4, 2, 0.0);
    const Tensor q = rand({2, 3, 4}), kv = rand({2, 5, 4});
    CHECK(vals(mha(q, kv, kv)) == vals(mha.forward(q, kv, kv)));
    CHECK(vals(mha(q, kv, kv, lens({2, 3}))) == vals(mha.forward(q, kv, kv, lens({2, 3}))));
    CHECK(vals(mha(q, kv, kv, AttentionMask::causal())) == vals(mha.forward(q, kv, kv, AttentionMask::causal())));
    DotProductAttention dot(0.0);
    CHECK(dot(q, kv, kv).shape() == Shape{2, 3, 4});
    AdditiveAttention add(4, 4, 8, 0.0);
    CHECK(add(q, kv, kv, lens({1, 2})).shape() == Shape{2, 3, 4});
    AddNorm an({4}, 0.0);
    CHECK(an(q, q).shape() == q.shape());
    PositionalEncoding pe(4, 0.0);
    CHECK(vals(pe(q, 2)) == vals(pe.forward(q, 2)));  // default and extra arguments alike
    LearnedPositionalEmbedding lpe(8, 4, 0.0);
    CHECK(lpe(q, 1).shape() == q.shape());
    Embedding emb(5, 4);
    CHECK(emb(from_vector(std::vector<std::int64_t>{1, 2}, {2})).shape() == Shape{2, 4});
    TransformerEncoderBlock blk(4, 4, 4, 4, {4}, 4, 8, 2, 0.0);
    CHECK(blk(q).shape() == q.shape());
    // through a shared_ptr, as modules are held
    auto lin = std::make_shared<Linear>(4, 1);
    CHECK((*lin)(q).shape() == Shape{2, 3, 1});
}

TEST_CASE("load_state_dict converts dtypes as torch's copy_ and reports keys with strict false",
          "[containers][state]") {
    Linear lin(3, 2);
    // a float64 state from numpy into a float32 model
    NamedTensors f64{{"weight", full({2, 3}, 0.25, kFloat64)}, {"bias", full({2}, -1.5, kFloat64)}};
    const Tensor weight = lin.weight();
    const LoadResult r = lin.load_state_dict(f64);
    CHECK(r.missing_keys.empty());
    CHECK(r.unexpected_keys.empty());
    CHECK(lin.weight().is_same(weight));
    CHECK(lin.weight().dtype() == kFloat32);
    CHECK(vals(lin.weight()) == std::vector<double>(6, 0.25));
    CHECK(vals(lin.bias()) == std::vector<double>(2, -1.5));
    CHECK(lin.weight().requires_grad());
    // int64 converts too
    lin.load_state_dict({{"weight", full({2, 3}, 2.0, kInt64)}, {"bias", zeros({2}, kInt64)}});
    CHECK(vals(lin.weight()) == std::vector<double>(6, 2.0));

    // strict = false: what matches is loaded, the rest reported as torch does
    // torch: load_state_dict({"lin.weight": f64 zeros, "extra": ...}, strict=False) →
    //        missing ['running', 'lin.bias', 'sub.0.weight', 'sub.0.bias'], unexpected ['extra']
    Net n;
    const auto bias_before = vals(n.lin->bias());
    const LoadResult partial =
        n.load_state_dict({{"lin.weight", zeros({2, 2}, kFloat64)}, {"extra", zeros({1})}}, false);
    CHECK(partial.missing_keys == std::vector<std::string>{"running", "lin.bias", "sub.0.weight", "sub.0.bias"});
    CHECK(partial.unexpected_keys == std::vector<std::string>{"extra"});
    CHECK(vals(n.lin->weight()) == std::vector<double>(4, 0.0));
    CHECK(vals(n.lin->bias()) == bias_before);
    // strict = true: the same state is one clear error, nothing loaded
    n.lin->weight().set_data(ones({2, 2}));
    CHECK_THROWS_WITH(n.load_state_dict({{"lin.weight", zeros({2, 2})}, {"extra", zeros({1})}}),
                      Catch::Contains("missing: running, lin.bias") && Catch::Contains("unexpected: extra") &&
                          Catch::Contains("strict") && Catch::Contains("nothing was loaded"));
    CHECK(vals(n.lin->weight()) == std::vector<double>(4, 1.0));
    // shapes must match even without strict (torch raises), and then nothing is loaded
    CHECK_THROWS_WITH(n.load_state_dict({{"lin.weight", zeros({2, 2})}, {"lin.bias", zeros({3})}}, false),
                      Catch::Contains("lin.bias: expected shape (2,), got (3,)"));
    CHECK(vals(n.lin->weight()) == std::vector<double>(4, 1.0));
    // a value that cannot convert (NaN into an integer buffer) throws before anything is written
    struct IntBuf : Module {
        IntBuf() : Module("IntBuf") {
            register_parameter("w", zeros({1}));
            register_buffer("n", zeros({1}, kInt64));
        }
    } ib;
    CHECK_THROWS_WITH(ib.load_state_dict({{"w", ones({1})}, {"n", full({1}, std::nan(""))}}),
                      Catch::Contains("load_state_dict: n (float32 into int64) cannot be converted"));
    CHECK(vals(ib.parameter("w")) == std::vector<double>{0});

    // nn::load on a numpy float64 file, strict and not
    const std::string path = temp_path("containers_f64.npz");
    save_npz(path, {{"weight", full({2, 3}, 0.5, kFloat64)}, {"bias", full({2}, 0.5, kFloat64)},
                    {"step", zeros({1}, kInt64)}});
    CHECK_THROWS_WITH(load(lin, path), Catch::Contains(path) && Catch::Contains("unexpected: step"));
    const LoadResult from_file = load(lin, path, false);
    CHECK(from_file.unexpected_keys == std::vector<std::string>{"step"});
    CHECK(vals(lin.weight()) == std::vector<double>(6, 0.5));
    std::remove(path.c_str());
}

TEST_CASE("container indices count from the end when negative and refuse a wrapped size_t", "[containers]") {
    ModuleList list{std::make_shared<Linear>(2, 3), std::make_shared<ReLU>(), std::make_shared<Linear>(3, 1)};
    Sequential seq(std::make_shared<Linear>(2, 3), std::make_shared<ReLU>());
    // torch's blks[-1]
    CHECK(list[-1].get() == list[2].get());
    CHECK(list[-3].get() == list[0].get());
    CHECK(list.at<Linear>(-1).weight().shape() == Shape{1, 3});
    CHECK(seq[-1].get() == seq[1].get());
    CHECK_THROWS_WITH(list[3], Catch::Contains("ModuleList: index 3 is out of range") &&
                                   Catch::Contains("-3 to 2"));
    CHECK_THROWS_WITH(list[-4], Catch::Contains("ModuleList: index -4 is out of range"));
    CHECK_THROWS_WITH(seq[2], Catch::Contains("Sequential: index 2 is out of range"));
    // i - 1 at i = 0 in size_t is 2^64 - 1: refused, not the last module
    std::size_t i = 0;
    CHECK_THROWS_WITH(list[i - 1], Catch::Contains("ModuleList: index 18446744073709551615 is an unsigned value"));
    CHECK_THROWS_WITH(list.at<Linear>(i - 1), Catch::Contains("unsigned"));
    CHECK_THROWS_WITH(seq[i - 1], Catch::Contains("Sequential: index 18446744073709551615"));
    // every integer type works
    CHECK(list[std::size_t{2}].get() == list[2L].get());
    CHECK(list[static_cast<unsigned char>(1)].get() == list[1].get());
    ModuleList empty;
    CHECK_THROWS_WITH(empty[0], Catch::Contains("out of range for a container of 0 modules"));
}
