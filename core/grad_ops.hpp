#pragma once
/// The ops that gradient formulas are made of, besides the public ones of ops.hpp: each fused
/// kernel's backward is an op of its own, with its own formula (so a gradient through it is
/// differentiable again), as torch's threshold_backward and softmax_backward_data. Internal to
/// core/: user code differentiates the public ops.
#include <cstddef>
#include <memory>
#include <vector>

#include "core/ops.hpp"

#include "core/attention_mask.hpp"
#include "core/tensor.hpp"

namespace xgrad {

/// relu's gradient: g where x > 0 (and where x is NaN), else 0. Differentiable in g (itself);
/// a step in x (no gradient).
Tensor threshold_backward(const Tensor& g, const Tensor& x);
/// gelu's gradient g·(Φ(x) + x·φ(x)); its own gradient in x is g·φ(x)·(2 − x²).
Tensor gelu_backward(const Tensor& g, const Tensor& x);

/// pow's gradient to the exponent (torch's pow_backward_exponent), at y's shape: g·y·ln base,
/// 0 where the base is 0 and the exponent ≥ 0, -inf where it is 0 and the exponent < 0. The
/// one formula of pow(number, Tensor) and pow(Tensor, Tensor) (a base of any broadcastable shape).
Tensor pow_exponent_backward(const Tensor& g, const Tensor& y, const Tensor& exponent, double base);
Tensor pow_exponent_backward(const Tensor& g, const Tensor& y, const Tensor& exponent, const Tensor& base);

// --- the shape and index ops' gradients (ops_shape.cpp, ops_index.cpp) ------------------------
// Each is linear in g, so its own gradient is the forward op it undoes, applied to the incoming
// gradient gg (as torch's derivatives.yaml pairs slice_backward with slice, index_add with
// index_select, scatter_add with gather).

/// slice's gradient: zeros of `input_shape` with g (the slice, of length m along `axis`) written
/// at start, start + step, …, start + (m − 1)·step. Its gradient is slice(gg, axis, start, ·, step).
Tensor slice_backward(const Tensor& g, const Shape& input_shape, long axis, long start, long step);
/// repeat_interleave's gradient: g of length n·repeats along `axis` back to `input_shape` (length
/// n), each run of `repeats` consecutive slices summed in order. Its gradient is
/// repeat_interleave(gg, repeats, axis).
Tensor repeat_interleave_backward(const Tensor& g, const Shape& input_shape, std::size_t repeats, long axis);
/// index_select's gradient (torch's index_add into zeros): slice k of g along the index's axes
/// added into slice index[k] of zeros of `input_shape`, so repeated indices sum. Its gradient in
/// g is index_select(gg, axis, index); none in the (int64) index.
Tensor index_select_backward(const Tensor& g, const Shape& input_shape, long axis, const Tensor& index);
/// gather's gradient (torch's scatter_add into zeros): g (index's shape) added into zeros of
/// `input_shape` at the element each output read, so repeated picks sum. Its gradient in g is
/// gather(gg, axis, index); none in the index.
Tensor gather_backward(const Tensor& g, const Shape& input_shape, long axis, const Tensor& index);
/// t.index(indices)'s gradient: zeros of `input_shape` with g written at the elements the indices
/// pick (basic indexing picks each at most once). Its gradient is gg.index(indices).
Tensor index_backward(const Tensor& g, const Shape& input_shape, const std::vector<TensorIndex>& indices);

// --- the fused kernels' backwards (ops_softmax.cpp, ops_norm.cpp, ops_loss.cpp) ---------------

/// softmax's gradient: y ⊙ (g − Σ g⊙y) along `axis`, y the softmax's output. Linear in g, and
/// its own gradient in g is itself; in y it is gg⊙(g − Σ g⊙y) − g·Σ gg⊙y.
Tensor softmax_backward(const Tensor& g, const Tensor& y, long axis);
/// The gradient of softmax_backward(g, y, axis) with respect to y, for an incoming gradient gg:
/// gg ⊙ (g − Σ g⊙y) − g ⊙ Σ gg⊙y (sums along axis). The one copy of it, which the masked
/// softmax's and the attention ops' backward formulas use too.
Tensor softmax_backward_grad_y(const Tensor& gg, const Tensor& g, const Tensor& y, long axis);
/// log_softmax's gradient: g − exp(y)·Σ g along `axis`, y the log_softmax's output. Its own
/// gradient: gg − Σ gg⊙exp(y) in g, −gg⊙exp(y)·Σ g in y.
Tensor log_softmax_backward(const Tensor& g, const Tensor& y, long axis);
/// masked_softmax's gradient: keep ⊙ y ⊙ (g − Σ g⊙y) over the last axis, keep the mask's
/// kept keys (the sum runs over every key). Shapes: g, y (batch, queries, keys).
Tensor masked_softmax_backward(const Tensor& g, const Tensor& y, const ResolvedMask& mask);
/// layer_norm's gradient in its input: rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ⊙x̂)), ĝ = g⊙weight (g
/// when weight is undefined), x̂ = (x − mean)·rstd, the means over each row of the trailing
/// normalized_shape axes. mean and rstd are the forward's row statistics, float64 of shape
/// (rows,); its own gradient recomputes them from x, so that it is exact in x.
Tensor layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, const Shape& normalized_shape, double eps);
/// layer_norm's gradient in its weight: Σ over the rows of g⊙x̂ (normalized_shape). The bias's
/// is sum_to(g, normalized_shape).
Tensor layer_norm_weight_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                  const Shape& normalized_shape, double eps);
/// cross_entropy's gradient in its logits: s_i·(softmax(logits_i) − one_hot(targets_i)) along
/// the class axis, s_i = g_i (none), g (sum) or g/count (mean), and 0 on rows whose target is
/// ignore_index. lse holds each row's logsumexp (the targets' row order), count the rows not
/// ignored.
Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              Reduction reduction, std::int64_t ignore_index, std::size_t count);
/// mse_loss's (sum or mean) gradient in its input: 2·s·g·(input − target), s = 1 (sum) or
/// 1/numel (mean), g 0-d; the target's is its negation.
Tensor mse_loss_backward(const Tensor& g, const Tensor& input, const Tensor& target, Reduction reduction);

