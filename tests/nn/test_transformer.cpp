// PositionWiseFFN, AddNorm, the Transformer encoder and decoder blocks, and d2l's
// TransformerEncoder and TransformerDecoder.
#include <algorithm>
#include <type_traits>

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

TEST_CASE("AddNorm runs the fused add_layer_norm after dropout of Y only", "[transformer]") {
    for (Dtype d : {kFloat32, kFloat64})
        for (double p : {0.0, 0.5})
            for (bool training : {true, false}) {
                INFO(dtype_name(d) << " p=" << p << " training=" << training);
                AddNorm add_norm({6}, p);
                add_norm.to(d);
                add_norm.train(training);
                Generator gen(3);
                Tensor X = randn({2, 3, 6}, TensorOptions(d).requires_grad(true), gen);
                Tensor Y = randn({2, 3, 6}, TensorOptions(d).requires_grad(true), gen);
                const Tensor up = randn({2, 3, 6}, TensorOptions(d), gen);
                manual_seed(11);
                const Tensor Z = add_norm(X, Y);
                CHECK(Z.op_name() == "add_layer_norm");
                (Z * up).sum().backward();
                // The unfused reference: the same dropout mask (same seed), then + and the norm.
                const auto params = add_norm.named_parameters();
                REQUIRE(params.size() == 2);
                CHECK(params[0].first == "ln.weight");
                CHECK(params[1].first == "ln.bias");
                Tensor X2 = X.detach().requires_grad_(), Y2 = Y.detach().requires_grad_();
                Tensor w2 = params[0].second.detach().requires_grad_(), b2 = params[1].second.detach().requires_grad_();
                Dropout drop(p);
                drop.train(training);
                manual_seed(11);
                const Tensor Z2 = layer_norm(drop(Y2) + X2, {6}, w2, b2, 1e-5);
                (Z2 * up).sum().backward();
                CHECK(vals(Z) == vals(Z2));
                CHECK(vals(X.grad()) == vals(X2.grad()));
                CHECK(vals(Y.grad()) == vals(Y2.grad()));
                CHECK(vals(params[0].second.grad()) == vals(w2.grad()));
                CHECK(vals(params[1].second.grad()) == vals(b2.grad()));
                // Dropout in training zeroes some of Y's gradient and none of X's.
                const auto gy = vals(Y.grad());
                const bool some_dropped = std::count(gy.begin(), gy.end(), 0.0) > 0;
                CHECK(some_dropped == (training && p > 0));
            }
}


// d2l's positional argument lists compile; an argument of the wrong kind in any place does not.
using Enc = TransformerEncoderBlock;
using Dec = TransformerDecoderBlock;
static_assert(std::is_constructible_v<Enc, int, int, int, int, Shape, int, int, int, double>);
static_assert(std::is_constructible_v<Enc, int, int, int, int, Shape, int, int, int, double, bool>);
// the old 8-argument form without ffn_num_input: the dropout lands on num_heads
static_assert(!std::is_constructible_v<Enc, int, int, int, int, Shape, int, int, double>);
static_assert(!std::is_constructible_v<Enc, int, int, int, int, Shape, int, int, double, bool>);
// a float for use_bias, a float for a size, a bool for a size
static_assert(!std::is_constructible_v<Enc, int, int, int, int, Shape, int, int, int, double, double>);
static_assert(!std::is_constructible_v<Enc, int, int, int, double, Shape, int, int, int, double>);
static_assert(!std::is_constructible_v<Enc, int, int, int, int, Shape, int, int, bool, double>);
static_assert(!std::is_constructible_v<Enc, int, int, int, int, Shape, int, int, int, double, int>);
static_assert(std::is_constructible_v<Dec, int, int, int, int, Shape, int, int, int, double, int>);
static_assert(!std::is_constructible_v<Dec, int, int, int, int, Shape, int, int, int, double, bool>);
static_assert(!std::is_constructible_v<Dec, int, int, int, int, Shape, int, int, int, double, double>);
static_assert(!std::is_constructible_v<Dec, int, int, int, int, Shape, int, int, double>);
static_assert(std::is_constructible_v<MultiHeadAttention, int, int, int, int, int, double, bool>);
static_assert(!std::is_constructible_v<MultiHeadAttention, int, int, int, int, int, double, double>);
static_assert(!std::is_constructible_v<MultiHeadAttention, int, int, int, int, double, double>);
static_assert(!std::is_constructible_v<MultiHeadAttention, int, int, int, int, int, double, int>);
static_assert(!std::is_constructible_v<Linear, double, int>);
static_assert(!std::is_constructible_v<Linear, int, int, double>);
static_assert(!std::is_constructible_v<Linear, int, int, int>);
static_assert(!std::is_constructible_v<Embedding, int, double>);
static_assert(!std::is_constructible_v<PositionalEncoding, double, double>);
static_assert(!std::is_constructible_v<PositionWiseFFN, int, double, int>);
static_assert(!std::is_constructible_v<AdditiveAttention, int, int, double, double>);
static_assert(!std::is_constructible_v<LayerNorm, Shape, double, double>);
static_assert(!std::is_constructible_v<TransformerEncoder, int, int, int, int, int, Shape, int, int, int, int, double, double>);
static_assert(!std::is_constructible_v<TransformerDecoder, int, int, int, int, int, Shape, int, int, double, int, double>);
// the options' setters refuse the same
template <class O, class T, class = void>
struct can_set_heads : std::false_type {};
template <class O, class T>
struct can_set_heads<O, T, std::void_t<decltype(std::declval<O&>().num_heads(std::declval<T>()))>> : std::true_type {};
static_assert(can_set_heads<MultiHeadAttentionOptions, int>::value);
static_assert(!can_set_heads<MultiHeadAttentionOptions, double>::value);
static_assert(!can_set_heads<TransformerEncoderBlockOptions, double>::value);

