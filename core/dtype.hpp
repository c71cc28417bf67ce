#pragma once
/// Element types a Tensor can hold, chosen at run time (as torch::Dtype).
/// float32 is the default; float64 runs every op too, which is what gradient checks use.
#include <cstdint>
#include <string_view>

namespace xgrad {

enum class Dtype : std::uint8_t { Float32, Float64, Int64, Bool };

inline constexpr Dtype kFloat32 = Dtype::Float32;
inline constexpr Dtype kFloat64 = Dtype::Float64;
inline constexpr Dtype kInt64 = Dtype::Int64;
inline constexpr Dtype kBool = Dtype::Bool;

/// "float32", "float64", "int64", "bool": the names PyTorch and numpy print.
constexpr std::string_view dtype_name(Dtype d) {
    switch (d) {
        case Dtype::Float32: return "float32";
        case Dtype::Float64: return "float64";
        case Dtype::Int64: return "int64";
        case Dtype::Bool: return "bool";
    }
    return "?";
}

constexpr bool is_floating(Dtype d) { return d == Dtype::Float32 || d == Dtype::Float64; }

/// The smaller type both convert to without losing their category (torch.promote_types):
/// bool < int64 < float32 < float64, so the larger of the two.
constexpr Dtype promote_types(Dtype a, Dtype b) {
    auto rank = [](Dtype d) { return d == Dtype::Bool ? 0 : d == Dtype::Int64 ? 1 : d == Dtype::Float32 ? 2 : 3; };
    return rank(a) >= rank(b) ? a : b;
}

/// Whether a value of type `from` may be written into a tensor of type `to` (torch.can_cast):
/// not a floating value into an integer or bool, nor an integer into bool.
constexpr bool can_cast(Dtype from, Dtype to) {
    if (is_floating(from) && !is_floating(to)) return false;
    return !(from != Dtype::Bool && to == Dtype::Bool);
}

/// The Dtype of a C++ scalar type: dtype_of<float> == kFloat32.
template <class T> constexpr Dtype dtype_of();
template <> constexpr Dtype dtype_of<float>() { return Dtype::Float32; }
template <> constexpr Dtype dtype_of<double>() { return Dtype::Float64; }
template <> constexpr Dtype dtype_of<std::int64_t>() { return Dtype::Int64; }
template <> constexpr Dtype dtype_of<bool>() { return Dtype::Bool; }

}  // namespace xgrad
