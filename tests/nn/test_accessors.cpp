// Every accessor of a module that returns a Tensor, written through: what the module sees says
// whether the accessor aliases (the rule, as torch's) or copies (then its name says so).
#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

namespace {

// A parameter, a persistent and a non-persistent buffer, and a child.
class Holder : public Module {
public:
    Holder() : Module("Holder") {
        register_parameter("w", tensor({1.0, 2.0}));
        register_buffer("running", tensor({3.0, 4.0}));
        register_buffer("scratch", tensor({5.0}), /*persistent=*/false);
        child = register_module("child", std::make_shared<Linear>(2, 1));
    }
    std::shared_ptr<Linear> child;
};

}  // namespace

TEST_CASE("parameters(), named_parameters() and parameter() alias the module's parameters", "[module][alias]") {
    Holder m;
    NoGradGuard no_grad;  // a parameter is written in place as an optimiser does
    m.parameters()[0].mul_(10);
    CHECK_THAT(vals(m.parameter("w")), approx({10.0, 20.0}));
    m.named_parameters()[1].second.fill_(0.5);  // child.weight
    CHECK_THAT(vals(m.child->weight()), approx({0.5, 0.5}));
    m.parameter("w").zero_();
    CHECK_THAT(vals(m.parameters()[0]), approx({0.0, 0.0}));
    m.child->bias().fill_(-1);
    CHECK(m.named_parameters()[2].first == "child.bias");
    CHECK(m.named_parameters()[2].second.item<float>() == -1.0f);
}

TEST_CASE("buffers(), named_buffers() and buffer() alias the module's buffers", "[module][alias]") {
    Holder m;
    m.buffers()[0].add_(1);
    CHECK_THAT(vals(m.buffer("running")), approx({4.0, 5.0}));
    m.named_buffers()[1].second.mul_(2);  // the non-persistent one
    CHECK(m.buffer("scratch").item<float>() == 10.0f);
    m.buffer("running")[0] = 0;  // through t[i] too
    CHECK_THAT(vals(m.named_buffers()[0].second), approx({0.0, 5.0}));
}

TEST_CASE("state_dict() entries alias the parameters and buffers, as torch's", "[module][alias][state]") {
    Holder m;
    NamedTensors sd = m.state_dict();
    REQUIRE(sd[0].first == "w");
    REQUIRE(sd[1].first == "running");
    CHECK(sd[0].second.is_same(m.parameter("w")));
    {
        NoGradGuard no_grad;
        sd[0].second.copy_(tensor({7.0, 8.0}));  // torch: sd['w'].copy_(...) sets the weight
    }
    CHECK_THAT(vals(m.parameter("w")), approx({7.0, 8.0}));
    sd[1].second.zero_();
    CHECK_THAT(vals(m.buffer("running")), approx({0.0, 0.0}));
    // A parameter's entry is the parameter: written in place while recording, it is refused as
    // the parameter would be (torch's entries are detached; do it under NoGradGuard).
    CHECK_THROWS_WITH(sd[0].second.add_(1), Catch::Contains("leaf Variable"));
    // A later change to the module shows in the entries, and in a detach() of one (which shares
    // its storage, as torch's); clone() keeps a snapshot.
    const Tensor detached = sd[0].second.detach();
    const Tensor snapshot = sd[0].second.detach().clone();
    {
        NoGradGuard no_grad;
        m.parameter("w").mul_(2);
    }
    CHECK_THAT(vals(sd[0].second), approx({14.0, 16.0}));
    CHECK_THAT(vals(detached), approx({14.0, 16.0}));
    CHECK_THAT(vals(snapshot), approx({7.0, 8.0}));
}

TEST_CASE("Linear, LayerNorm and Embedding hand out their parameters themselves", "[module][alias]") {
    NoGradGuard no_grad;
    Linear lin(2, 2);
    lin.weight().zero_();
    lin.bias().fill_(1.5);
    CHECK_THAT(vals(lin.forward(ones({1, 2}))), approx({1.5, 1.5}));
    LayerNorm ln(Shape{2});
    ln.weight().fill_(2);
    ln.bias().fill_(1);
    CHECK_THAT(vals(ln.forward(tensor({{0.0, 1.0}}))), approx({-1.0, 3.0}, 1e-4));
    Embedding emb(3, 2);
    emb.weight()[1] = tensor({9.0, 8.0});
    CHECK_THAT(vals(emb.forward(from_vector(std::vector<std::int64_t>{1}, {1}))), approx({9.0, 8.0}));
}

TEST_CASE("PositionalEncoding's table() is the table forward adds", "[module][alias]") {
    PositionalEncoding pe(4, 0.0, 3);
    pe.eval();
    pe.table().zero_();
    CHECK_THAT(vals(pe.forward(ones({1, 2, 4}))), approx({1, 1, 1, 1, 1, 1, 1, 1}));
}

TEST_CASE("attention_weights() alias what the attention modules keep, MHA's 4-D form is a copy",
          "[attention][alias]") {
    const Tensor q = rand({2, 3, 4}), k = rand({2, 5, 4}), v = rand({2, 5, 2});
    DotProductAttention dot(0.0);
    dot.forward(q, k, v);
    dot.attention_weights().zero_();
    CHECK(sum(dot.attention_weights()).item<double>() == 0.0);
    AdditiveAttention add(4, 4, 3, 0.0);
    add.forward(q, k, v);
    add.attention_weights().fill_(0.25);
    CHECK(add.attention_weights().index({0, 0, 0}).item<float>() == 0.25f);
    MultiHeadAttention mha(4, 4, 2, 4, 2, 0.0);
    mha.forward(q, k, v);
    mha.attention()->attention_weights().fill_(1);  // d2l's, the tensor itself
    CHECK(mha.attention_weights_copy().index({1, 1, 2, 4}).item<float>() == 1.0f);
    const Tensor copy = mha.attention_weights_copy();
    copy.zero_();  // a copy, as its name says: the module keeps its weights
    CHECK(mha.attention()->attention_weights().index({0, 0, 0}).item<float>() == 1.0f);
}

TEST_CASE("the transformer models' attention_weights() are the blocks' tensors", "[transformer][alias]") {
    const TransformerOptions o(/*vocab_size=*/7, /*num_hiddens=*/4, /*ffn_num_hiddens=*/8, /*num_heads=*/2,
                               /*num_layers=*/2);
    TransformerEncoder encoder(o);
    encoder.eval();
    const Tensor X = from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
    encoder.forward(X);
    encoder.attention_weights()[1].zero_();
    CHECK(sum(encoder.block(1).attention()->attention()->attention_weights()).item<double>() == 0.0);
    TransformerDecoder decoder(o);
    decoder.eval();
    auto state = decoder.init_state(encoder.forward(X));
    decoder.forward(X, state);
    decoder.attention_weights()[1][0].fill_(3);
    CHECK(decoder.block(0).attention2()->attention()->attention_weights().index({0, 0, 0}).item<float>() == 3.0f);
}
