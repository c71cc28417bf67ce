// Reductions: sum, mean, max and argmax, each with its gradient (argmax has none).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/ops.hpp"
#include "core/ops_util.hpp"

namespace xgrad {

namespace {

// Normalised axes in increasing order; an empty list means every axis (torch.sum(x, dim=[])).
std::vector<std::size_t> reduce_axes(const char* op, const std::vector<long>& axes, const Shape& shape) {
    std::vector<std::size_t> out;
    if (axes.empty()) {
        out.resize(shape.size());
        std::iota(out.begin(), out.end(), std::size_t{0});
        return out;
    }
    for (long axis : axes) {
        const std::size_t a = normalize_axis(op, axis, shape);
        if (std::find(out.begin(), out.end(), a) != out.end())
            throw Error(fmt::format("{}: axes ({}) name axis {} more than once (shape {})", op,
                                    fmt::join(axes, ", "), a, shape_str(shape)));
        out.push_back(a);
    }
    std::sort(out.begin(), out.end());
    return out;
}

// The input shape with the reduced axes set to 1, and the result shape (kept or dropped).
std::pair<Shape, Shape> reduced_shapes(const Shape& in, const std::vector<std::size_t>& axes, bool keepdims) {
    Shape kept = in;
    for (std::size_t a : axes) kept[a] = 1;
    if (keepdims) return {kept, kept};
    Shape dropped;
    for (std::size_t d = 0; d < in.size(); ++d)
        if (!std::binary_search(axes.begin(), axes.end(), d)) dropped.push_back(in[d]);
    return {kept, dropped};
}

Tensor reduce_sum(const char* op, const Tensor& a, const std::vector<std::size_t>& axes, bool keepdims,
                  bool mean) {
    const Shape& in = a.shape();
    // Named variables, not a structured binding: C++17 does not let lambdas capture those
    // (clang refuses; gcc allows it as an extension).
    const auto shapes = reduced_shapes(in, axes, keepdims);
    const Shape& kept = shapes.first;
    const Shape& out_shape = shapes.second;
    std::size_t count = 1;
    for (std::size_t ax : axes) count *= in[ax];

    if (!is_floating(a.dtype())) {
        if (mean)
            throw Error(fmt::format("{}: expected a floating-point tensor (float32 or float64), got {} "
                                    "(convert it with .to(kFloat32) first)",
                                    op, dtype_name(a.dtype())));
        // int64 and bool sum to int64, as torch; integers carry no gradient. An overflowing sum
        // wraps around as torch's does: summed as unsigned, where wrapping is defined (signed
        // overflow is undefined behaviour).
        xt::xarray<std::int64_t> r = std::visit(
            [&](const auto& x) -> xt::xarray<std::int64_t> {
                if (x.size() == 0) return xt::zeros<std::int64_t>(kept);  // see below
                const xt::xarray<std::uint64_t> u =
                    xt::sum(xt::cast<std::uint64_t>(xt::cast<std::int64_t>(x)), axes, xt::evaluation_strategy::immediate);
                return xt::cast<std::int64_t>(u);
            },
            a.node().data);
        r.reshape(out_shape);
        return make_leaf(Storage(std::move(r)));
    }

    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // xtensor accumulates float sums in double, then rounds once. Its immediate reducer
        // crashes on an empty input when only some axes are reduced: an empty sum is 0.
        xt::xarray<T> r = values<T>(a).size() == 0
                              ? xt::xarray<T>(xt::zeros<T>(kept))
                              : xt::xarray<T>(xt::sum(values<T>(a), axes, xt::evaluation_strategy::immediate));
        if (mean) r /= static_cast<T>(count);
        r.reshape(out_shape);
        return make_result<T>(std::move(r), {a}, op,
                              [op, kept = kept, count, mean](Node& self, const Storage& gs) {
                                  const Tensor& x = self.parents[0];
                                  xt::xarray<T> g = grad_as<T>(gs);
                                  g.reshape(kept);
                                  if (mean) g /= static_cast<T>(count);
                                  accumulate<T>(op, x, xt::xarray<T>(xt::broadcast(g, x.shape())));
                              },
                              Saves::none());
    });
}

