#include "transformer.hpp"

#include "core/call_context.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

namespace {

struct BlockSizes {
    std::size_t key_size, query_size, value_size, num_hiddens, ffn_num_input, ffn_num_hiddens, num_heads;
    Shape norm_shape;
};

// X is the self-attention's queries, keys and values and is added back by the residual; the FFN
// reads the AddNorm's output. So every size d2l asks for must be num_hiddens (d2l itself fails
// at the first forward otherwise), and norm_shape must end with it.
template <class Options>
BlockSizes block_sizes(const char* who, const Options& o) {
    const std::size_t d = o.num_hiddens();
    auto or_d = [d](std::size_t v) { return v == 0 ? d : v; };
    BlockSizes s{or_d(o.key_size()), or_d(o.query_size()), or_d(o.value_size()), d, or_d(o.ffn_num_input()),
                 o.ffn_num_hiddens(), o.num_heads(), o.norm_shape().empty() ? Shape{d} : o.norm_shape()};
    if (d == 0 || s.ffn_num_hiddens == 0)
        throw Error(fmt::format("{}: num_hiddens and ffn_num_hiddens must be positive, got {} and {}", who, d,
                                s.ffn_num_hiddens));
    if (s.key_size != d || s.query_size != d || s.value_size != d || s.ffn_num_input != d)
        throw Error(fmt::format(
            "{}: key_size, query_size, value_size and ffn_num_input must equal num_hiddens = {} (X is the "
            "queries, keys and values, is added back, and feeds the FFN), got {}, {}, {} and {}",
            who, d, s.key_size, s.query_size, s.value_size, s.ffn_num_input));
    if (s.norm_shape.back() != d)
        throw Error(fmt::format("{}: norm_shape must end with num_hiddens = {}, got {}", who, d,
                                shape_str(s.norm_shape)));
    return s;
}

std::shared_ptr<MultiHeadAttention> make_attention(const BlockSizes& s, double dropout, bool bias, Generator& gen) {
    return std::make_shared<MultiHeadAttention>(s.key_size, s.query_size, s.value_size, s.num_hiddens, s.num_heads,
                                                dropout, bias, gen);
}

}  // namespace

// The modules below are constructed as the user's call (detail::enter_constructor): what a
// submodule refuses, or running out of memory for its weights, names the module being made.
PositionWiseFFN::PositionWiseFFN(SizeArg ffn_num_input, SizeArg ffn_num_hiddens, SizeArg ffn_num_outputs,
                                 Generator& gen) try
    : Module(detail::enter_constructor("PositionWiseFFN")),
      m_dense1(
          register_module("dense1", std::make_shared<Linear>(ffn_num_input, ffn_num_hiddens, true, gen))),
      m_relu(register_module("relu", std::make_shared<ReLU>())),
      m_dense2(
          register_module("dense2", std::make_shared<Linear>(ffn_num_hiddens, ffn_num_outputs, true, gen))) {
    detail::leave_call();
} catch (...) {
    detail::leave_constructor("PositionWiseFFN");
}

Tensor PositionWiseFFN::forward(const Tensor& X) {
    return as_call("PositionWiseFFN", [&]() -> Tensor {
        return m_dense2->forward(m_relu->forward(m_dense1->forward(X)));
    });
}

AddNorm::AddNorm(const IntList& normalized_shape, double dropout) try
    : Module(detail::enter_constructor("AddNorm")),
      m_dropout(register_module("dropout", std::make_shared<Dropout>(dropout))),
      m_ln(register_module("ln", std::make_shared<LayerNorm>(normalized_shape))) {
    detail::leave_call();
} catch (...) {
    detail::leave_constructor("AddNorm");
}

Tensor AddNorm::forward(const Tensor& X, const Tensor& Y) {
    return as_call("AddNorm", [&]() -> Tensor {
        if (X.shape() != Y.shape())
            throw Error(fmt::format("AddNorm: X and Y must have the same shape, got {} and {}",
                                    shape_str(X.shape()), shape_str(Y.shape())));
        // ln(dropout(Y) + X) with the sum fused into the norm; float addition commutes, so the
        // operands' order does not change a bit.
        return m_ln->forward_residual(m_dropout->forward(Y), X);
    });
}

