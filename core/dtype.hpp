#pragma once
/// Element types a Tensor can hold, chosen at run time (as torch::Dtype).
/// float32 is the default; float64 runs every op too, which is what gradient checks use.
/// bfloat16 is a storage type (as torch's for autocast): it converts, copies, prints, moves
/// through the shape ops and compares, but arithmetic on it is refused (convert to float32).
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "core/runtime/bfloat16.hpp"

namespace xgrad {

/// bfloat16: the top 16 bits of a float32, as a tensor element. Conversions are explicit and
/// round as torch's c10::BFloat16: from float32 to nearest, ties to even; from any other number
/// through float32 first (so a float64 or int64 rounds twice, as in torch); to a number exactly
/// (through float32). Comparisons compare the values (NaN unequal to itself). No arithmetic.
struct bfloat16 {
    std::uint16_t bits = 0;

    constexpr bfloat16() = default;
    template <class U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
    explicit bfloat16(U v) : bits(bf16_from_float(static_cast<float>(v))) {}
    static constexpr bfloat16 from_bits(std::uint16_t b) {
        bfloat16 r;
        r.bits = b;
        return r;
    }
    template <class U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
    explicit operator U() const { return static_cast<U>(bf16_to_float(bits)); }

    friend bool operator==(bfloat16 a, bfloat16 b) { return float(a) == float(b); }
    friend bool operator!=(bfloat16 a, bfloat16 b) { return float(a) != float(b); }
    friend bool operator<(bfloat16 a, bfloat16 b) { return float(a) < float(b); }
    friend bool operator<=(bfloat16 a, bfloat16 b) { return float(a) <= float(b); }
    friend bool operator>(bfloat16 a, bfloat16 b) { return float(a) > float(b); }
    friend bool operator>=(bfloat16 a, bfloat16 b) { return float(a) >= float(b); }
};
static_assert(sizeof(bfloat16) == 2 && std::is_standard_layout_v<bfloat16> && std::is_trivially_copyable_v<bfloat16>,
              "bfloat16 must be its bits, so arrays of it are arrays of uint16 (oneDNN, the bulk conversions)");

/// Float32, Float64, Int64, Bool, BFloat16: the indices of the Storage variant (node.hpp), so a
/// new type goes at the end.
enum class Dtype : std::uint8_t { Float32, Float64, Int64, Bool, BFloat16 };

inline constexpr Dtype kFloat32 = Dtype::Float32;
inline constexpr Dtype kFloat64 = Dtype::Float64;
inline constexpr Dtype kInt64 = Dtype::Int64;
inline constexpr Dtype kBool = Dtype::Bool;
inline constexpr Dtype kBFloat16 = Dtype::BFloat16;

/// "float32", "float64", "int64", "bool", "bfloat16": the names PyTorch and numpy print.
constexpr std::string_view dtype_name(Dtype d) {
    switch (d) {
        case Dtype::Float32: return "float32";
        case Dtype::Float64: return "float64";
        case Dtype::Int64: return "int64";
        case Dtype::Bool: return "bool";
        case Dtype::BFloat16: return "bfloat16";
    }
    return "?";
}

/// Whether d is a floating-point type (torch's is_floating_point): bfloat16 is one.
constexpr bool is_floating(Dtype d) { return d == Dtype::Float32 || d == Dtype::Float64 || d == Dtype::BFloat16; }

/// The smaller type both convert to without losing their category (torch.promote_types):
/// bool < int64 < bfloat16 < float32 < float64, so the larger of the two.
constexpr Dtype promote_types(Dtype a, Dtype b) {
    auto rank = [](Dtype d) {
        switch (d) {
            case Dtype::Bool: return 0;
            case Dtype::Int64: return 1;
            case Dtype::BFloat16: return 2;
            case Dtype::Float32: return 3;
            case Dtype::Float64: return 4;
        }
        return 0;
    };
    return rank(a) >= rank(b) ? a : b;
}

/// Whether a value of type `from` may be written into a tensor of type `to` (torch.can_cast):
/// not a floating value into an integer or bool, nor an integer into bool.
constexpr bool can_cast(Dtype from, Dtype to) {
    if (is_floating(from) && !is_floating(to)) return false;
    return !(from != Dtype::Bool && to == Dtype::Bool);
}

/// Whether T is one of the C++ element types: float, double, std::int64_t, bool, bfloat16.
template <class T>
inline constexpr bool is_element_type_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                          std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool> ||
                                          std::is_same_v<T, bfloat16>;

/// The Dtype of a C++ element type: dtype_of<float> == kFloat32. Another T does not compile.
template <class T> constexpr Dtype dtype_of() {
    static_assert(is_element_type_v<T>, "dtype_of<T>: T must be float, double, std::int64_t, bool or bfloat16 "
                                        "(the element types)");
    return Dtype::Float32;
}
template <> constexpr Dtype dtype_of<float>() { return Dtype::Float32; }
template <> constexpr Dtype dtype_of<double>() { return Dtype::Float64; }
template <> constexpr Dtype dtype_of<std::int64_t>() { return Dtype::Int64; }
template <> constexpr Dtype dtype_of<bool>() { return Dtype::Bool; }
template <> constexpr Dtype dtype_of<bfloat16>() { return Dtype::BFloat16; }

/// Whether the C++ element type T is a floating-point one: float, double or bfloat16.
template <class T> inline constexpr bool is_floating_v = std::is_floating_point_v<T> || std::is_same_v<T, bfloat16>;

}  // namespace xgrad
