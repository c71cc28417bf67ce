#include "transformer_model.hpp"

#include <cmath>

#include "core/call_context.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

namespace {

TransformerOptions d2l_options(SizeArg vocab_size, SizeArg key_size, SizeArg query_size, SizeArg value_size,
                               SizeArg num_hiddens, Shape norm_shape, SizeArg ffn_num_input, SizeArg ffn_num_hiddens,
                               SizeArg num_heads, SizeArg num_layers, double dropout, bool use_bias) {
    return TransformerOptions(vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_layers)
        .key_size(key_size)
        .query_size(query_size)
        .value_size(value_size)
        .norm_shape(std::move(norm_shape))
        .ffn_num_input(ffn_num_input)
        .dropout(dropout)
        .use_bias(use_bias);
}

std::shared_ptr<Module> make_positions(const TransformerOptions& o, Generator& gen) {
    if (o.positions() == Positions::learned)
        return std::make_shared<LearnedPositionalEmbedding>(o.max_len(), o.num_hiddens(), o.dropout(), gen);
    return std::make_shared<PositionalEncoding>(o.num_hiddens(), o.dropout(), o.max_len());
}

template <class BlockOptions>
BlockOptions block_options(const TransformerOptions& o) {
    return BlockOptions(o.num_hiddens(), o.ffn_num_hiddens(), o.num_heads())
        .key_size(o.key_size())
        .query_size(o.query_size())
        .value_size(o.value_size())
        .ffn_num_input(o.ffn_num_input())
        .norm_shape(o.norm_shape())
        .dropout(o.dropout())
        .use_bias(o.use_bias());
}

// The token ids a whole model takes: int64 (batch, steps).
void check_ids(const char* who, const Tensor& X) {
    if (!X.defined()) throw Error(fmt::format("{}: X (the token ids) is an undefined tensor", who));
    if (X.dim() != 2 || X.dtype() != kInt64)
        throw Error(fmt::format("{}: X must be int64 token ids of shape (batch, steps), got {} of shape {}", who,
                                dtype_name(X.dtype()), shape_str(X.shape())));
}

// The state a decoder step reads, against its ids X (batch, steps): the encoder's outputs
// (batch, T_enc, num_hiddens) and every cached block input of the same batch.
void check_state(const char* who, const Tensor& X, const TransformerDecoderState& state, std::size_t num_hiddens) {
    const Tensor& enc = state.enc_outputs;
    if (!enc.defined())
        throw Error(fmt::format("{}: state.enc_outputs is an undefined tensor (make the state with "
                                "init_state(enc_outputs, enc_valid_lens))",
                                who));
    if (enc.dim() != 3 || enc.size(0) != X.size(0) || enc.shape()[2] != num_hiddens)
        throw Error(fmt::format("{}: state.enc_outputs must have shape ({}, T_enc, {}) for X of shape {}, got {}",
                                who, X.size(0), num_hiddens, shape_str(X.shape()), shape_str(enc.shape())));
    for (std::size_t i = 0; i < state.key_values.size(); ++i) {
        const Tensor& kv = state.key_values[i];
        if (kv.defined() && (kv.dim() != 3 || kv.size(0) != X.size(0) || kv.shape()[2] != num_hiddens))
            throw Error(fmt::format("{}: state.key_values[{}] must have shape ({}, steps, {}) for X of shape {} "
                                    "(the batch the state was decoding), got {}",
                                    who, i, X.size(0), num_hiddens, shape_str(X.shape()), shape_str(kv.shape())));
    }
}

void check_layers(const char* who, const TransformerOptions& o) {
    if (o.num_layers() == 0) throw Error(fmt::format("{}: num_layers must be at least 1, got 0", who));
}

// pos_encoding(embedding(X) · √d) with the positions starting at `offset`.
Tensor embed(Embedding& embedding, Module& positions, const Tensor& X, std::size_t num_hiddens, bool scale,
             std::size_t offset) {
    Tensor H = embedding.forward(X);  // (batch, T, d)
    if (scale) H = H * std::sqrt(static_cast<double>(num_hiddens));
    if (auto* learned = positions.as<LearnedPositionalEmbedding>()) return learned->forward(H, offset);
    return positions.as<PositionalEncoding>()->forward(H, offset);
}

}  // namespace

TransformerEncoder::TransformerEncoder(SizeArg vocab_size, SizeArg key_size, SizeArg query_size, SizeArg value_size,
                                       SizeArg num_hiddens, Shape norm_shape, SizeArg ffn_num_input,
                                       SizeArg ffn_num_hiddens, SizeArg num_heads, SizeArg num_layers, double dropout,
                                       BoolArg use_bias, Generator& gen)
    : TransformerEncoder(d2l_options(vocab_size, key_size, query_size, value_size, num_hiddens, std::move(norm_shape),
                                     ffn_num_input, ffn_num_hiddens, num_heads, num_layers, dropout, use_bias),
                         gen) {}

TransformerEncoder::TransformerEncoder(const TransformerOptions& o, Generator& gen)
    : Module("TransformerEncoder"), m_num_hiddens(o.num_hiddens()), m_scale(o.scale_embeddings()) {
    as_call("TransformerEncoder", [&] { build(o, gen); });
}

