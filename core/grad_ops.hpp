#pragma once
/// The ops that gradient formulas are made of, besides the public ones of ops.hpp: each fused
/// kernel's backward is an op of its own, with its own formula (so a gradient through it is
/// differentiable again), as torch's threshold_backward and softmax_backward_data. Internal to
/// core/: user code differentiates the public ops.
#include "core/attention_mask.hpp"
#include "core/tensor.hpp"

namespace xgrad {

/// relu's gradient: g where x > 0 (and where x is NaN), else 0. Differentiable in g (itself);
/// a step in x (no gradient).
Tensor threshold_backward(const Tensor& g, const Tensor& x);
/// gelu's gradient g·(Φ(x) + x·φ(x)); its own gradient in x is g·φ(x)·(2 − x²).
Tensor gelu_backward(const Tensor& g, const Tensor& x);

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
