// Module trees built as a careless or hostile user would: a container put inside itself or into
// its own descendant through every call that links a child (refused, naming both modules and
// the path), chains 100,000 levels deep walked by every service of the base (parameters,
// named_*, modules, apply, to, train/eval, zero_grad, state_dict and its round trip,
// set_parameter, printing, destruction) without touching the call stack's limit, and modules
// shared on many paths walked once where torch walks them once. Expected names, orders and
// trees are torch 1.13's output for the same models, pasted as literals.
#include <pthread.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::nn;
using namespace xgrad::test;

namespace {

constexpr std::size_t kDeep = 100000;

// A user's layer that registers whatever it is given.
struct Holder : Module {
    Holder() : Module("Holder") {}
    void hold(const std::string& name, std::shared_ptr<Module> m) { register_module(name, std::move(m)); }
    Tensor forward(const Tensor& x) { return x; }
};

// A leaf with one parameter, one persistent and one non-persistent buffer.
struct Leaf : Module, Callable<Leaf> {
    Leaf() : Module("Leaf") {
        register_parameter("w", ones({2}));
        register_buffer("b", zeros({2}));
        register_buffer("scratch", zeros({1}), false);
    }
    Tensor forward(const Tensor& x) { return x * parameter("w"); }
};

// A chain of `depth` Sequentials, the innermost holding a Leaf: names "0.0.....0.w".
std::shared_ptr<Sequential> deep_chain(std::size_t depth, std::shared_ptr<Leaf> leaf = std::make_shared<Leaf>()) {
    auto top = std::make_shared<Sequential>(leaf);
    for (std::size_t i = 1; i < depth; ++i) top = std::make_shared<Sequential>(top);
    return top;
}

std::string dotted_zeros(std::size_t n) {  // "0.0.0" for n = 3
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += i ? ".0" : "0";
    return s;
}

// Runs fn on a thread with a small stack (256 KiB): a walk that recursed once per level would
// overflow it a few thousand levels down, where the names it builds are still small.
void on_small_stack(const std::function<void()>& fn) {
    struct Call {
        const std::function<void()>* fn;
        std::exception_ptr error;
    } call{&fn, nullptr};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t thread;
    const int rc = pthread_create(
        &thread, &attr,
        [](void* p) -> void* {
            auto* c = static_cast<Call*>(p);
            try {
                (*c->fn)();
            } catch (...) {
                c->error = std::current_exception();
            }
            return nullptr;
        },
        &call);
    pthread_attr_destroy(&attr);
    REQUIRE(rc == 0);
    pthread_join(thread, nullptr);
    if (call.error) std::rethrow_exception(call.error);
}


}  // namespace

// A macro, not a function: Catch's composed matchers hold their parts by reference, so the
// parts must live as long as the assertion's full expression.
#define is_cycle(who, call) (Catch::Contains(std::string(who) + ": " + (call) + ":") && Catch::Contains("cycle"))

TEST_CASE("a container put inside itself is refused by every call that links a child", "[nn][hostile][module-tree]") {
    auto seq = std::make_shared<Sequential>(std::make_shared<ReLU>());
    CHECK_THROWS_WITH(seq->push_back(seq), is_cycle("Sequential", "push_back") &&
                                               Catch::Contains("'1' is this Sequential itself"));
    CHECK_THROWS_WITH(seq->push_back("me", seq), is_cycle("Sequential", "push_back") && Catch::Contains("'me'"));
    CHECK_THROWS_WITH(seq->add_module("me", seq), is_cycle("Sequential", "add_module"));
    CHECK(seq->size() == 1);
    CHECK(seq->named_children().size() == 1);
    CHECK(vals((*seq)(tensor({-1.0, 2.0}))) == std::vector<double>{0.0, 2.0});  // still a working Sequential

    auto list = std::make_shared<ModuleList>();
    CHECK_THROWS_WITH(list->push_back(list), is_cycle("ModuleList", "push_back") && Catch::Contains("itself"));
    CHECK_THROWS_WITH(list->append(list), is_cycle("ModuleList", "append"));
    const auto holds_list = std::make_shared<ModuleList>(std::initializer_list<std::shared_ptr<Module>>{list});
    CHECK_THROWS_WITH(list->extend(*holds_list), is_cycle("ModuleList", "extend"));
    CHECK(list->empty());
    CHECK(list->named_children().empty());

    auto dict = std::make_shared<ModuleDict>();
    CHECK_THROWS_WITH(dict->insert("self", dict), is_cycle("ModuleDict", "insert") && Catch::Contains("'self'"));
    auto relu = std::make_shared<ReLU>();
    dict->insert("a", relu);
    CHECK_THROWS_WITH(dict->insert("a", dict), is_cycle("ModuleDict", "insert"));  // a replacement too
    CHECK((*dict)["a"] == relu);
    CHECK(dict->named_children() == std::vector<std::pair<std::string, std::shared_ptr<Module>>>{{"a", relu}});

    auto holder = std::make_shared<Holder>();
    CHECK_THROWS_WITH(holder->hold("me", holder), is_cycle("Holder", "register_module") && Catch::Contains("'me'"));
    CHECK(holder->children().empty());
}

