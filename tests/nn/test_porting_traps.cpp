// The small traps of a port from torch: sizes from size() into shape arguments, LayerNorm(128),
// containers through make_shared, load_state_dict's unexpected_keys in torch's order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/creation.hpp"
#include "core/ops.hpp"
#include "nn/nn.hpp"

using namespace xgrad;
using namespace xgrad::indexing;
using Catch::Matchers::Contains;

TEST_CASE("Sizes from size() go into reshape, view, narrow, select, expand and zeros as torch's",
          "[porting-traps]") {
    const Tensor x = arange(24).reshape({2, 3, 4});
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    const int n_head = 2;
    // q.view(B, T, n_head, C // n_head).transpose(1, 2)
    const Tensor q = x.view(B, T, n_head, C / n_head).transpose(1, 2);
    REQUIRE(q.shape() == Shape{2, 2, 3, 2});
    REQUIRE(x.reshape({-1, x.size(-1)}).shape() == Shape{6, 4});
    REQUIRE(x.view({B * T, C}).shape() == Shape{6, 4});
    REQUIRE(x.reshape(-1).shape() == Shape{24});
    REQUIRE(x.permute(0, 2, 1).shape() == Shape{2, 4, 3});
    REQUIRE(x.index({Slice(), Slice(0, x.size(1) - 1)}).shape() == Shape{2, 2, 4});
    REQUIRE(x.sum({x.dim() - 1}).shape() == Shape{2, 3});
    REQUIRE(zeros({B, T, n_head}).shape() == Shape{2, 3, 2});
    REQUIRE(full({B, 1L}, 2.0).shape() == Shape{2, 1});
    // narrow(dim, start, length) and select(dim, index), negative counting from the end.
    REQUIRE(x.narrow(2, 1, 2).to_vector<float>() ==
            std::vector<float>{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22});
    REQUIRE(x.narrow(-1, -2, 2).to_vector<float>() == x.narrow(2, 2, 2).to_vector<float>());
    REQUIRE(x.select(1, -1).to_vector<float>() == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});
    REQUIRE(x.select(0, 1).shape() == Shape{3, 4});
    REQUIRE_THROWS_WITH(x.narrow(2, 3, 2), Contains("narrow: start 3 and length 2 do not lie within axis 2 of size 4"));
    REQUIRE_THROWS_WITH(x.select(1, 3), Contains("select: index 3 is out of range for axis 1 of size 3"));
    // expand's -1 keeps the size, as torch's.
    REQUIRE(x.index({Slice(), Slice(), Slice(0, 1)}).expand({-1, -1, 5}).shape() == Shape{2, 3, 5});
    REQUIRE(x.expand({2, B, T, C}).shape() == Shape{2, 2, 3, 4});
    // A size that went below zero, or a negative size, is refused naming the call.
    const Tensor e = zeros({0});
    const std::size_t unsigned_size = e.shape()[0];
    REQUIRE_THROWS_WITH(e.reshape({unsigned_size - 1}), Contains("reshape: entry 0") && Contains("above 2^63 - 1"));
    REQUIRE_THROWS_WITH(e.reshape({e.size(0) - 2}), Contains("reshape"));  // -2, as torch refuses it
    REQUIRE_THROWS_WITH(zeros({2, -1}), Contains("zeros: sizes must be non-negative, got [2, -1]"));
    REQUIRE_THROWS_WITH(randn({-3}), Contains("randn: sizes must be non-negative"));
    REQUIRE_THROWS_WITH(x.expand({-1, 3, 4, 4}), Contains("expand: sizes must be non-negative"));
}

TEST_CASE("size(), dim() and numel() are int64 as LibTorch's: they mix with signed counts", "[porting-traps]") {
    const Tensor logits = zeros({2, 5});
    static_assert(std::is_same_v<decltype(logits.size(-1)), std::int64_t>);
    static_assert(std::is_same_v<decltype(logits.dim()), std::int64_t>);
    static_assert(std::is_same_v<decltype(logits.numel()), std::int64_t>);
    // nanoGPT's generate: v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
    const std::int64_t top_k = 200;
    REQUIRE(std::min(top_k, logits.size(-1)) == 5);
    // A size that goes below zero stays negative instead of wrapping to 2^64 - 1.
    REQUIRE(logits.size(0) - 3 == -1);
    int rows = 0;
    for (int i = 0; i < logits.size(0); ++i) ++rows;
    REQUIRE(rows == 2);
    REQUIRE(logits.numel() == 10);
}

TEST_CASE("Shape reads and builds as torch.Size: shape()[-1], Shape{B, T} from size()", "[porting-traps]") {
    const Tensor x = zeros({2, 3, 4});
    // X.shape[-1], X.shape[1], X.shape[-3]
    REQUIRE(x.shape()[-1] == 4);
    REQUIRE(x.shape()[1] == 3);
    REQUIRE(x.shape()[-3] == 2);
    const long last = -1;
    REQUIRE(x.shape()[last] == 4);
    Shape s = x.shape();
    s[-1] = 8;  // a write through a negative index lands on the last size too
    REQUIRE(s == Shape{2, 3, 8});
    // A signed index past either end throws instead of reading past the vector.
    REQUIRE_THROWS_WITH(x.shape()[-4], Contains("Shape: index -4 is out of range for a shape of 3 sizes (2, 3, 4)"));
    REQUIRE_THROWS_WITH(x.shape()[3], Contains("Shape: index 3 is out of range"));
    REQUIRE_THROWS_WITH(Shape{}[-1], Contains("Shape: index -1 is out of range for a shape of 0 sizes ()"));
    // Entries of any integer type, as size() gives them, with no narrowing error.
    const auto B = x.size(0), T = x.size(1);
    const std::size_t C = 4;
    const int h = 2;
    REQUIRE(Shape{B, T, C, h} == Shape{2, 3, 4, 2});
    REQUIRE(zeros(Shape{B, T}).shape() == Shape{2, 3});
    REQUIRE_THROWS_WITH((Shape{B, -1}), Contains("Shape: entry 1 is -1; a size must be non-negative"));
    // It stays a std::vector<std::size_t>: vectors of sizes convert both ways.
    const std::vector<std::size_t> v = x.shape();
    REQUIRE(Shape(v) == x.shape());
    REQUIRE(Shape(v.begin(), v.end() - 1) == Shape{2, 3});
    REQUIRE(Shape(2) == Shape{0, 0});
    REQUIRE(Shape(2, 7) == Shape{7, 7});
}

