// layer_norm as one op: forward and backward over rows of the normalised block, on the pool.
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/broadcast.hpp"
#include "core/ops.hpp"
#include "core/runtime/alloc.hpp"
#include "core/runtime/parallel.hpp"

namespace xgrad {

namespace {

void check_affine(const char* arg, const Tensor& t, const Tensor& x, const Shape& normalized_shape) {
    if (!t.defined()) return;
    if (t.dtype() != x.dtype())
        throw Error(fmt::format("layer_norm: {} is {} but the input is {}; convert one with .to()", arg,
                                dtype_name(t.dtype()), dtype_name(x.dtype())));
    if (t.shape() != normalized_shape)
        throw Error(fmt::format("layer_norm: {} must have the normalized shape {}, got shape {}", arg,
                                shape_str(normalized_shape), shape_str(t.shape())));
}

// Σ f(j) over [0, n) in kLanes interleaved partial sums combined in a fixed order: one running
// sum is a single dependency chain the compiler may not split (no -ffast-math), these
// vectorise. The order depends only on n, never on the threads.
template <class A, class F> A lane_sum(std::size_t n, F f) {
    constexpr std::size_t kLanes = 8;
    A acc[kLanes] = {};
    std::size_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
        for (std::size_t l = 0; l < kLanes; ++l) acc[l] += f(j + l);
    for (std::size_t l = 0; j < n; ++j, ++l) acc[l] += f(j);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// f(integral_constant<bool, p != nullptr>): loops specialised on whether a weight (or bias)
// is there, rather than testing it per element.
template <class F> void with_flag(bool on, F&& f) {
    if (on) f(std::true_type{});
    else f(std::false_type{});
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
    if (!x.defined()) throw Error("layer_norm: input is an undefined tensor");
    if (!is_floating(x.dtype()))
        throw Error(fmt::format("layer_norm: expected a floating-point input (float32 or float64), got {}",
                                dtype_name(x.dtype())));
    const std::size_t k = normalized_shape.size();
    if (k == 0) throw Error("layer_norm: normalized_shape must have at least one axis, got ()");
    if (x.dim() < k || !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - static_cast<long>(k)))
        throw Error(fmt::format("layer_norm: input must end with the normalized shape {}, got shape {}",
                                shape_str(normalized_shape), shape_str(x.shape())));
    check_affine("weight", weight, x, normalized_shape);
    check_affine("bias", bias, x, normalized_shape);
    // A negative eps can make var + eps negative and every output NaN without a word.
    if (!(eps >= 0) || !std::isfinite(eps))
        throw Error(fmt::format("layer_norm: eps must be finite and >= 0, got {}", eps));

    std::size_t n = 1, rows = 1;
    for (std::size_t d = 0; d < x.dim(); ++d) (d < x.dim() - k ? rows : n) *= x.shape()[d];
    const AllocContext context("layer_norm", x.shape());
    std::vector<Tensor> inputs{x};
    const std::size_t iw = weight.defined() ? inputs.size() : 0;
    if (weight.defined()) inputs.push_back(weight);
    const std::size_t ib = bias.defined() ? inputs.size() : 0;
    if (bias.defined()) inputs.push_back(bias);
    // The backward reads x and the weight; the bias only for its shape.
    const Saves saves = Saves::only_inputs(1u | (iw ? 1u << iw : 0u));
    const std::size_t grain = std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(n, 1));

