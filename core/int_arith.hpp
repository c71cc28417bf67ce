#pragma once
/// Integer arithmetic without undefined behaviour. Internal to core/.
///
/// int64 elements wrap around in two's complement, as torch's do (INT64_MAX + 1 is INT64_MIN,
/// -INT64_MIN and abs(INT64_MIN) are INT64_MIN): every int64 kernel (add, sub, mul, neg, abs,
/// sum, cumsum, the adds of scatter_add and index_put_'s accumulate, scatter's reduce) computes
/// through wrapping_*, which do the arithmetic in uint64, where wrapping is defined, so that an
/// optimising compiler cannot assume the overflow away.
///
/// Sizes and counts made from a user's arguments (one_hot's class count, split's sizes, a
/// repeat count times a length) go through checked_add / checked_mul, which throw naming the op
/// instead of wrapping; element counts of whole shapes go through checked_numel (error.hpp).
#include <cstdint>
#include <type_traits>

#include <fmt/format.h>

#include "core/error.hpp"

namespace xgrad {

// uint64 → int64 keeps the bits: modular in C++20, and in GCC and Clang before it.
constexpr std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
constexpr std::int64_t wrapping_sub(std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}
constexpr std::int64_t wrapping_mul(std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}
constexpr std::int64_t wrapping_neg(std::int64_t a) { return wrapping_sub(0, a); }
constexpr std::int64_t wrapping_abs(std::int64_t a) { return a < 0 ? wrapping_neg(a) : a; }
/// b^e as torch's integer pow: by squaring, wrapping; a negative e gives 1 for b = 1, ±1 for
/// b = -1 (by e's parity) and 0 for every other b (the integer part of 1/b^|e|, 0 for b = 0 too).
constexpr std::int64_t wrapping_pow(std::int64_t b, std::int64_t e) {
    if (e < 0) {
        if (b == 1) return 1;
        if (b == -1) return e % 2 == 0 ? 1 : -1;
        return 0;
    }
    std::int64_t r = 1;
    for (; e > 0; e >>= 1) {
        if (e & 1) r = wrapping_mul(r, b);
        b = wrapping_mul(b, b);
    }
    return r;
}

/// a + b for a size or count, or throws "<op>: <what> overflows (a + b): more elements than fit in memory".
template <class T> T checked_add(const char* op, const char* what, T a, T b) {
    static_assert(std::is_integral_v<T>, "sizes and counts are integers");
    T r;
    if (__builtin_add_overflow(a, b, &r))
        throw Error(fmt::format("{}: {} overflows ({} + {}): more elements than fit in memory", op, what, a, b));
    return r;
}

/// a · b for a size or count, or throws "<op>: <what> overflows (a * b): ..." as checked_add.
template <class T> T checked_mul(const char* op, const char* what, T a, T b) {
    static_assert(std::is_integral_v<T>, "sizes and counts are integers");
    T r;
    if (__builtin_mul_overflow(a, b, &r))
        throw Error(fmt::format("{}: {} overflows ({} * {}): more elements than fit in memory", op, what, a, b));
    return r;
}

}  // namespace xgrad
