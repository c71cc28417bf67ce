#pragma once
/// numpy broadcasting: the result shape of two operands, and the reduction of a gradient
/// back to an operand's shape (every broadcasting op's backward goes through sum_to).
#include "core/node.hpp"

namespace xgrad {

/// Shape both operands broadcast to, or "<op>: shapes (2, 3) and (4,) cannot be broadcast
/// together (axis -1: 3 vs 4)"; checked with checked_numel (two large operands can broadcast
/// to more elements than fit in memory).
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

/// Sums g over the axes that broadcasting added or stretched, so the result has `shape`.
template <class T> xt::xarray<T> sum_to(xt::xarray<T>&& g, const Shape& shape);

}  // namespace xgrad