TEST_CASE("two or more modules that would hold each other are refused naming both and the path",
          "[nn][hostile][module-tree]") {
    // a holds b (through each linking call in turn); b taking a back closes the cycle.
    auto a_seq = std::make_shared<Sequential>();
    auto a_list = std::make_shared<ModuleList>();
    auto a_dict = std::make_shared<ModuleDict>();
    auto a_holder = std::make_shared<Holder>();
    auto b_seq = std::make_shared<Sequential>(a_seq);  // constructors link too
    auto b_list = std::make_shared<ModuleList>(std::initializer_list<std::shared_ptr<Module>>{a_list});
    auto b_dict = std::make_shared<ModuleDict>(
        std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>>{{"inner", a_dict}});
    auto b_holder = std::make_shared<Holder>();
    b_holder->hold("inner", a_holder);

    CHECK_THROWS_WITH(a_seq->push_back(b_seq), is_cycle("Sequential", "push_back") &&
                                                   Catch::Contains("cannot add '0' (Sequential)") &&
                                                   Catch::Contains("this Sequential is inside it, at '0'"));
    CHECK_THROWS_WITH(a_seq->add_module("b", b_seq), is_cycle("Sequential", "add_module"));
    CHECK_THROWS_WITH(a_list->append(b_list), is_cycle("ModuleList", "append") &&
                                                  Catch::Contains("'0' (ModuleList)") && Catch::Contains("at '0'"));
    CHECK_THROWS_WITH(a_list->push_back(b_list), is_cycle("ModuleList", "push_back"));
    CHECK_THROWS_WITH(a_dict->insert("outer", b_dict), is_cycle("ModuleDict", "insert") &&
                                                          Catch::Contains("'outer' (ModuleDict)") &&
                                                          Catch::Contains("at 'inner'"));
    CHECK_THROWS_WITH(a_holder->hold("outer", b_holder),
                      is_cycle("Holder", "register_module") && Catch::Contains("at 'inner'"));
    // across kinds, and through a longer path: list -> dict -> holder -> seq
    auto seq = std::make_shared<Sequential>();
    auto holder = std::make_shared<Holder>();
    holder->hold("body", seq);
    auto dict = std::make_shared<ModuleDict>();
    dict->insert("h", holder);
    auto list = std::make_shared<ModuleList>();
    list->append(dict);
    CHECK_THROWS_WITH(seq->add_module("top", list), is_cycle("Sequential", "add_module") &&
                                                        Catch::Contains("'top' (ModuleList)") &&
                                                        Catch::Contains("at '0.h.body'"));
    CHECK(seq->empty());
    CHECK(list->modules().size() == 4);  // nothing was linked
    CHECK(to_string(*list) ==
          "ModuleList(\n  (0): ModuleDict(\n    (h): Holder(\n      (body): Sequential()\n    )\n  )\n)");
}

