#include "core/broadcast.hpp"

#include <numeric>

namespace xgrad {

Shape broadcast_axes(const char* op, const Shape& a, const Shape& b) {
    const std::size_t rank = std::max(a.size(), b.size());
    Shape out(rank);
    for (std::size_t i = 0; i < rank; ++i) {
        // Align from the right; a missing axis acts as length 1.
        const std::size_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const std::size_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (da != db && da != 1 && db != 1)
            throw Error(fmt::format("{}: shapes {} and {} cannot be broadcast together (axis {}: {} vs {})",
                                    op, shape_str(a), shape_str(b), static_cast<long>(i) - static_cast<long>(rank),
                                    da, db));
        out[i] = da == 1 ? db : da;
    }
    return out;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
    Shape out = broadcast_axes(op, a, b);
    checked_numel(op, out);
    return out;
}

namespace {

std::size_t product(Shape::const_iterator begin, Shape::const_iterator end) {
    return std::accumulate(begin, end, std::size_t{1}, std::multiplies<>());
}

// s right-aligned to out's rank with leading 1s; nothing when s has more axes or is not
// broadcastable to out.
std::optional<Shape> padded(const Shape& s, const Shape& out) {
    if (s.size() > out.size()) return std::nullopt;
    Shape p(out.size() - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    for (std::size_t i = 0; i < p.size(); ++i)
        if (p[i] != 1 && p[i] != out[i]) return std::nullopt;
    return p;
}

// cols when p is out's trailing block (1 on every axis before it), else nothing.
std::optional<std::size_t> trailing_block(const Shape& p, const Shape& out) {
    std::size_t k = p.size();
    while (k > 0 && p[k - 1] == out[k - 1]) --k;
    for (std::size_t j = 0; j < k; ++j)
        if (p[j] != 1) return std::nullopt;
    return product(out.begin() + static_cast<long>(k), out.end());
}

// rows when p is out's leading block (1 on every axis after it), else nothing.
std::optional<std::size_t> leading_block(const Shape& p, const Shape& out) {
    std::size_t k = 0;
    while (k < p.size() && p[k] == out[k]) ++k;
    for (std::size_t j = k; j < p.size(); ++j)
        if (p[j] != 1) return std::nullopt;
    return product(out.begin(), out.begin() + static_cast<long>(k));
}

}  // namespace

std::optional<std::pair<std::size_t, std::size_t>> split_for(const Shape& s, const Shape& out) {
    const std::size_t n_out = product(out.begin(), out.end());
    const auto p = padded(s, out);
    if (!p || n_out == 0) return std::nullopt;
    const std::size_t n = product(s.begin(), s.end());
    if (n == n_out || n == 1) return std::make_pair(std::size_t{1}, n_out);
    if (const auto cols = trailing_block(*p, out)) return std::make_pair(n_out / *cols, *cols);
    if (const auto rows = leading_block(*p, out)) return std::make_pair(*rows, n_out / *rows);
    return std::nullopt;
}

std::optional<Steps> steps_for(const Shape& s, const Shape& out, std::size_t rows, std::size_t cols) {
    const auto p = padded(s, out);
    if (!p || rows * cols == 0) return std::nullopt;
    const std::size_t n = product(s.begin(), s.end());
    if (n == rows * cols) return Steps{cols, 1};
    if (n == 1) return Steps{0, 0};
    if (const auto c = trailing_block(*p, out); c && *c == cols) return Steps{0, 1};
    if (const auto r = leading_block(*p, out); r && *r == rows) return Steps{1, 0};
    return std::nullopt;
}

std::optional<Plan2D> plan_broadcast(const Shape& a, const Shape& b, const Shape& out) {
    for (const Shape* s : {&a, &b}) {
        const auto split = split_for(*s, out);
        if (!split) return std::nullopt;
        const auto sa = steps_for(a, out, split->first, split->second);
        const auto sb = steps_for(b, out, split->first, split->second);
        if (sa && sb) return Plan2D{split->first, split->second, *sa, *sb};
    }
    return std::nullopt;
}

template <class T> std::optional<xt::xarray<T>> broadcast_fast(const xt::xarray<T>& g, const Shape& to) {
    const Shape from(g.shape().begin(), g.shape().end());
    const auto split = split_for(from, to);
    if (!split) return std::nullopt;
    const auto s = steps_for(from, to, split->first, split->second);
    if (!s) return std::nullopt;
    xt::xarray<T> y = xt::xarray<T>::from_shape(to);
    const Plan2D p{split->first, split->second, *s, *s};
    apply_plan<T>(p, g.data(), g.data(), y.data(), [](T x, T) { return x; });
    return y;
}

template <class T> xt::xarray<T> sum_to(xt::xarray<T>&& g, const Shape& shape) {
    if (std::equal(g.shape().begin(), g.shape().end(), shape.begin(), shape.end())) return std::move(g);
    const Shape from(g.shape().begin(), g.shape().end());
    if (const auto split = split_for(shape, from)) {
        if (const auto s = steps_for(shape, from, split->first, split->second)) {
            xt::xarray<T> out = xt::xarray<T>::from_shape(shape);
            const T* pg = g.data();
            const std::size_t cols = split->second;
            reduce_plan<T>(split->first, cols, *s, out.data(), [pg, cols](std::size_t r, std::size_t c) { return pg[r * cols + c]; });
            return out;
        }
    }
    const std::size_t lead = g.dimension() - shape.size();
    std::vector<std::size_t> axes;
    for (std::size_t i = 0; i < g.dimension(); ++i)
        if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) axes.push_back(i);
    // xtensor's immediate reducer crashes on an empty input reduced over some axes.
    if (g.size() == 0) return xt::zeros<T>(shape);
    xt::xarray<T> reduced = xt::sum(g, axes, xt::evaluation_strategy::immediate);
    reduced.reshape(shape);
    return reduced;
}

template xt::xarray<float> sum_to<float>(xt::xarray<float>&&, const Shape&);
template xt::xarray<double> sum_to<double>(xt::xarray<double>&&, const Shape&);
template std::optional<xt::xarray<float>> broadcast_fast<float>(const xt::xarray<float>&, const Shape&);
template std::optional<xt::xarray<double>> broadcast_fast<double>(const xt::xarray<double>&, const Shape&);

}  // namespace xgrad
