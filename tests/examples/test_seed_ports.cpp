// Seeds 003 and 004 ported from PyTorch (examples/scaled_dot_product_attention.hpp and
// examples/mha_d_model.hpp): their semantics, gradients in double, and torch's printed tree.
#include <cmath>
#include <limits>

#include "helpers.hpp"
#include "mha_d_model.hpp"
#include "nn/nn_helpers.hpp"
#include "scaled_dot_product_attention.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

// torch 1.13: repr(MultiHeadAttention(embed_dim=8, num_heads=2, head_dim=4)) of seed 003
const char* const kSeed003Tree = R"(MultiHeadAttention(
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

}  // namespace

TEST_CASE("seed 003 scaled_dot_product_attention is softmax of scaled scores times values", "[seeds]") {
    using examples::seed003::scaled_dot_product_attention;
    const Tensor q = param({2, 3, 4}, -1, 1, 1), k = param({2, 5, 4}, -1, 1, 2), v = param({2, 5, 6}, -1, 1, 3);
    const Tensor expected = bmm(softmax(bmm(q, k.transpose(1, 2)) / 2.0, -1), v);
    CHECK_THAT(vals(scaled_dot_product_attention(q, k, v)), approx(vals(expected), 1e-12));

    // mask == 0 → no weight: the output only depends on the keys left in
    Tensor mask = ones({2, 3, 5}, kFloat64);
    for (std::size_t j = 3; j < 5; ++j) mask.data_ptr<double>()[j] = 0.0;  // batch 0, query 0: keys 0-2
    const Tensor masked = scaled_dot_product_attention(q, k, v, Tensor(), Tensor(), mask);
    const Tensor only_3 = scaled_dot_product_attention(slice(slice(q, 0, 0, 1), 1, 0, 1),
                                                       slice(slice(k, 0, 0, 1), 1, 0, 3),
                                                       slice(slice(v, 0, 0, 1), 1, 0, 3));
    CHECK_THAT(vals(slice(slice(masked, 0, 0, 1), 1, 0, 1)), approx(vals(only_3), 1e-12));
    CHECK_THAT(vals(slice(masked, 0, 1, 2)), approx(vals(slice(expected, 0, 1, 2)), 1e-12));

    // query_mask and key_mask: their outer product is the mask (and replaces one passed with them)
    const Tensor qm = tensor({{1., 1., 0.}, {1., 1., 1.}}, kFloat64), km = tensor({{1., 1., 1., 0., 0.}, {1., 1., 1., 1., 1.}}, kFloat64);
    const Tensor outer = bmm(qm.unsqueeze(-1), km.unsqueeze(1));
    const auto by_masks = vals(scaled_dot_product_attention(q, k, v, qm, km, ones({2, 3, 5}, kFloat64)));
    const auto by_outer = vals(scaled_dot_product_attention(q, k, v, Tensor(), Tensor(), outer));
    // A query with nothing to attend to (query_mask 0) gives NaN, as torch's softmax of -inf.
    for (std::size_t i = 0; i < by_masks.size(); ++i) {
        const bool padded_query = i / 6 == 2;  // batch 0, query 2: 6 values
        CHECK(std::isnan(by_masks[i]) == padded_query);
        CHECK(std::isnan(by_outer[i]) == padded_query);
        if (!padded_query) CHECK(by_masks[i] == Approx(by_outer[i]).epsilon(1e-12));
    }
}

TEST_CASE("seed 003 attention passes gradcheck with and without masks", "[seeds][gradcheck]") {
    using examples::seed003::scaled_dot_product_attention;
    const Tensor q = param({2, 3, 4}, -1, 1, 1), k = param({2, 5, 4}, -1, 1, 2), v = param({2, 5, 6}, -1, 1, 3);
    // Every query keeps a key: a fully masked row would be NaN, and its 0·NaN would reach the
    // gradient of every value, as in torch.
    const Tensor qm = ones({2, 3}, kFloat64);
    const Tensor km = tensor({{1., 1., 1., 0., 0.}, {1., 0., 1., 1., 1.}}, kFloat64);
    REQUIRE_GRADCHECK([](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }, {q, k, v},
                      "scaled_dot_product_attention");
    REQUIRE_GRADCHECK([&](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], qm, km); }, {q, k, v},
                      "scaled_dot_product_attention with masks");

    examples::seed003::MultiHeadAttention mha(8, 2, 4);
    mha.to(kFloat64);
    const Tensor x = param({2, 3, 8}, -1, 1, 4);
    REQUIRE_MODULE_GRADCHECK(mha, {x}, [&](auto& in) { return mha(in[0], in[0], in[0]); }, "seed 003 MHA");
}