TEST_CASE("the cycle check names the path whichever side of the search finds it", "[nn][hostile][module-tree]") {
    // The check searches down from the new child and up from the new parent in turns. A wide
    // child makes the upward search find it; many parents of the new parent, the downward one.
    auto bottom = std::make_shared<Holder>();
    auto top = std::make_shared<Holder>();
    auto mid = std::make_shared<Holder>();
    mid->hold("bottom", bottom);
    for (int i = 0; i < 1000; ++i) top->hold("leaf" + std::to_string(i), std::make_shared<ReLU>());
    top->hold("mid", mid);
    CHECK_THROWS_WITH(bottom->hold("top", top), is_cycle("Holder", "register_module") &&
                                                    Catch::Contains("at 'mid.bottom'"));
    std::vector<std::shared_ptr<Holder>> others;
    for (int i = 0; i < 1000; ++i) {
        others.push_back(std::make_shared<Holder>());
        others.back()->hold("bottom", bottom);
    }
    auto lone = std::make_shared<Holder>();
    lone->hold("mid", mid);
    CHECK_THROWS_WITH(bottom->hold("lone", lone), Catch::Contains("at 'mid.bottom'"));
    // a module shared below (a DAG) is no cycle
    auto diamond = std::make_shared<Holder>();
    diamond->hold("left", mid);
    auto right = std::make_shared<Holder>();
    right->hold("shared", bottom);
    CHECK_NOTHROW(diamond->hold("right", right));
    CHECK(diamond->modules().size() == 4);
}

TEST_CASE("a module shared in a tree is walked as torch walks it", "[nn][hostile][module-tree]") {
    // torch 1.13: lin = nn.Linear(2, 2); s = nn.Sequential(lin, nn.ReLU(), lin)
    auto lin = std::make_shared<Linear>(2, 2);
    auto s = std::make_shared<Sequential>(lin, std::make_shared<ReLU>(), lin);
    std::vector<std::string> names;
    for (const auto& [n, c] : s->named_children()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"0", "1"});
    CHECK(s->children().size() == 2);
    names.clear();
    for (const auto& [n, p] : s->named_parameters()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"0.weight", "0.bias"});
    names.clear();
    for (const auto& [n, t] : s->state_dict()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
    names.clear();
    s->apply([&](Module& m) { names.push_back(m.name()); });
    CHECK(names == std::vector<std::string>{"Linear", "ReLU", "Sequential"});
    CHECK(to_string(*s) ==
          "Sequential(\n  (0): Linear(in_features=2, out_features=2, bias=True)\n  (1): ReLU()\n"
          "  (2): Linear(in_features=2, out_features=2, bias=True)\n)");

    // shared across levels: inner in a and in b, top = Sequential(a, b)
    auto inner = std::make_shared<Sequential>(std::make_shared<Linear>(1, 1));
    auto top = std::make_shared<Sequential>(std::make_shared<Sequential>(inner), std::make_shared<Sequential>(inner));
    names.clear();
    top->apply([&](Module& m) { names.push_back(m.name()); });
    CHECK(names == std::vector<std::string>{"Linear", "Sequential", "Sequential", "Linear", "Sequential",
                                            "Sequential", "Sequential"});
    names.clear();
    for (const auto& [n, m] : top->named_modules()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"", "0", "0.0", "0.0.0", "1"});
    names.clear();
    for (const auto& [n, p] : top->named_parameters()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"0.0.0.weight", "0.0.0.bias"});
    names.clear();
    for (const auto& [n, t] : top->state_dict()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"0.0.0.weight", "0.0.0.bias", "1.0.0.weight", "1.0.0.bias"});
    CHECK(top->load_state_dict(top->state_dict()).missing_keys.empty());
}

TEST_CASE("a module shared on exponentially many paths is walked once per module", "[nn][hostile][module-tree]") {
    // Each level holds the next twice: 2^64 paths. torch's named_modules, parameters, apply and
    // train visit each module once (apply through children(), which lists a child once).
    auto bottom = std::make_shared<Leaf>();
    std::shared_ptr<Module> level = bottom;
    for (int i = 0; i < 64; ++i) {
        auto h = std::make_shared<Holder>();
        h->hold("a", level);
        h->hold("b", level);
        level = h;
    }
    CHECK(level->parameters().size() == 1);
    std::string first_name;
    for (int i = 0; i < 64; ++i) first_name += "a.";
    CHECK(level->named_parameters()[0].first == first_name + "w");
    CHECK(level->buffers().size() == 2);
    CHECK(level->modules().size() == 65);
    CHECK(level->named_modules().size() == 65);
    std::size_t calls = 0;
    level->apply([&](Module&) { ++calls; });
    CHECK(calls == 65);
    level->eval();
    CHECK_FALSE(bottom->is_training());
    level->to(kFloat64);
    CHECK(bottom->parameter("w").dtype() == kFloat64);
    CHECK(level->num_parameters() == 2);
    level->zero_grad();
}