TEST_CASE("TransformerEncoderBlock takes d2l's arguments and keeps the shape of its input", "[transformer]") {
    // d2l: X = torch.ones((2, 100, 24)); valid_lens = torch.tensor([3, 2])
    //      encoder_blk = EncoderBlock(24, 24, 24, 24, [100, 24], 24, 48, 8, 0.5); encoder_blk.eval()
    //      encoder_blk(X, valid_lens).shape == (2, 100, 24)
    TransformerEncoderBlock block(24, 24, 24, 24, {100, 24}, 24, 48, 8, 0.5);
    block.eval();
    CHECK(block(ones({2, 100, 24}), lens({3, 2})).shape() == Shape{2, 100, 24});
    // what each argument sized: 8 heads, a 24 → 48 → 24 FFN, dropout 0.5, LayerNorm over (100, 24), no biases
    CHECK(block.attention()->num_heads() == 8);
    const auto named = block.named_parameters();
    auto shape_of = [&](const std::string& n) {
        for (const auto& [k, t] : named)
            if (k == n) return t.shape();
        FAIL("no parameter " << n);
        return Shape{};
    };
    CHECK(shape_of("ffn.dense1.weight") == Shape{48, 24});
    CHECK(shape_of("ffn.dense2.weight") == Shape{24, 48});
    CHECK(shape_of("addnorm1.ln.weight") == Shape{100, 24});
    CHECK(!block.attention()->W_q()->bias().defined());
    CHECK_THAT(to_string(block), Catch::Contains("Dropout(p=0.5, inplace=False)"));
    // use_bias, the tenth argument
    TransformerEncoderBlock biased(24, 24, 24, 24, {24}, 24, 48, 8, 0.5, true);
    CHECK(biased.attention()->W_q()->bias().defined());
}

TEST_CASE("Block options build the same block as d2l's positional arguments", "[transformer]") {
    Generator g1(3), g2(3);
    TransformerEncoderBlock positional(8, 8, 8, 8, {8}, 8, 16, 2, 0.25, true, g1);
    TransformerEncoderBlock options(TransformerEncoderBlockOptions(8, 16, 2).dropout(0.25).use_bias(true), g2);
    CHECK(to_string(positional) == to_string(options));
    const auto a = positional.state_dict(), b = options.state_dict();
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
        CHECK(a[k].first == b[k].first);
        CHECK(vals(a[k].second) == vals(b[k].second));
    }
    Generator g3(4), g4(4);
    TransformerDecoderBlock dpos(8, 8, 8, 8, {8}, 8, 16, 2, 0.0, 3, g3);
    TransformerDecoderBlock dopt(TransformerDecoderBlockOptions(8, 16, 2).i(3), g4);
    CHECK(dpos.i() == 3);
    CHECK(dopt.i() == 3);
    CHECK(vals(dpos.state_dict()[0].second) == vals(dopt.state_dict()[0].second));
    // options read back what was set
    const auto o = TransformerEncoderBlockOptions(8, 16, 2).key_size(8).norm_shape({5, 8}).dropout(0.1);
    CHECK(o.key_size() == 8);
    CHECK(o.norm_shape() == Shape{5, 8});
    CHECK(o.dropout() == 0.1);
    CHECK(!o.use_bias());
}

