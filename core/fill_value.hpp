#pragma once
/// The one check of a number stored into a tensor (a fill value), shared by every op that
/// stores one and by nn::init.
#include "core/dtype.hpp"
#include "core/tensor.hpp"

namespace xgrad {

/// Checks a number stored into a tensor of dtype d as a fill value, as torch checks one (its
/// "value cannot be converted to type float without overflow"), or throws naming `op` and `what`:
/// into float32 or bfloat16 a finite value beyond that type's largest finite one (it would become
/// inf); into int64 NaN, ±inf and values outside [-2^63, 2^63) (fractions truncate toward zero).
/// inf and NaN go into floating tensors as they are, and every number into bool (nonzero: true).
/// The one check of every fill: full, ones, fill_, masked_fill(_), index_put_ and t[i] = with a
/// number, a rvalue `= number`, nn::init::constant_; torch's other checked scalars (a clamp bound,
/// add_'s alpha) too. A number in arithmetic (x + 1e300, x * s, comparisons) follows IEEE instead.
void check_fill_value(const char* op, const char* what, Scalar value, Dtype d);

}  // namespace xgrad
