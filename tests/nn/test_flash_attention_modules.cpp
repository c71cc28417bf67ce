// DotProductAttention and MultiHeadAttention choosing the fused flash_attention: long heads run
// it by default and keep no weights (reading them says how to keep them), need_weights(true)
// materialises them, the two paths agree, and the fused dropout follows manual_seed.
#include <cmath>

#include "core/flash_attention.hpp"
#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

namespace {

// Self-attention on 600 positions: 600·600 is past the fused path's threshold.
constexpr std::size_t kLong = 600;

}  // namespace

TEST_CASE("MultiHeadAttention runs long heads fused and keeps no weights unless asked", "[flash]") {
    manual_seed(3);
    MultiHeadAttention mha(MultiHeadAttentionOptions(16, 2));
    mha.eval();
    CHECK(mha.attention()->uses_fused(kLong, kLong, 8));
    CHECK_FALSE(mha.attention()->uses_fused(10, 10, 8));
    const Tensor x = uniform({2, kLong, 16}, -1, 1);
    const Tensor lens = from_vector(std::vector<std::int64_t>{600, 250}, {2});
    const Tensor fused = mha(x, x, x, lens);
    CHECK_THROWS_WITH(mha.attention()->attention_weights(),
                      Catch::Contains("DotProductAttention::attention_weights: the last forward kept no weights (it ran "
                                      "the fused attention on heads of 600 queries × 600 keys); call need_weights(true)"));
    CHECK_THROWS_WITH(mha.attention_weights_copy(), Catch::Contains("need_weights(true)"));
    mha.need_weights(true);
    CHECK_FALSE(mha.attention()->uses_fused(kLong, kLong, 8));
    const Tensor materialised = mha(x, x, x, lens);
    CHECK(max_abs_diff(fused, materialised) < 1e-5);
    CHECK(mha.attention_weights_copy().shape() == Shape{2, 2, kLong, kLong});
    // causal too
    mha.need_weights(std::nullopt);
    const Tensor fused_causal = mha(x, x, x, AttentionMask::causal());
    mha.need_weights(true);
    CHECK(max_abs_diff(fused_causal, mha(x, x, x, AttentionMask::causal())) < 1e-5);
}

TEST_CASE("need_weights(false) keeps no weights on short heads either, and says how to keep them", "[flash]") {
    DotProductAttention attention(0.0);
    attention.need_weights(false);
    const Tensor q = uniform({2, 3, 4}, -1, 1), k = uniform({2, 5, 4}, -1, 1), v = uniform({2, 5, 2}, -1, 1);
    attention(q, k, v);
    CHECK_THROWS_WITH(attention.attention_weights(), Catch::Contains("need_weights(false) was set") &&
                                                         Catch::Contains("call need_weights(true)"));
    attention.need_weights(std::nullopt);
    attention(q, k, v);
    CHECK(attention.attention_weights().shape() == Shape{2, 3, 5});
}

TEST_CASE("need_attention_weights sets every attention layer of a model", "[flash]") {
    TransformerEncoderBlock block(TransformerEncoderBlockOptions(16, 32, 2));
    need_attention_weights(block, false);
    CHECK(block.attention()->attention()->need_weights() == std::optional<bool>(false));
    need_attention_weights(block, true);
    CHECK(block.attention()->attention()->need_weights() == std::optional<bool>(true));
}

TEST_CASE("the fused path's dropout follows manual_seed and trains", "[flash]") {
    MultiHeadAttention mha(MultiHeadAttentionOptions(16, 2).dropout(0.3));
    const Tensor x = uniform({1, kLong, 16}, -1, 1);
    manual_seed(11);
    const Tensor a = mha(x, x, x);
    manual_seed(11);
    const Tensor b = mha(x, x, x);
    CHECK(max_abs_diff(a, b) == 0.0);
    const Tensor c = mha(x, x, x);  // the generator moved on: another mask
    CHECK(max_abs_diff(a, c) > 0.0);
    mha.eval();
    CHECK(max_abs_diff(mha(x, x, x), mha(x, x, x)) == 0.0);
    mha.train();
    a.sum().backward();
    CHECK(mha.W_q()->weight().grad().defined());
}
