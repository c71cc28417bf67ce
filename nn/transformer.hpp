#pragma once
/// The pieces of d2l's Transformer: the position-wise feed-forward network, the residual
/// AddNorm, and the encoder and decoder blocks composed from them and MultiHeadAttention.
#include <cstddef>
#include <memory>

#include "core/random.hpp"
#include "nn/activation.hpp"
#include "nn/dropout.hpp"
#include "nn/layer_norm.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"
#include "nn/multi_head_attention.hpp"

namespace xgrad::nn {

/// d2l's PositionWiseFFN: dense2(relu(dense1(X))), the same MLP at every position.
/// Shapes: X (..., ffn_num_input) → (..., ffn_num_outputs). Children dense1, relu, dense2.
class PositionWiseFFN : public Module {
public:
    PositionWiseFFN(std::size_t ffn_num_input, std::size_t ffn_num_hiddens, std::size_t ffn_num_outputs,
                    Generator& gen = default_generator());

    Tensor forward(const Tensor& X);
    Tensor operator()(const Tensor& X) { return forward(X); }

private:
    std::shared_ptr<Linear> m_dense1;
    std::shared_ptr<ReLU> m_relu;
    std::shared_ptr<Linear> m_dense2;
};

/// d2l's AddNorm: ln(dropout(Y) + X), the residual connection followed by layer norm.
/// Shapes: X and Y the same, ending with normalized_shape. Children dropout, ln.
class AddNorm : public Module {
public:
    AddNorm(Shape normalized_shape, double dropout);

    Tensor forward(const Tensor& X, const Tensor& Y);

private:
    std::shared_ptr<Dropout> m_dropout;
    std::shared_ptr<LayerNorm> m_ln;
};

/// d2l's EncoderBlock (post-norm):
///   Y = addnorm1(X, attention(X, X, X, valid_lens));  out = addnorm2(Y, ffn(Y)).
/// The FFN maps num_hiddens → ffn_num_hiddens → num_hiddens (d2l's separate ffn_num_input
/// is always num_hiddens, so it is not asked for). X is queries, keys and values at once, so
/// key_size, query_size and value_size must equal num_hiddens for the residual to fit; they are
/// kept for d2l's argument order (and checked).
/// Shapes: X (batch, T, num_hiddens), valid_lens undefined, (batch,) or (batch, T) → same as X.
/// Children: attention, addnorm1, ffn, addnorm2.
class TransformerEncoderBlock : public Module {
public:
    TransformerEncoderBlock(std::size_t key_size, std::size_t query_size, std::size_t value_size,
                            std::size_t num_hiddens, Shape norm_shape, std::size_t ffn_num_hiddens,
                            std::size_t num_heads, double dropout, bool use_bias = false,
                            Generator& gen = default_generator());

    Tensor forward(const Tensor& X, const Tensor& valid_lens = Tensor());

    const std::shared_ptr<MultiHeadAttention>& attention() const { return m_attention; }

private:
    std::shared_ptr<MultiHeadAttention> m_attention;
    std::shared_ptr<AddNorm> m_addnorm1;
    std::shared_ptr<PositionWiseFFN> m_ffn;
    std::shared_ptr<AddNorm> m_addnorm2;
};

/// d2l's DecoderBlock:
///   X2 = attention1(X, KV, KV, dec_valid_lens)      masked self-attention
///   Y  = addnorm1(X, X2)
///   Y2 = attention2(Y, enc_outputs, enc_outputs, enc_valid_lens)   cross-attention
///   Z  = addnorm2(Y, Y2);  out = addnorm3(Z, ffn(Z))
/// where KV = concat(earlier inputs, X) along time and dec_valid_lens (batch, T) has row
/// [t0+1, ..., t0+T] (t0 = number of earlier steps): position t0+i sees itself and all before.
///
/// Unlike d2l, which masks only in training mode, the self-attention is causal in train and eval
/// mode alike, so a whole sequence (teacher forcing) gives the same result in both modes, and
/// decoding step by step with the cache gives the same outputs as the whole sequence at once.
/// Shapes: X (batch, T, num_hiddens), enc_outputs (batch, T_enc, num_hiddens), enc_valid_lens
/// undefined, (batch,) or (batch, T) → (batch, T, num_hiddens).
/// key_size, query_size and value_size must equal num_hiddens, as for the encoder block.
/// Children: attention1, addnorm1, attention2, addnorm2, ffn, addnorm3.
class TransformerDecoderBlock : public Module {
public:
    TransformerDecoderBlock(std::size_t key_size, std::size_t query_size, std::size_t value_size,
                            std::size_t num_hiddens, Shape norm_shape, std::size_t ffn_num_hiddens,
                            std::size_t num_heads, double dropout, bool use_bias = false,
                            Generator& gen = default_generator());

    /// The whole target sequence at once (training, teacher-forced evaluation).
    Tensor forward(const Tensor& X, const Tensor& enc_outputs, const Tensor& enc_valid_lens = Tensor());
    /// Incremental decoding: X holds the next step(s); `cache` holds this block's inputs from the
    /// earlier steps, (batch, t0, num_hiddens), or is undefined at the start, and is replaced by
    /// the concatenation with X (d2l's state[2][i]). One cache per block.
    Tensor forward(const Tensor& X, const Tensor& enc_outputs, const Tensor& enc_valid_lens, Tensor& cache);

    const std::shared_ptr<MultiHeadAttention>& self_attention() const { return m_attention1; }
    const std::shared_ptr<MultiHeadAttention>& cross_attention() const { return m_attention2; }

private:
    std::shared_ptr<MultiHeadAttention> m_attention1;
    std::shared_ptr<AddNorm> m_addnorm1;
    std::shared_ptr<MultiHeadAttention> m_attention2;
    std::shared_ptr<AddNorm> m_addnorm2;
    std::shared_ptr<PositionWiseFFN> m_ffn;
    std::shared_ptr<AddNorm> m_addnorm3;
};

}  // namespace xgrad::nn
