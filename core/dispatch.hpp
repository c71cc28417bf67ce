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
/// "<op>: expected a floating-point tensor (float32 or float64), got int64". bfloat16 is
/// floating but stored only (no arithmetic), so it is refused too, saying how to go on.
template <class F> decltype(auto) dispatch_floating(const char* op, Dtype d, F&& f) {
    switch (d) {
        case Dtype::Float32: return f(type_tag<float>{});
        case Dtype::Float64: return f(type_tag<double>{});
        default: break;
    }
    throw Error(fmt::format("{}: expected a floating-point tensor (float32 or float64), got {}{}", op, dtype_name(d),
                            d == Dtype::BFloat16 ? " (xgrad does no arithmetic in bfloat16: convert with "
                                                   ".to(kFloat32), or run the product under AutocastGuard)"
                                                 : ""));
}

/// Calls f(type_tag<T>{}) for any of the five dtypes (shape ops, copies, printing).
template <class F> decltype(auto) dispatch_all(Dtype d, F&& f) {
    switch (d) {
        case Dtype::Float32: return f(type_tag<float>{});
        case Dtype::Float64: return f(type_tag<double>{});
        case Dtype::Int64: return f(type_tag<std::int64_t>{});
        case Dtype::BFloat16: return f(type_tag<bfloat16>{});
        case Dtype::Bool: break;
    }
    return f(type_tag<bool>{});
}

/// dispatch_all for the four types xtensor computes in, refusing bfloat16 (a storage type with
/// no arithmetic or ordering in xtensor): for ops that handle bfloat16 apart, or not at all.
/// "<op>: bfloat16 tensors are not supported (convert with .to(kFloat32))".
template <class F> decltype(auto) dispatch_computable(const char* op, Dtype d, F&& f) {
    switch (d) {
        case Dtype::Float32: return f(type_tag<float>{});
        case Dtype::Float64: return f(type_tag<double>{});
        case Dtype::Int64: return f(type_tag<std::int64_t>{});
        case Dtype::Bool: return f(type_tag<bool>{});
        case Dtype::BFloat16: break;
    }
    throw Error(fmt::format("{}: bfloat16 tensors are not supported (xgrad does no arithmetic in bfloat16: convert "
                            "with .to(kFloat32))",
                            op));
}

}  // namespace xgrad
