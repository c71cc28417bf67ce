// Every module is twice differentiable: gradgradcheck (torch.autograd.gradgradcheck's
// semantics) with respect to its inputs and all its parameters, in float64. A module is a
// composition of ops, so this holds when every op's gradient formula is differentiable; these
// tests say so for the compositions users run.
#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

TEST_CASE("Linear, ReLU, Sequential, LayerNorm, Embedding: second derivatives", "[gradgrad][modules]") {
    Linear lin(3, 2);
    lin.to(kFloat64);
    // tanh after the layer: a linear map's second derivative is zero and would check nothing.
    REQUIRE_MODULE_GRADGRADCHECK(lin, {param({4, 3})}, [&](auto& x) { return tanh(lin(x[0])); }, "Linear");
    Linear no_bias(3, 2, false);
    no_bias.to(kFloat64);
    REQUIRE_MODULE_GRADGRADCHECK(no_bias, {param({2, 2, 3})}, [&](auto& x) { return no_bias(x[0]).pow(2.0); },
                                 "Linear without bias");

    Sequential mlp(std::make_shared<Linear>(3, 4), std::make_shared<ReLU>(), std::make_shared<Linear>(4, 2));
    mlp.to(kFloat64);
    // Inputs away from relu's kink at 0 for every hidden unit: checked by the first order too.
    REQUIRE_MODULE_GRADGRADCHECK(mlp, {param({2, 3}, -1, 1, 3)}, [&](auto& in) { return sigmoid(mlp(in[0])); },
                                 "Sequential");

    LayerNorm ln({4});
    ln.to(kFloat64);
    for (const auto& [name, p] : ln.named_parameters()) ln.set_parameter(name, param(p.shape(), 0.5, 1.5, 9));
    REQUIRE_MODULE_GRADGRADCHECK(ln, {param({2, 4}, -2, 2)}, [&](auto& x) { return ln(x[0]); }, "LayerNorm");

    Embedding emb(4, 3);
    emb.to(kFloat64);
    const Tensor ids = from_vector(std::vector<std::int64_t>{1, 3, 1, 0}, {4});
    REQUIRE_MODULE_GRADGRADCHECK(emb, {}, [&](auto&) { return emb(ids).pow(2.0); }, "Embedding");
}

TEST_CASE("Dropout in eval mode and with p = 0 is twice differentiable", "[gradgrad][modules]") {
    Dropout drop(0.5);
    drop.eval();
    REQUIRE_MODULE_GRADGRADCHECK(drop, {param({3, 2})}, [&](auto& x) { return drop(x[0]).pow(3.0); }, "Dropout eval");
    Dropout none(0.0);
    REQUIRE_MODULE_GRADGRADCHECK(none, {param({3, 2})}, [&](auto& x) { return none(x[0]).pow(3.0); }, "Dropout p=0");
}

TEST_CASE("the attention modules: second derivatives", "[gradgrad][modules][attention]") {
    DotProductAttention dot(0.0);
    const std::vector<Tensor> qkv = {param({2, 3, 4}), param({2, 4, 4}, -1, 1, 2), param({2, 4, 2}, -1, 1, 3)};
    for (const Tensor& l : {Tensor(), lens({2, 4}), lens2({1, 2, 3, 4, 4, 1}, 2)})
        REQUIRE_MODULE_GRADGRADCHECK(dot, qkv, [&](auto& x) { return dot(x[0], x[1], x[2], l); },
                                     "DotProductAttention");

    AdditiveAttention additive(3, 2, 4, 0.0);
    additive.to(kFloat64);
    const std::vector<Tensor> qkv2 = {param({2, 2, 2}), param({2, 3, 3}, -1, 1, 2), param({2, 3, 2}, -1, 1, 3)};
    for (const Tensor& l : {Tensor(), lens({1, 3})})
        REQUIRE_MODULE_GRADGRADCHECK(additive, qkv2, [&](auto& x) { return additive(x[0], x[1], x[2], l); },
                                     "AdditiveAttention");

    MultiHeadAttention mha(4, 4, 4, 4, 2, 0.0);
    mha.to(kFloat64);
    const std::vector<Tensor> qkv3 = {param({2, 2, 4}), param({2, 3, 4}, -1, 1, 2), param({2, 3, 4}, -1, 1, 3)};
    for (const Tensor& l : {Tensor(), lens({3, 1})})
        REQUIRE_MODULE_GRADGRADCHECK(mha, qkv3, [&](auto& x) { return mha(x[0], x[1], x[2], l); },
                                     "MultiHeadAttention");
}

