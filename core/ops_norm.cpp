// layer_norm as one op, and add_layer_norm (layer_norm of a residual sum) beside it: forward and
// backward over rows of the normalised block, on the pool.
//
// Precision: the row statistics (mean, variance, and the backward's two row sums) are taken in
// double for float32 with the fixed-order lane_sum; the elementwise passes then run in the
// input's type with those statistics rounded to it once per row, as torch's CPU kernel does, so
// they vectorise 4-wide on baseline SSE2 rather than 2-wide through double.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/broadcast.hpp"
#include "core/ops.hpp"
#include "core/runtime/alloc.hpp"
#include "core/runtime/kernel_loops.hpp"
#include "core/runtime/parallel.hpp"

namespace xgrad {

namespace {

// x − mean computed in C, the row's double mean held as its rounding to C plus the remainder:
// (x − hi) − lo keeps the double mean's accuracy, where x − C(mean) alone is off by up to half
// an ulp of the mean, a shift of the whole row that is large against its spread when the row
// sits far from zero (mean 1e4, spread 1: 5e-4 in every float32 output).
template <class C, class A> struct Centred {
    C hi, lo;
    explicit Centred(A mu) : hi(static_cast<C>(mu)), lo(static_cast<C>(mu - static_cast<A>(hi))) {}
    C operator()(C x) const {
        if constexpr (std::is_same_v<C, A>) return x - hi;
        else return (x - hi) - lo;
    }
};

// Whether a row's elementwise pass may run in T rather than in double: rstd, the largest
// |x − mean| (at most √n/rstd) and the backward's row means a and b well inside T's range, so
// that the normalised row neither overflows nor rstd goes subnormal where double's would not.
// Rows of values near float's limits, or of a spread near its smallest numbers with eps 0,
// take the double pass (and NaN rows, which are NaN either way). The weight and the incoming
// gradient are not bounded here: a row whose T pass came out non-finite is redone in double
// (all_finite), so huge weights cost a second pass instead of an inf double would not give.
template <class T, class A> bool fits(std::size_t n, A rs, A a = 0, A b = 0) {
    if constexpr (std::is_same_v<T, A>) {
        return true;
    } else {
        const A lim = static_cast<A>(std::numeric_limits<T>::max()) * A(1e-6);
        return rs <= lim && std::sqrt(static_cast<A>(n)) <= lim * rs && std::abs(a) <= lim && std::abs(b) <= lim;
    }
}

// Whether every value of a row is finite: no value has all exponent bits set (inf and NaN do;
// NaN fails too, and that row is then redone in double and comes out NaN again). Tested on the
// bits, folded into one flag, so that the loop vectorises: GCC does not vectorise a float
// comparison that may trap on NaN.
template <class T> bool all_finite(const T* p, std::size_t n) {
    using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    static_assert(sizeof(T) == sizeof(U) && std::numeric_limits<T>::is_iec559, "all_finite: float or double");
    constexpr U exponent = sizeof(T) == 4 ? U(0x7f800000u) : U(0x7ff0000000000000ull);
    U bad = 0;
    for (std::size_t j = 0; j < n; ++j) {
        U u;
        std::memcpy(&u, p + j, sizeof u);
        bad |= static_cast<U>((u & exponent) == exponent);
    }
    return bad == 0;
}

// The names an op's messages use: layer_norm has one input, add_layer_norm two (x and y).
struct Names {
    const char* op;
    const char* input;  // "input" or "x"
    const char* what;   // "the input is" or "x and y are"
};

void check_affine(const Names& nm, const char* arg, const Tensor& t, const Tensor& x, const Shape& normalized_shape) {
    if (!t.defined()) return;
    if (t.dtype() != x.dtype())
        throw Error(fmt::format("{}: {} is {} but {} {}; convert one with .to()", nm.op, arg, dtype_name(t.dtype()),
                                nm.what, dtype_name(x.dtype())));
    if (t.shape() != normalized_shape)
        throw Error(fmt::format("{}: {} must have the normalized shape {}, got shape {}", nm.op, arg,
                                shape_str(normalized_shape), shape_str(t.shape())));
}

void check_args(const Names& nm, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                const Tensor& bias, double eps) {
    if (!is_floating(x.dtype()))
        throw Error(fmt::format("{}: expected a floating-point {} (float32 or float64), got {}", nm.op, nm.input,
                                dtype_name(x.dtype())));
    const std::size_t k = normalized_shape.size();
    if (k == 0) throw Error(fmt::format("{}: normalized_shape must have at least one axis, got ()", nm.op));
    if (x.dim() < k || !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - static_cast<long>(k)))
        throw Error(fmt::format("{}: {} must end with the normalized shape {}, got shape {}", nm.op, nm.input,
                                shape_str(normalized_shape), shape_str(x.shape())));
    check_affine(nm, "weight", weight, x, normalized_shape);
    check_affine(nm, "bias", bias, x, normalized_shape);
    // A negative eps can make var + eps negative and every output NaN without a word.
    if (!(eps >= 0) || !std::isfinite(eps))
        throw Error(fmt::format("{}: eps must be finite and >= 0, got {}", nm.op, eps));
}

// layer_norm of x, or of x + y when y is defined. The residual form keeps the sum (rounded to
// T, as x + y would be) for its backward and reads neither x nor y again, so writing to them
// after the forward pass is allowed, as after an add.
Tensor norm_rows(const Names& nm, const Tensor& x, const Tensor& y, const Shape& normalized_shape,
                 const Tensor& weight, const Tensor& bias, double eps) {
    const std::size_t k = normalized_shape.size();
    std::size_t n = 1, rows = 1;
    for (std::size_t d = 0; d < x.dim(); ++d) (d < x.dim() - k ? rows : n) *= x.shape()[d];
    const AllocContext context(nm.op, x.shape());
    const bool residual = y.defined();
    std::vector<Tensor> inputs{x};
    if (residual) inputs.push_back(y);
    const std::size_t iw = weight.defined() ? inputs.size() : 0;
    if (weight.defined()) inputs.push_back(weight);
    const std::size_t ib = bias.defined() ? inputs.size() : 0;
    if (bias.defined()) inputs.push_back(bias);
    // The backward reads the normalised values (x, or its own copy of x + y) and the weight;
    // the bias only for its shape.
    const Saves saves = Saves::only_inputs((residual ? 0u : 1u) | (iw ? 1u << iw : 0u));
    const std::size_t grain = std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(n, 1));

