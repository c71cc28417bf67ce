#pragma once
/// The one place that includes xtensor. Everything that computes on arrays includes this
/// header (directly or through node.hpp); public headers that only compose ops do not.
///
/// xtensor is lazy: an expression holds references to its operands. Whatever is stored in a
/// node, captured for backward or returned is an xt::xarray (assigned, or passed through
/// xt::eval), never an `auto` expression.
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xbroadcast.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include "tensor.hpp"

namespace xgrad {

/// Typed access to a tensor's values as an xarray (throws when T is not its dtype).
template <class T> xt::xarray<T>& array(const Tensor& t);

/// A leaf tensor that takes ownership of `values`.
template <class T> Tensor from_array(xt::xarray<T> values, bool requires_grad = false);

/// Shape of an xarray as our Shape type.
template <class E> Shape shape_of(const E& e) { return Shape(e.shape().begin(), e.shape().end()); }

}  // namespace xgrad
