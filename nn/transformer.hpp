#pragma once
/// The pieces of d2l's Transformer: the position-wise feed-forward network, the residual
/// AddNorm, and the encoder and decoder blocks composed from them and MultiHeadAttention.
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

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
class PositionWiseFFN : public Module, public Callable<PositionWiseFFN> {
public:
    PositionWiseFFN(SizeArg ffn_num_input, SizeArg ffn_num_hiddens, SizeArg ffn_num_outputs,
                    Generator& gen = default_generator());

    Tensor forward(const Tensor& X);

private:
    std::shared_ptr<Linear> m_dense1;
    std::shared_ptr<ReLU> m_relu;
    std::shared_ptr<Linear> m_dense2;
};

/// d2l's AddNorm: ln(dropout(Y) + X), the residual connection followed by layer norm, the sum
/// and the norm one op (ln.forward_residual, core add_layer_norm).
/// Shapes: X and Y the same, ending with normalized_shape. Children dropout, ln.
class AddNorm : public Module, public Callable<AddNorm> {
public:
    AddNorm(const IntList& normalized_shape, double dropout);

    Tensor forward(const Tensor& X, const Tensor& Y);

private:
    std::shared_ptr<Dropout> m_dropout;
    std::shared_ptr<LayerNorm> m_ln;
};

/// The options of an encoder block (and, with i, of a decoder block), as LibTorch's
/// TransformerEncoderLayerOptions: the three sizes every block needs, the rest chainable.
///   TransformerEncoderBlock blk(TransformerEncoderBlockOptions(24, 48, 8).dropout(0.5));
/// key_size, query_size, value_size and ffn_num_input: 0 (default) means num_hiddens;
/// norm_shape: empty (default) means {num_hiddens}.
struct TransformerEncoderBlockOptions {
    TransformerEncoderBlockOptions(SizeArg num_hiddens, SizeArg ffn_num_hiddens, SizeArg num_heads)
        : m_num_hiddens(num_hiddens.get("TransformerEncoderBlockOptions", "num_hiddens")),
          m_ffn_num_hiddens(ffn_num_hiddens.get("TransformerEncoderBlockOptions", "ffn_num_hiddens")),
          m_num_heads(num_heads.get("TransformerEncoderBlockOptions", "num_heads")) {}
    XGRAD_SIZE_ARG(TransformerEncoderBlockOptions, num_hiddens, 0);
    XGRAD_SIZE_ARG(TransformerEncoderBlockOptions, ffn_num_hiddens, 0);
    XGRAD_SIZE_ARG(TransformerEncoderBlockOptions, num_heads, 0);
    XGRAD_SIZE_ARG(TransformerEncoderBlockOptions, key_size, 0);
    XGRAD_SIZE_ARG(TransformerEncoderBlockOptions, query_size, 0);
    XGRAD_SIZE_ARG(TransformerEncoderBlockOptions, value_size, 0);
    XGRAD_SIZE_ARG(TransformerEncoderBlockOptions, ffn_num_input, 0);
    XGRAD_ARG(TransformerEncoderBlockOptions, Shape, norm_shape, {});
    XGRAD_ARG(TransformerEncoderBlockOptions, double, dropout, 0.0);
    XGRAD_BOOL_ARG(TransformerEncoderBlockOptions, use_bias, false);
};

