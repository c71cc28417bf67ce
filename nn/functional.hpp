#pragma once
/// d2l's masking functions and the input checks the attention layers share. The masked softmax
/// and the fused head-attention ops are core ops (core/ops.hpp); they are named here too, so
/// that nn::masked_softmax and nn::AttentionMask read as in d2l.
#include <cstddef>

#include "core/attention_mask.hpp"
#include "core/ops.hpp"
#include "core/tensor.hpp"

namespace xgrad::nn {

using xgrad::AttentionMask;
using xgrad::masked_softmax;
using xgrad::ResolvedMask;

/// d2l's sequence_mask: a copy of X whose entries at positions j ≥ valid_len[i] along axis 1
/// are `value` (d2l writes into X in place; this returns a new tensor). No gradient reaches
/// the replaced entries.
/// Shapes: X (n, maxlen, ...) floating; valid_len (n,), int64 or floating whole numbers ≥ 0.
Tensor sequence_mask(const Tensor& X, const Tensor& valid_len, double value = 0.0);

// --- checks shared by the attention layers at entry; `who` names the layer in messages --------

/// Throws unless queries, keys and values are 3-D (batch, n, features) with one batch size and
/// keys and values of the same length n.
void check_attention_inputs(const char* who, const Tensor& queries, const Tensor& keys, const Tensor& values);

/// Throws unless t holds `dtype`, the dtype of the module's parameters, saying how to convert:
/// "Linear: input is float64 but the module's parameters are float32; convert the input with
/// .to(kFloat32), or the module with .to(kFloat64)".
void check_input_dtype(const char* who, const char* arg, const Tensor& t, Dtype dtype);

/// Throws unless t's last axis is `size`:
/// "MultiHeadAttention: keys must have last axis key_size = 3, got shape (2, 6, 4)".
void check_last_axis(const char* who, const char* arg, const Tensor& t, const char* size_name,
                     std::size_t size);

}  // namespace xgrad::nn
