#pragma once
/// The ops that gradient formulas are made of, besides the public ones of ops.hpp: each fused
/// kernel's backward is an op of its own, with its own formula (so a gradient through it is
/// differentiable again), as torch's threshold_backward and softmax_backward_data. Internal to
/// core/: user code differentiates the public ops.
#include "core/tensor.hpp"

namespace xgrad {

/// relu's gradient: g where x > 0 (and where x is NaN), else 0. Differentiable in g (itself);
/// a step in x (no gradient).
Tensor threshold_backward(const Tensor& g, const Tensor& x);
/// gelu's gradient g·(Φ(x) + x·φ(x)); its own gradient in x is g·φ(x)·(2 − x²).
Tensor gelu_backward(const Tensor& g, const Tensor& x);

// --- the shape and index ops' gradients (ops_shape.cpp, ops_index.cpp) ------------------------
// Each is linear in g, so its own gradient is the forward op it undoes, applied to the incoming
// gradient gg (as torch's derivatives.yaml pairs slice_backward with slice).

/// slice's gradient: zeros of `input_shape` with g (the slice, of length m along `axis`) written
/// at start, start + step, …, start + (m − 1)·step. Its gradient is slice(gg, axis, start, ·, step).
Tensor slice_backward(const Tensor& g, const Shape& input_shape, long axis, long start, long step);

}  // namespace xgrad