/// The options of a decoder block: those of the encoder block and d2l's block index i (its
/// slot in TransformerDecoderState::key_values).
struct TransformerDecoderBlockOptions {
    TransformerDecoderBlockOptions(SizeArg num_hiddens, SizeArg ffn_num_hiddens, SizeArg num_heads)
        : m_num_hiddens(num_hiddens.get("TransformerDecoderBlockOptions", "num_hiddens")),
          m_ffn_num_hiddens(ffn_num_hiddens.get("TransformerDecoderBlockOptions", "ffn_num_hiddens")),
          m_num_heads(num_heads.get("TransformerDecoderBlockOptions", "num_heads")) {}
    XGRAD_SIZE_ARG(TransformerDecoderBlockOptions, num_hiddens, 0);
    XGRAD_SIZE_ARG(TransformerDecoderBlockOptions, ffn_num_hiddens, 0);
    XGRAD_SIZE_ARG(TransformerDecoderBlockOptions, num_heads, 0);
    XGRAD_SIZE_ARG(TransformerDecoderBlockOptions, key_size, 0);
    XGRAD_SIZE_ARG(TransformerDecoderBlockOptions, query_size, 0);
    XGRAD_SIZE_ARG(TransformerDecoderBlockOptions, value_size, 0);
    XGRAD_SIZE_ARG(TransformerDecoderBlockOptions, ffn_num_input, 0);
    XGRAD_ARG(TransformerDecoderBlockOptions, Shape, norm_shape, {});
    XGRAD_ARG(TransformerDecoderBlockOptions, double, dropout, 0.0);
    XGRAD_BOOL_ARG(TransformerDecoderBlockOptions, use_bias, false);
    XGRAD_SIZE_ARG(TransformerDecoderBlockOptions, i, 0);
};

/// d2l's EncoderBlock (post-norm):
///   Y = addnorm1(X, attention(X, X, X, valid_lens));  out = addnorm2(Y, ffn(Y)).
/// The constructor takes d2l's arguments in d2l's order:
///   TransformerEncoderBlock(key_size, query_size, value_size, num_hiddens, norm_shape,
///                           ffn_num_input, ffn_num_hiddens, num_heads, dropout, use_bias = false)
/// so d2l's `EncoderBlock(24, 24, 24, 24, [100, 24], 24, 48, 8, 0.5)` is
/// `TransformerEncoderBlock(24, 24, 24, 24, {100, 24}, 24, 48, 8, 0.5)`. Sizes are integers
/// and use_bias a bool: an argument in the wrong place does not compile.
/// The sizes size what d2l sizes: the attention's W_q/W_k/W_v take query_size/key_size/
/// value_size features and the FFN takes ffn_num_input. X is the queries, keys and values and
/// is added back by the residual, so in d2l any of them other than num_hiddens fails at the
/// first forward; here the constructor says so. norm_shape is LayerNorm's normalized_shape
/// (d2l's [100, 24] normalises over the steps and the features: X must then have 100 steps).
/// Shapes: X (batch, T, num_hiddens), valid_lens undefined, (batch,) or (batch, T) → same as X.
/// Children: attention, addnorm1, ffn, addnorm2.
class TransformerEncoderBlock : public Module, public Callable<TransformerEncoderBlock> {
public:
    TransformerEncoderBlock(SizeArg key_size, SizeArg query_size, SizeArg value_size, SizeArg num_hiddens,
                            Shape norm_shape, SizeArg ffn_num_input, SizeArg ffn_num_hiddens, SizeArg num_heads,
                            double dropout, BoolArg use_bias = false, Generator& gen = default_generator());
    explicit TransformerEncoderBlock(const TransformerEncoderBlockOptions& options,
                                     Generator& gen = default_generator());

    Tensor forward(const Tensor& X, const Tensor& valid_lens = Tensor());

    /// d2l's blk.attention; its attention()->attention_weights() is d2l's
    /// blk.attention.attention.attention_weights, (batch·num_heads, T, T).
    const std::shared_ptr<MultiHeadAttention>& attention() const { return m_attention; }

private:
    std::shared_ptr<MultiHeadAttention> m_attention;
    std::shared_ptr<AddNorm> m_addnorm1;
    std::shared_ptr<PositionWiseFFN> m_ffn;
    std::shared_ptr<AddNorm> m_addnorm2;
};

/// d2l's decoder state, `[enc_outputs, enc_valid_lens, [None] * num_layers]`: what the encoder
/// gave, and for block i the decoder inputs it has seen so far (key_values[i], undefined before
/// the first step). TransformerDecoder::init_state makes one.
struct TransformerDecoderState {
    Tensor enc_outputs;             ///< (batch, T_enc, num_hiddens)
    Tensor enc_valid_lens;          ///< undefined, (batch,) or (batch, T)
    std::vector<Tensor> key_values; ///< one per block: (batch, steps so far, num_hiddens)
};

