// PositionWiseFFN, AddNorm and the Transformer encoder and decoder blocks.
#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

TEST_CASE("PositionWiseFFN and AddNorm keep d2l's shapes", "[transformer]") {
    // d2l: PositionWiseFFN(4, 4, 8)(torch.ones((2, 3, 4))).shape == (2, 3, 8)
    PositionWiseFFN ffn(4, 4, 8);
    ffn.eval();
    const Tensor y = ffn(ones({2, 3, 4}));
    CHECK(y.shape() == Shape{2, 3, 8});
    // the same MLP at every position: equal inputs give equal rows
    const auto v = vals(y);
    for (std::size_t k = 0; k < 8; ++k) CHECK(v[k] == v[5 * 8 + k]);
    // d2l: AddNorm([3, 4], 0.5)(torch.ones((2, 3, 4)), torch.ones((2, 3, 4))).shape
    AddNorm add_norm({3, 4}, 0.5);
    add_norm.eval();
    CHECK(add_norm.forward(ones({2, 3, 4}), ones({2, 3, 4})).shape() == Shape{2, 3, 4});
}

TEST_CASE("AddNorm is layer norm of the residual sum", "[transformer]") {
    AddNorm add_norm({4}, 0.0);
    const Tensor X = tensor({{1., 0., 2., 0.}}), Y = tensor({{0., 2., 1., 4.}});
    // ln([1, 2, 3, 4]) with weight 1, bias 0: torch.nn.LayerNorm(4)
    CHECK_THAT(
        vals(add_norm.forward(X, Y)),
        approx({-1.341635419968927, -0.4472118066563091, 0.4472118066563089, 1.3416354199689269}, 1e-5));
    CHECK_THROWS_WITH(add_norm.forward(ones({2, 4}), ones({1, 4})),
                      Catch::Contains("AddNorm") && Catch::Contains("(2, 4)") && Catch::Contains("(1, 4)"));
}

TEST_CASE("TransformerEncoderBlock keeps the shape of its input (d2l's check)", "[transformer]") {
    // d2l: EncoderBlock(24, 24, 24, 24, [100, 24], 24, 48, 8, 0.5) on ones((2, 100, 24)), valid_lens [3, 2]
    TransformerEncoderBlock block(24, 24, 24, 24, {100, 24}, 48, 8, 0.5);
    block.eval();
    const Tensor X = ones({2, 100, 24});
    CHECK(block.forward(X, lens({3, 2})).shape() == Shape{2, 100, 24});
    CHECK(block.attention()->attention_weights().shape() == Shape{2, 8, 100, 100});
}

TEST_CASE("TransformerEncoderBlock passes gradcheck for input and every parameter",
          "[transformer][gradcheck]") {
    const bool bias = GENERATE(false, true);
    TransformerEncoderBlock block(4, 4, 4, 4, {4}, 6, 2, 0.0, bias);
    block.to(kFloat64);
    const Tensor X = param({2, 3, 4}, -1, 1, 4);
    for (const Tensor& l : {Tensor(), lens({2, 3}), lens2({1, 2, 3, 3, 1, 2}, 2)})
        REQUIRE_MODULE_GRADCHECK(
            block, {X}, [&](auto& x) { return block.forward(x[0], l); }, "TransformerEncoderBlock");
}

TEST_CASE("TransformerDecoderBlock keeps the shape of its input (d2l's check)", "[transformer]") {
    TransformerEncoderBlock encoder(24, 24, 24, 24, {100, 24}, 48, 8, 0.5);
    TransformerDecoderBlock decoder(24, 24, 24, 24, {100, 24}, 48, 8, 0.5);
    encoder.eval();
    decoder.eval();
    const Tensor X = ones({2, 100, 24});
    const Tensor valid_lens = lens({3, 2});
    const Tensor enc_outputs = encoder.forward(X, valid_lens);
    CHECK(decoder.forward(X, enc_outputs, valid_lens).shape() == Shape{2, 100, 24});
    CHECK(to_string(decoder).find("(attention2): MultiHeadAttention(") != std::string::npos);
}

