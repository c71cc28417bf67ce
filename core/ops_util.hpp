#pragma once
/// Helpers shared by the op families that run on every dtype (shape, select, index, reduce).
/// Internal to core/: includes xtensor through node.hpp.
#include <type_traits>

#include "core/bool_bytes.hpp"
#include "core/node.hpp"

namespace xgrad {

/// Throws when gradients are recorded and one of `inputs` requires grad: "<op>: a bfloat16
/// tensor that requires grad cannot go through <op> ...". For ops whose forward runs on bfloat16
/// but whose backward does not exist for it.
void check_no_bfloat16_graph(const char* op, const std::vector<Tensor>& inputs);

/// Throws, with torch's message, when gradients are recorded and t is a leaf that requires grad:
/// what every in-place op (`op`) checks before writing t.
void check_in_place_leaf(const char* op, const Tensor& t);
/// The in-place write of `values` (self's shape, any dtype: cast to self's) into self, as op
/// `op` through the in-place machinery (ops_inplace.cpp): version bump, and with a graph to
/// record it, no gradient to the old values. For the random fills, which draw `values` first.
const Tensor& write_in_place(const char* op, const Tensor& self, const Tensor& values);

/// masked_fill with the value as a Scalar (an int64 keeps all its bits) and the name of the call
/// the user made (masked_fill, masked_fill_) for its errors; the value is checked by check_fill_value.
Tensor masked_fill(const char* op, const Tensor& a, const Tensor& mask, const Scalar& value);

/// Bool tensor t's values as an xtensor expression, every byte but 0 true (core/bool_bytes.hpp):
/// what casts, comparisons and logical ops over a mask compute from. It refers to t's storage.
inline auto bool_values(const Tensor& t) {
    const auto& v = values<bool>(t);
    return xt::not_equal(xt::adapt(bool_bytes(t), v.size(), xt::no_ownership(), v.shape()), std::uint8_t(0));
}

/// t itself, or for a bool tensor a copy whose every byte but 0 is 1: what ops that compare or
/// order a mask's values (max, argmax, sort) read, paying the copy only for bool tensors.
inline Tensor canonical_bools(const Tensor& t) {
    if (!t.defined() || t.dtype() != kBool) return t;
    xt::xarray<bool> c = bool_values(t);
    return make_leaf(Storage(std::move(c)));
}

/// Throws "op: arg is an undefined tensor" for a default-constructed argument: the entry check
/// of an op, so that the error names the op, not the tensor it read first.
inline void check_defined(const char* op, const Tensor& a, const char* arg = "input") {
    if (!a.defined()) throw Error(fmt::format("{}: {} is an undefined tensor", op, arg));
}

/// cast (Tensor::to) to or from bfloat16, differentiable between the floating types: the
/// gradient goes back converted to the source dtype (bfloat16 gradients round to nearest even).
Tensor cast_bfloat16(const Tensor& a, Dtype d);

/// An op result of any dtype: make_result for float32/float64 values, a plain leaf for
/// int64 and bool values (they never carry a gradient, as in torch).
/// A bfloat16 result has no gradient here: one whose input requires grad, while gradients are
/// recorded, is refused rather than silently cut from the graph. Only cast (Tensor::to) and
/// clone differentiate through bfloat16.
template <class T>
Tensor make_any_result(xt::xarray<T>&& value, std::vector<Tensor> inputs, const char* op, Formula formula,
                       Saves saves = Saves::all()) {
    if constexpr (std::is_floating_point_v<T>) {
        return make_result<T>(std::move(value), std::move(inputs), op, std::move(formula), saves);
    } else {
        if constexpr (std::is_same_v<T, bfloat16>) check_no_bfloat16_graph(op, inputs);
        return make_leaf(Storage(std::move(value)));
    }
}

/// A row-major shape seen as (outer, n, inner) around one axis: element (o, k, i) sits at
/// flat offset (o·n + k)·inner + i.
struct axis_split {
    std::size_t outer = 1, n = 1, inner = 1;
};

inline axis_split split_at(const Shape& shape, std::size_t axis) {
    axis_split s;
    for (std::size_t d = 0; d < axis; ++d) s.outer *= shape[d];
    s.n = shape[axis];
    for (std::size_t d = axis + 1; d < shape.size(); ++d) s.inner *= shape[d];
    return s;
}

/// Row-major strides of a contiguous array of this shape, in elements.
inline std::vector<std::size_t> row_major_strides(const Shape& shape) {
    std::vector<std::size_t> strides(shape.size());
    std::size_t s = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
        strides[d] = s;
        s *= shape[d];
    }
    return strides;
}

/// Checks every element of `a` converts to To, or throws naming `who`, the value and its flat
/// index: "cast: float32 value nan at flat index 3 cannot be converted to int64". Only a float
/// into int64 can fail (torch gives INT64_MIN for NaN, C++ undefined behaviour); every other
/// conversion between the four element types is defined.
template <class To, class From>
void check_convertible(const char* who, const From* a, std::size_t n) {
    if constexpr (is_floating_v<From> && std::is_same_v<To, std::int64_t>) {
        for (std::size_t i = 0; i < n; ++i)
            if (!fits_int64(static_cast<double>(a[i])))
                throw Error(fmt::format("{}: {} value {} at flat index {} cannot be converted to {} (it must be "
                                        "finite and within [-2^63, 2^63))",
                                        who, dtype_name(dtype_of<From>()), static_cast<double>(a[i]), i, dtype_name(dtype_of<To>())));
    }
}

/// Whether numpy broadcasting can stretch `from` to exactly `to` (broadcast_to's rule).
inline bool broadcastable_to(const Shape& from, const Shape& to) {
    if (from.size() > to.size()) return false;
    const std::size_t lead = to.size() - from.size();
    for (std::size_t i = 0; i < from.size(); ++i)
        if (from[i] != 1 && from[i] != to[lead + i]) return false;
    return true;
}

}  // namespace xgrad
