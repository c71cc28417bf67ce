#include "core/reduce_rules.hpp"

#include <cmath>

#include <fmt/format.h>

namespace xgrad {

void check_empty_reduction(const char* op, EmptyReduction rule, const Shape& shape,
                           const std::vector<std::size_t>& axes, const char* what) {
    if (rule == EmptyReduction::identity) return;
    for (std::size_t a : axes)
        if (shape[a] == 0)
            // torch's words: the operation has no identity, so an empty set has no value.
            throw Error(fmt::format("{}: cannot take {} over axis {} of length 0 (shape {}): it has no identity; "
                                    "reduce a non-empty axis",
                                    op, what, a, shape_str(shape)));
}

double norm_order(const char* op, double p) {
    if (std::isnan(p))
        throw Error(fmt::format("{}: invalid p nan (expected a number: 0, 1, 2, any other real, inf or -inf)", op));
    // torch passes the order to its kernels as a float: 1e300 is inf there, 1e-300 is 0. At
    // and above the midpoint between float's largest value and 2^128 the rounding gives inf
    // (ties to even); the cast itself would be undefined there.
    if (std::abs(p) >= 0x1.ffffffp127) return std::copysign(INFINITY, p);
    return static_cast<double>(static_cast<float>(p));
}

}  // namespace xgrad
