#include "model.hpp"

#include <cmath>

#include "core/creation.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"
#include "nn/init.hpp"

namespace xgrad::examples {

namespace {

constexpr double kInitStd = 0.02;

// nanoGPT's _init_weights for one Linear: weight N(0, std), bias 0.
void init_linear(const nn::Linear& layer, double std, Generator& gen) {
    nn::init::normal_(layer.weight(), 0.0, std, gen);
    if (layer.bias().defined()) nn::init::zeros_(layer.bias());
}

}  // namespace

GptBlock::GptBlock(const GptSpec& s, Generator& gen) : Module("GptBlock") {
    const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(s.layers));
    m_ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(Shape{s.d_model}));
    m_attn = register_module("attn", std::make_shared<nn::MultiHeadAttention>(
                                         nn::MultiHeadAttentionOptions(s.d_model, s.heads).dropout(s.dropout).bias(true),
                                         gen));
    m_ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(Shape{s.d_model}));
    m_fc = register_module("c_fc", std::make_shared<nn::Linear>(s.d_model, 4 * s.d_model, true, gen));
    m_proj = register_module("c_proj", std::make_shared<nn::Linear>(4 * s.d_model, s.d_model, true, gen));
    m_dropout = register_module("dropout", std::make_shared<nn::Dropout>(s.dropout));
    for (const auto* layer : {m_attn->W_q().get(), m_attn->W_k().get(), m_attn->W_v().get(), m_fc.get()})
        init_linear(*layer, kInitStd, gen);
    init_linear(*m_attn->W_o(), proj_std, gen);
    init_linear(*m_proj, proj_std, gen);
}

Tensor GptBlock::forward(const Tensor& x) {
    // x: (B, T, d)
    const Tensor h = m_ln_1->forward(x);
    const Tensor a = add(x, m_attn->forward(h, h, h, AttentionMask::causal()));
    return add(a, m_dropout->forward(m_proj->forward(gelu(m_fc->forward(m_ln_2->forward(a))))));
}

CharGpt::CharGpt(const GptSpec& s, Generator& gen) : Module("CharGpt"), m_spec(s) {
    if (s.vocab_size == 0 || s.block == 0 || s.d_model == 0 || s.layers == 0 || s.heads == 0)
        throw Error("CharGpt: vocab_size, block, d_model, heads and layers must be at least 1");
    if (s.d_model % s.heads != 0)
        throw Error(fmt::format("CharGpt: d_model ({}) must be a multiple of heads ({})", s.d_model, s.heads));
    m_wte = register_module("wte", std::make_shared<nn::Embedding>(s.vocab_size, s.d_model, gen));
    m_wpe = register_module("wpe", std::make_shared<nn::Embedding>(s.block, s.d_model, gen));
    nn::init::normal_(m_wte->weight(), 0.0, kInitStd, gen);
    nn::init::normal_(m_wpe->weight(), 0.0, kInitStd, gen);
    m_drop = register_module("drop", std::make_shared<nn::Dropout>(s.dropout));
    auto blocks = register_module("h", std::make_shared<nn::ModuleList>());
    for (std::size_t l = 0; l < s.layers; ++l) {
        m_blocks.push_back(std::make_shared<GptBlock>(s, gen));
        blocks->append(m_blocks.back());
    }
    m_ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{s.d_model}));
}

Tensor CharGpt::forward(const Tensor& idx) {
    // idx: (B, T) int64
    const std::size_t T = idx.size(1);
    if (T > m_spec.block)
        throw Error(fmt::format("CharGpt: a context of {} characters is longer than the block ({})", T, m_spec.block));
    const Tensor pos = arange(T);
    Tensor x = m_drop->forward(add(m_wte->forward(idx), m_wpe->forward(pos)));  // (B, T, d) + (T, d)
    for (const auto& block : m_blocks) x = block->forward(x);
    // The head is the token embedding: (B, T, d)·(V, d)ᵀ → (B, T, V), gradients from both uses summed.
    return matmul_t(m_ln_f->forward(x), m_wte->weight(), false, true);
}

Tensor CharGpt::attention_weights(std::size_t layer) const {
    return m_blocks.at(layer)->attention().attention_weights_copy();
}

CharGpt::ParameterSplit CharGpt::decay_split() const {
    ParameterSplit split;
    for (const auto& [name, p] : named_parameters()) {
        const bool embedding = name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0;
        const bool decays = p.dim() >= 2 && !embedding;
        (decays ? split.decay : split.no_decay).push_back(p);
        (decays ? split.decay_names : split.no_decay_names).push_back(name);
    }
    return split;
}

std::string CharGpt::extra_repr() const {
    return fmt::format("vocab={}, block={}, d_model={}, heads={}, layers={}, dropout={}", m_spec.vocab_size,
                       m_spec.block, m_spec.d_model, m_spec.heads, m_spec.layers, m_spec.dropout);
}

}  // namespace xgrad::examples