TEST_CASE("TransformerEncoderBlock passes gradcheck for input and every parameter",
          "[transformer][gradcheck]") {
    const bool bias = GENERATE(false, true);
    TransformerEncoderBlock block(4, 4, 4, 4, {4}, 4, 6, 2, 0.0, bias);
    block.to(kFloat64);
    const Tensor X = param({2, 3, 4}, -1, 1, 4);
    for (const Tensor& l : {Tensor(), lens({2, 3}), lens2({1, 2, 3, 3, 1, 2}, 2)})
        REQUIRE_MODULE_GRADCHECK(
            block, {X}, [&](auto& x) { return block(x[0], l); }, "TransformerEncoderBlock");
}

TEST_CASE("TransformerDecoderBlock takes d2l's arguments and state (d2l's check)", "[transformer]") {
    // d2l: decoder_blk = DecoderBlock(24, 24, 24, 24, [100, 24], 24, 48, 8, 0.5, 0); decoder_blk.eval()
    //      state = [encoder_blk(X, valid_lens), valid_lens, [None]]; decoder_blk(X, state)[0].shape
    TransformerEncoderBlock encoder(24, 24, 24, 24, {100, 24}, 24, 48, 8, 0.5);
    TransformerDecoderBlock decoder(24, 24, 24, 24, {100, 24}, 24, 48, 8, 0.5, 0);
    encoder.eval();
    decoder.eval();
    const Tensor X = ones({2, 100, 24}), valid_lens = lens({3, 2});
    TransformerDecoderState state{encoder(X, valid_lens), valid_lens, {Tensor()}};
    auto [Y, new_state] = decoder(X, state);
    CHECK(Y.shape() == Shape{2, 100, 24});
    // d2l's state[2][0] = key_values, in place and in the returned state
    CHECK(state.key_values[0].shape() == Shape{2, 100, 24});
    CHECK(new_state.key_values[0].is_same(state.key_values[0]));
    CHECK(decoder(X, state.enc_outputs, valid_lens).shape() == Shape{2, 100, 24});
}

TEST_CASE("TransformerDecoderBlock masks its self-attention as d2l: causal in training only", "[transformer]") {
    TransformerDecoderBlock block(8, 8, 8, 8, {8}, 8, 16, 2, 0.0, 0);
    block.to(kFloat64);
    const Tensor X = param({2, 5, 8}, -1, 1, 7), enc = param({2, 3, 8}, -1, 1, 8);
    Tensor X2 = X.detach().clone();  // detach alone shares X's storage, as torch's
    X2.data_ptr<double>()[4 * 8] += 1.0;  // batch 0, step 4 changes
    auto first_steps = [](const Tensor& y) { return vals(slice(y, 1, 0, 4)); };
    // training (dropout 0): step 4 is in no earlier step's past
    CHECK(first_steps(block(X, enc, lens({3, 2}))) == first_steps(block(X2, enc, lens({3, 2}))));
    // eval: a whole sequence with no dec_valid_lens attends to every key (d2l's eval mode)
    block.eval();
    CHECK(first_steps(block(X, enc, lens({3, 2}))) != first_steps(block(X2, enc, lens({3, 2}))));
    CHECK(vals(block(X, enc, lens({3, 2}))) == vals(block(X, enc, lens({3, 2}), AttentionMask())));
    // eval with the causal mask asked for: as in training
    const auto causal = vals(block(X, enc, lens({3, 2}), AttentionMask::causal()));
    block.train();
    CHECK(causal == vals(block(X, enc, lens({3, 2}))));
}

