#include "model.hpp"

#include "core/ops.hpp"
#include "core/sequence_ops.hpp"
#include "nn/init.hpp"

namespace xgrad::examples::bahdanau {

Seq2SeqEncoder::Seq2SeqEncoder(const ModelSpec& s, Generator& gen) : Module("Seq2SeqEncoder") {
    m_embedding = register_module("embedding", std::make_shared<nn::Embedding>(s.src_vocab, s.embed, gen));
    m_rnn = register_module(
        "rnn", std::make_shared<nn::GRU>(nn::GRUOptions(s.embed, s.hidden).num_layers(s.layers).dropout(s.dropout), gen));
}

std::tuple<Tensor, Tensor> Seq2SeqEncoder::forward(const Tensor& X) {
    // (B, T) → (B, T, embed) → time first, as nn.GRU reads it without batch_first.
    const Tensor embedded = m_embedding->forward(X).permute({1, 0, 2});
    return (*m_rnn)(embedded);
}

Seq2SeqAttentionDecoder::Seq2SeqAttentionDecoder(const ModelSpec& s, Generator& gen)
    : Module("Seq2SeqAttentionDecoder") {
    m_attention = register_module("attention",
                                  std::make_shared<nn::AdditiveAttention>(s.hidden, s.hidden, s.hidden, s.dropout, gen));
    m_embedding = register_module("embedding", std::make_shared<nn::Embedding>(s.tgt_vocab, s.embed, gen));
    m_rnn = register_module(
        "rnn", std::make_shared<nn::GRU>(
                   nn::GRUOptions(s.embed + s.hidden, s.hidden).num_layers(s.layers).dropout(s.dropout), gen));
    m_dense = register_module("dense", std::make_shared<nn::Linear>(s.hidden, s.tgt_vocab, true, gen));
}

DecoderState Seq2SeqAttentionDecoder::init_state(const std::tuple<Tensor, Tensor>& enc_outputs,
                                                 const Tensor& enc_valid_lens) const {
    const auto& [outputs, hidden_state] = enc_outputs;
    return {outputs.permute({1, 0, 2}), hidden_state, enc_valid_lens};
}

std::tuple<Tensor, DecoderState> Seq2SeqAttentionDecoder::forward(const Tensor& X, DecoderState state) {
    const Tensor embedded = m_embedding->forward(X).permute({1, 0, 2});  // (T, B, embed)
    std::vector<Tensor> outputs;
    m_attention_weights.clear();
    for (const Tensor& x : unbind(embedded, 0)) {
        const Tensor query = state.hidden[-1].unsqueeze(1);  // (B, 1, hidden)
        const Tensor context = (*m_attention)(query, state.enc_outputs, state.enc_outputs, state.enc_valid_lens);
        const Tensor step_input = concat({context, x.unsqueeze(1)}, -1);  // (B, 1, hidden + embed)
        auto [out, hidden] = (*m_rnn)(step_input.permute({1, 0, 2}), state.hidden);
        state.hidden = hidden;
        outputs.push_back(out);  // (1, B, hidden)
        m_attention_weights.push_back(m_attention->attention_weights());
    }
    const Tensor logits = m_dense->forward(concat(outputs, 0));  // (T, B, tgt_vocab)
    return {logits.permute({1, 0, 2}), state};
}

EncoderDecoder::EncoderDecoder(const ModelSpec& s, Generator& gen) : Module("EncoderDecoder") {
    m_encoder = register_module("encoder", std::make_shared<Seq2SeqEncoder>(s, gen));
    m_decoder = register_module("decoder", std::make_shared<Seq2SeqAttentionDecoder>(s, gen));
    // d2l's xavier_init_weights, applied to every module.
    apply([&](nn::Module& m) {
        if (const auto* linear = m.as<nn::Linear>()) nn::init::xavier_uniform_(linear->weight(), 1.0, gen);
        if (const auto* gru = m.as<nn::GRU>())
            for (const auto& [name, p] : gru->named_parameters())
                if (name.rfind("weight", 0) == 0) nn::init::xavier_uniform_(p, 1.0, gen);
    });
}

Tensor EncoderDecoder::forward(const Tensor& src, const Tensor& dec_input, const Tensor& src_valid_len) {
    DecoderState state = m_decoder->init_state((*m_encoder)(src), src_valid_len);
    return std::get<0>((*m_decoder)(dec_input, state));
}

}  // namespace xgrad::examples::bahdanau
