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

}  // namespace xgrad
