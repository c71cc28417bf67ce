#pragma once
/// The one place that includes xtensor. Everything that computes on arrays includes this
/// header (directly or through node.hpp); public headers that only compose ops do not.
///
/// xtensor is lazy: an expression holds references to its operands. Whatever is stored in a
/// node, captured for backward or returned is an xt::xarray (assigned, or passed through
/// xt::eval), never an `auto` expression.
///
/// Every xarray here allocates through xgrad's caching allocator (core/runtime/alloc.hpp). The macro
/// must be set before xtensor's configuration is read, so xtensor is included only here.
#include "core/runtime/alloc.hpp"
#if defined(XTENSOR_CONFIG_HPP) && !defined(XGRAD_XTENSOR_ALLOCATOR)
#error "core/xt.hpp must be included before any xtensor header (it sets xtensor's allocator)"
#endif
#define XGRAD_XTENSOR_ALLOCATOR
#define XTENSOR_DEFAULT_ALLOCATOR(T) ::xgrad::cache_allocator<T>
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xbroadcast.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include "core/tensor.hpp"

namespace xgrad {

/// Typed access to a tensor's values as an xarray (throws when T is not its dtype).
template <class T> xt::xarray<T>& array(const Tensor& t);

/// A leaf tensor that takes ownership of `values`.
template <class T> Tensor from_array(xt::xarray<T> values, bool requires_grad = false);

/// Shape of an xarray as our Shape type.
template <class E> Shape shape_of(const E& e) { return Shape(e.shape().begin(), e.shape().end()); }

}  // namespace xgrad