    return dispatch_floating(nm.op, x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* px = values<T>(x).data();
        const T* py = residual ? values<T>(y).data() : nullptr;
        const T* pw = iw ? values<T>(weight).data() : nullptr;
        const T* pb = ib ? values<T>(bias).data() : nullptr;
        xt::xarray<T> sum = residual ? xt::xarray<T>::from_shape(x.shape()) : xt::xarray<T>();
        T* ps = residual ? sum.data() : nullptr;
        xt::xarray<T> out = xt::xarray<T>::from_shape(x.shape());
        T* po = out.data();
        std::vector<A> mean(rows), rstd(rows);
        with_flag(pw != nullptr, [&](auto has_w) {
            with_flag(pb != nullptr, [&](auto has_b) {
                parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
                    for (std::size_t r = r0; r < r1; ++r) {
                        const T* xr = px + r * n;
                        if (residual) {
                            T* sr = ps + r * n;
                            const T* yr = py + r * n;
                            for (std::size_t j = 0; j < n; ++j) sr[j] = xr[j] + yr[j];
                            xr = sr;
                        }
                        const A mu = lane_sum<A>(n, [xr](std::size_t j) { return A(xr[j]); }) / static_cast<A>(n);
                        const A v = lane_sum<A>(n, [xr, mu](std::size_t j) { return (xr[j] - mu) * (xr[j] - mu); });
                        const A rs = A(1) / std::sqrt(v / static_cast<A>(n) + static_cast<A>(eps));
                        mean[r] = mu;
                        rstd[r] = rs;
                        T* yr = po + r * n;
                        auto normalise = [&](auto in) {
                            using C = typename decltype(in)::type;
                            const Centred<C, A> centred(mu);
                            const C q = static_cast<C>(rs);
                            for (std::size_t j = 0; j < n; ++j) {
                                C h = centred(static_cast<C>(xr[j])) * q;
                                if constexpr (has_w) h *= static_cast<C>(pw[j]);
                                if constexpr (has_b) h += static_cast<C>(pb[j]);
                                yr[j] = static_cast<T>(h);
                            }
                        };
                        const bool in_t = fits<T, A>(n, rs);
                        if (in_t) normalise(type_tag<T>{});
                        if (!in_t || !all_finite(yr, n)) normalise(type_tag<A>{});
                    }
                });
            });
        });
        return make_result<T>(
            std::move(out), std::move(inputs), nm.op,
            [op = nm.op, residual, rows, n, iw, ib, grain, sum = std::move(sum), mean = std::move(mean),
             rstd = std::move(rstd)](Node& self, const Storage& gs) {
                const Tensor& tx = self.parents[0];
                const T* px = residual ? sum.data() : values<T>(tx).data();
                const T* pw = iw ? values<T>(self.parents[iw]).data() : nullptr;
                const T* pg = grad_as<T>(gs).data();
                const bool want_x = needs_grad(self, 0), want_y = residual && needs_grad(self, 1);
                if (want_x || want_y) {
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
                                    if constexpr (has_w) return A(gr[j]) * A(pw[j]);
                                    else return A(gr[j]);
                                };
                                const A s1 = lane_sum<A>(n, gw) / static_cast<A>(n);
                                const A s2 = lane_sum<A>(n, [&](std::size_t j) { return gw(j) * ((xr[j] - mu) * rs); }) /
                                             static_cast<A>(n);
                                T* dr = pd + r * n;
                                auto pass = [&](auto in) {
                                    using C = typename decltype(in)::type;
                                    const Centred<C, A> centred(mu);
                                    const C q = static_cast<C>(rs), t1 = static_cast<C>(s1), t2 = static_cast<C>(s2);
                                    for (std::size_t j = 0; j < n; ++j) {
                                        C g = static_cast<C>(gr[j]);
                                        if constexpr (has_w) g *= static_cast<C>(pw[j]);
                                        dr[j] = static_cast<T>(q * (g - t1 - centred(static_cast<C>(xr[j])) * q * t2));
                                    }
                                };
                                const bool in_t = fits<T, A>(n, rs, s1, s2);
                                if (in_t) pass(type_tag<T>{});
                                if (!in_t || !all_finite(dr, n)) pass(type_tag<A>{});
                            }
                        });
                    });
                    // x + y passes the same gradient to both; when they are one tensor it
                    // arrives twice, as for any op that takes a tensor twice.
                    if (want_x && want_y) accumulate<T>(op, self.parents[1], xt::xarray<T>(dx));
                    else if (want_y) accumulate<T>(op, self.parents[1], std::move(dx));
                    if (want_x) accumulate<T>(op, tx, std::move(dx));
                }
                // dweight = Σ_rows g·x̂, dbias = Σ_rows g: each column summed over the rows in
                // order into a double row, so the result does not depend on the threads.
                const bool want_w = iw && needs_grad(self, iw), want_b = ib && needs_grad(self, ib);
                if (!want_w && !want_b) return;
                xt::xarray<T> dw = xt::xarray<T>::from_shape(self.parents[want_w ? iw : ib].shape());
                xt::xarray<T> db = xt::xarray<T>::from_shape(dw.shape());
                T *pdw = dw.data(), *pdb = db.data();
                parallel_for(n, std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(rows, 1)),
                             [&](std::size_t j0, std::size_t j1) {
                                 const std::size_t w = j1 - j0;
                                 std::vector<A> accw(w, A(0)), accb(w, A(0));
                                 A* __restrict aw = accw.data();
                                 A* __restrict ab = accb.data();
                                 for (std::size_t r = 0; r < rows; ++r) {
                                     const T* __restrict xr = px + r * n + j0;
                                     const T* __restrict gr = pg + r * n + j0;
                                     auto add_row = [&](auto in) {
                                         using C = typename decltype(in)::type;
                                         const Centred<C, A> centred(mean[r]);
                                         const C q = static_cast<C>(rstd[r]);
                                         for (std::size_t j = 0; j < w; ++j) {
                                             aw[j] += A(gr[j]) * A(centred(static_cast<C>(xr[j])) * q);
                                             ab[j] += A(gr[j]);
                                         }
                                     };
                                     if (fits<T, A>(n, rstd[r])) add_row(type_tag<T>{});
                                     else add_row(type_tag<A>{});
                                 }
                                 for (std::size_t j = 0; j < w; ++j) {
                                     pdw[j0 + j] = static_cast<T>(aw[j]);
                                     pdb[j0 + j] = static_cast<T>(ab[j]);
                                 }
                             });
                if (want_w) accumulate<T>(op, self.parents[iw], std::move(dw));
                if (want_b) accumulate<T>(op, self.parents[ib], std::move(db));
            },
            saves);
    });
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
    const Names nm{"layer_norm", "input", "the input is"};
    if (!x.defined()) throw Error("layer_norm: input is an undefined tensor");
    check_args(nm, x, normalized_shape, weight, bias, eps);
    return norm_rows(nm, x, Tensor(), normalized_shape, weight, bias, eps);
}

Tensor add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape, const Tensor& weight,
                      const Tensor& bias, double eps) {
    const Names nm{"add_layer_norm", "x", "x and y are"};
    if (!x.defined()) throw Error("add_layer_norm: x is an undefined tensor");
    if (!y.defined()) throw Error("add_layer_norm: y is an undefined tensor");
    if (y.dtype() != x.dtype())
        throw Error(fmt::format("add_layer_norm: y is {} but x is {}; convert one with .to()", dtype_name(y.dtype()),
                                dtype_name(x.dtype())));
    // No broadcasting: the residual of a block has the block's shape, and a broadcast y would
    // need its gradient summed back, which this fused op does not do.
    if (y.shape() != x.shape())
        throw Error(fmt::format("add_layer_norm: x and y must have the same shape (no broadcasting), got {} and {}",
                                shape_str(x.shape()), shape_str(y.shape())));
    check_args(nm, x, normalized_shape, weight, bias, eps);
    return norm_rows(nm, x, y, normalized_shape, weight, bias, eps);
}

}  // namespace xgrad
