// Errors name the call the user made (core/call_context.hpp): a composite op or a module's
// forward checks at entry and names itself, and whatever its inner ops raise comes out
// starting with it; file errors name the file and the member.
#include <algorithm>
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
#if defined(__SANITIZE_ADDRESS__)
    WARN("the 4 TiB cases are skipped under AddressSanitizer, which aborts on such allocations");
    return;
#endif
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

namespace {

// A call the user makes, the name its error must start with, and words of the argument, of
// what was expected and of what came.
struct CallCase {
    const char* call;
    std::function<void()> run;
    std::vector<std::string> says;
};

void check_names(const std::vector<CallCase>& cases) {
    for (const CallCase& c : cases) {
        CAPTURE(c.call);
        const std::string m = message_of(c.run);
        CAPTURE(m);
        CHECK_THAT(m, StartsWith(std::string(c.call) + ": "));
        for (const std::string& word : c.says) CHECK_THAT(m, Contains(word));
    }
}

constexpr std::size_t kHuge = std::size_t(1) << 20;  // 2^20 × 2^20 floats: 4 TiB, never there

}  // namespace

TEST_CASE("composite ops name themselves, whatever the ops inside them refuse", "[adversarial][call_errors]") {
    const Tensor u, x = ones({2, 3}), scores = ones({2, 3, 4}), lens = full({2}, 2.0, kInt64);
    const Tensor labels = zeros({2, 3}, kInt64);
    std::vector<CallCase> cases = {
        // masked_softmax without a mask is softmax inside
        {"masked_softmax", [&] { masked_softmax(zeros({2, 3}, kInt64), AttentionMask()); }, {"int64", "floating"}},
        {"masked_softmax", [&] { masked_softmax(full({}, 1.0), AttentionMask()); }, {"axis -1", "rank 0"}},
        {"masked_softmax", [&] { masked_softmax(u, AttentionMask()); }, {"X is an undefined tensor"}},
        {"masked_softmax", [&] { masked_softmax(u, lens); }, {"X is an undefined tensor"}},
        {"masked_softmax", [&] { masked_softmax(scores, ones({5}, kInt64)); }, {"valid_lens", "(2,)", "(5,)"}},
        {"masked_softmax", [&] { masked_softmax(ones({2, 3, 4}, kInt64), lens); }, {"int64", "floating"}},
        // argmin is min's indices
        {"argmin", [&] { argmin(x, 5); }, {"axis 5", "(2, 3)"}},
        {"argmin", [&] { argmin(zeros({0}), 0); }, {"length 0"}},
        // d2l's functions
        {"sequence_mask", [&] { nn::sequence_mask(zeros({2, 3}, kInt64), lens, 1e300); }, {"1e+300", "int64"}},
        {"sequence_mask", [&] { nn::sequence_mask(u, lens); }, {"X is an undefined tensor"}},
        {"masked_softmax_ce_loss", [&] { masked_softmax_ce_loss(ones({2, 3, 4}, kInt64), labels, lens); },
         {"int64", "floating"}},
        {"masked_softmax_ce_loss", [&] { masked_softmax_ce_loss(scores, full({2, 3}, 9.0, kInt64), lens); },
         {"target 9", "4 classes"}},
        {"masked_softmax_ce_loss", [&] { masked_softmax_ce_loss(scores, zeros({2, 3}), lens); }, {"int64", "float32"}},
        {"masked_softmax_ce_loss", [&] { masked_softmax_ce_loss(scores, labels, full({2}, NAN)); }, {"valid_len", "nan"}},
        {"masked_softmax_ce_loss", [&] { MaskedSoftmaxCELoss()(scores, labels, ones({2}, kBool)); }, {"valid_len", "bool"}},
        // creation and conversion made of other ops
        {"tensor", [] { tensor({NAN, 1.0}, kInt64); }, {"nan", "int64"}},
        {"tensor", [] { tensor(1e30, kInt64); }, {"1e+30", "int64"}},
        {"to", [] { full({2}, NAN).to(kInt64); }, {"nan", "int64"}},
        {"zeros_like", [&] { zeros_like(u); }, {"undefined"}},
        {"ones_like", [&] { ones_like(u); }, {"undefined"}},
        // nn::save and nn::load go through the .npz writer and reader, whose words name the file
        {"load", [] { Linear layer(2, 1); nn::load(layer, "/nonexistent_xgrad_dir/model.npz"); },
         {"/nonexistent_xgrad_dir/model.npz"}},
        {"save", [] { nn::save(Linear(2, 1), "/nonexistent_xgrad_dir/model.npz"); }, {"/nonexistent_xgrad_dir"}},
        // nn::init writes through a drawing op
        {"init.constant_", [] { init::constant_(zeros({2}, kInt64), NAN); }, {"nan", "int64"}},
        {"init.uniform_", [] { init::uniform_(zeros({2}, kBool)); }, {"floating", "bool"}},
    };
    // An undefined tensor is named as the argument of the call it was given to, never as the
    // "Tensor" an inner read found empty.
    const std::vector<std::pair<const char*, std::function<void()>>> undefined = {
        {"mean", [&] { mean(u); }},
        {"mean", [&] { mean(u, {0}); }},
        {"sum", [&] { sum(u, {0}); }},
        {"var", [&] { var(u); }},
        {"std", [&] { xgrad::std(u, {0}, Correction{0}); }},
        {"norm", [&] { norm(u); }},
        {"max", [&] { max(u); }},
        {"min", [&] { min(u, 0); }},
        {"argmax", [&] { argmax(u, 0); }},
        {"argmin", [&] { argmin(u, 0); }},
        {"cumsum", [&] { cumsum(u, 0); }},
        {"mse_loss", [&] { mse_loss(u, x); }},
        {"mse_loss", [&] { mse_loss(x, u); }},
        {"where", [&] { where(u, x, x); }},
        {"where", [&] { where(ones({2, 3}, kBool), x, u); }},
        {"masked_fill", [&] { masked_fill(u, ones({2, 3}, kBool), 1.0); }},
        {"masked_fill", [&] { masked_fill(x, u, 1.0); }},
        {"matmul", [&] { matmul(u, x); }},
        {"bmm", [&] { bmm(scores, u); }},
        {"matmul_t", [&] { matmul_t(u, x, false, true); }},
        {"cast", [&] { cast(u, kFloat64); }},
        {"to", [&] { u.to(kFloat64); }},
        {"clone", [&] { u.clone(); }},
        {"item", [&] { u.item<float>(); }},
        {"to_vector", [&] { u.to_vector<double>(); }},
        {"split", [&] { split(u, 1); }},
        {"chunk", [&] { chunk(u, 2); }},
        {"data_ptr", [&] { Tensor v; v.data_ptr<float>(); }},
        {"const_data_ptr", [&] { u.const_data_ptr<float>(); }},
    };
    for (const auto& [call, run] : undefined) cases.push_back({call, run, {"undefined"}});
    // A typed accessor asked for another element type than the tensor's names itself and both.
    cases.push_back({"const_data_ptr", [&] { x.const_data_ptr<double>(); }, {"float32", "float64"}});
    cases.push_back({"mutable_data_ptr", [&] { x.mutable_data_ptr<std::int64_t>(); }, {"float32", "int64"}});
    cases.push_back({"data_ptr", [&] { Tensor y = x; y.data_ptr<bool>(); }, {"float32", "bool"}});
    check_names(cases);
}