TEST_CASE("nn::LayerNorm(128) as torch's, and non-positive sizes refused", "[porting-traps]") {
    nn::LayerNorm a(128);
    REQUIRE(a.normalized_shape() == Shape{128});
    REQUIRE(a.weight().shape() == Shape{128});
    const std::size_t d = 16;
    const long t = 3;
    nn::LayerNorm b({t, d});
    REQUIRE(b.normalized_shape() == Shape{3, 16});
    auto c = std::make_shared<nn::LayerNorm>(d);
    REQUIRE(c->normalized_shape() == Shape{16});
    auto e = std::make_shared<nn::LayerNorm>(Shape{2, 3}, 1e-6, false);
    REQUIRE(e->normalized_shape() == Shape{2, 3});
    for (long bad : {0L, -1L})
        REQUIRE_THROWS_WITH(nn::LayerNorm(bad), Contains("LayerNorm: normalized_shape must be non-empty with positive sizes, got (" + std::to_string(bad) + ")"));
    REQUIRE_THROWS_WITH(nn::LayerNorm(IntList{}), Contains("must be non-empty"));
    REQUIRE_THROWS_WITH(nn::LayerNorm({4, 0}), Contains("got (4, 0)"));
}

TEST_CASE("Containers built from lists go through make_shared and register_module", "[porting-traps]") {
    struct Net : nn::Module {
        Net() : nn::Module("Net") {
            auto a = std::make_shared<nn::Linear>(2, 3), b = std::make_shared<nn::Linear>(3, 1);
            h = register_module("h", std::make_shared<nn::ModuleList>(nn::ModuleList::Items{a, b}));
            d = register_module("d", std::make_shared<nn::ModuleDict>(nn::ModuleDict::Items{
                                         {"wte", std::make_shared<nn::Embedding>(5, 2)}, {"ln_f", std::make_shared<nn::LayerNorm>(2)}}));
        }
        std::shared_ptr<nn::ModuleList> h;
        std::shared_ptr<nn::ModuleDict> d;
    };
    Net net;
    REQUIRE(net.h->size() == 2);
    REQUIRE(net.d->size() == 2);
    std::vector<std::string> names;
    for (const auto& [name, p] : net.named_parameters()) names.push_back(name);
    REQUIRE(names == std::vector<std::string>{"h.0.weight", "h.0.bias", "h.1.weight", "h.1.bias", "d.wte.weight",
                                              "d.ln_f.weight", "d.ln_f.bias"});
    // The braced forms stay.
    nn::ModuleDict braced{{"a", std::make_shared<nn::ReLU>()}};
    REQUIRE(braced.contains("a"));
    // A null module in the list is refused as push_back refuses it.
    REQUIRE_THROWS(std::make_shared<nn::ModuleList>(nn::ModuleList::Items{nullptr}));
}

TEST_CASE("load_state_dict(strict=false) lists unexpected_keys in torch's order", "[porting-traps]") {
    // torch 1.13: nn.Sequential(OrderedDict(a=Linear(2, 2), b=Sequential(Linear(2, 2), LayerNorm(2))))
    // loading the state below with strict=False gives
    //   missing    ['a.weight', 'a.bias', 'b.0.bias', 'b.1.weight', 'b.1.bias']
    //   unexpected ['zz', 'aa', 'a.extra', 'b.extra', 'b.0.q', 'b.1.extra']
    // (torch drops 'b' and 'b.0.bias.x' without a word; here they are listed with the module
    // whose name they carry).
    auto inner = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::LayerNorm>(2));
    nn::Sequential m;
    m.push_back("a", std::make_shared<nn::Linear>(2, 2));
    m.push_back("b", inner);
    NamedTensors state;
    for (const char* k : {"zz", "b.1.extra", "a.extra", "b.0.weight", "b.extra", "aa", "b.0.q"})
        state.emplace_back(k, std::string(k) == "b.0.weight" ? zeros({2, 2}) : zeros({1}));
    auto [missing, unexpected] = m.load_state_dict(state, false);
    REQUIRE(missing == std::vector<std::string>{"a.weight", "a.bias", "b.0.bias", "b.1.weight", "b.1.bias"});
    REQUIRE(unexpected == std::vector<std::string>{"zz", "aa", "a.extra", "b.extra", "b.0.q", "b.1.extra"});
    state.emplace_back("b.0.bias.x", zeros({1}));
    state.emplace_back("b", zeros({1}));
    auto [missing2, unexpected2] = m.load_state_dict(state, false);
    REQUIRE(unexpected2 ==
            std::vector<std::string>{"zz", "aa", "b", "a.extra", "b.extra", "b.0.q", "b.0.bias.x", "b.1.extra"});
}