TEST_CASE("TransformerDecoderBlock decoding step by step with the state equals the causal whole sequence",
          "[transformer]") {
    TransformerDecoderBlock block(8, 8, 8, 8, {8}, 8, 16, 2, 0.3, 1);
    block.to(kFloat64);
    block.eval();
    const Tensor X = param({2, 4, 8}, -1, 1, 9), enc = param({2, 3, 8}, -1, 1, 10);
    const Tensor enc_lens = lens({3, 1});
    const auto whole = vals(block(X, enc, enc_lens, AttentionMask::causal()));
    TransformerDecoderState state{enc, enc_lens, {Tensor(), Tensor()}};  // block i = 1 uses slot 1
    std::vector<Tensor> steps;
    for (long t = 0; t < 4; ++t) steps.push_back(block(slice(X, 1, t, t + 1), state).first);
    CHECK(!state.key_values[0].defined());
    CHECK(state.key_values[1].shape() == Shape{2, 4, 8});
    CHECK_THAT(vals(concat(steps, 1)), approx(whole, 1e-9));
    // several steps at once after a cached prefix, with the causal mask aligned to the end
    // (step t0 + i sees t0 + i keys), as training mode does
    TransformerDecoderState s2{enc, enc_lens, {Tensor(), Tensor()}};
    const Tensor first = block(slice(X, 1, 0, 1), s2).first;
    const Tensor rest = block(slice(X, 1, 1, 4), s2, AttentionMask::causal()).first;
    CHECK_THAT(vals(concat({first, rest}, 1)), approx(whole, 1e-9));
}

TEST_CASE("TransformerDecoderBlock passes gradcheck for its inputs and parameters",
          "[transformer][gradcheck]") {
    TransformerDecoderBlock block(TransformerDecoderBlockOptions(4, 6, 2).use_bias(true));
    block.to(kFloat64);
    const Tensor X = param({2, 3, 4}, -1, 1, 4), enc = param({2, 2, 4}, -1, 1, 5);
    REQUIRE_MODULE_GRADCHECK(
        block, (std::vector<Tensor>{X, enc}), [&](auto& x) { return block(x[0], x[1], lens({2, 1})); },
        "TransformerDecoderBlock");
    block.eval();
    REQUIRE_MODULE_GRADCHECK(
        block, (std::vector<Tensor>{X, enc}),
        [&](auto& x) {
            TransformerDecoderState state{x[1], lens({2, 1}), {Tensor()}};
            const Tensor first = block(slice(x[0], 1, 0, 1), state).first;
            return concat({first, block(slice(x[0], 1, 1, 3), state).first}, 1);
        },
        "TransformerDecoderBlock with state");
}

TEST_CASE("Transformer blocks refuse sizes that cannot work, naming them", "[transformer]") {
    CHECK_THROWS_WITH(TransformerEncoderBlock(8, 8, 6, 8, {8}, 8, 16, 2, 0.0),
                      Catch::Contains("TransformerEncoderBlock") && Catch::Contains("num_hiddens = 8") &&
                          Catch::Contains("value_size"));
    CHECK_THROWS_WITH(TransformerEncoderBlock(8, 8, 8, 8, {8}, 24, 16, 2, 0.0),
                      Catch::Contains("ffn_num_input") && Catch::Contains("24"));
    CHECK_THROWS_WITH(TransformerEncoderBlock(8, 8, 8, 8, {8, 5}, 8, 16, 2, 0.0),
                      Catch::Contains("norm_shape") && Catch::Contains("(8, 5)"));
    CHECK_THROWS_WITH(TransformerDecoderBlock(8, 8, 8, 8, {8}, 8, 16, 3, 0.0, 0),
                      Catch::Contains("divisible"));
    CHECK_THROWS_WITH(TransformerEncoderBlock(8, 8, 8, 8, {8}, 8, 16, -2, 0.0),
                      Catch::Contains("num_heads must be a non-negative integer, got -2"));
    CHECK_THROWS_WITH(TransformerDecoderBlock(8, 8, 8, 8, {8}, 8, 16, 2, 0.0, -1),
                      Catch::Contains("i must be a non-negative integer, got -1"));
    CHECK_THROWS_WITH(MultiHeadAttention(8, 8, 8, 8, 2, 0.0, false).forward(ones({1, 2, 8}), ones({1, 2, 8}),
                                                                            ones({1, 2, 8}), lens({3, 1})),
                      Catch::Contains("MultiHeadAttention"));
    TransformerDecoderBlock block(8, 8, 8, 8, {8}, 8, 16, 2, 0.0, 2);
    TransformerDecoderState short_state{ones({2, 5, 8}), Tensor(), {Tensor()}};
    CHECK_THROWS_WITH(block(ones({2, 1, 8}), short_state),
                      Catch::Contains("block i = 2") && Catch::Contains("1 block(s)"));
    TransformerDecoderState bad{ones({2, 5, 8}), Tensor(), {Tensor(), Tensor(), zeros({3, 2, 8})}};
    CHECK_THROWS_WITH(block(ones({2, 1, 8}), bad),
                      Catch::Contains("key_values[2]") && Catch::Contains("(3, 2, 8)"));
    CHECK(bad.key_values[2].shape() == Shape{3, 2, 8});  // a refused step leaves the state alone
    CHECK_THROWS_WITH(block(ones({2, 1, 8}), ones({2, 5, 8}), lens({1, 2, 3})),
                      Catch::Contains("MultiHeadAttention"));
}

