#pragma once
/// The one exception type for bad input: what op, which argument, what was expected, what came.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

// xgrad::Shape is a std::vector<std::size_t> of its own class, which xtensor's template
// matching does not see through: an adaptor or broadcast shaped by one (in core, or in a
// program that includes xtensor itself) asks for its strides' container type here, a
// std::vector as for the vector itself. Declared, not included: xtensor stays out of this header.
namespace xgrad { class Shape; }
namespace xt {
template <class X, class C> struct rebind_container;
template <class X> struct rebind_container<X, xgrad::Shape> {
    using type = std::vector<X>;
};
}  // namespace xt

namespace xgrad {

/// A tensor's sizes, torch.Size's counterpart: a std::vector<std::size_t>, so every container
/// habit works, that a port from torch also builds and reads as torch's:
/// - a braced list takes entries of any integer type, mixed: `Shape{B, T, C}` with B, T, C
///   from size() (int64, as LibTorch's) has no narrowing error; a negative entry throws.
/// - a signed index counts from the end, as Python's: `x.shape()[-1]` is the last size, and a
///   signed index out of range throws instead of reading past the end, for operator[] and at()
///   alike. An unsigned index reads as std::vector's (unchecked, or std::out_of_range from at()).
class Shape : public std::vector<std::size_t> {
public:
    using Base = std::vector<std::size_t>;
    /// One entry of a braced list: any integer type but bool.
    struct Entry {
        template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
        Entry(T v) : value(static_cast<std::size_t>(v)) {  // NOLINT: implicit by design
            if constexpr (std::is_signed_v<T>) negative = v < 0;
            if (negative) signed_value = static_cast<long long>(v);
        }
        std::size_t value;
        bool negative = false;
        long long signed_value = 0;
    };
    Shape() = default;
    Shape(Base sizes) : Base(std::move(sizes)) {}  // NOLINT: implicit, a vector of sizes is one
    Shape(std::initializer_list<Entry> sizes);     // NOLINT: implicit, as a braced argument
    template <class It, std::enable_if_t<!std::is_integral_v<It>, int> = 0>
    Shape(It first, It last) : Base(first, last) {}
    explicit Shape(size_type count, std::size_t value = 0) : Base(count, value) {}

    using Base::operator[];
    template <class I, std::enable_if_t<std::is_integral_v<I> && std::is_signed_v<I>, int> = 0>
    reference operator[](I i) { return Base::operator[](wrap(static_cast<long long>(i))); }
    template <class I, std::enable_if_t<std::is_integral_v<I> && std::is_signed_v<I>, int> = 0>
    const_reference operator[](I i) const { return Base::operator[](wrap(static_cast<long long>(i))); }
    /// at() with a signed index is that operator[] (from the end, out of range throws
    /// xgrad::Error naming Shape); with an unsigned one, std::vector's.
    using Base::at;
    template <class I, std::enable_if_t<std::is_integral_v<I> && std::is_signed_v<I>, int> = 0>
    reference at(I i) { return Base::operator[](wrap(static_cast<long long>(i))); }
    template <class I, std::enable_if_t<std::is_integral_v<I> && std::is_signed_v<I>, int> = 0>
    const_reference at(I i) const { return Base::operator[](wrap(static_cast<long long>(i))); }

private:
    /// i, or size() + i for a negative i; throws "Shape: index -4 is out of range for a shape of 3 sizes (2, 3, 4)".
    size_type wrap(long long i) const;
};

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

/// The most elements a tensor may have: 2^60 - 1, so that its bytes (at most 8 per element)
/// and every offset into it fit in a ptrdiff_t. No machine has that much memory.
inline constexpr std::size_t kMaxElements = static_cast<std::size_t>(PTRDIFF_MAX) / 8;

/// The number of elements of `shape`: every shape that becomes a count or an allocation goes
/// through it. Throws "<op>: shape (4611686018427387904, 4) has more elements than fit in
/// memory" past kMaxElements, where a wrapped product would size a tiny buffer. A shape with a
/// zero axis must pass the same test without its zero axes, since strides, (outer, n, inner)
/// splits and partial products are taken of them.
std::size_t checked_numel(const char* op, const Shape& shape);

/// checked_numel's count, or SIZE_MAX where it would throw (no valid count comes near it).
std::size_t numel_or_max(const Shape& shape) noexcept;
/// checked_numel's error, `of` (when not empty) saying what the shape was made from.
[[noreturn]] void throw_too_large(const char* op, const Shape& shape, const std::string& of);

/// checked_numel for a shape the caller derived from its arguments: of() (called only to
/// write the message) says from what, so that the message names shapes the caller passed
/// ("matmul: shape (...) has more elements than fit in memory (the product of (...) and
/// (...))"), not only one it never saw.
template <class Of> std::size_t checked_numel(const char* op, const Shape& shape, Of&& of) {
    const std::size_t n = numel_or_max(shape);
    if (n == SIZE_MAX) throw_too_large(op, shape, of());
    return n;
}

/// A double as int64 (truncated toward zero, as static_cast), or throws "<op>: <what> must be
/// finite and within int64's range, got nan": the cast would be undefined for those.
std::int64_t checked_int64(const char* op, const char* what, double v);

/// An index from any integer type, as the index ops take it (signed; negative counts from the
/// end). An unsigned value above 2^63 − 1 is refused, naming `op`: it is almost always a size_t
/// that went below zero (i − 1 at i = 0), which a plain conversion would turn into −1, the last
/// element, silently.
[[noreturn]] void throw_wrapped_index(const char* op, unsigned long long v);
/// Whether T is an integer type an index or size may come as (every one but bool).
template <class T> inline constexpr bool is_index_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <class T>
long checked_index(const char* op, T v) {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "an index is an integer");
    if constexpr (std::is_unsigned_v<T>)
        if (static_cast<unsigned long long>(v) > static_cast<unsigned long long>(std::numeric_limits<long>::max()))
            throw_wrapped_index(op, v);
    return static_cast<long>(v);
}