    return dispatch_floating("layer_norm", x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* px = values<T>(x).data();
        const T* pw = iw ? values<T>(weight).data() : nullptr;
        const T* pb = ib ? values<T>(bias).data() : nullptr;
        xt::xarray<T> y = xt::xarray<T>::from_shape(x.shape());
        T* py = y.data();
        std::vector<A> mean(rows), rstd(rows);
        with_flag(pw != nullptr, [&](auto has_w) {
            with_flag(pb != nullptr, [&](auto has_b) {
                parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
                    for (std::size_t r = r0; r < r1; ++r) {
                        const T* xr = px + r * n;
                        const A mu = lane_sum<A>(n, [xr](std::size_t j) { return A(xr[j]); }) / static_cast<A>(n);
                        const A v = lane_sum<A>(n, [xr, mu](std::size_t j) { return (xr[j] - mu) * (xr[j] - mu); });
                        const A rs = A(1) / std::sqrt(v / static_cast<A>(n) + static_cast<A>(eps));
                        mean[r] = mu;
                        rstd[r] = rs;
                        T* yr = py + r * n;
                        for (std::size_t j = 0; j < n; ++j) {
                            A h = (xr[j] - mu) * rs;
                            if constexpr (has_w) h *= pw[j];
                            if constexpr (has_b) h += pb[j];
                            yr[j] = static_cast<T>(h);
                        }
                    }
                });
            });
        });
        return make_result<T>(
            std::move(y), std::move(inputs), "layer_norm",
            [rows, n, iw, ib, grain, mean = std::move(mean), rstd = std::move(rstd)](Node& self, const Storage& gs) {
                const Tensor& tx = self.parents[0];
                const T* px = values<T>(tx).data();
                const T* pw = iw ? values<T>(self.parents[iw]).data() : nullptr;
                const T* pg = grad_as<T>(gs).data();
                if (needs_grad(self, 0)) {
                    // dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), ĝ = g·weight, x̂ the normalised x.
                    xt::xarray<T> dx = xt::xarray<T>::from_shape(tx.shape());
                    T* pd = dx.data();
                    with_flag(pw != nullptr, [&](auto has_w) {
                        parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
                            for (std::size_t r = r0; r < r1; ++r) {
                                const T* xr = px + r * n;
                                const T* gr = pg + r * n;
                                const A mu = mean[r], rs = rstd[r];
                                auto gw = [&](std::size_t j) {
                                    if constexpr (has_w) return A(gr[j]) * pw[j];
                                    else return A(gr[j]);
                                };
                                const A s1 = lane_sum<A>(n, gw) / static_cast<A>(n);
                                const A s2 = lane_sum<A>(n, [&](std::size_t j) { return gw(j) * ((xr[j] - mu) * rs); }) /
                                             static_cast<A>(n);
                                T* dr = pd + r * n;
                                for (std::size_t j = 0; j < n; ++j)
                                    dr[j] = static_cast<T>(rs * (gw(j) - s1 - (xr[j] - mu) * rs * s2));
                            }
                        });
                    });
                    accumulate<T>("layer_norm", tx, std::move(dx));
                }
                // dweight = Σ_rows g·x̂, dbias = Σ_rows g: each column summed over the rows in
                // order, so the result does not depend on the threads.
                const bool want_w = iw && needs_grad(self, iw), want_b = ib && needs_grad(self, ib);
                if (!want_w && !want_b) return;
                xt::xarray<T> dw = xt::xarray<T>::from_shape(self.parents[want_w ? iw : ib].shape());
                xt::xarray<T> db = xt::xarray<T>::from_shape(dw.shape());
                T *pdw = dw.data(), *pdb = db.data();
                parallel_for(n, std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(rows, 1)),
                             [&](std::size_t j0, std::size_t j1) {
                                 std::vector<A> aw(j1 - j0, A(0)), ab(j1 - j0, A(0));
                                 for (std::size_t r = 0; r < rows; ++r) {
                                     const T* xr = px + r * n;
                                     const T* gr = pg + r * n;
                                     for (std::size_t j = j0; j < j1; ++j) {
                                         aw[j - j0] += A(gr[j]) * ((xr[j] - mean[r]) * rstd[r]);
                                         ab[j - j0] += gr[j];
                                     }
                                 }
                                 for (std::size_t j = j0; j < j1; ++j) {
                                     pdw[j] = static_cast<T>(aw[j - j0]);
                                     pdb[j] = static_cast<T>(ab[j - j0]);
                                 }
                             });
                if (want_w) accumulate<T>("layer_norm", self.parents[iw], std::move(dw));
                if (want_b) accumulate<T>("layer_norm", self.parents[ib], std::move(db));
            },
            saves);
    });
}

}  // namespace xgrad
