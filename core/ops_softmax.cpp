// Softmax and log-softmax along one axis, fused: one pass for the max, one for the sum, one
// to write; backward from the saved output alone. The tensor is viewed as (outer, n, inner)
// around the axis, so any axis is a strided loop over contiguous memory.
#include <cmath>

#include "ops.hpp"
#include "ops_util.hpp"

namespace xgrad {

namespace {

axis_split layout_around(const char* op, const Shape& shape, long axis) {
    return split_at(shape, normalize_axis(op, axis, shape));
}

// Calls f(base, stride) for every line along the axis: elements base + k·stride, k < n.
template <class F> void for_each_line(const axis_split& l, F&& f) {
    for (std::size_t o = 0; o < l.outer; ++o)
        for (std::size_t j = 0; j < l.inner; ++j) f(o * l.n * l.inner + j, l.inner);
}

}  // namespace

Tensor softmax(const Tensor& a, long axis) {
    const axis_split l = layout_around("softmax", a.shape(), axis);
    return dispatch_floating("softmax", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* x = values<T>(a).data();
        xt::xarray<T> out = xt::empty<T>(a.shape());
        T* y = out.data();
        for_each_line(l, [&](std::size_t base, std::size_t s) {
            T m = -std::numeric_limits<T>::infinity();
            for (std::size_t k = 0; k < l.n; ++k) m = std::max(m, x[base + k * s]);
            T z = 0;
            for (std::size_t k = 0; k < l.n; ++k) z += (y[base + k * s] = std::exp(x[base + k * s] - m));
            const T inv = T(1) / z;
            for (std::size_t k = 0; k < l.n; ++k) y[base + k * s] *= inv;
        });
        return make_result<T>(std::move(out), {a}, "softmax", [l](Node& self, const Storage& gs) {
            // gx = y ⊙ (g − Σₖ g⊙y)
            const T* y = values<T>(self).data();
            const T* g = grad_as<T>(gs).data();
            xt::xarray<T> gx = xt::empty<T>(self.shape);
            T* d = gx.data();
            for_each_line(l, [&](std::size_t base, std::size_t s) {
                T dot = 0;
                for (std::size_t k = 0; k < l.n; ++k) dot += g[base + k * s] * y[base + k * s];
                for (std::size_t k = 0; k < l.n; ++k) d[base + k * s] = y[base + k * s] * (g[base + k * s] - dot);
            });
            accumulate<T>("softmax", self.parents[0], std::move(gx));
        });
    });
}

Tensor log_softmax(const Tensor& a, long axis) {
    const axis_split l = layout_around("log_softmax", a.shape(), axis);
    return dispatch_floating("log_softmax", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* x = values<T>(a).data();
        xt::xarray<T> out = xt::empty<T>(a.shape());
        T* y = out.data();
        for_each_line(l, [&](std::size_t base, std::size_t s) {
            T m = -std::numeric_limits<T>::infinity();
            for (std::size_t k = 0; k < l.n; ++k) m = std::max(m, x[base + k * s]);
            T z = 0;
            for (std::size_t k = 0; k < l.n; ++k) z += std::exp(x[base + k * s] - m);
            const T lse = m + std::log(z);
            for (std::size_t k = 0; k < l.n; ++k) y[base + k * s] = x[base + k * s] - lse;
        });
        return make_result<T>(std::move(out), {a}, "log_softmax", [l](Node& self, const Storage& gs) {
            // gx = g − softmax ⊙ Σₖ g, with softmax = exp(y)
            const T* y = values<T>(self).data();
            const T* g = grad_as<T>(gs).data();
            xt::xarray<T> gx = xt::empty<T>(self.shape);
            T* d = gx.data();
            for_each_line(l, [&](std::size_t base, std::size_t s) {
                T total = 0;
                for (std::size_t k = 0; k < l.n; ++k) total += g[base + k * s];
                for (std::size_t k = 0; k < l.n; ++k)
                    d[base + k * s] = g[base + k * s] - std::exp(y[base + k * s]) * total;
            });
            accumulate<T>("log_softmax", self.parents[0], std::move(gx));
        });
    });
}

}  // namespace xgrad
