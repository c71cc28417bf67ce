#include "transformer.hpp"

#include "core/ops.hpp"

namespace xgrad::nn {

namespace {

// X is the queries, keys and values of the self-attention and is added back by the residual,
// so every size must be num_hiddens.
void check_sizes(const char* who, std::size_t key_size, std::size_t query_size, std::size_t value_size,
                 std::size_t num_hiddens) {
    if (key_size != num_hiddens || query_size != num_hiddens || value_size != num_hiddens)
        throw Error(
            fmt::format("{}: key_size, query_size and value_size must equal num_hiddens = {} (X is the "
                        "queries, keys and values and is added back), got {}, {} and {}",
                        who, num_hiddens, key_size, query_size, value_size));
}

}  // namespace

PositionWiseFFN::PositionWiseFFN(std::size_t ffn_num_input, std::size_t ffn_num_hiddens,
                                 std::size_t ffn_num_outputs, Generator& gen)
    : Module("PositionWiseFFN"),
      m_dense1(
          register_module("dense1", std::make_shared<Linear>(ffn_num_input, ffn_num_hiddens, true, gen))),
      m_relu(register_module("relu", std::make_shared<ReLU>())),
      m_dense2(
          register_module("dense2", std::make_shared<Linear>(ffn_num_hiddens, ffn_num_outputs, true, gen))) {}

Tensor PositionWiseFFN::forward(const Tensor& X) {
    return m_dense2->forward(m_relu->forward(m_dense1->forward(X)));
}

AddNorm::AddNorm(Shape normalized_shape, double dropout)
    : Module("AddNorm"),
      m_dropout(register_module("dropout", std::make_shared<Dropout>(dropout))),
      m_ln(register_module("ln", std::make_shared<LayerNorm>(std::move(normalized_shape)))) {}

Tensor AddNorm::forward(const Tensor& X, const Tensor& Y) {
    if (X.shape() != Y.shape())
        throw Error(fmt::format("AddNorm: X and Y must have the same shape, got {} and {}",
                                shape_str(X.shape()), shape_str(Y.shape())));
    return m_ln->forward(m_dropout->forward(Y) + X);
}

TransformerEncoderBlock::TransformerEncoderBlock(std::size_t key_size, std::size_t query_size,
                                                 std::size_t value_size, std::size_t num_hiddens,
                                                 Shape norm_shape, std::size_t ffn_num_hiddens,
                                                 std::size_t num_heads, double dropout, bool use_bias,
                                                 Generator& gen)
    : Module("TransformerEncoderBlock") {
    check_sizes("TransformerEncoderBlock", key_size, query_size, value_size, num_hiddens);
    m_attention = register_module(
        "attention", std::make_shared<MultiHeadAttention>(key_size, query_size, value_size, num_hiddens,
                                                          num_heads, dropout, use_bias, gen));
    m_addnorm1 = register_module("addnorm1", std::make_shared<AddNorm>(norm_shape, dropout));
    m_ffn = register_module(
        "ffn", std::make_shared<PositionWiseFFN>(num_hiddens, ffn_num_hiddens, num_hiddens, gen));
    m_addnorm2 = register_module("addnorm2", std::make_shared<AddNorm>(norm_shape, dropout));
}

Tensor TransformerEncoderBlock::forward(const Tensor& X, const Tensor& valid_lens) {
    // X: (batch, T, num_hiddens)
    const Tensor Y = m_addnorm1->forward(X, m_attention->forward(X, X, X, valid_lens));
    return m_addnorm2->forward(Y, m_ffn->forward(Y));
}

TransformerDecoderBlock::TransformerDecoderBlock(std::size_t key_size, std::size_t query_size,
                                                 std::size_t value_size, std::size_t num_hiddens,
                                                 Shape norm_shape, std::size_t ffn_num_hiddens,
                                                 std::size_t num_heads, double dropout, bool use_bias,
                                                 Generator& gen)
    : Module("TransformerDecoderBlock") {
    check_sizes("TransformerDecoderBlock", key_size, query_size, value_size, num_hiddens);
    auto attention = [&] {
        return std::make_shared<MultiHeadAttention>(key_size, query_size, value_size, num_hiddens, num_heads,
                                                    dropout, use_bias, gen);
    };
    m_attention1 = register_module("attention1", attention());
    m_addnorm1 = register_module("addnorm1", std::make_shared<AddNorm>(norm_shape, dropout));
    m_attention2 = register_module("attention2", attention());
    m_addnorm2 = register_module("addnorm2", std::make_shared<AddNorm>(norm_shape, dropout));
    m_ffn = register_module(
        "ffn", std::make_shared<PositionWiseFFN>(num_hiddens, ffn_num_hiddens, num_hiddens, gen));
    m_addnorm3 = register_module("addnorm3", std::make_shared<AddNorm>(norm_shape, dropout));
}

Tensor TransformerDecoderBlock::forward(const Tensor& X, const Tensor& enc_outputs,
                                        const Tensor& enc_valid_lens) {
    Tensor cache;
    return forward(X, enc_outputs, enc_valid_lens, cache);
}

Tensor TransformerDecoderBlock::forward(const Tensor& X, const Tensor& enc_outputs,
                                        const Tensor& enc_valid_lens, Tensor& cache) {
    // X: (batch, T, num_hiddens); cache: (batch, t0, num_hiddens) or undefined
    if (X.dim() != 3)
        throw Error(
            fmt::format("TransformerDecoderBlock: X must be 3-D (batch, steps, num_hiddens), got shape {}",
                        shape_str(X.shape())));
    if (cache.defined() && (cache.dim() != 3 || cache.size(0) != X.size(0) || cache.size(2) != X.size(2)))
        throw Error(
            fmt::format("TransformerDecoderBlock: cache must have shape ({}, steps, {}) to go with X {}, "
                        "got {}",
                        X.size(0), X.size(2), shape_str(X.shape()), shape_str(cache.shape())));
    const Tensor key_values = cache.defined() ? concat({cache, X}, 1) : X;  // (batch, t0 + T, d)
    cache = key_values;
    // Causal, bottom-right aligned: step t0+i sees itself and every earlier step (d2l's
    // dec_valid_lens row [t0+1, ..., t0+T]).
    const Tensor Y =
        m_addnorm1->forward(X, m_attention1->forward(X, key_values, key_values, AttentionMask::causal()));
    const Tensor Z =
        m_addnorm2->forward(Y, m_attention2->forward(Y, enc_outputs, enc_outputs, enc_valid_lens));
    return m_addnorm3->forward(Z, m_ffn->forward(Z));
}

}  // namespace xgrad::nn
