#pragma once
/// bahdanau's model: d2l's "Bahdanau Attention" encoder-decoder, module for module.
///
///   encoder:  Embedding(src_vocab, embed) → GRU(embed, hidden, layers, dropout)
///   decoder, per target step t:
///       query   = the top layer's hidden state          (B, 1, hidden)
///       context = AdditiveAttention(query, enc_outputs, enc_outputs, src_valid_len)
///       x_t     = [context, Embedding(tgt_vocab, embed)(y_{t−1})]   (B, 1, hidden + embed)
///       out_t, state = GRU(hidden + embed, hidden, layers, dropout)(x_t, state)
///   logits = Linear(hidden, tgt_vocab)(out_1..T)        (B, T, tgt_vocab)
///
/// The encoder's final state starts the decoder's. Initialised as d2l's train_seq2seq: the
/// Linear and GRU weights Xavier-uniform, the GRU biases uniform in ±1/√hidden, the
/// embeddings N(0, 1).
#include <cstddef>
#include <memory>
#include <tuple>
#include <vector>

#include "core/random.hpp"
#include "nn/nn.hpp"

namespace xgrad::examples::bahdanau {

struct ModelSpec {
    std::size_t src_vocab = 0, tgt_vocab = 0;
    std::size_t embed = 32, hidden = 32, layers = 2;
    double dropout = 0.1;
};

/// d2l's Seq2SeqEncoder: X (B, T) int64 → (outputs (T, B, hidden), state (layers, B, hidden)).
class Seq2SeqEncoder : public nn::Module, public nn::Callable<Seq2SeqEncoder> {
public:
    Seq2SeqEncoder(const ModelSpec& spec, Generator& gen);
    std::tuple<Tensor, Tensor> forward(const Tensor& X);

private:
    std::shared_ptr<nn::Embedding> m_embedding;
    std::shared_ptr<nn::GRU> m_rnn;
};

/// What the decoder carries from step to step: d2l's [enc_outputs, hidden_state, enc_valid_lens].
struct DecoderState {
    Tensor enc_outputs;     ///< (B, Ts, hidden), batch first for the attention
    Tensor hidden;          ///< (layers, B, hidden)
    Tensor enc_valid_lens;  ///< (B,)
};

/// d2l's Seq2SeqAttentionDecoder.
class Seq2SeqAttentionDecoder : public nn::Module, public nn::Callable<Seq2SeqAttentionDecoder> {
public:
    Seq2SeqAttentionDecoder(const ModelSpec& spec, Generator& gen);
    /// The encoder's (outputs, state) and the source's valid lengths → the first state.
    DecoderState init_state(const std::tuple<Tensor, Tensor>& enc_outputs, const Tensor& enc_valid_lens) const;
    /// X (B, T) int64 → (logits (B, T, tgt_vocab), the state after step T).
    std::tuple<Tensor, DecoderState> forward(const Tensor& X, DecoderState state);
    /// The attention weights of the last forward, one (B, 1, Ts) per step.
    const std::vector<Tensor>& attention_weights() const { return m_attention_weights; }

private:
    std::shared_ptr<nn::AdditiveAttention> m_attention;
    std::shared_ptr<nn::Embedding> m_embedding;
    std::shared_ptr<nn::GRU> m_rnn;
    std::shared_ptr<nn::Linear> m_dense;
    std::vector<Tensor> m_attention_weights;
};

/// d2l's EncoderDecoder.
class EncoderDecoder : public nn::Module, public nn::Callable<EncoderDecoder> {
public:
    EncoderDecoder(const ModelSpec& spec, Generator& gen);
    /// Teacher forcing: src (B, Ts), dec_input (B, T), src_valid_len (B,) → logits (B, T, tgt_vocab).
    Tensor forward(const Tensor& src, const Tensor& dec_input, const Tensor& src_valid_len);
    Seq2SeqEncoder& encoder() { return *m_encoder; }
    Seq2SeqAttentionDecoder& decoder() { return *m_decoder; }

private:
    std::shared_ptr<Seq2SeqEncoder> m_encoder;
    std::shared_ptr<Seq2SeqAttentionDecoder> m_decoder;
};

}  // namespace xgrad::examples::bahdanau
