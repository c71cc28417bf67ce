#include "dot_product_attention.hpp"

#include <cmath>

#include "core/ops.hpp"

namespace xgrad::nn {

DotProductAttention::DotProductAttention(double dropout)
    : Module("DotProductAttention"),
      m_dropout(register_module("dropout", std::make_shared<Dropout>(dropout))) {}

Tensor DotProductAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                    const Tensor& valid_lens) {
    return forward(queries, keys, values, AttentionMask::valid_lens(valid_lens));
}

Tensor DotProductAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                    const AttentionMask& mask) {
    // queries: (batch, Tq, d), keys: (batch, Tk, d), values: (batch, Tk, v)
    check_attention_inputs("DotProductAttention", queries, keys, values);
    if (queries.size(2) != keys.size(2))
        throw Error(
            fmt::format("DotProductAttention: queries and keys must have the same last axis, got "
                        "queries {} and keys {}",
                        shape_str(queries.shape()), shape_str(keys.shape())));
    check_attention_mask("DotProductAttention", mask, queries.size(0), queries.size(1), keys.size(1));
    const double d = static_cast<double>(queries.size(2));
    // (batch, Tq, Tk): q·kᵀ/√d in one gemm per batch, k read transposed in place
    const Tensor scores = matmul_t(queries, keys, false, true, 1.0 / std::sqrt(d));
    m_attention_weights = masked_softmax(scores, mask);
    return bmm(m_dropout->forward(m_attention_weights), values);  // (batch, Tq, v)
}

}  // namespace xgrad::nn