TEST_CASE("MultiHeadAttention key query and value sizes size the projections as in d2l", "[transformer]") {
    // d2l: MultiHeadAttention(key_size=3, query_size=5, value_size=7, num_hiddens=8, num_heads=2, 0)
    MultiHeadAttention mha(3, 5, 7, 8, 2, 0.0);
    CHECK(mha.W_q()->weight().shape() == Shape{8, 5});
    CHECK(mha.W_k()->weight().shape() == Shape{8, 3});
    CHECK(mha.W_v()->weight().shape() == Shape{8, 7});
    CHECK(mha(ones({2, 4, 5}), ones({2, 6, 3}), ones({2, 6, 7})).shape() == Shape{2, 4, 8});
    CHECK_THROWS_WITH(mha(ones({2, 4, 5}), ones({2, 6, 5}), ones({2, 6, 7})), Catch::Contains("key_size"));
    MultiHeadAttention from_options(MultiHeadAttentionOptions(8, 2).key_size(3).query_size(5).value_size(7));
    CHECK(to_string(from_options) == to_string(mha));
    CHECK(MultiHeadAttention(MultiHeadAttentionOptions(8, 2)).W_k()->weight().shape() == Shape{8, 8});
    CHECK(MultiHeadAttention(MultiHeadAttentionOptions(8, 2).bias(true)).W_o()->bias().defined());
    CHECK_THROWS_WITH(MultiHeadAttention(0, 8, 8, 8, 2, 0.0), Catch::Contains("key_size must be positive"));
}

TEST_CASE("MultiHeadAttention attention weights: d2l's shape from the inner attention", "[transformer]") {
    MultiHeadAttention mha(8, 8, 8, 8, 2, 0.0);
    mha.to(kFloat64);
    mha(param({3, 4, 8}, -1, 1, 1), param({3, 5, 8}, -1, 1, 2), param({3, 5, 8}, -1, 1, 3), lens({1, 5, 2}));
    // d2l: mha.attention.attention_weights, (batch·num_heads, Tq, Tk)
    const Tensor d2l = mha.attention()->attention_weights();
    CHECK(d2l.shape() == Shape{6, 4, 5});
    const Tensor four_d = mha.attention_weights_copy();
    CHECK(four_d.shape() == Shape{3, 2, 4, 5});
    CHECK(vals(four_d) == vals(d2l));  // the same weights, row b·H + h is [b, h]
    // batch row 0 has 1 valid key: both its heads put all weight on key 0
    CHECK(vals(slice(slice(d2l, 0, 0, 2), 2, 1, 5)) == std::vector<double>(2 * 4 * 4, 0.0));
}

TEST_CASE("TransformerEncoder is d2l's: scaled embedding, positions, blocks, weights per block", "[transformer]") {
    // d2l: TransformerEncoder(200, 24, 24, 24, 24, [100, 24], 24, 48, 8, 2, 0.5); eval
    //      encoder(torch.ones((2, 100), dtype=torch.long), valid_lens).shape == (2, 100, 24)
    manual_seed(0);
    TransformerEncoder encoder(200, 24, 24, 24, 24, {100, 24}, 24, 48, 8, 2, 0.5);
    encoder.eval();
    const Tensor ids = full({2, 100}, 1.0, kInt64);
    CHECK(encoder(ids, lens({3, 2})).shape() == Shape{2, 100, 24});
    const auto weights = encoder.attention_weights();
    REQUIRE(weights.size() == 2);
    for (const auto& w : weights) CHECK(w.shape() == Shape{16, 100, 100});
    // d2l's parameter names
    const auto named = encoder.named_parameters();
    CHECK(named[0].first == "embedding.weight");
    CHECK(named[1].first == "blks.block0.attention.W_q.weight");
    CHECK(named.back().first == "blks.block1.addnorm2.ln.bias");
    CHECK_THAT(to_string(encoder), Catch::StartsWith("TransformerEncoder(\n  (embedding): Embedding(200, 24)\n"
                                                     "  (pos_encoding): PositionalEncoding(\n") &&
                                       Catch::Contains("  (blks): Sequential(\n    (block0): TransformerEncoderBlock("));

    // forward is the composition d2l writes, √num_hiddens included
    TransformerEncoder small(TransformerOptions(7, 4, 6, 2, 2));
    small.eval();
    const Tensor x = from_vector(std::vector<std::int64_t>{1, 3, 5, 0, 6, 2}, {2, 3});
    Tensor H = PositionalEncoding(4, 0.0)(small.named_modules()[1].second->as<Embedding>()->forward(x) * 2.0);
    for (std::size_t i = 0; i < 2; ++i) H = small.block(i)(H, lens({2, 3}));
    CHECK(vals(small(x, lens({2, 3}))) == vals(H));
    // learned positions and no scaling (seq_train's choice)
    TransformerEncoder learned(TransformerOptions(7, 4, 6, 2, 1).positions(Positions::learned).max_len(3)
                                   .scale_embeddings(false));
    CHECK(learned.named_parameters()[1].first == "pos_encoding.embedding.weight");
    CHECK_THROWS_WITH(learned(full({1, 4}, 1.0, kInt64)), Catch::Contains("LearnedPositionalEmbedding"));
    CHECK_THROWS_WITH(TransformerEncoder(TransformerOptions(7, 4, 6, 2, 0)), Catch::Contains("num_layers"));
}