// --- the reductions' and sorting's gradients (ops_reduce.cpp) -------------------------------

/// Flat (row-major) offsets into a tensor, one per element of another: where each value that
/// max(x, axis), sort and topk picked came from. Shared, not copied, by the ops that use them.
using FlatOffsets = std::shared_ptr<const std::vector<std::size_t>>;

/// The gradient of a value-selecting op (max/min along an axis, sort, topk): a zero tensor of
/// `shape` with g's element i at flat offset at[i] (the offsets are distinct), torch's
/// zeros.scatter(dim, indices, g). Linear in g; its gradient is gather_flat(gg, at, g.shape()).
Tensor scatter_flat(const Tensor& g, const FlatOffsets& at, const Shape& shape);
/// Element i of the result, of `shape`, is x's element at flat offset at[i] (torch's gather);
/// its gradient is scatter_flat(gg, at, x.shape()).
Tensor gather_flat(const Tensor& x, const FlatOffsets& at, const Shape& shape);

/// cumsum's gradient along `axis`: the running sum of g taken from the end, dx_k = Σ_{j ≥ k} g_j
/// (torch's reversed cumsum). Linear; its gradient is cumsum(gg, axis).
Tensor cumsum_backward(const Tensor& g, long axis);

/// var's gradient, fused: 2/dof · g · (x − mean(x)), the mean over `axes` (normalised, sorted),
/// g of var's result shape (the reduced axes kept or dropped) spread back over them, and
/// dof = N − correction as torch's backward takes it (not clamped at 0: the forward divides
/// by max(0, dof), the gradient by dof). Differentiable in g and x.
Tensor var_backward(const Tensor& g, const Tensor& x, const std::vector<std::size_t>& axes, double dof);
/// std's gradient: var_backward with g / (2·std) for g, 0 where std is 0 (torch's
/// std_backward). `result` is std's output, which the gradient reads, so its own gradient
/// reaches x through std again.
Tensor std_backward(const Tensor& g, const Tensor& x, const Tensor& result, const std::vector<std::size_t>& axes,
                    double dof);

/// norm's gradient, fused, with torch's conventions: for p = 0 zero; p = 1 sgn(x)·g; p = ±inf
/// g split evenly between the elements that reach the norm (NaN counting as reaching it); otherwise
/// sgn(x)|x|^(p−1)·g / n^(p−1), 0 where the norm n is 0 (and, for p < 1, where x is 0).
/// sgn(NaN) is 0, as torch's. `n` is norm's output, broadcast back over `axes` as g is.
/// Differentiable in g, x and n, as torch's norm_backward is, NaNs included.
Tensor norm_backward(const Tensor& g, const Tensor& x, const Tensor& n, double p, const std::vector<std::size_t>& axes);

// The products' gradients (matmul, bmm, matmul_t) are products again, run on the plan and the
// engine of their forward pass: ops named "<op>_backward", internal to ops_matmul.cpp.

/// What head_attention_weights_backward gives: the gradients of the queries and of the keys.
struct QueryKeyGrads {
    Tensor queries, keys;
};
/// head_attention_weights' gradients from the weights' gradient `grad` and the weights
/// themselves (its output), per head (b, h) the masked softmax's backward
///   dS = keep ⊙ W_bh ⊙ (G_bh − Σ_keys G_bh⊙W_bh)   (keep: 0 for the keys the mask leaves out)
/// and then dQ_bh = scale·dS·K_bh, dK_bh = scale·dSᵀ·Q_bh, each head's dS made once, in cache,
/// for both. Two ops, dQ of (grad, weights, keys) and dK of (grad, weights, queries), each
/// differentiable again: dQ's gradient gq gives keys scale·dSᵀ·gq_bh and dS scale·gq_bh·K_bhᵀ,
/// which the softmax's backward hands on to grad and weights. Shapes as head_attention_weights:
/// grad and weights (batch·H, Tq, Tk), queries (batch, Tq, H·d), keys (batch, Tk, H·d). Runs
/// where head_attention_weights would run now; the one a forward pass records runs where that
/// forward ran (autocast's bfloat16 included).
QueryKeyGrads head_attention_weights_backward(const Tensor& grad, const Tensor& weights, const Tensor& queries,
                                              const Tensor& keys, std::size_t num_heads, double scale,
                                              const ResolvedMask& mask);

/// What head_attention_combine_backward gives: the gradients of the weights and of the values.
struct ValueGrads {
    Tensor weights, values;
};
/// head_attention_combine's gradients from its result's gradient `grad`: per head
///   dW_bh = G_bh·V_bhᵀ  (batch·H, Tq, Tk)   and   dV_bh = W_bhᵀ·G_bh  (batch, Tk, H·dv),
/// in one pass over the heads. Two ops, dW of (grad, values) and dV of (grad, weights), each
/// differentiable again (their gradients are head_attention_combine and each other). Shapes
/// as head_attention_combine; grad (batch, Tq, H·dv).
ValueGrads head_attention_combine_backward(const Tensor& grad, const Tensor& weights, const Tensor& values,
                                           std::size_t num_heads);

}  // namespace xgrad
