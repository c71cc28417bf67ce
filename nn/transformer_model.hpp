#pragma once
/// d2l's whole-model Transformer classes: TransformerEncoder (embedding, positions, encoder
/// blocks) and TransformerDecoder (the same with decoder blocks, the state d2l threads through
/// them, and the output Linear).
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "core/random.hpp"
#include "nn/container.hpp"
#include "nn/embedding.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"
#include "nn/positional_encoding.hpp"
#include "nn/transformer.hpp"

namespace xgrad::nn {

/// How a Transformer gives its tokens positions: d2l's fixed sinusoids (PositionalEncoding) or
/// a learned table (LearnedPositionalEmbedding).
enum class Positions { sinusoidal, learned };

/// The options of TransformerEncoder and TransformerDecoder: d2l's arguments, with two knobs
/// d2l does not have (positions, scale_embeddings: d2l's choices are the defaults) and the
/// positions table's max_len (d2l's PositionalEncoding default, 1000).
struct TransformerOptions {
    TransformerOptions(SizeArg vocab_size, SizeArg num_hiddens, SizeArg ffn_num_hiddens, SizeArg num_heads,
                       SizeArg num_layers)
        : m_vocab_size(vocab_size.get("TransformerOptions", "vocab_size")),
          m_num_hiddens(num_hiddens.get("TransformerOptions", "num_hiddens")),
          m_ffn_num_hiddens(ffn_num_hiddens.get("TransformerOptions", "ffn_num_hiddens")),
          m_num_heads(num_heads.get("TransformerOptions", "num_heads")),
          m_num_layers(num_layers.get("TransformerOptions", "num_layers")) {}
    XGRAD_SIZE_ARG(TransformerOptions, vocab_size, 0);
    XGRAD_SIZE_ARG(TransformerOptions, num_hiddens, 0);
    XGRAD_SIZE_ARG(TransformerOptions, ffn_num_hiddens, 0);
    XGRAD_SIZE_ARG(TransformerOptions, num_heads, 0);
    XGRAD_SIZE_ARG(TransformerOptions, num_layers, 0);
    XGRAD_SIZE_ARG(TransformerOptions, key_size, 0);       ///< 0: num_hiddens
    XGRAD_SIZE_ARG(TransformerOptions, query_size, 0);     ///< 0: num_hiddens
    XGRAD_SIZE_ARG(TransformerOptions, value_size, 0);     ///< 0: num_hiddens
    XGRAD_SIZE_ARG(TransformerOptions, ffn_num_input, 0);  ///< 0: num_hiddens
    XGRAD_ARG(TransformerOptions, Shape, norm_shape, {});  ///< empty: {num_hiddens}
    XGRAD_ARG(TransformerOptions, double, dropout, 0.0);
    XGRAD_BOOL_ARG(TransformerOptions, use_bias, false);
    XGRAD_SIZE_ARG(TransformerOptions, max_len, 1000);
    XGRAD_ARG(TransformerOptions, Positions, positions, Positions::sinusoidal);
    /// Multiply the embeddings by √num_hiddens before adding positions (d2l does).
    XGRAD_BOOL_ARG(TransformerOptions, scale_embeddings, true);
};

/// d2l's TransformerEncoder:
///   X = pos_encoding(embedding(X) · √num_hiddens);  X = blk(X, valid_lens) for blk in blks
/// d2l's argument order: TransformerEncoder(vocab_size, key_size, query_size, value_size,
/// num_hiddens, norm_shape, ffn_num_input, ffn_num_hiddens, num_heads, num_layers, dropout,
/// use_bias = false). Children: embedding, pos_encoding, blks (a Sequential of block0, block1,
/// ... as d2l's add_module("block" + str(i))), so parameter names are d2l's
/// ("blks.block0.attention.W_q.weight").
/// Shapes: X int64 (batch, T), valid_lens undefined, (batch,) or (batch, T) → (batch, T, num_hiddens).
class TransformerEncoder : public Module, public Callable<TransformerEncoder> {
public:
    TransformerEncoder(SizeArg vocab_size, SizeArg key_size, SizeArg query_size, SizeArg value_size,
                       SizeArg num_hiddens, Shape norm_shape, SizeArg ffn_num_input, SizeArg ffn_num_hiddens,
                       SizeArg num_heads, SizeArg num_layers, double dropout, BoolArg use_bias = false,
                       Generator& gen = default_generator());
    explicit TransformerEncoder(const TransformerOptions& options, Generator& gen = default_generator());

