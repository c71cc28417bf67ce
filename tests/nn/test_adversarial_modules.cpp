// Modules given hostile construction arguments or inputs: each is an xgrad::Error that names the
// module, never a module that silently computes something else (an infinite eps zeroes a layer
// norm, a dropout of 8 or NaN is no probability, an index past the table reads another row).
#include <limits>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::nn;
using xgrad::test::kInf;
using xgrad::test::kNaN;

TEST_CASE("every module with a dropout refuses a value that is not a probability", "[nn][hostile]") {
    for (double p : {kNaN, kInf, -kInf, -0.1, 1.5, 8.0}) {
        INFO(p);
        CHECK_THROWS_WITH(Dropout(p), Catch::Contains("Dropout") && Catch::Contains("p"));
        CHECK_THROWS_AS(DotProductAttention(p), Error);
        CHECK_THROWS_AS(MultiHeadAttention(4, 4, 4, 4, 2, p), Error);
        CHECK_THROWS_AS(PositionalEncoding(4, p), Error);
        CHECK_THROWS_AS(AddNorm({4}, p), Error);
        CHECK_THROWS_AS(AdditiveAttention(4, 4, 4, p), Error);
        CHECK_THROWS_AS(TransformerEncoderBlock(4, 4, 4, 4, {4}, 4, 8, 2, p), Error);
        CHECK_THROWS_AS(TransformerDecoderBlock(4, 4, 4, 4, {4}, 4, 8, 2, p, 0), Error);
    }
}

TEST_CASE("sizes and epsilons that cannot work are refused at construction", "[nn][hostile]") {
    for (double eps : {kNaN, kInf, -1.0, 0.0}) {
        INFO(eps);
        CHECK_THROWS_WITH(LayerNorm({4}, eps), Catch::StartsWith("LayerNorm: eps must be positive and finite"));
    }
    CHECK_THROWS_AS(LayerNorm(Shape{}), Error);
    CHECK_THROWS_AS(LayerNorm(Shape{3, 0}), Error);
    CHECK_THROWS_AS(MultiHeadAttention(4, 4, 4, 4, 0, 0.0), Error);  // no heads
    CHECK_THROWS_AS(MultiHeadAttention(4, 4, 4, 5, 2, 0.0), Error);  // 5 hiddens over 2 heads
    CHECK_THROWS_AS(MultiHeadAttention(4, 4, 4, 0, 1, 0.0), Error);
    CHECK_THROWS_AS(Linear(0, 3), Error);
    CHECK_THROWS_AS(Embedding(0, 4), Error);
    CHECK_THROWS_AS(Embedding(4, 0), Error);
    CHECK_THROWS_AS(PositionalEncoding(0, 0.0), Error);
    CHECK_THROWS_AS(PositionalEncoding(4, 0.0, 0), Error);
}

TEST_CASE("inputs outside what a module holds are refused, not read past", "[nn][hostile]") {
    Embedding e(5, 3);
    CHECK_THROWS_AS(e.forward(tensor({5.0}, kInt64)), Error);
    CHECK_THROWS_AS(e.forward(tensor({-1.0}, kInt64)), Error);
    CHECK_THROWS_AS(e.forward(tensor({1.5}, kFloat32)), Error);
    PositionalEncoding pe(4, 0.0, 10);
    CHECK_THROWS_AS(pe.forward(ones({1, 11, 4})), Error);                                     // longer than max_len
    CHECK_THROWS_AS(pe.forward(ones({1, 5, 4}), 6), Error);                                   // offset + length
    CHECK_THROWS_AS(pe.forward(ones({1, 5, 4}), std::numeric_limits<std::size_t>::max()), Error);  // wraps
    Linear l(3, 2);
    CHECK_THROWS_AS(l.forward(Tensor()), Error);
    // An empty batch is valid, as in torch: an empty result and zero gradients.
    Tensor x = ones({0, 3}).requires_grad_();
    l.forward(x).sum().backward();
    for (float g : l.weight().grad().to_vector<float>()) CHECK(g == 0);
}

TEST_CASE("a positional table whose size wraps around is refused before it is filled", "[nn][hostile]") {
    // 2^40 · 2^40 wraps to 0: the table was sized small and written far past its end.
    CHECK_THROWS_WITH(PositionalEncoding(std::size_t{1} << 40, 0.0, std::size_t{1} << 40),
                      Catch::StartsWith("PositionalEncoding: shape (1, 1099511627776, 1099511627776)"));
    CHECK_THROWS_WITH(PositionalEncoding(std::size_t{1} << 32, 0.0, (std::size_t{1} << 32) + 1),
                      Catch::StartsWith("PositionalEncoding: "));
}