TEST_CASE("module constructors name the module being made, not the submodule that refused",
          "[adversarial][call_errors]") {
    std::vector<CallCase> cases = {
        // out of memory for the weights of a submodule
        {"MultiHeadAttention", [] { MultiHeadAttention(MultiHeadAttentionOptions(kHuge, 1)); },
         {"out of memory", "(1048576, 1048576)"}},
        {"AdditiveAttention", [] { AdditiveAttention(kHuge, 4, kHuge, 0.0); }, {"out of memory", "(1048576, 1048576)"}},
        {"PositionWiseFFN", [] { PositionWiseFFN(kHuge, kHuge, 4); }, {"out of memory", "(1048576, 1048576)"}},
        {"TransformerEncoderBlock", [] { TransformerEncoderBlock(TransformerEncoderBlockOptions(kHuge, 8, 1)); },
         {"out of memory", "(1048576, 1048576)"}},
        {"TransformerDecoderBlock", [] { TransformerDecoderBlock(TransformerDecoderBlockOptions(kHuge, 8, 1)); },
         {"out of memory", "(1048576, 1048576)"}},
        {"LayerNorm", [] { LayerNorm(Shape{kHuge, kHuge}); }, {"out of memory", "(1048576, 1048576)"}},
        {"AddNorm", [] { AddNorm(Shape{kHuge, kHuge}, 0.0); }, {"out of memory", "(1048576, 1048576)"}},
        {"PositionalEncoding", [] { PositionalEncoding(kHuge, 0.0, kHuge); }, {"out of memory", "(1, 1048576, 1048576)"}},
        {"LearnedPositionalEmbedding", [] { LearnedPositionalEmbedding(kHuge, kHuge, 0.0); },
         {"out of memory", "(1048576, 1048576)"}},
        // an argument a submodule checks
        {"AdditiveAttention", [] { AdditiveAttention(4, 4, 0, 0.0); }, {"must be positive", "got 4 and 0"}},
        {"PositionWiseFFN", [] { PositionWiseFFN(4, 0, 4); }, {"must be positive", "got 4 and 0"}},
        {"DotProductAttention", [] { DotProductAttention(1.5); }, {"p must be in [0, 1)", "1.5"}},
        {"MultiHeadAttention", [] { MultiHeadAttention(MultiHeadAttentionOptions(8, 2).dropout(-0.5)); },
         {"p must be in [0, 1)", "-0.5"}},
        {"AddNorm", [] { AddNorm(Shape{4}, 2.0); }, {"p must be in [0, 1)", "2"}},
        {"AddNorm", [] { AddNorm(Shape{}, 0.0); }, {"normalized_shape", "()"}},
        {"PositionalEncoding", [] { PositionalEncoding(4, NAN, 10); }, {"p must be in [0, 1)", "nan"}},
        {"LearnedPositionalEmbedding", [] { LearnedPositionalEmbedding(10, 4, 1.0); }, {"p must be in [0, 1)", "1"}},
        {"TransformerEncoderBlock", [] { TransformerEncoderBlock(TransformerEncoderBlockOptions(8, 16, 2).dropout(1.0)); },
         {"p must be in [0, 1)"}},
    };
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer aborts on a 4 TiB allocation instead of failing it: the memory cases run
    // only in the plain build.
    cases.erase(std::remove_if(cases.begin(), cases.end(),
                               [](const CallCase& c) {
                                   return std::find(c.says.begin(), c.says.end(), std::string("out of memory")) !=
                                          c.says.end();
                               }),
                cases.end());
#endif
    check_names(cases);
    // Every refused constructor left its level: the next call is the outermost again, and
    // modules made after them work.
    CHECK(message_of([] { as_call("again", [] { throw Error("inner: bad"); }); }) == "again: inner: bad");
    MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2));
    CHECK(mha.forward(ones({1, 2, 4}), ones({1, 2, 4}), ones({1, 2, 4})).shape() == Shape{1, 2, 4});
    CHECK(message_of([] { as_call("again", [] { throw Error("inner: bad"); }); }) == "again: inner: bad");
}