/// Whether a double converts to int64 without undefined behaviour: finite, in [-2^63, 2^63).
inline bool fits_int64(double v) { return v >= -0x1p63 && v < 0x1p63; }  // NaN fails both

/// A list of sizes or axes as an argument, as LibTorch's IntArrayRef: a braced list whose
/// entries are of any integer types, mixed ({-1, x.size(-1)}; {B, T, n_head, C / n_head} with
/// B, T, C from size() and n_head an int), or a std::vector of any integer type (a Shape, a
/// std::vector<long>). So sizes from size() and shape() go into reshape, permute, sum, zeros,
/// expand, layer_norm... with no cast and no narrowing error or warning. It reads as the
/// std::vector<long> it holds.
/// An unsigned entry above 2^63 − 1 (a size that went below zero: x.size(1) − 2 at size 1, or
/// a Shape too large for memory) has no long; the conversion cannot throw naming the call (it
/// happens before the call), so the list remembers it and every op taking a list calls
/// check(op) or shape(op), which refuse it naming the op. Its slot holds LONG_MIN, which no op
/// accepts as a size or an axis either.
class IntList : public std::vector<long> {
public:
    /// One entry of a braced list: any integer type but bool (a double does not compile).
    struct Entry {
        template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
        Entry(T v) {  // NOLINT: implicit by design
            if constexpr (std::is_unsigned_v<T>)
                if (static_cast<unsigned long long>(v) > static_cast<unsigned long long>(std::numeric_limits<long>::max())) {
                    wrapped = true;
                    raw = static_cast<unsigned long long>(v);
                    return;
                }
            value = static_cast<long>(v);
        }
        long value = std::numeric_limits<long>::min();
        bool wrapped = false;
        unsigned long long raw = 0;
    };
    IntList() = default;
    IntList(std::initializer_list<Entry> entries) {  // NOLINT: implicit, as a braced argument
        reserve(entries.size());
        for (const Entry& e : entries) add(e);
    }
    template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
    IntList(const std::vector<T>& values) {  // NOLINT: implicit, so a Shape or vector<long> passes
        reserve(values.size());
        for (T v : values) add(Entry(v));
    }
    /// Throws "<op>: ... entry i is v, an unsigned value above 2^63 - 1 ..." if an entry was one.
    void check(const char* op) const;
    /// The entries as a tensor's shape, for an argument that is one: throws "<op>: sizes must
    /// be non-negative, got [2, -1]" (as torch, "negative dimension"), or "<op>: shape (...)
    /// ... does not fit in memory" for an unsigned size above 2^63 − 1.
    Shape shape(const char* op) const;

private:
    void add(const Entry& e) {
        if (e.wrapped && !m_wrapped) {
            m_wrapped = true;
            m_wrapped_at = size();
            m_wrapped_value = e.raw;
        }
        push_back(e.value);
    }
    bool m_wrapped = false;
    std::size_t m_wrapped_at = 0;
    unsigned long long m_wrapped_value = 0;
};

}  // namespace xgrad
