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
    m_encoder = register_module(
        "encoder", std::make_shared<nn::TransformerEncoder>(
                       nn::TransformerOptions(spec.vocab_size, spec.hidden, spec.ffn_hidden, spec.heads, spec.layers)
                           .dropout(spec.dropout)
                           .max_len(spec.max_len)
                           .positions(spec.pos == PosEncoding::learned ? nn::Positions::learned
                                                                       : nn::Positions::sinusoidal)
                           .scale_embeddings(spec.scale_embeddings),
                       gen));
    m_head = register_module("head", std::make_shared<nn::Linear>(spec.hidden, spec.vocab_size, true, gen));
}

Tensor SeqEncoder::forward(const Tensor& X, const Tensor& valid_lens) {
    return m_head->forward(m_encoder->forward(X, valid_lens));  // (batch, T, hidden) → (batch, T, vocab)
}

std::vector<Tensor> SeqEncoder::attention_weights_copy() const {
    std::vector<Tensor> out;
    for (std::size_t l = 0; l < m_spec.layers; ++l)
        out.push_back(m_encoder->block(l).attention()->attention_weights_copy());
    return out;
}

std::string SeqEncoder::extra_repr() const {
    return fmt::format("vocab={}, max_len={}, hidden={}, heads={}, layers={}, pos={}, scale_embeddings={}",
                       m_spec.vocab_size, m_spec.max_len, m_spec.hidden, m_spec.heads, m_spec.layers,
                       pos_name(m_spec.pos), nn::python_bool(m_spec.scale_embeddings));
}

}  // namespace xgrad::examples
