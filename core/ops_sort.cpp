// Sorting along an axis: sort, argsort and topk. The values carry a gradient, which goes back
// to where each value came from; the indices carry none.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/grad_ops.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"

namespace xgrad {

namespace {

// The first k of each row along `axis` after a stable sort (NaN as the largest value, as
// torch), ascending or descending.
ValuesIndices sorted_prefix(const char* op, const Tensor& a, long axis, std::size_t k, bool descending) {
    if (!a.defined()) throw Error(fmt::format("{}: the input is an undefined tensor", op));
    // A 0-d tensor sorts as one element, as torch.
    // A mask orders its bytes as 0 and 1 (canonical_bools).
    const Tensor in = a.dim() == 0 ? canonical_bools(a).reshape({1}) : canonical_bools(a);
    const Shape& shape = in.shape();
    const std::size_t ax = normalize_axis(op, axis, shape);
    const axis_split s = split_at(shape, ax);
    if (k > s.n)
        throw Error(fmt::format("{}: k = {} is larger than axis {} (length {}, shape {})", op, k, ax, s.n,
                                shape_str(shape)));
    Shape out_shape = shape;
    out_shape[ax] = k;
    const AllocContext context(op, out_shape);
    return dispatch_all(in.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* x = values<T>(in).data();
        xt::xarray<T> y = xt::xarray<T>::from_shape(out_shape);
        xt::xarray<std::int64_t> where = xt::xarray<std::int64_t>::from_shape(out_shape);
        auto is_nan = [](T v) {
            if constexpr (is_floating_v<T>) return std::isnan(static_cast<double>(v));
            else return false;
        };
        // "u before v": NaN counts as larger than everything, ties are left to the stable sort.
        auto less = [&](T u, T v) { return !is_nan(u) && (is_nan(v) || u < v); };
        std::vector<std::size_t> order(s.n);
        // Flat source offsets of every picked element, for the backward.
        auto picked = std::make_shared<std::vector<std::size_t>>(s.outer * k * s.inner);
        for (std::size_t o = 0; o < s.outer; ++o)
            for (std::size_t i = 0; i < s.inner; ++i) {
                auto at = [&](std::size_t j) { return x[(o * s.n + j) * s.inner + i]; };
                std::iota(order.begin(), order.end(), std::size_t{0});
                if (descending)
                    std::stable_sort(order.begin(), order.end(), [&](std::size_t p, std::size_t q) { return less(at(q), at(p)); });
                else
                    std::stable_sort(order.begin(), order.end(), [&](std::size_t p, std::size_t q) { return less(at(p), at(q)); });
                for (std::size_t j = 0; j < k; ++j) {
                    const std::size_t dst = (o * k + j) * s.inner + i, src = (o * s.n + order[j]) * s.inner + i;
                    y.data()[dst] = x[src];
                    where.data()[dst] = static_cast<std::int64_t>(order[j]);
                    (*picked)[dst] = src;
                }
            }
        // The gradient goes back to where each value came from (torch's scatter of g).
        Tensor values = make_any_result<T>(
            std::move(y), {in}, op,
            Formula([at = FlatOffsets(std::move(picked))](const GradArgs& in) -> std::vector<Tensor> {
                return {scatter_flat(in.grad(), at, in.inputs[0].shape())};
            }),
            Saves::none());
        Tensor indices = make_leaf(Storage(std::move(where)));
        if (a.dim() == 0) return ValuesIndices{values.reshape({}), indices.reshape({})};
        return ValuesIndices{values, indices};
    });
}

}  // namespace

ValuesIndices sort(const Tensor& a, long axis, bool descending) {
    const std::size_t n = a.defined() && a.dim() > 0 ? a.shape()[normalize_axis("sort", axis, a.shape())] : 1;
    return sorted_prefix("sort", a, axis, n, descending);
}

Tensor argsort(const Tensor& a, long axis, bool descending) {
    NoGradGuard no_grad;  // only the indices are kept: no graph for the values
    return sort(a, axis, descending).indices;
}

ValuesIndices topk(const Tensor& a, long k, long axis, bool largest) {
    if (k < 0) throw Error(fmt::format("topk: k must be at least 0, got {}", k));
    return sorted_prefix("topk", a, axis, static_cast<std::size_t>(k), largest);
}

}  // namespace xgrad