TEST_CASE("a chain 100000 levels deep is built from either end and walked by every service",
          "[nn][hostile][module-tree]") {
    auto leaf = std::make_shared<Leaf>();
    auto top = deep_chain(kDeep, leaf);  // built from the bottom: each new parent is fresh
    const std::string prefix = dotted_zeros(kDeep) + ".";

    const auto params = top->named_parameters();
    REQUIRE(params.size() == 1);
    CHECK(params[0].first == prefix + "w");
    CHECK(params[0].second.is_same(leaf->parameter("w")));
    CHECK(top->parameters().size() == 1);
    CHECK(top->num_parameters() == 2);
    const auto bufs = top->named_buffers();
    REQUIRE(bufs.size() == 2);
    CHECK(bufs[0].first == prefix + "b");
    CHECK(bufs[1].first == prefix + "scratch");
    CHECK(top->buffers().size() == 2);
    const auto mods = top->modules();
    REQUIRE(mods.size() == kDeep + 1);
    CHECK(mods.front() == top.get());
    CHECK(mods.back() == leaf.get());
    CHECK(top->children().size() == 1);

    std::vector<const Module*> order;
    top->apply([&](Module& m) { order.push_back(&m); });
    REQUIRE(order.size() == kDeep + 1);
    CHECK(order.front() == leaf.get());  // children first
    CHECK(order.back() == top.get());

    top->eval();
    CHECK_FALSE(leaf->is_training());
    CHECK_FALSE(top->is_training());
    top->train();
    CHECK(leaf->is_training());

    Tensor w = leaf->parameter("w");
    (*leaf)(ones({2})).sum().backward();
    CHECK(w.grad().defined());
    top->zero_grad();
    CHECK_FALSE(w.grad().defined());

    top->to(kFloat64);
    CHECK(leaf->parameter("w").dtype() == kFloat64);
    CHECK(leaf->buffer("b").dtype() == kFloat64);

    auto state = top->state_dict();
    REQUIRE(state.size() == 2);
    CHECK(state[0].first == prefix + "w");
    CHECK(state[1].first == prefix + "b");
    const NamedTensors saved{{state[0].first, tensor({3.0, 4.0}, kFloat64)}, {state[1].first, tensor({5.0, 6.0})}};
    const LoadResult loaded = top->load_state_dict(saved);
    CHECK(loaded.missing_keys.empty());
    CHECK(vals(leaf->parameter("w")) == std::vector<double>{3.0, 4.0});
    CHECK(vals(leaf->buffer("b")) == std::vector<double>{5.0, 6.0});
    CHECK_THROWS_WITH(top->load_state_dict({{state[0].first, tensor({1.0})}}),
                      Catch::Contains("size mismatch") && Catch::Contains("missing"));

    top->set_parameter(prefix + "w", tensor({7.0, 8.0}, kFloat64));
    CHECK(vals(leaf->parameter("w")) == std::vector<double>{7.0, 8.0});
    CHECK_THROWS_WITH(top->set_parameter(prefix + "1.w", tensor({7.0, 8.0}, kFloat64)),
                      Catch::Contains("Leaf: no child module named '1' (in '1.w')"));
    CHECK(vals((*top)(ones({2}, kFloat64))) == std::vector<double>{7.0, 8.0});  // forward through every level
    CHECK_THROWS_WITH(static_cast<Sequential*>(mods[kDeep - 1])->push_back(top),
                      is_cycle("Sequential", "push_back") && Catch::Contains("at '" + dotted_zeros(kDeep - 1) + "'"));

    // built from the top: each new child is fresh
    auto root = std::make_shared<Sequential>();
    Sequential* end = root.get();
    for (std::size_t i = 0; i < kDeep; ++i) {
        auto next = std::make_shared<Sequential>();
        end->push_back(next);
        end = next.get();
    }
    end->push_back(std::make_shared<Leaf>());
    CHECK(root->modules().size() == kDeep + 2);
    CHECK(root->state_dict()[0].first == dotted_zeros(kDeep + 1) + ".w");
    CHECK_THROWS_WITH(end->push_back(root), is_cycle("Sequential", "push_back"));
}

