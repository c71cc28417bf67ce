#pragma once
/// Fused multi-head attention that never holds the (queries × keys) matrix
/// (ops_flash_attention.cpp), beside head_attention_weights / head_attention_combine in ops.hpp.
#include <cstddef>
#include <cstdint>

#include "core/attention_mask.hpp"
#include "core/tensor.hpp"

namespace xgrad {

/// head_attention_combine(dropout(head_attention_weights(queries, keys, H, scale, mask)),
/// values, H) in one op that never holds a head's (Tq, Tk) scores: queries in blocks, keys
/// streamed in blocks with an online softmax, the output accumulated block by block. It saves
/// only its inputs, its output and one log-sum-exp per (head, query); the backward computes
/// each block's scores again from them. Memory: O(batch·H·Tq) beyond inputs and output.
/// Shapes, head layout and mask as head_attention_weights / head_attention_combine: queries
/// (batch, Tq, H·d), keys (batch, Tk, H·d), values (batch, Tk, H·dv) → (batch, Tq, H·dv).
/// Valid lengths and causal masks skip the key blocks they hide; a row keeping no key is
/// uniform over every key, as the materialised op (d2l's -1e6 fill).
/// `dropout` (in [0, 1)) zeroes weight (b·H + h, i, j) when flash_dropout_keep draws it so,
/// scaling the rest by 1/(1 − p): a counter-based draw keyed by (seed, b·H + h, i, j), so the
/// backward draws the same mask again and the result does not depend on the thread count.
/// float32 runs on OpenBLAS; under autocast (core/autocast.hpp) its products take bfloat16
/// roundings of their operands (queries, keys, values, and each block's weights) with float32
/// accumulation; float64 as float32. First-order gradients are fused too; second order
/// (create_graph) goes through the materialised ops.
Tensor flash_attention(const Tensor& queries, const Tensor& keys, const Tensor& values, std::size_t num_heads,
                       double scale, const AttentionMask& mask = AttentionMask(), double dropout = 0.0,
                       std::uint64_t seed = 0);
Tensor flash_attention(const Tensor& queries, const Tensor& keys, const Tensor& values, std::size_t num_heads,
                       double scale, const ResolvedMask& mask, double dropout = 0.0, std::uint64_t seed = 0);
/// flash_attention's dropout as a tensor of the weights' shape (batch·H, Tq, Tk) and `dtype`:
/// 1/(1 − p) where weight (b·H + h, i, j) is kept, 0 where dropped. What the materialised ops
/// multiply the weights by to give flash_attention's result (tests, second derivatives).
Tensor flash_dropout_keep(std::size_t batch_heads, std::size_t queries, std::size_t keys, double dropout,
                          std::uint64_t seed, Dtype dtype = kFloat32);
/// Whether flash_attention runs a head of Tq queries and Tk keys (d features) faster than the
/// materialised head_attention_weights + head_attention_combine on this build, as measured by
/// tools/bench --seq-sweep (DotProductAttention's automatic choice).
bool flash_attention_faster(std::size_t queries, std::size_t keys, std::size_t d);

}  // namespace xgrad