// Index of the maximum along the middle axis of (outer, n, inner), first one on ties; a NaN
// counts as larger than any number so that it propagates, as in torch. Values go to `best`.
template <class T>
std::vector<std::size_t> argmax_along(const xt::xarray<T>& x, const axis_split& s, xt::xarray<T>& best) {
    std::vector<std::size_t> idx(s.outer * s.inner, 0);
    T* bv = best.data();
    const T* p = x.data();
    // k in the middle loop, i innermost: every pass reads contiguous rows.
    for (std::size_t o = 0; o < s.outer; ++o) {
        T* b = bv + o * s.inner;
        std::size_t* bi = idx.data() + o * s.inner;
        std::copy(p + o * s.n * s.inner, p + (o * s.n + 1) * s.inner, b);
        for (std::size_t k = 1; k < s.n; ++k) {
            const T* row = p + (o * s.n + k) * s.inner;
            for (std::size_t i = 0; i < s.inner; ++i) {
                bool beats = row[i] > b[i];
                if constexpr (std::is_floating_point_v<T>) beats = beats || (std::isnan(row[i]) && !std::isnan(b[i]));
                if (beats) {
                    b[i] = row[i];
                    bi[i] = k;
                }
            }
        }
    }
    return idx;
}

Shape without_axis(const Shape& in, std::size_t axis, bool keepdims) {
    Shape out = in;
    if (keepdims) out[axis] = 1;
    else out.erase(out.begin() + static_cast<long>(axis));
    return out;
}

void check_nonempty_axis(const char* op, const Shape& in, std::size_t axis) {
    if (in[axis] == 0)
        throw Error(fmt::format("{}: cannot reduce axis {} of length 0 (shape {})", op, axis, shape_str(in)));
}

}  // namespace

Tensor sum(const Tensor& a) { return reduce_sum("sum", a, reduce_axes("sum", {}, a.shape()), false, false); }

Tensor sum(const Tensor& a, const std::vector<long>& axes, bool keepdims) {
    return reduce_sum("sum", a, reduce_axes("sum", axes, a.shape()), keepdims, false);
}

Tensor mean(const Tensor& a) { return reduce_sum("mean", a, reduce_axes("mean", {}, a.shape()), false, true); }

Tensor mean(const Tensor& a, const std::vector<long>& axes, bool keepdims) {
    return reduce_sum("mean", a, reduce_axes("mean", axes, a.shape()), keepdims, true);
}

Tensor max(const Tensor& a, long axis, bool keepdims) {
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis("max", axis, in);
    check_nonempty_axis("max", in, ax);
    const axis_split s = split_at(in, ax);
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> best = xt::xarray<T>::from_shape(without_axis(in, ax, keepdims));
        std::vector<std::size_t> idx = argmax_along(values<T>(a), s, best);
        return make_any_result<T>(
            std::move(best), {a}, "max",
            floating_backward("max", [s, idx = std::move(idx)](auto gtag, Node& self, const Storage& gs) {
                using G = typename decltype(gtag)::type;
                const Tensor& x = self.parents[0];
                const G* g = grad_as<G>(gs).data();
                xt::xarray<G> gx = xt::zeros<G>(x.shape());
                G* d = gx.data();
                for (std::size_t o = 0; o < s.outer; ++o)
                    for (std::size_t i = 0; i < s.inner; ++i)
                        d[(o * s.n + idx[o * s.inner + i]) * s.inner + i] = g[o * s.inner + i];
                accumulate<G>("max", x, std::move(gx));
            }), Saves::none());
    });
}

Tensor argmax(const Tensor& a, long axis, bool keepdims) {
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis("argmax", axis, in);
    check_nonempty_axis("argmax", in, ax);
    const axis_split s = split_at(in, ax);
    const Shape out_shape = without_axis(in, ax, keepdims);
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> best = xt::xarray<T>::from_shape(out_shape);
        std::vector<std::size_t> idx = argmax_along(values<T>(a), s, best);
        xt::xarray<std::int64_t> r = xt::xarray<std::int64_t>::from_shape(out_shape);
        std::copy(idx.begin(), idx.end(), r.begin());
        return make_leaf(Storage(std::move(r)));
    });
}

}  // namespace xgrad
