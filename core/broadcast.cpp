#include "core/broadcast.hpp"

namespace xgrad {

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
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
    checked_numel(op, out);
    return out;
}

template <class T> xt::xarray<T> sum_to(xt::xarray<T>&& g, const Shape& shape) {
    if (std::equal(g.shape().begin(), g.shape().end(), shape.begin(), shape.end())) return std::move(g);
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

}  // namespace xgrad