TransformerEncoderBlock::TransformerEncoderBlock(SizeArg key_size, SizeArg query_size, SizeArg value_size,
                                                 SizeArg num_hiddens, Shape norm_shape, SizeArg ffn_num_input,
                                                 SizeArg ffn_num_hiddens, SizeArg num_heads, double dropout,
                                                 BoolArg use_bias, Generator& gen)
    : TransformerEncoderBlock(TransformerEncoderBlockOptions(num_hiddens, ffn_num_hiddens, num_heads)
                                  .key_size(key_size)
                                  .query_size(query_size)
                                  .value_size(value_size)
                                  .norm_shape(std::move(norm_shape))
                                  .ffn_num_input(ffn_num_input)
                                  .dropout(dropout)
                                  .use_bias(use_bias),
                              gen) {}

TransformerEncoderBlock::TransformerEncoderBlock(const TransformerEncoderBlockOptions& o, Generator& gen)
    : Module("TransformerEncoderBlock") {
    as_call("TransformerEncoderBlock", [&] {
        const BlockSizes s = block_sizes("TransformerEncoderBlock", o);
        m_attention = register_module("attention", make_attention(s, o.dropout(), o.use_bias(), gen));
        m_addnorm1 = register_module("addnorm1", std::make_shared<AddNorm>(s.norm_shape, o.dropout()));
        m_ffn = register_module("ffn", std::make_shared<PositionWiseFFN>(s.ffn_num_input, s.ffn_num_hiddens,
                                                                         s.num_hiddens, gen));
        m_addnorm2 = register_module("addnorm2", std::make_shared<AddNorm>(s.norm_shape, o.dropout()));
    });
}

Tensor TransformerEncoderBlock::forward(const Tensor& X, const Tensor& valid_lens) {
    return as_call("TransformerEncoderBlock", [&]() -> Tensor {
        // X: (batch, T, num_hiddens)
        const Tensor Y = m_addnorm1->forward(X, m_attention->forward(X, X, X, valid_lens));
        return m_addnorm2->forward(Y, m_ffn->forward(Y));
    });
}

TransformerDecoderBlock::TransformerDecoderBlock(SizeArg key_size, SizeArg query_size, SizeArg value_size,
                                                 SizeArg num_hiddens, Shape norm_shape, SizeArg ffn_num_input,
                                                 SizeArg ffn_num_hiddens, SizeArg num_heads, double dropout,
                                                 SizeArg i, Generator& gen)
    : TransformerDecoderBlock(TransformerDecoderBlockOptions(num_hiddens, ffn_num_hiddens, num_heads)
                                  .key_size(key_size)
                                  .query_size(query_size)
                                  .value_size(value_size)
                                  .norm_shape(std::move(norm_shape))
                                  .ffn_num_input(ffn_num_input)
                                  .dropout(dropout)
                                  .i(i),
                              gen) {}

TransformerDecoderBlock::TransformerDecoderBlock(const TransformerDecoderBlockOptions& o, Generator& gen)
    : Module("TransformerDecoderBlock"), m_i(o.i()) {
    as_call("TransformerDecoderBlock", [&] {
        const BlockSizes s = block_sizes("TransformerDecoderBlock", o);
        m_attention1 = register_module("attention1", make_attention(s, o.dropout(), o.use_bias(), gen));
        m_addnorm1 = register_module("addnorm1", std::make_shared<AddNorm>(s.norm_shape, o.dropout()));
        m_attention2 = register_module("attention2", make_attention(s, o.dropout(), o.use_bias(), gen));
        m_addnorm2 = register_module("addnorm2", std::make_shared<AddNorm>(s.norm_shape, o.dropout()));
        m_ffn = register_module("ffn", std::make_shared<PositionWiseFFN>(s.ffn_num_input, s.ffn_num_hiddens,
                                                                         s.num_hiddens, gen));
        m_addnorm3 = register_module("addnorm3", std::make_shared<AddNorm>(s.norm_shape, o.dropout()));
    });
}

