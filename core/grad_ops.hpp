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

}  // namespace xgrad
