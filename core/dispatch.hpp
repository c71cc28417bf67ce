#pragma once
/// Dtype dispatch: runs a generic lambda with the C++ scalar type of a run-time Dtype, for code
/// that works on a tensor's storage through data_ptr<T>() (kernels, optimisers, communication).
#include <cstdint>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace xgrad {

/// Tag that carries a scalar type through a generic lambda: `[&](auto tag) { using T =
/// typename decltype(tag)::type; ... }`.
template <class T> struct type_tag { using type = T; };

/// Calls f(type_tag<T>{}) for float32 / float64, and throws for other dtypes:
/// "<op>: expected a floating-point tensor (float32 or float64), got int64".
template <class F> decltype(auto) dispatch_floating(const char* op, Dtype d, F&& f) {
    switch (d) {
        case Dtype::Float32: return f(type_tag<float>{});
        case Dtype::Float64: return f(type_tag<double>{});
        default: break;
    }
    throw Error(fmt::format("{}: expected a floating-point tensor (float32 or float64), got {}", op,
                            dtype_name(d)));
}

/// Calls f(type_tag<T>{}) for any of the four dtypes (shape ops, copies, printing).
template <class F> decltype(auto) dispatch_all(Dtype d, F&& f) {
    switch (d) {
        case Dtype::Float32: return f(type_tag<float>{});
        case Dtype::Float64: return f(type_tag<double>{});
        case Dtype::Int64: return f(type_tag<std::int64_t>{});
        case Dtype::Bool: break;
    }
    return f(type_tag<bool>{});
}

}  // namespace xgrad
