// Errors name the call the user made (core/call_context.hpp): a composite op or a module's
// forward checks at entry and names itself, and whatever its inner ops raise comes out
// starting with it; file errors name the file and the member.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/call_context.hpp"
#include "helpers.hpp"
#include "nn/nn.hpp"

using namespace xgrad;
using namespace xgrad::nn;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using xgrad::indexing::Slice;

namespace {

// The message f throws, or "" when it throws nothing.
std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("as_call: the outermost call names the error, once", "[adversarial][call_errors]") {
    CHECK(message_of([] { as_call("outer", [] { throw Error("inner: bad"); }); }) == "outer: inner: bad");
    CHECK(message_of([] { as_call("outer", [] { throw Error("outer: bad"); }); }) == "outer: bad");
    CHECK(message_of([] {
              as_call("outer", [] { as_call("middle", [] { throw Error("inner: bad"); }); });
          }) == "outer: inner: bad");
    // a name that only begins like the call's is no match
    CHECK(message_of([] { as_call("stack", [] { throw Error("stacked: bad"); }); }) == "stack: stacked: bad");
    // the level is left on the way out, so the next call is outermost again
    CHECK(message_of([] { as_call("again", [] { throw Error("inner: bad"); }); }) == "again: inner: bad");
    CHECK(as_call("value", [] { return 7; }) == 7);
}

TEST_CASE("composite ops name themselves: stack, split, chunk, index_put_", "[adversarial][call_errors]") {
    const Tensor a = ones({3, 2}), b = ones({3, 2});
    for (long axis : {3L, -4L, 100L}) {
        CAPTURE(axis);
        const std::string m = message_of([&] { stack({a, b}, axis); });
        CHECK_THAT(m, StartsWith("stack: axis " + std::to_string(axis)) && Contains("(3, 2)") &&
                          Contains("[-3, 2]"));
    }
    CHECK(stack({a, b}, -3).shape() == Shape{2, 3, 2});
    CHECK(stack({a, b}, 2).shape() == Shape{3, 2, 2});
    CHECK_THAT(message_of([&] { split(a, std::vector<long>{1, 1}, 0); }), StartsWith("split: ") && Contains("add up to 2"));
    CHECK_THAT(message_of([&] { split(a, 1, 5); }), StartsWith("split: axis 5"));
    CHECK_THAT(message_of([&] { chunk(a, 2, 5); }), StartsWith("chunk: axis 5"));
    CHECK_THAT(message_of([&] { chunk(a, 0, 0); }), StartsWith("chunk: chunks must be positive"));
    // NaN into int64: refused by the conversion, named as the call the user made
    Tensor ids = zeros({4}, kInt64);
    const std::string m = message_of([&] { ids.index_put_({Slice(0, 2)}, full({}, NAN, kFloat64)); });
    CHECK_THAT(m, StartsWith("index_put_: ") && Contains("nan"));
    const std::string m2 = message_of([&] { ids.index_put_({1}, NAN); });
    CHECK_THAT(m2, StartsWith("index_put_: ") && Contains("nan"));
}

TEST_CASE("constructors that allocate name the module when memory runs out", "[adversarial][call_errors]") {
    // 2^60 weights cannot be counted, 2^40 cannot be allocated (4 TiB)
    CHECK_THAT(message_of([] { Linear(std::size_t(1) << 30, std::size_t(1) << 30); }),
               StartsWith("Linear: ") && Contains("(1073741824, 1073741824)"));
    CHECK_THAT(message_of([] { Linear(std::size_t(1) << 20, std::size_t(1) << 20); }),
               StartsWith("Linear: ") && Contains("out of memory") && Contains("(1048576, 1048576)"));
    CHECK_THAT(message_of([] { Embedding(std::size_t(1) << 20, std::size_t(1) << 20); }),
               StartsWith("Embedding: ") && Contains("(1048576, 1048576)"));
    CHECK_THAT(message_of([] { TransformerEncoder(TransformerOptions(std::size_t(1) << 20, std::size_t(1) << 20, 8, 1, 1)); }),
               StartsWith("TransformerEncoder: "));
}

namespace {

TransformerOptions small_model() { return TransformerOptions(11, 8, 16, 2, 2).dropout(0.0); }

Tensor ids(const Shape& shape) { return zeros(shape, kInt64); }

}  // namespace

TEST_CASE("a Transformer names itself for its ids, its state and its lengths", "[adversarial][call_errors]") {
    TransformerEncoder enc(small_model());
    TransformerDecoder dec(small_model());
    // 1-D, 3-D and float ids
    for (const Tensor& X : {ids({5}), ids({2, 3, 1}), zeros({2, 3})}) {
        CAPTURE(shape_str(X.shape()));
        CHECK_THAT(message_of([&] { enc.forward(X); }),
                   StartsWith("TransformerEncoder: X must be int64 token ids of shape (batch, steps)") &&
                       Contains(shape_str(X.shape())));
        auto state = dec.init_state(enc.forward(ids({2, 4})));
        CHECK_THAT(message_of([&] { dec.forward(X, state); }),
                   StartsWith("TransformerDecoder: X must be int64 token ids") && Contains(shape_str(X.shape())));
    }
    CHECK_THAT(message_of([&] { enc.forward(Tensor()); }), StartsWith("TransformerEncoder: X (the token ids) is an undefined"));
    // lengths of the wrong shape are found deep inside: named as the encoder
    CHECK_THAT(message_of([&] { enc.forward(ids({2, 4}), from_vector(std::vector<std::int64_t>{1, 2, 3}, {3})); }),
               StartsWith("TransformerEncoder: ") && Contains("valid_lens") && Contains("(3,)"));

    // undefined encoder outputs, a batch that differs from the state's, the wrong width
    auto undefined = dec.init_state(Tensor());
    CHECK_THAT(message_of([&] { dec.forward(ids({2, 1}), undefined); }),
               StartsWith("TransformerDecoder: state.enc_outputs is an undefined tensor"));
    auto state = dec.init_state(enc.forward(ids({2, 4})));
    CHECK_THAT(message_of([&] { dec.forward(ids({3, 1}), state); }),
               StartsWith("TransformerDecoder: state.enc_outputs must have shape (3, T_enc, 8)") && Contains("(2, 4, 8)"));
    auto narrow = dec.init_state(zeros({2, 4, 5}));
    CHECK_THAT(message_of([&] { dec.forward(ids({2, 1}), narrow); }),
               StartsWith("TransformerDecoder: state.enc_outputs must have shape (2, T_enc, 8)") && Contains("(2, 4, 5)"));
    // a step, then a state whose cache is of another batch
    dec.eval();
    auto stepped = dec.init_state(enc.forward(ids({2, 4})));
    dec.forward(ids({2, 1}), stepped);
    stepped.enc_outputs = enc.forward(ids({3, 4}));
    CHECK_THAT(message_of([&] { dec.forward(ids({3, 1}), stepped); }),
               StartsWith("TransformerDecoder: state.key_values[0] must have shape (3, steps, 8)") && Contains("(2, 1, 8)"));
    // the state unchanged by the refused step: the same call with the right batch goes on
    stepped.enc_outputs = enc.forward(ids({2, 4}));
    CHECK(dec.forward(ids({2, 1}), stepped).first.shape() == Shape{2, 1, 11});
}

TEST_CASE("every module's forward names the module, whatever op inside refuses", "[adversarial][call_errors]") {
    struct Case {
        const char* module;
        std::function<void()> call;
        const char* says;  // a word of what was expected or what came
    };
    auto linear = std::make_shared<Linear>(4, 3);
    auto embedding = std::make_shared<Embedding>(5, 4);
    auto norm = std::make_shared<LayerNorm>(Shape{4});
    auto dropout = std::make_shared<Dropout>(0.5);
    auto relu = std::make_shared<ReLU>();
    auto pos = std::make_shared<PositionalEncoding>(4, 0.0, 10);
    auto learned = std::make_shared<LearnedPositionalEmbedding>(10, 4, 0.0);
    auto ffn = std::make_shared<PositionWiseFFN>(4, 8, 4);
    auto addnorm = std::make_shared<AddNorm>(Shape{4}, 0.0);
    auto dot = std::make_shared<DotProductAttention>(0.0);
    auto additive = std::make_shared<AdditiveAttention>(4, 4, 6, 0.0);
    auto mha = std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions(4, 2));
    auto encblk = std::make_shared<TransformerEncoderBlock>(TransformerEncoderBlockOptions(4, 8, 2));
    auto decblk = std::make_shared<TransformerDecoderBlock>(TransformerDecoderBlockOptions(4, 8, 2));
    auto seq = std::make_shared<Sequential>();
    seq->push_back(std::make_shared<Linear>(4, 4));
    seq->push_back(std::make_shared<Linear>(5, 4));
    const Tensor x = ones({2, 3, 4}), wide = ones({2, 3, 6});
    const std::vector<Case> cases = {
        {"Linear", [&] { linear->forward(wide); }, "in_features = 4"},
        {"Embedding", [&] { embedding->forward(ids({2}) + 7); }, "[0, 5)"},
        {"LayerNorm", [&] { norm->forward(wide); }, "(2, 3, 6)"},
        {"Dropout", [&] { dropout->forward(ones({2}, kInt64)); }, "int64"},
        {"ReLU", [&] { relu->forward(ones({2}, kBool)); }, "bool"},
        {"PositionalEncoding", [&] { pos->forward(wide); }, "(2, 3, 6)"},
        {"LearnedPositionalEmbedding", [&] { learned->forward(ones({2, 11, 4})); }, "10"},
        {"PositionWiseFFN", [&] { ffn->forward(wide); }, "in_features = 4"},
        {"AddNorm", [&] { addnorm->forward(x, wide); }, "(2, 3, 6)"},
        {"DotProductAttention", [&] { dot->forward(x, wide, wide); }, "(2, 3, 6)"},
        {"AdditiveAttention", [&] { additive->forward(x, wide, wide); }, "(2, 3, 6)"},
        {"MultiHeadAttention", [&] { mha->forward(x, x, x, from_vector(std::vector<std::int64_t>{1, 2, 3}, {3})); },
         "valid_lens"},
        {"TransformerEncoderBlock", [&] { encblk->forward(wide, Tensor()); }, "(2, 3, 6)"},
        {"TransformerDecoderBlock", [&] { decblk->forward(x, wide, Tensor()); }, "(2, 3, 6)"},
        {"Sequential", [&] { seq->forward(x); }, "in_features = 5"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.module);
        const std::string m = message_of(c.call);
        CHECK_THAT(m, StartsWith(std::string(c.module) + ": ") && Contains(c.says));
        // the call operator is the forward
    }
    CHECK_THAT(message_of([&] { (*linear)(wide); }), StartsWith("Linear: "));
}