namespace {

void check_decoder_input(const Tensor& X) {
    if (X.dim() != 3)
        throw Error(
            fmt::format("TransformerDecoderBlock: X must be 3-D (batch, steps, num_hiddens), got shape {}",
                        shape_str(X.shape())));
}

// d2l: causal while training (bottom-right aligned: step t0+i sees itself and every earlier
// step), nothing in eval mode.
AttentionMask mode_mask(bool training) { return training ? AttentionMask::causal() : AttentionMask(); }

}  // namespace

std::pair<Tensor, TransformerDecoderState> TransformerDecoderBlock::forward(const Tensor& X,
                                                                             TransformerDecoderState& state) {
    return as_call("TransformerDecoderBlock", [&]() -> std::pair<Tensor, TransformerDecoderState> {
        return forward(X, state, mode_mask(is_training()));
    });
}

std::pair<Tensor, TransformerDecoderState> TransformerDecoderBlock::forward(const Tensor& X,
                                                                             TransformerDecoderState& state,
                                                                             const AttentionMask& self_mask) {
    return as_call("TransformerDecoderBlock", [&]() -> std::pair<Tensor, TransformerDecoderState> {
        check_decoder_input(X);
        if (m_i >= state.key_values.size())
            throw Error(fmt::format("TransformerDecoderBlock: this is block i = {} but the state has key_values for {} "
                                    "block(s) (make the state with TransformerDecoder::init_state, or give key_values "
                                    "one entry per block)",
                                    m_i, state.key_values.size()));
        const Tensor& cache = state.key_values[m_i];
        if (cache.defined() && (cache.dim() != 3 || cache.size(0) != X.size(0) || cache.size(2) != X.size(2)))
            throw Error(fmt::format("TransformerDecoderBlock: state.key_values[{}] must have shape ({}, steps, {}) to "
                                    "go with X {}, got {}",
                                    m_i, X.size(0), X.size(2), shape_str(X.shape()), shape_str(cache.shape())));
        const Tensor key_values = cache.defined() ? concat({cache, X}, 1) : X;  // (batch, t0 + T, d)
        Tensor out = run(X, key_values, state.enc_outputs, state.enc_valid_lens, self_mask);
        state.key_values[m_i] = key_values;  // only once the step went through
        return {std::move(out), state};
    });
}

Tensor TransformerDecoderBlock::forward(const Tensor& X, const Tensor& enc_outputs, const Tensor& enc_valid_lens) {
    return as_call("TransformerDecoderBlock", [&]() -> Tensor {
        return forward(X, enc_outputs, enc_valid_lens, mode_mask(is_training()));
    });
}

Tensor TransformerDecoderBlock::forward(const Tensor& X, const Tensor& enc_outputs, const Tensor& enc_valid_lens,
                                        const AttentionMask& self_mask) {
    return as_call("TransformerDecoderBlock", [&]() -> Tensor {
        check_decoder_input(X);
        return run(X, X, enc_outputs, enc_valid_lens, self_mask);
    });
}

Tensor TransformerDecoderBlock::run(const Tensor& X, const Tensor& key_values, const Tensor& enc_outputs,
                                    const Tensor& enc_valid_lens, const AttentionMask& self_mask) {
    // X: (batch, T, num_hiddens); key_values: (batch, t0 + T, num_hiddens)
    const Tensor Y = m_addnorm1->forward(X, m_attention1->forward(X, key_values, key_values, self_mask));
    const Tensor Z =
        m_addnorm2->forward(Y, m_attention2->forward(Y, enc_outputs, enc_outputs, enc_valid_lens));
    return m_addnorm3->forward(Z, m_ffn->forward(Z));
}

}  // namespace xgrad::nn
