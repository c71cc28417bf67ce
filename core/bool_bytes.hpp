#pragma once
/// A bool tensor's storage read as bytes. A byte other than 0 and 1 can be there (written raw
/// through data_ptr<bool>: a C array of 0/255 flags copied in), and reading such a byte as bool
/// is undefined behaviour (GCC's `!b` flips its low bit, `b ? x : y` may test the whole byte or
/// one bit). Every loop in core over a mask's values reads these bytes instead, any byte but 0
/// true, as numpy and load_npz read a bool. Internal to core/.
#include <cstdint>
#include <type_traits>

#include "core/tensor.hpp"

namespace xgrad {

/// The type a copy moves an element of T as: a bool as its byte (kept as it is), any other type
/// as itself. Copy loops over any dtype read and write through pointers to it.
template <class T> using moved_t = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;

/// The bytes of bool tensor t (its dtype must be bool), one per element, row-major (a view's
/// read as its values: core/views.cpp).
const std::uint8_t* bool_bytes(const Tensor& t);

}  // namespace xgrad
