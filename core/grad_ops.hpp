#pragma once
/// The ops that gradient formulas are made of, besides the public ones of ops.hpp: each fused
/// kernel's backward is an op of its own, with its own formula (so a gradient through it is
/// differentiable again), as torch's threshold_backward and softmax_backward_data. Internal to
/// core/: user code differentiates the public ops.
#include "core/ops.hpp"
#include "core/tensor.hpp"

namespace xgrad {

/// relu's gradient: g where x > 0 (and where x is NaN), else 0. Differentiable in g (itself);
/// a step in x (no gradient).
Tensor threshold_backward(const Tensor& g, const Tensor& x);
/// gelu's gradient g·(Φ(x) + x·φ(x)); its own gradient in x is g·φ(x)·(2 − x²).
Tensor gelu_backward(const Tensor& g, const Tensor& x);

// --- the fused kernels' backwards (ops_softmax.cpp, ops_norm.cpp, ops_loss.cpp) ---------------

/// softmax's gradient: y ⊙ (g − Σ g⊙y) along `axis`, y the softmax's output. Linear in g, and
/// its own gradient in g is itself; in y it is gg⊙(g − Σ g⊙y) − g·Σ gg⊙y.
Tensor softmax_backward(const Tensor& g, const Tensor& y, long axis);
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

}  // namespace xgrad