    Tensor forward(const Tensor& X, const Tensor& valid_lens = Tensor());

    /// d2l's attention_weights: per block, blk.attention.attention.attention_weights of the last
    /// forward, (batch·num_heads, T, T) each: the blocks' tensors themselves (the handles alias
    /// them, see DotProductAttention::attention_weights).
    std::vector<Tensor> attention_weights() const;

    const std::shared_ptr<Sequential>& blks() const { return m_blks; }
    TransformerEncoderBlock& block(std::size_t i) const { return m_blks->at<TransformerEncoderBlock>(i); }

private:
    void build(const TransformerOptions& options, Generator& gen);
    std::size_t m_num_hiddens;
    bool m_scale;
    std::shared_ptr<Embedding> m_embedding;
    std::shared_ptr<Module> m_pos_encoding;
    std::shared_ptr<Sequential> m_blks;
};

/// d2l's TransformerDecoder:
///   state = init_state(enc_outputs, enc_valid_lens)
///   X = pos_encoding(embedding(X) · √num_hiddens);  X, state = blk(X, state) for blk in blks
///   return dense(X), state
/// Decoding step by step feeds one token at a time with the state the last call returned; each
/// block keeps its earlier inputs in state.key_values[i]. Unlike d2l, whose PositionalEncoding
/// gives every step position 0 while predicting, the positions continue from the number of
/// steps already in the state, so decoding step by step matches the whole sequence.
/// Self-attention masking follows the blocks (causal in training, none in eval; see
/// TransformerDecoderBlock). d2l's argument order: TransformerDecoder(vocab_size, key_size,
/// query_size, value_size, num_hiddens, norm_shape, ffn_num_input, ffn_num_hiddens, num_heads,
/// num_layers, dropout). Children: embedding, pos_encoding, blks, dense.
/// Shapes: X int64 (batch, T) → logits (batch, T, vocab_size).
class TransformerDecoder : public Module, public Callable<TransformerDecoder> {
public:
    TransformerDecoder(SizeArg vocab_size, SizeArg key_size, SizeArg query_size, SizeArg value_size,
                       SizeArg num_hiddens, Shape norm_shape, SizeArg ffn_num_input, SizeArg ffn_num_hiddens,
                       SizeArg num_heads, SizeArg num_layers, double dropout, Generator& gen = default_generator());
    explicit TransformerDecoder(const TransformerOptions& options, Generator& gen = default_generator());

    /// [enc_outputs, enc_valid_lens, [None] * num_layers].
    TransformerDecoderState init_state(const Tensor& enc_outputs, const Tensor& enc_valid_lens = Tensor()) const;

    std::pair<Tensor, TransformerDecoderState> forward(const Tensor& X, TransformerDecoderState& state);
    /// With the blocks' self-attention mask given, whatever the mode (AttentionMask::causal()
    /// to evaluate a whole target sequence as training sees it).
    std::pair<Tensor, TransformerDecoderState> forward(const Tensor& X, TransformerDecoderState& state,
                                                       const AttentionMask& self_mask);

    /// d2l's attention_weights: [0][i] block i's self-attention weights, [1][i] its
    /// cross-attention weights, each (batch·num_heads, T, keys) from the last forward: the
    /// blocks' tensors themselves (the handles alias them).
    std::vector<std::vector<Tensor>> attention_weights() const;

    std::size_t num_layers() const { return m_blks->size(); }
    const std::shared_ptr<Sequential>& blks() const { return m_blks; }
    TransformerDecoderBlock& block(std::size_t i) const { return m_blks->at<TransformerDecoderBlock>(i); }

private:
    void build(const TransformerOptions& options, Generator& gen);
    template <class Step>
    std::pair<Tensor, TransformerDecoderState> run(const Tensor& X, TransformerDecoderState& state, Step step);
    template <class Step>
    std::pair<Tensor, TransformerDecoderState> run_checked(const Tensor& X, TransformerDecoderState& state, Step step);

    std::size_t m_num_hiddens;
    bool m_scale;
    std::shared_ptr<Embedding> m_embedding;
    std::shared_ptr<Module> m_pos_encoding;
    std::shared_ptr<Sequential> m_blks;
    std::shared_ptr<Linear> m_dense;
};

}  // namespace xgrad::nn