TEST_CASE("TransformerDecoderBlock self-attention is causal in train and eval mode", "[transformer]") {
    TransformerDecoderBlock block(8, 8, 8, 8, {8}, 16, 2, 0.0);
    block.to(kFloat64);
    const Tensor enc = param({2, 5, 8}, -1, 1, 2).detach();
    const Tensor X = param({2, 4, 8}, -1, 1, 3).detach();
    const auto full_train = vals(block.forward(X, enc, lens({5, 3})));
    block.eval();
    CHECK(vals(block.forward(X, enc, lens({5, 3}))) == full_train);
    // Changing the last step leaves the outputs of the earlier steps alone.
    const Tensor X2 = concat({slice(X, 1, 0, 3), param({2, 1, 8}, -1, 1, 7).detach()}, 1);
    const auto changed = vals(block.forward(X2, enc, lens({5, 3})));
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t k = 0; k < 3 * 8; ++k)
            CHECK(changed[b * 32 + k] == Approx(full_train[b * 32 + k]).epsilon(1e-12));
    block.forward(X, enc, lens({5, 3}));
    const Tensor w = block.self_attention()->attention_weights();
    REQUIRE(w.shape() == Shape{2, 2, 4, 4});
    const auto wv = vals(w);
    for (std::size_t row = 0; row < 2 * 2; ++row)
        for (std::size_t i = 0; i < 4; ++i)
            for (std::size_t j = i + 1; j < 4; ++j) CHECK(wv[(row * 4 + i) * 4 + j] == 0.0);
}

TEST_CASE("TransformerDecoderBlock decoding step by step with a cache equals the whole sequence",
          "[transformer]") {
    TransformerDecoderBlock block(8, 8, 8, 8, {8}, 16, 2, 0.3);
    block.to(kFloat64);
    block.eval();
    const Tensor enc = param({2, 5, 8}, -1, 1, 2).detach();
    const Tensor X = param({2, 4, 8}, -1, 1, 3).detach();
    const Tensor enc_lens = lens({5, 2});
    const auto whole = vals(block.forward(X, enc, enc_lens));
    Tensor cache;
    std::vector<Tensor> steps;
    for (long t = 0; t < 4; ++t) steps.push_back(block.forward(slice(X, 1, t, t + 1), enc, enc_lens, cache));
    CHECK(cache.shape() == Shape{2, 4, 8});
    CHECK_THAT(vals(concat(steps, 1)), approx(whole, 1e-12));
    // Several steps at once after a cached prefix work too.
    Tensor cache2;
    const Tensor first = block.forward(slice(X, 1, 0, 1), enc, enc_lens, cache2);
    const Tensor rest = block.forward(slice(X, 1, 1, 4), enc, enc_lens, cache2);
    CHECK_THAT(vals(concat({first, rest}, 1)), approx(whole, 1e-12));
}

TEST_CASE("TransformerDecoderBlock passes gradcheck for its inputs and parameters",
          "[transformer][gradcheck]") {
    TransformerDecoderBlock block(4, 4, 4, 4, {4}, 6, 2, 0.0, true);
    block.to(kFloat64);
    const Tensor X = param({2, 3, 4}, -1, 1, 4), enc = param({2, 2, 4}, -1, 1, 5);
    REQUIRE_MODULE_GRADCHECK(
        block, (std::vector<Tensor>{X, enc}),
        [&](auto& x) {
            return block.forward(x[0], x[1], lens({2, 1}));
        },
        "TransformerDecoderBlock");
}

TEST_CASE("bad input: transformer blocks whose sizes do not fit together", "[transformer][bad]") {
    CHECK_THROWS_WITH(TransformerEncoderBlock(8, 8, 6, 8, {8}, 16, 2, 0.0),
                      Catch::Contains("TransformerEncoderBlock") && Catch::Contains("num_hiddens = 8"));
    CHECK_THROWS_WITH(TransformerDecoderBlock(8, 8, 8, 8, {8}, 16, 3, 0.0),
                      Catch::Contains("MultiHeadAttention") && Catch::Contains("num_heads (3)"));
    TransformerDecoderBlock block(8, 8, 8, 8, {8}, 16, 2, 0.0);
    Tensor cache = zeros({3, 2, 8});
    CHECK_THROWS_WITH(block.forward(ones({2, 1, 8}), ones({2, 5, 8}), Tensor(), cache),
                      Catch::Contains("TransformerDecoderBlock: cache") && Catch::Contains("(3, 2, 8)"));
    CHECK_THROWS_WITH(
        block.forward(ones({2, 1, 8}), ones({2, 5, 8}), lens({1, 2, 3})),
        Catch::Contains("MultiHeadAttention: valid_lens must have shape (2,) or (2, 1), got (3,)"));
}
