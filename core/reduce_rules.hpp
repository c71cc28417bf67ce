#pragma once
/// The rules every reduction follows, kept in one place so that no kernel decides them alone:
///
/// - NaN propagates through max-type reductions (max, min, argmax, argmin, the ±inf norms,
///   clip_grad_norm's inf-norm): a NaN anywhere in what is reduced gives NaN (and its index),
///   whatever its position, as torch. `beats` is the one comparison they use.
/// - What a reduction over no elements gives, by kind (`EmptyReduction`), as torch: an
///   identity, or an Error naming the op and the empty axis.
/// - How norm reads its order p (`norm_order`).
///
/// Internal to core/ (and optim's clip_grad_norm); includes no xtensor.
#include <cmath>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace xgrad {

/// Whether v is NaN, for any element type (integers and bool never are).
template <class T> bool is_nan_value(T v) {
    if constexpr (is_floating_v<T>) return std::isnan(static_cast<double>(v));
    else return false;
}

/// Whether v takes the place of `best` as the running maximum (Largest) or minimum: it lies
/// strictly beyond it, or it is NaN and best is not. So a NaN, once held, is never replaced,
/// ties keep the first, and the first NaN wins (torch's max, argmax and amax).
template <bool Largest, class T> bool beats(T v, T best) {
    const bool further = Largest ? best < v : v < best;
    return further || (is_nan_value(v) && !is_nan_value(best));
}

/// The larger / smaller of a and b, NaN when either is.
template <class T> T nan_max(T a, T b) { return beats<true>(b, a) ? b : a; }
template <class T> T nan_min(T a, T b) { return beats<false>(b, a) ? b : a; }

/// What a reduction over an empty set of elements gives, as torch:
///   identity  sum 0, mean/var/std NaN (0/0), norm with p ≥ 0: 0;
///   refuse    max, min, argmax, argmin, norm with p < 0 or p = ±inf: no identity, an Error.
/// Reductions that keep the axis (cumsum, softmax, sort) give an empty result and need no rule.
enum class EmptyReduction { identity, refuse };

/// For `refuse`: throws when one of `axes` of `shape` has length 0, so that the reduction takes
/// an empty set, naming op, `what` (e.g. "the inf norm"), the empty axis and the shape.
/// Reducing a non-empty axis of a tensor that is empty elsewhere is allowed: the result is
/// itself empty.
void check_empty_reduction(const char* op, EmptyReduction rule, const Shape& shape,
                           const std::vector<std::size_t>& axes, const char* what);

/// The order norm computes with, as torch 1.13's vector norm: p is read as a float32, for any
/// dtype, so |p| above float's range is ±inf (the max / min norm) and |p| below its smallest
/// subnormal is 0 (the count of non-zero elements). NaN has no meaning as an order and
/// throws, naming op.
double norm_order(const char* op, double p);

}  // namespace xgrad
