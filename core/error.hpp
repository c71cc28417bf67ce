#pragma once
/// The one exception type for bad input: what op, which argument, what was expected, what came.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace xgrad {

using Shape = std::vector<std::size_t>;

/// Thrown for every bad argument: wrong shape, dtype, axis, value or state.
/// Derives from std::invalid_argument so callers can catch either.
class Error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// "(2, 3)"; "()" for a scalar. The spelling every message uses for shapes.
std::string shape_str(const Shape& shape);

/// The coordinates of flat element `flat` in a row-major array of `shape` (numpy.unravel_index).
Shape unravel_index(std::size_t flat, const Shape& shape);

/// Normalises a possibly negative axis against `rank` (Python style), or throws
/// "<op>: axis 3 is out of range for a tensor of rank 2 (shape (2, 5))".
std::size_t normalize_axis(const char* op, long axis, const Shape& shape);

/// The number of elements of `shape`, or throws "<op>: shape (...) has more elements than
/// can be addressed" when the product overflows (a wrapped count would size a tiny buffer).
std::size_t checked_numel(const char* op, const Shape& shape);

}  // namespace xgrad