void TransformerEncoder::build(const TransformerOptions& o, Generator& gen) {
    check_layers("TransformerEncoder", o);
    m_embedding = register_module("embedding", std::make_shared<Embedding>(o.vocab_size(), o.num_hiddens(), gen));
    m_pos_encoding = register_module("pos_encoding", make_positions(o, gen));
    m_blks = register_module("blks", std::make_shared<Sequential>());
    for (std::size_t i = 0; i < o.num_layers(); ++i)
        m_blks->add_module(
            "block" + std::to_string(i),
            std::make_shared<TransformerEncoderBlock>(block_options<TransformerEncoderBlockOptions>(o), gen));
}

Tensor TransformerEncoder::forward(const Tensor& X, const Tensor& valid_lens) {
    return as_call("TransformerEncoder", [&] {
        check_ids("TransformerEncoder", X);
        Tensor H = embed(*m_embedding, *m_pos_encoding, X, m_num_hiddens, m_scale, 0);
        for (std::size_t i = 0; i < m_blks->size(); ++i) H = block(i).forward(H, valid_lens);
        return H;
    });
}

std::vector<Tensor> TransformerEncoder::attention_weights() const {
    std::vector<Tensor> out;
    for (std::size_t i = 0; i < m_blks->size(); ++i)
        out.push_back(block(i).attention()->attention()->attention_weights());
    return out;
}

TransformerDecoder::TransformerDecoder(SizeArg vocab_size, SizeArg key_size, SizeArg query_size, SizeArg value_size,
                                       SizeArg num_hiddens, Shape norm_shape, SizeArg ffn_num_input,
                                       SizeArg ffn_num_hiddens, SizeArg num_heads, SizeArg num_layers, double dropout,
                                       Generator& gen)
    : TransformerDecoder(d2l_options(vocab_size, key_size, query_size, value_size, num_hiddens, std::move(norm_shape),
                                     ffn_num_input, ffn_num_hiddens, num_heads, num_layers, dropout, false),
                         gen) {}

TransformerDecoder::TransformerDecoder(const TransformerOptions& o, Generator& gen)
    : Module("TransformerDecoder"), m_num_hiddens(o.num_hiddens()), m_scale(o.scale_embeddings()) {
    as_call("TransformerDecoder", [&] { build(o, gen); });
}

void TransformerDecoder::build(const TransformerOptions& o, Generator& gen) {
    check_layers("TransformerDecoder", o);
    m_embedding = register_module("embedding", std::make_shared<Embedding>(o.vocab_size(), o.num_hiddens(), gen));
    m_pos_encoding = register_module("pos_encoding", make_positions(o, gen));
    m_blks = register_module("blks", std::make_shared<Sequential>());
    for (std::size_t i = 0; i < o.num_layers(); ++i)
        m_blks->add_module(
            "block" + std::to_string(i),
            std::make_shared<TransformerDecoderBlock>(block_options<TransformerDecoderBlockOptions>(o).i(i), gen));
    m_dense = register_module("dense", std::make_shared<Linear>(o.num_hiddens(), o.vocab_size(), true, gen));
}

TransformerDecoderState TransformerDecoder::init_state(const Tensor& enc_outputs, const Tensor& enc_valid_lens) const {
    return {enc_outputs, enc_valid_lens, std::vector<Tensor>(m_blks->size())};
}

template <class Step>
std::pair<Tensor, TransformerDecoderState> TransformerDecoder::run(const Tensor& X, TransformerDecoderState& state,
                                                                   Step step) {
    return as_call("TransformerDecoder", [&] { return run_checked(X, state, step); });
}

template <class Step>
std::pair<Tensor, TransformerDecoderState> TransformerDecoder::run_checked(const Tensor& X,
                                                                           TransformerDecoderState& state, Step step) {
    check_ids("TransformerDecoder", X);
    if (state.key_values.size() != m_blks->size())
        throw Error(fmt::format("TransformerDecoder: the state has key_values for {} block(s), the decoder has {} "
                                "(make it with init_state)",
                                state.key_values.size(), m_blks->size()));
    check_state("TransformerDecoder", X, state, m_num_hiddens);
    // The steps already decoded: where this input's positions start.
    const Tensor& seen = state.key_values[0];
    const std::size_t offset = seen.defined() && seen.dim() == 3 ? seen.size(1) : 0;
    Tensor H = embed(*m_embedding, *m_pos_encoding, X, m_num_hiddens, m_scale, offset);
    for (std::size_t i = 0; i < m_blks->size(); ++i) H = step(block(i), H, state);
    return {m_dense->forward(H), state};
}

std::pair<Tensor, TransformerDecoderState> TransformerDecoder::forward(const Tensor& X, TransformerDecoderState& state) {
    return run(X, state, [](TransformerDecoderBlock& b, const Tensor& H, TransformerDecoderState& s) {
        return b.forward(H, s).first;
    });
}

std::pair<Tensor, TransformerDecoderState> TransformerDecoder::forward(const Tensor& X, TransformerDecoderState& state,
                                                                       const AttentionMask& self_mask) {
    return run(X, state, [&](TransformerDecoderBlock& b, const Tensor& H, TransformerDecoderState& s) {
        return b.forward(H, s, self_mask).first;
    });
}

std::vector<std::vector<Tensor>> TransformerDecoder::attention_weights() const {
    std::vector<std::vector<Tensor>> out(2);
    for (std::size_t i = 0; i < m_blks->size(); ++i) {
        out[0].push_back(block(i).attention1()->attention()->attention_weights());
        out[1].push_back(block(i).attention2()->attention()->attention_weights());
    }
    return out;
}

}  // namespace xgrad::nn
