#include "core/error.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace xgrad {

Shape::Shape(std::initializer_list<Entry> sizes) {
    reserve(sizes.size());
    for (const Entry& e : sizes) {
        if (e.negative)
            throw Error(fmt::format("Shape: entry {} is {}; a size must be non-negative", size(), e.signed_value));
        push_back(e.value);
    }
}

Shape::size_type Shape::wrap(long long i) const {
    const auto n = static_cast<long long>(size());
    if (i < -n || i >= n)
        throw Error(fmt::format("Shape: index {} is out of range for a shape of {} sizes {}", i, n, shape_str(*this)));
    return static_cast<size_type>(i < 0 ? i + n : i);
}

std::string shape_str(const Shape& shape) {
    if (shape.size() == 1) return fmt::format("({},)", shape[0]);
    return fmt::format("({})", fmt::join(shape, ", "));
}

Shape unravel_index(std::size_t flat, const Shape& shape) {
    Shape index(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    return index;
}

std::size_t normalize_axis(const char* op, long axis, const Shape& shape) {
    const long rank = static_cast<long>(shape.size());
    const long a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
        throw Error(fmt::format("{}: axis {} is out of range for a tensor of rank {} (shape {})", op,
                                axis, rank, shape_str(shape)));
    return static_cast<std::size_t>(a);
}

std::size_t numel_or_max(const Shape& shape) noexcept {
    std::size_t nonzero = 1;
    bool empty = false;
    for (std::size_t d : shape) {
        if (d == 0) {
            empty = true;
            continue;
        }
        if (__builtin_mul_overflow(nonzero, d, &nonzero) || nonzero > kMaxElements) return SIZE_MAX;
    }
    return empty ? 0 : nonzero;
}

void throw_too_large(const char* op, const Shape& shape, const std::string& of) {
    const std::string whose = of.empty() ? std::string() : fmt::format(" ({})", of);
    if (std::find(shape.begin(), shape.end(), 0) != shape.end())
        throw Error(fmt::format("{}: shape {} is too large: without its zero-length axes it has more elements than "
                                "fit in memory{}",
                                op, shape_str(shape), whose));
    throw Error(fmt::format("{}: shape {} has more elements than fit in memory{}", op, shape_str(shape), whose));
}

std::size_t checked_numel(const char* op, const Shape& shape) {
    return checked_numel(op, shape, [] { return std::string(); });
}

std::int64_t checked_int64(const char* op, const char* what, double v) {
    if (!fits_int64(v))
        throw Error(fmt::format("{}: {} must be finite and within int64's range, got {}", op, what, v));
    return static_cast<std::int64_t>(v);
}

void throw_wrapped_index(const char* op, unsigned long long v) {
    throw Error(fmt::format("{}: index {} is an unsigned value above 2^63 - 1, which no axis has: an "
                            "unsigned index that went below zero? (use a signed type for negative indices)",
                            op, v));
}

void IntList::check(const char* op) const {
    if (!m_wrapped) return;
    throw Error(fmt::format("{}: entry {} of the size or axis list is {}, an unsigned value above 2^63 - 1, which no "
                            "size or axis has: an unsigned value that went below zero? (use a signed type for "
                            "negative values)",
                            op, m_wrapped_at, m_wrapped_value));
}

Shape IntList::shape(const char* op) const {
    if (m_wrapped)
        throw Error(fmt::format("{}: shape has size {} at entry {}, above 2^63 - 1: more elements than fit in memory "
                                "(or an unsigned size that went below zero)",
                                op, m_wrapped_value, m_wrapped_at));
    Shape out;
    out.reserve(size());
    for (long v : *this) {
        if (v < 0)
            throw Error(fmt::format("{}: sizes must be non-negative, got [{}] (a negative size, as torch's "
                                    "\"negative dimension\")",
                                    op, fmt::join(*this, ", ")));
        out.push_back(static_cast<std::size_t>(v));
    }
    return out;
}

}  // namespace xgrad
