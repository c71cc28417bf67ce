#pragma once
/// seq_train's model: d2l's TransformerEncoder with a per-position classifier.
///
///   H = encoder(X, valid_lens)  (embedding(X) · scale + positions, then the blocks);
///   logits = head(H)
///
/// positions: learned (an Embedding of positions) or d2l's fixed sinusoidal table; scale is
/// √hidden with scale_embeddings (d2l's TransformerEncoder does this), else 1.
///
/// scale_embeddings is off by default: N(0, 1) embeddings times √64 = 8 drown sinusoids in
/// [-1, 1], so the model barely sees the positions the reverse task depends on.
///
/// Shapes: X int64 (batch, T ≤ max_len), valid_lens int64 (batch,) → logits (batch, T, vocab).
/// Keys past a sequence's valid length are masked in every block.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/random.hpp"
#include "nn/nn.hpp"

namespace xgrad::examples {

enum class PosEncoding { learned, sinusoidal };
/// "learned" / "sinusoidal" ↔ PosEncoding; parse_pos throws xgrad::Error for anything else.
PosEncoding parse_pos(const std::string& name);
std::string pos_name(PosEncoding pos);

struct ModelSpec {
    std::size_t vocab_size = 11;
    std::size_t max_len = 8;
    std::size_t hidden = 64;
    std::size_t heads = 4;
    std::size_t layers = 2;
    std::size_t ffn_hidden = 128;
    double dropout = 0.0;
    PosEncoding pos = PosEncoding::learned;
    bool scale_embeddings = false;
};

class SeqEncoder : public nn::Module, public nn::Callable<SeqEncoder> {
public:
    /// Parameters drawn from `gen`. Throws if hidden is not a multiple of heads.
    SeqEncoder(const ModelSpec& spec, Generator& gen);
    Tensor forward(const Tensor& X, const Tensor& valid_lens);
    /// Per-layer attention weights of the last forward, each (batch, heads, T, T): copies
    /// (reshaped from what the layers keep).
    std::vector<Tensor> attention_weights_copy() const;
    const ModelSpec& spec() const { return m_spec; }
    std::string extra_repr() const override;

private:
    ModelSpec m_spec;
    std::shared_ptr<nn::TransformerEncoder> m_encoder;
    std::shared_ptr<nn::Linear> m_head;
};

}  // namespace xgrad::examples