/// d2l's DecoderBlock:
///   key_values = concat(state.key_values[i], X) along time;  state.key_values[i] = key_values
///   X2 = attention1(X, key_values, key_values, dec_valid_lens)      self-attention
///   Y  = addnorm1(X, X2)
///   Y2 = attention2(Y, enc_outputs, enc_outputs, enc_valid_lens)    cross-attention
///   Z  = addnorm2(Y, Y2);  out = addnorm3(Z, ffn(Z))
/// As d2l: in training mode the self-attention is causal (dec_valid_lens row [1, ..., T], each
/// step sees itself and the earlier ones; after cached steps, t0 + [1, ..., T]); in eval mode
/// there is no mask, so a whole sequence attends to every key (d2l's book example) and step-by-
/// step decoding sees the cached steps and itself. To evaluate a whole target sequence causally
/// in eval mode, pass AttentionMask::causal() to the self_mask overload.
/// The constructor takes d2l's arguments in d2l's order, i being the block's index in the state:
///   TransformerDecoderBlock(key_size, query_size, value_size, num_hiddens, norm_shape,
///                           ffn_num_input, ffn_num_hiddens, num_heads, dropout, i)
/// with the same size rules as the encoder block (d2l's decoder block has no use_bias; the
/// options have one). Shapes: X (batch, T, num_hiddens), enc_outputs (batch, T_enc, num_hiddens)
/// → (batch, T, num_hiddens). Children: attention1, addnorm1, attention2, addnorm2, ffn, addnorm3.
class TransformerDecoderBlock : public Module, public Callable<TransformerDecoderBlock> {
public:
    TransformerDecoderBlock(SizeArg key_size, SizeArg query_size, SizeArg value_size, SizeArg num_hiddens,
                            Shape norm_shape, SizeArg ffn_num_input, SizeArg ffn_num_hiddens, SizeArg num_heads,
                            double dropout, SizeArg i, Generator& gen = default_generator());
    explicit TransformerDecoderBlock(const TransformerDecoderBlockOptions& options,
                                     Generator& gen = default_generator());

    /// d2l's forward(X, state): reads and extends state.key_values[i()]; returns the output and
    /// the state (also updated in place), so both `std::tie(X, state) = blk(X, state)` and
    /// `X = blk(X, state).first` work.
    std::pair<Tensor, TransformerDecoderState> forward(const Tensor& X, TransformerDecoderState& state);
    /// The same with the self-attention mask given, whatever the mode.
    std::pair<Tensor, TransformerDecoderState> forward(const Tensor& X, TransformerDecoderState& state,
                                                       const AttentionMask& self_mask);
    /// The whole target sequence with no state (training, or eval with the mode's mask).
    Tensor forward(const Tensor& X, const Tensor& enc_outputs, const Tensor& enc_valid_lens = Tensor());
    /// The same with the self-attention mask given, whatever the mode (AttentionMask::causal()
    /// for teacher-forced evaluation).
    Tensor forward(const Tensor& X, const Tensor& enc_outputs, const Tensor& enc_valid_lens,
                   const AttentionMask& self_mask);

    std::size_t i() const { return m_i; }
    const std::shared_ptr<MultiHeadAttention>& attention1() const { return m_attention1; }
    const std::shared_ptr<MultiHeadAttention>& attention2() const { return m_attention2; }

private:
    Tensor run(const Tensor& X, const Tensor& key_values, const Tensor& enc_outputs, const Tensor& enc_valid_lens,
               const AttentionMask& self_mask);

    std::size_t m_i;
    std::shared_ptr<MultiHeadAttention> m_attention1;
    std::shared_ptr<AddNorm> m_addnorm1;
    std::shared_ptr<MultiHeadAttention> m_attention2;
    std::shared_ptr<AddNorm> m_addnorm2;
    std::shared_ptr<PositionWiseFFN> m_ffn;
    std::shared_ptr<AddNorm> m_addnorm3;
};

}  // namespace xgrad::nn