TEST_CASE("TransformerDecoder threads d2l's state: step by step equals the whole sequence", "[transformer]") {
    manual_seed(1);
    TransformerEncoder encoder(TransformerOptions(9, 8, 16, 2, 2));
    TransformerDecoder decoder(9, 8, 8, 8, 8, {8}, 8, 16, 2, 2, 0.0);
    encoder.eval();
    decoder.eval();
    const Tensor src = from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
    const Tensor src_lens = lens({4, 2});
    const Tensor tgt = from_vector(std::vector<std::int64_t>{0, 3, 2, 8, 0, 1, 1, 5, 0, 7}, {2, 5});
    TransformerDecoderState state = decoder.init_state(encoder(src, src_lens), src_lens);
    CHECK(state.key_values.size() == 2);
    auto whole_state = state;
    const Tensor whole = decoder(tgt, whole_state, AttentionMask::causal()).first;
    CHECK(whole.shape() == Shape{2, 5, 9});
    std::vector<Tensor> steps;
    for (long t = 0; t < 5; ++t) {
        auto [logits, next] = decoder(slice(tgt, 1, t, t + 1), state);
        CHECK(next.key_values[1].shape() == Shape{2, std::size_t(t + 1), 8});
        steps.push_back(logits);
    }
    // positions continue across steps (d2l's predict would give every step position 0)
    CHECK_THAT(vals(concat(steps, 1)), approx(vals(whole), 1e-5));
    const auto weights = decoder.attention_weights();
    REQUIRE(weights.size() == 2);
    CHECK(weights[0][1].shape() == Shape{4, 1, 5});  // last step's self-attention: 5 keys
    CHECK(weights[1][0].shape() == Shape{4, 1, 4});  // cross-attention over 4 source steps
    CHECK(decoder.named_parameters().back().first == "dense.bias");
    CHECK(decoder.block(1).i() == 1);
    TransformerDecoderState wrong{state.enc_outputs, src_lens, {Tensor()}};
    CHECK_THROWS_WITH(decoder(tgt, wrong), Catch::Contains("init_state"));
}

TEST_CASE("TransformerEncoder and TransformerDecoder pass gradcheck for every parameter",
          "[transformer][gradcheck]") {
    TransformerEncoder encoder(TransformerOptions(5, 4, 6, 2, 1).use_bias(true));
    TransformerDecoder decoder(TransformerOptions(5, 4, 6, 2, 1));
    encoder.to(kFloat64);
    decoder.to(kFloat64);
    const Tensor ids = from_vector(std::vector<std::int64_t>{1, 2, 4, 0, 3, 1}, {2, 3});
    REQUIRE_MODULE_GRADCHECK(encoder, {}, [&](auto&) { return encoder(ids, lens({3, 2})); }, "TransformerEncoder");
    const Tensor enc = param({2, 3, 4}, -1, 1, 6);
    REQUIRE_MODULE_GRADCHECK(
        decoder, {enc},
        [&](auto& x) {
            auto state = decoder.init_state(x[0], lens({3, 2}));
            return decoder(ids, state).first;
        },
        "TransformerDecoder");
}