TEST_CASE("named_modules of a deep chain does not recurse", "[nn][hostile][module-tree]") {
    // The names of a chain are quadratic in its depth, so this one runs 5000 levels deep on a
    // 256 KiB stack, which a walk with a frame per level overflows.
    auto top = deep_chain(5000);
    std::vector<std::pair<std::string, const Module*>> named;
    on_small_stack([&] { named = static_cast<const Module&>(*top).named_modules(); });
    REQUIRE(named.size() == 5001);
    CHECK(named[0].first.empty());
    CHECK(named[1].first == "0");
    CHECK(named.back().first == dotted_zeros(5000));
    std::vector<std::pair<std::string, Module*>> mutable_named;
    on_small_stack([&] { mutable_named = top->named_modules(); });
    CHECK(mutable_named.size() == 5001);
    // the other walks on the same small stack
    on_small_stack([&] {
        top->parameters();
        top->state_dict();
        top->apply([](Module&) {});
        top->eval();
        to_string(*top);
        top.reset();  // destruction
    });
    CHECK_FALSE(top);
}

TEST_CASE("a tree prints as torch's to 64 levels deep and no further indented in linear text",
          "[nn][hostile][module-tree]") {
    // torch 1.13: repr(nn.Sequential(nn.Sequential(nn.ReLU())))
    CHECK(to_string(*deep_chain(2)) == "Sequential(\n  (0): Sequential(\n    (0): Leaf()\n  )\n)");
    // The expected text, written out line by line: level d indented 2*min(d, 64).
    const auto expected = [](std::size_t depth) {
        std::string s;
        const auto indent = [](std::size_t d) { return std::string(2 * std::min<std::size_t>(d, 64), ' '); };
        for (std::size_t d = 0; d < depth; ++d) s += (d ? "(0): " : "") + std::string("Sequential(\n") + indent(d + 1);
        s += "(0): Leaf()";
        for (std::size_t d = depth; d-- > 0;) s += "\n" + indent(d) + ")";
        return s;
    };
    CHECK(to_string(*deep_chain(3)) == expected(3));
    CHECK(to_string(*deep_chain(70)) == expected(70));

    auto top = deep_chain(kDeep);
    const std::string text = to_string(*top);
    // every line is at most 128 spaces and "(0): Sequential(": the text is linear in the depth
    CHECK(text.size() < 2 * (kDeep + 1) * (128 + 20));
    CHECK(text.substr(0, 30) == "Sequential(\n  (0): Sequential(");
    CHECK(text.substr(text.size() - 2) == "\n)");
    std::ostringstream os;
    os << *top;
    CHECK(os.str() == text);
    CHECK(fmt::format("{}", top) == text);

    // the rest of torch's repr: extra_repr of several lines, a name with a line break
    struct Lines : Module {
        Lines() : Module("Module") {}
        std::string extra_repr() const override { return "a\n\nb"; }
    };
    // torch 1.13: m.extra_repr = lambda: "a\n\nb"; repr(nn.Sequential(nn.Sequential(m)))
    auto nested = std::make_shared<Sequential>();
    auto mid = std::make_shared<Sequential>();
    mid->add_module("0", std::make_shared<Lines>());
    nested->add_module("0", mid);
    CHECK(to_string(*nested) == "Sequential(\n  (0): Sequential(\n    (0): Module(\n      a\n      \n      b\n    )\n  )\n)");
    // torch 1.13: q = nn.Module(); q.add_module("x\ny", nn.Sequential(nn.ReLU())); repr(nn.Sequential(q))
    auto q = std::make_shared<Holder>();
    q->hold("x\ny", std::make_shared<Sequential>(std::make_shared<ReLU>()));
    auto outer = std::make_shared<Sequential>();
    outer->add_module("0", q);
    CHECK(to_string(*outer) == "Sequential(\n  (0): Holder(\n    (x\n  y): Sequential(\n      (0): ReLU()\n    )\n  )\n)");
}

