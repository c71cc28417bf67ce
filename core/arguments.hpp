#pragma once
/// The one check of a public function's floating-point arguments (p, eps, momentum, a
/// probability, a correction, a gain, a tolerance, a schedule factor): an argument that has no
/// meaning as NaN or ±inf is refused at entry, before it can turn every result into NaN or inf
/// without a word. Every message reads alike, as the optimizers' always have:
///
///   "<function>: invalid <argument> <value> (expected <what>)"
///
/// Where IEEE arithmetic gives a non-finite argument a meaning torch keeps (a scalar operand of
/// + or *, a clamp bound, pow's exponent, a fill value, clip_grad_norm's max_norm = inf), it is
/// not checked.
#include "core/error.hpp"

namespace xgrad {

/// Throws Error("<op>: invalid <arg> <value> (expected <expected>)") unless ok.
void check_argument(bool ok, const char* op, const char* arg, double value, const char* expected);

/// check_argument for an argument that must be finite: "(expected a finite number)".
void check_finite_argument(const char* op, const char* arg, double value);

}  // namespace xgrad
