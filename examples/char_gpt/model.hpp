#pragma once
/// char_gpt's model: nanoGPT's GPT at character level.
///
///   x = wte(idx) + wpe(0..T-1)                 token and position embeddings, (B, T, d)
///   x = x + attn(ln_1(x))                      causal multi-head self-attention (pre-LayerNorm)
///   x = x + mlp(ln_2(x))                       Linear(d, 4d) → GELU → Linear(4d, d) → dropout
///   logits = ln_f(x) · wte.weightᵀ             the head shares the token embedding (weight tying)
///
/// Initialised as nanoGPT: every Linear and Embedding weight N(0, 0.02), the projections back
/// into the residual stream (attn.W_o, mlp.c_proj) N(0, 0.02/√(2·layers)), biases 0, LayerNorm
/// weight 1 and bias 0. Shapes: idx int64 (B, T ≤ block) → logits (B, T, vocab).
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/random.hpp"
#include "nn/nn.hpp"

namespace xgrad::examples {

struct GptSpec {
    std::size_t vocab_size = 0;
    std::size_t block = 64;   ///< longest context (positions)
    std::size_t d_model = 128;
    std::size_t heads = 4;
    std::size_t layers = 4;
    double dropout = 0.0;
};

/// One pre-LayerNorm Transformer block.
class GptBlock : public nn::Module, public nn::Callable<GptBlock> {
public:
    GptBlock(const GptSpec& spec, Generator& gen);
    Tensor forward(const Tensor& x);
    const nn::MultiHeadAttention& attention() const { return *m_attn; }

private:
    std::shared_ptr<nn::LayerNorm> m_ln_1, m_ln_2;
    std::shared_ptr<nn::MultiHeadAttention> m_attn;
    std::shared_ptr<nn::Linear> m_fc, m_proj;
    std::shared_ptr<nn::Dropout> m_dropout;
};

class CharGpt : public nn::Module, public nn::Callable<CharGpt> {
public:
    /// Throws xgrad::Error when d_model is not a multiple of heads, or a size is 0.
    CharGpt(const GptSpec& spec, Generator& gen);
    Tensor forward(const Tensor& idx);
    /// Block `layer`'s attention weights of the last forward, (B, heads, T, T): a copy.
    Tensor attention_weights(std::size_t layer) const;
    const GptSpec& spec() const { return m_spec; }
    std::string extra_repr() const override;

    /// nanoGPT's configure_optimizers split: the weights of the Linear layers decay; biases,
    /// LayerNorm weights and the embeddings (the head's weight among them) do not.
    struct ParameterSplit {
        std::vector<Tensor> decay, no_decay;
        std::vector<std::string> decay_names, no_decay_names;
    };
    ParameterSplit decay_split() const;

private:
    GptSpec m_spec;
    std::shared_ptr<nn::Embedding> m_wte, m_wpe;
    std::shared_ptr<nn::Dropout> m_drop;
    std::vector<std::shared_ptr<GptBlock>> m_blocks;
    std::shared_ptr<nn::LayerNorm> m_ln_f;
};

}  // namespace xgrad::examples