TEST_CASE("positional encodings and the Transformer blocks: second derivatives", "[gradgrad][modules][transformer]") {
    PositionalEncoding pe(4, 0.0, 10);
    REQUIRE_MODULE_GRADGRADCHECK(pe, {param({2, 3, 4})}, [&](auto& x) { return pe(x[0]).pow(2.0); },
                                 "PositionalEncoding");
    LearnedPositionalEmbedding pos(10, 4, 0.0);
    pos.to(kFloat64);
    REQUIRE_MODULE_GRADGRADCHECK(pos, {param({2, 3, 4})}, [&](auto& x) { return pos.forward(x[0], 1).pow(2.0); },
                                 "LearnedPositionalEmbedding");

    PositionWiseFFN ffn(4, 5, 4);
    ffn.to(kFloat64);
    REQUIRE_MODULE_GRADGRADCHECK(ffn, {param({2, 3, 4}, -1, 1, 5)}, [&](auto& x) { return tanh(ffn(x[0])); },
                                 "PositionWiseFFN");
    AddNorm add_norm({4}, 0.0);
    add_norm.to(kFloat64);
    REQUIRE_MODULE_GRADGRADCHECK(add_norm, {param({2, 3, 4}), param({2, 3, 4}, -1, 1, 7)},
                                 [&](auto& x) { return add_norm(x[0], x[1]); }, "AddNorm");

    TransformerEncoderBlock encoder(4, 4, 4, 4, {4}, 4, 6, 2, 0.0, true);
    encoder.to(kFloat64);
    REQUIRE_MODULE_GRADGRADCHECK(encoder, {param({2, 3, 4}, -1, 1, 4)},
                                 [&](auto& x) { return encoder(x[0], lens({2, 3})); }, "TransformerEncoderBlock");

    TransformerDecoderBlock decoder(TransformerDecoderBlockOptions(4, 6, 2).use_bias(true));
    decoder.to(kFloat64);
    REQUIRE_MODULE_GRADGRADCHECK(decoder, {param({2, 3, 4}, -1, 1, 4), param({2, 2, 4}, -1, 1, 5)},
                                 [&](auto& x) { return decoder(x[0], x[1], lens({2, 1})); }, "TransformerDecoderBlock");
}

TEST_CASE("the whole Transformer encoder and its loss: second derivatives", "[gradgrad][modules][transformer]") {
    TransformerEncoder encoder(TransformerOptions(5, 4, 6, 2, 1).use_bias(true));
    encoder.to(kFloat64);
    const Tensor ids = from_vector(std::vector<std::int64_t>{1, 2, 4, 0, 3, 1}, {2, 3});
    const Tensor targets = from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 2, 0}, {2, 3});
    REQUIRE_MODULE_GRADGRADCHECK(
        encoder, {},
        [&](auto&) {
            const Tensor h = encoder(ids, lens({3, 2}));                          // (2, 3, 4)
            return cross_entropy(h.reshape({-1, 4}), targets.reshape({-1}));     // classes = the 4 features
        },
        "TransformerEncoder with cross_entropy");
    const Tensor pred = param({2, 3, 5}, -2, 2);
    const Tensor label = from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 4, 0}, {2, 3});
    REQUIRE_GRADGRADCHECK([&](auto& v) { return masked_softmax_ce_loss(v[0], label, lens({3, 1})); }, {pred},
                          "masked_softmax_ce_loss");
}