TEST_CASE("a tree 100000 wide is built and walked in time linear in its size", "[nn][hostile][module-tree]") {
    // A name lookup or a parent list scanned per registration makes these quadratic: minutes.
    auto list = std::make_shared<ModuleList>();
    for (std::size_t i = 0; i < kDeep; ++i) list->append(std::make_shared<Leaf>());
    CHECK(list->at<Leaf>(-1).name() == "Leaf");
    const NamedTensors state = list->state_dict();
    REQUIRE(state.size() == 2 * kDeep);
    CHECK(state.back().first == std::to_string(kDeep - 1) + ".b");
    CHECK(list->load_state_dict(state).missing_keys.empty());
    NamedTensors extra = state;
    for (std::size_t i = 0; i < kDeep; ++i) extra.emplace_back("x" + std::to_string(i), ones({1}));
    CHECK(list->load_state_dict(extra, false).unexpected_keys.size() == kDeep);
    CHECK(list->parameters().size() == kDeep);
    CHECK(to_string(*list).size() < kDeep * 30);

    auto dict = std::make_shared<ModuleDict>();
    for (std::size_t i = 0; i < kDeep; ++i) dict->insert("k" + std::to_string(i), std::make_shared<ReLU>());
    for (std::size_t i = 0; i < kDeep; ++i) dict->insert("k" + std::to_string(kDeep - 1), std::make_shared<ReLU>());
    CHECK(dict->size() == kDeep);
    CHECK(dict->contains("k99999"));
    CHECK_FALSE(dict->contains("k100000"));
    CHECK(dict->pop("k0")->name() == "ReLU");
    CHECK(dict->items().front().first == "k1");
    CHECK((*dict)["k99999"]->name() == "ReLU");
    CHECK_THROWS_WITH(dict->insert("k5", dict), is_cycle("ModuleDict", "insert"));

    struct Wide : Module {
        Wide() : Module("Wide") {
            for (std::size_t i = 0; i < kDeep; ++i) register_parameter("p" + std::to_string(i), ones({1}));
            CHECK_THROWS_WITH(register_buffer("p7", ones({1})), Catch::Contains("'p7' is already registered as a parameter"));
        }
    };
    CHECK(Wide().named_parameters().size() == kDeep);

    // one module under 100000 parents, which then die in either order
    auto shared = std::make_shared<Leaf>();
    std::vector<std::shared_ptr<ModuleList>> owners;
    for (std::size_t i = 0; i < kDeep; ++i) owners.push_back(std::make_shared<ModuleList>(
        std::initializer_list<std::shared_ptr<Module>>{shared}));
    CHECK_THROWS_WITH(owners.back()->append(owners.back()), is_cycle("ModuleList", "append"));
    owners.resize(kDeep / 2);
    std::reverse(owners.begin(), owners.end());
    owners.clear();
    CHECK(shared.use_count() == 1);
}

TEST_CASE("a chain 100000 levels deep is destroyed without recursing", "[nn][hostile][module-tree]") {
    // Each kind of container keeps its own typed handles beside the registered ones.
    SECTION("Sequential") { deep_chain(kDeep).reset(); }
    SECTION("ModuleList") {
        auto top = std::make_shared<ModuleList>();
        for (std::size_t i = 0; i < kDeep; ++i) {
            auto next = std::make_shared<ModuleList>();
            next->append(top);
            top = next;
        }
    }
    SECTION("ModuleDict") {
        auto top = std::make_shared<ModuleDict>();
        for (std::size_t i = 0; i < kDeep; ++i) {
            auto next = std::make_shared<ModuleDict>();
            next->insert("x", top);
            top = next;
        }
    }
    SECTION("a user's layer, dropped by its last outside handle from the bottom") {
        std::vector<std::shared_ptr<Holder>> all;
        all.push_back(std::make_shared<Holder>());
        for (std::size_t i = 0; i < kDeep; ++i) {
            all.push_back(std::make_shared<Holder>());
            all.back()->hold("x", all[all.size() - 2]);
        }
        for (std::size_t i = 0; i < all.size(); ++i) all[i].reset();  // each still held by its parent
        all.clear();
    }
    SECTION("a user's layer that keeps its child in a typed member as well") {
        struct Link : Module {
            explicit Link(std::shared_ptr<Link> inner) : Module("Link") {
                if (inner) next = register_module("next", std::move(inner));
            }
            std::shared_ptr<Link> next;
        };
        auto top = std::make_shared<Link>(nullptr);
        for (std::size_t i = 0; i < kDeep; ++i) top = std::make_shared<Link>(top);
        CHECK(top->modules().size() == kDeep + 1);
    }
    SECTION("a child removed from a deep tree, and one replaced") {
        auto dict = std::make_shared<ModuleDict>();
        dict->insert("chain", deep_chain(kDeep));
        dict->insert("chain", std::make_shared<ReLU>());  // the old chain dies here
        dict->insert("other", deep_chain(kDeep));
        CHECK(dict->pop("other")->modules().size() == kDeep + 1);
        CHECK(dict->modules().size() == 2);
    }
    SUCCEED("destroyed");
}
