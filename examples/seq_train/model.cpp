#include "model.hpp"

#include <cmath>

#include "core/error.hpp"

namespace xgrad::examples {

PosEncoding parse_pos(const std::string& name) {
    if (name == "learned") return PosEncoding::learned;
    if (name == "sinusoidal") return PosEncoding::sinusoidal;
    throw Error(fmt::format("unknown positional encoding '{}' (expected learned or sinusoidal)", name));
}

std::string pos_name(PosEncoding pos) { return pos == PosEncoding::learned ? "learned" : "sinusoidal"; }

SeqEncoder::SeqEncoder(const ModelSpec& spec, Generator& gen) : Module("SeqEncoder"), m_spec(spec) {
    if (spec.heads == 0 || spec.hidden % spec.heads != 0)
        throw Error(fmt::format("SeqEncoder: hidden ({}) must be a positive multiple of heads ({})", spec.hidden,
                                spec.heads));
    if (spec.layers == 0) throw Error("SeqEncoder: layers must be at least 1");
    m_embedding = register_module("embedding", std::make_shared<nn::Embedding>(spec.vocab_size, spec.hidden, gen));
    if (spec.pos == PosEncoding::learned)
        m_learned = register_module(
            "pos_encoding", std::make_shared<nn::LearnedPositionalEmbedding>(spec.max_len, spec.hidden, spec.dropout, gen));
    else
        m_sinusoidal = register_module(
            "pos_encoding", std::make_shared<nn::PositionalEncoding>(spec.hidden, spec.dropout, spec.max_len));
    for (std::size_t l = 0; l < spec.layers; ++l)
        m_blocks.push_back(register_module(
            fmt::format("block{}", l),
            std::make_shared<nn::TransformerEncoderBlock>(spec.hidden, spec.hidden, spec.hidden, spec.hidden,
                                                          Shape{spec.hidden}, spec.ffn_hidden, spec.heads,
                                                          spec.dropout, false, gen)));
    m_head = register_module("head", std::make_shared<nn::Linear>(spec.hidden, spec.vocab_size, true, gen));
}

Tensor SeqEncoder::forward(const Tensor& X, const Tensor& valid_lens) {
    Tensor H = m_embedding->forward(X);  // (batch, T, hidden)
    if (m_spec.scale_embeddings) H = H * std::sqrt(static_cast<double>(m_spec.hidden));
    H = m_learned ? m_learned->forward(H) : m_sinusoidal->forward(H);
    for (auto& block : m_blocks) H = block->forward(H, valid_lens);
    return m_head->forward(H);  // (batch, T, vocab)
}

std::vector<Tensor> SeqEncoder::attention_weights() const {
    std::vector<Tensor> out;
    for (const auto& block : m_blocks) out.push_back(block->attention()->attention_weights());
    return out;
}

std::string SeqEncoder::extra_repr() const {
    return fmt::format("vocab={}, max_len={}, hidden={}, heads={}, layers={}, pos={}, scale_embeddings={}",
                       m_spec.vocab_size, m_spec.max_len, m_spec.hidden, m_spec.heads, m_spec.layers,
                       pos_name(m_spec.pos), nn::python_bool(m_spec.scale_embeddings));
}

}  // namespace xgrad::examples