TEST_CASE("seed 003 MultiHeadAttention prints torch's tree and names its parameters as torch", "[seeds]") {
    examples::seed003::MultiHeadAttention mha(8, 2, 4);
    CHECK(to_string(mha) == kSeed003Tree);
    const auto named = mha.named_parameters();
    REQUIRE(named.size() == 14);
    CHECK(named[0].first == "heads.0.q.weight");
    CHECK(named[7].first == "heads.1.q.bias");
    CHECK(named[13].first == "output_linear.bias");
    // the notebook's model and shapes
    examples::seed003::MultiHeadAttention big(768, 12, 64);
    CHECK(big.heads->size() == 12);
    CHECK(big(rand({2, 4, 768}), rand({2, 4, 768}), rand({2, 4, 768})).shape() == Shape{2, 4, 768});
    // the heads are what the output concatenates: head h's output is columns h·4:(h+1)·4
    mha.to(kFloat64);
    const Tensor x = param({1, 3, 8}, -1, 1, 5);
    const Tensor head1 = mha.heads->at<examples::seed003::AttentionHead>(1)(x, x, x);
    const Tensor y = mha(x, x, x);
    const Tensor by_hand =
        (*mha.output_linear)(concat({mha.heads->at<examples::seed003::AttentionHead>(0)(x, x, x), head1}, -1));
    CHECK_THAT(vals(y), approx(vals(by_hand), 1e-12));
}

TEST_CASE("seed 004 MultiHeadAttention equals nn::MultiHeadAttention with the same weights", "[seeds]") {
    examples::seed004::MultiHeadAttention seed(16, 4);
    nn::MultiHeadAttention library(nn::MultiHeadAttentionOptions(16, 4).bias(true));
    seed.to(kFloat64);
    library.to(kFloat64);
    NamedTensors state;
    for (const auto& [from, to] : {std::pair{"w_q", "W_q"}, {"w_k", "W_k"}, {"w_v", "W_v"}, {"w_out", "W_o"}})
        for (const char* p : {".weight", ".bias"})
            for (const auto& [n, t] : seed.state_dict())
                if (n == std::string(from) + p) state.emplace_back(std::string(to) + p, t);
    library.load_state_dict(state);
    const Tensor q = param({2, 5, 16}, -1, 1, 1), k = param({2, 5, 16}, -1, 1, 2), v = param({2, 5, 16}, -1, 1, 3);
    const Tensor y = seed(q, k, v);
    CHECK(y.shape() == Shape{2, 5, 16});
    CHECK_THAT(vals(y), approx(vals(library(q, k, v)), 1e-12));
    // 4-D attention in the middle: (batch, heads, seq, dim_head)
    const Tensor heads = param({2, 4, 5, 4}, -1, 1, 6);
    CHECK(seed.scaled_dot_product_attention(heads, heads, heads).shape() == Shape{2, 4, 5, 4});
    CHECK(seed.w_q->bias().defined());
}

TEST_CASE("seed 004 MultiHeadAttention passes gradcheck and refuses d_model not divisible", "[seeds][gradcheck]") {
    examples::seed004::MultiHeadAttention mha(8, 2);
    mha.to(kFloat64);
    const Tensor q = param({2, 3, 8}, -1, 1, 1), kv = param({2, 4, 8}, -1, 1, 2);
    REQUIRE_MODULE_GRADCHECK(mha, (std::vector<Tensor>{q, kv}), [&](auto& x) { return mha(x[0], x[1], x[1]); },
                             "seed 004 MHA");
    CHECK_THROWS_AS(examples::seed004::MultiHeadAttention(10, 4), Error);
    CHECK_THROWS_WITH(examples::seed004::MultiHeadAttention(10, 4),
                      Catch::Contains("d_model must be divisible by num_heads") && Catch::Contains("10") &&
                          Catch::Contains("4"));
    CHECK_THROWS_WITH(examples::seed004::MultiHeadAttention(10, 0), Catch::Contains("divisible"));
    CHECK_THROWS_WITH(mha(ones({2, 3, 6}, kFloat64), kv, kv), Catch::Contains("(batch_size, seq_len, 8)"));
}
