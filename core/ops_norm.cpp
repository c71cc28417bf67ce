// layer_norm as one op, and add_layer_norm (layer_norm of a residual sum) beside it: forward and
// backward over rows of the normalised block, on the pool. The backward is two ops of its own,
// layer_norm_backward (the input's gradient) and layer_norm_weight_backward, with the bias's a
// sum_to; their gradients are written in ops (grad_ops.hpp), so both are twice differentiable.
//
// Precision: the row statistics (mean, variance, and the backward's two row sums) are taken in
// double for float32 with the fixed-order lane_sum; the elementwise passes then run in the
// input's type with those statistics rounded to it once per row, as torch's CPU kernel does, so
// they vectorise 4-wide on baseline SSE2 rather than 2-wide through double.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/broadcast.hpp"
#include "core/grad_ops.hpp"
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
    if (x.shape().size() < k || !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - static_cast<long>(k)))
        throw Error(fmt::format("{}: {} must end with the normalized shape {}, got shape {}", nm.op, nm.input,
                                shape_str(normalized_shape), shape_str(x.shape())));
    check_affine(nm, "weight", weight, x, normalized_shape);
    check_affine(nm, "bias", bias, x, normalized_shape);
    // A negative eps can make var + eps negative and every output NaN without a word.
    if (!(eps >= 0) || !std::isfinite(eps))
        throw Error(fmt::format("{}: eps must be finite and >= 0, got {}", nm.op, eps));
}

// Rows and row length of x under the trailing normalized_shape axes.
std::pair<std::size_t, std::size_t> rows_of(const Tensor& x, std::size_t k) {
    std::size_t n = 1, rows = 1;
    const Shape& s = x.shape();
    for (std::size_t d = 0; d < s.size(); ++d) (d < s.size() - k ? rows : n) *= s[d];
    return {rows, n};
}

// layer_norm of x, or of x + y when y is defined. The residual form keeps the sum (rounded to
// T, as x + y would be) for its backward and reads neither x nor y again, so writing to them
// after the forward pass is allowed, as after an add.
Tensor norm_rows(const Names& nm, const Tensor& x, const Tensor& y, const Shape& normalized_shape,
                 const Tensor& weight, const Tensor& bias, double eps) {
    std::size_t rows, n;
    std::tie(rows, n) = rows_of(x, normalized_shape.size());
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
        static_assert(std::is_same_v<A, double>, "the row statistics are float64 tensors");
        const T* px = values<T>(x).data();
        const T* py = residual ? values<T>(y).data() : nullptr;
        const T* pw = iw ? values<T>(weight).data() : nullptr;
        const T* pb = ib ? values<T>(bias).data() : nullptr;
        xt::xarray<T> sum = residual ? xt::xarray<T>::from_shape(x.shape()) : xt::xarray<T>();
        T* ps = residual ? sum.data() : nullptr;
        xt::xarray<T> out = xt::xarray<T>::from_shape(x.shape());
        T* po = out.data();
        xt::xarray<A> mean_v = xt::xarray<A>::from_shape({rows}), rstd_v = xt::xarray<A>::from_shape({rows});
        A* mean = mean_v.data();
        A* rstd = rstd_v.data();
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
        // The sum x + y as an add in the graph, so that a gradient made from it with
        // create_graph reaches x and y; the statistics are constants (the backward's own
        // gradient recomputes them from the sum).
        const Tensor normalised = residual ? make_result<T>(std::move(sum), {x, y}, "add",
                                                            Formula([](const GradArgs& in) -> std::vector<Tensor> {
                                                                return {in.grad(), in.grad()};
                                                            }),
                                                            Saves::none())
                                           : x;
        const Tensor mean_t = make_leaf(Storage(std::move(mean_v))), rstd_t = make_leaf(Storage(std::move(rstd_v)));
        return make_result<T>(
            std::move(out), std::move(inputs), nm.op,
            Formula([residual, iw, ib, normalized_shape, eps, mean_t, rstd_t,
                     sum = residual ? normalised : Tensor()](const GradArgs& in) -> std::vector<Tensor> {
                const Tensor& g = in.grad();
                const Tensor& xs = residual ? sum : in.inputs[0];
                std::vector<Tensor> d(in.inputs.size());
                const bool want_x = in.needs(0), want_y = residual && in.needs(1);
                if (want_x || want_y) {
                    // x + y passes the same gradient to both; when they are one tensor it
                    // arrives twice, as for any op that takes a tensor twice.
                    const Tensor dx = layer_norm_backward(g, xs, iw ? in.inputs[iw] : Tensor(), mean_t, rstd_t,
                                                          normalized_shape, eps);
                    if (want_x) d[0] = dx;
                    if (want_y) d[1] = dx;
                }
                if (iw && in.needs(iw)) d[iw] = layer_norm_weight_backward(g, xs, mean_t, rstd_t, normalized_shape, eps);
                if (ib && in.needs(ib)) d[ib] = sum_to(g, normalized_shape);
                return d;
            }),
            saves);
    });
}

// Checks a layer-norm backward's arguments against x: g of x's shape and dtype, x ending with
// normalized_shape, the statistics float64 with one value per row. Returns (rows, n).
std::pair<std::size_t, std::size_t> check_backward(const char* op, const Tensor& g, const Tensor& x,
                                                   const Tensor& mean, const Tensor& rstd,
                                                   const Shape& normalized_shape) {
    check_same_dtype(op, g, x);
    if (g.shape() != x.shape())
        throw Error(fmt::format("{}: gradient of shape {} for an input of shape {}", op, shape_str(g.shape()),
                                shape_str(x.shape())));
    const std::size_t k = normalized_shape.size();
    if (k == 0 || x.shape().size() < k ||
        !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - static_cast<long>(k)))
        throw Error(fmt::format("{}: input of shape {} does not end with the normalized shape {}", op,
                                shape_str(x.shape()), shape_str(normalized_shape)));
    const auto rn = rows_of(x, k);
    for (const Tensor* t : {&mean, &rstd})
        if (t->dtype() != kFloat64 || static_cast<std::size_t>(t->numel()) != rn.first)
            throw Error(fmt::format("{}: expected the row statistics as float64 of shape ({},), got {} of shape {}", op,
                                    rn.first, dtype_name(t->dtype()), shape_str(t->shape())));
    return rn;
}

// The last k axes of a shape, and their numbers as reductions take them.
Shape tail_of(const Shape& s, std::size_t k) { return Shape(s.end() - static_cast<long>(k), s.end()); }
std::vector<long> last_axes(std::size_t k) {
    std::vector<long> axes;
    for (std::size_t a = 0; a < k; ++a) axes.push_back(-static_cast<long>(k - a));
    return axes;
}

// In ops, from x alone: the row statistics' rstd (keepdims) and the normalised x̂, so that a
// gradient made of them is exact in x to any order.
std::pair<Tensor, Tensor> rstd_and_normalised(const Tensor& x, std::size_t k, double eps) {
    const std::vector<long> axes = last_axes(k);
    const Tensor centred = x - mean(x, axes, true);
    const Tensor r = pow(mean(centred * centred, axes, true) + eps, -0.5);
    return {r, centred * r};
}

}  // namespace

Tensor layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean_t,
                           const Tensor& rstd_t, const Shape& normalized_shape, double eps) {
    constexpr const char* op = "layer_norm_backward";
    std::size_t rows, n;
    std::tie(rows, n) = check_backward(op, g, x, mean_t, rstd_t, normalized_shape);
    if (weight.defined()) check_affine({op, "input", "the input is"}, "weight", weight, x, normalized_shape);
    const std::size_t grain = std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(n, 1));
    const AllocContext context(op, x.shape());
    return dispatch_floating(op, x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* px = values<T>(x).data();
        const T* pw = weight.defined() ? values<T>(weight).data() : nullptr;
        const T* pg = values<T>(g).data();
        const A* pmean = values<A>(mean_t).data();
        const A* prstd = values<A>(rstd_t).data();
        // dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), ĝ = g·weight, x̂ the normalised x.
        xt::xarray<T> dx = xt::xarray<T>::from_shape(x.shape());
        T* pd = dx.data();
        with_flag(pw != nullptr, [&](auto has_w) {
            parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
                for (std::size_t r = r0; r < r1; ++r) {
                    const T* xr = px + r * n;
                    const T* gr = pg + r * n;
                    const A mu = pmean[r], rs = prstd[r];
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
                            C gj = static_cast<C>(gr[j]);
                            if constexpr (has_w) gj *= static_cast<C>(pw[j]);
                            dr[j] = static_cast<T>(q * (gj - t1 - centred(static_cast<C>(xr[j])) * q * t2));
                        }
                    };
                    const bool in_t = fits<T, A>(n, rs, s1, s2);
                    if (in_t) pass(type_tag<T>{});
                    if (!in_t || !all_finite(dr, n)) pass(type_tag<A>{});
                }
            });
        });
        // The formula captures no more than fits in std::function's own storage (the normalized
        // shape is x's last k axes): a first-order backward makes one and drops it unused.
        const std::size_t k = normalized_shape.size();
        return make_result<T>(
            std::move(dx), {g, x, weight, mean_t, rstd_t}, op,
            Formula([k, eps](const GradArgs& in) -> std::vector<Tensor> {
                // dx = r·P(ĝ), P(v) = v − mean(v) − x̂·mean(v⊙x̂) (symmetric), ĝ = g⊙w.
                //  in g: w ⊙ r·P(G); in w: Σ_rows g ⊙ r·P(G).
                //  in x, through r (∂r/∂x = −r²·x̂/N) and x̂ (whose vector-Jacobian product is
                //  layer_norm_backward without weight):
                //    layer_norm_backward(u) − r·mean(G⊙dx)·x̂,  u = −r·(b·G + mean(G⊙x̂)·ĝ),
                //  b = mean(ĝ⊙x̂), every mean over the row.
                const Tensor &g = in.inputs[0], &x = in.inputs[1], &w = in.inputs[2], &G = in.grad();
                const Tensor &mean_t = in.inputs[3], &rstd_t = in.inputs[4];
                const Shape normalized_shape = tail_of(x.shape(), k);
                std::vector<Tensor> d(5);
                if (in.needs(0) || in.needs(2)) {
                    const Tensor pg = layer_norm_backward(G, x, Tensor(), mean_t, rstd_t, normalized_shape, eps);
                    if (in.needs(0)) d[0] = w.defined() ? pg * w : pg;
                    if (in.needs(2)) d[2] = sum_to(g * pg, normalized_shape);
                }
                if (in.needs(1)) {
                    // dx itself recomputed rather than read from the output, which a caller may
                    // write in place (p.grad() *= c) before differentiating it.
                    const std::vector<long> axes = last_axes(k);
                    const auto [r, xh] = rstd_and_normalised(x, k, eps);
                    const Tensor gh = w.defined() ? g * w : g;
                    const Tensor b = mean(gh * xh, axes, true);
                    const Tensor dx = r * (gh - mean(gh, axes, true) - xh * b);
                    const Tensor u = -(r * (b * G + mean(G * xh, axes, true) * gh));
                    d[1] = layer_norm_backward(u, x, Tensor(), mean_t, rstd_t, normalized_shape, eps) -
                           r * mean(G * dx, axes, true) * xh;
                }
                return d;
            }),
            Saves::only_inputs(0x1fu));
    });
}

Tensor layer_norm_weight_backward(const Tensor& g, const Tensor& x, const Tensor& mean_t, const Tensor& rstd_t,
                                  const Shape& normalized_shape, double eps) {
    constexpr const char* op = "layer_norm_weight_backward";
    std::size_t rows, n;
    std::tie(rows, n) = check_backward(op, g, x, mean_t, rstd_t, normalized_shape);
    const AllocContext context(op, normalized_shape);
    return dispatch_floating(op, x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* px = values<T>(x).data();
        const T* pg = values<T>(g).data();
        const A* pmean = values<A>(mean_t).data();
        const A* prstd = values<A>(rstd_t).data();
        // dweight = Σ_rows g·x̂: each column summed over the rows in order into a double row,
        // so the result does not depend on the threads.
        xt::xarray<T> dw = xt::xarray<T>::from_shape(normalized_shape);
        T* pdw = dw.data();
        parallel_for(n, std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(rows, 1)),
                     [&](std::size_t j0, std::size_t j1) {
                         const std::size_t w = j1 - j0;
                         std::vector<A> accw(w, A(0));
                         A* __restrict aw = accw.data();
                         for (std::size_t r = 0; r < rows; ++r) {
                             const T* __restrict xr = px + r * n + j0;
                             const T* __restrict gr = pg + r * n + j0;
                             auto add_row = [&](auto in) {
                                 using C = typename decltype(in)::type;
                                 const Centred<C, A> centred(pmean[r]);
                                 const C q = static_cast<C>(prstd[r]);
                                 for (std::size_t j = 0; j < w; ++j) aw[j] += A(gr[j]) * A(centred(static_cast<C>(xr[j])) * q);
                             };
                             if (fits<T, A>(n, prstd[r])) add_row(type_tag<T>{});
                             else add_row(type_tag<A>{});
                         }
                         for (std::size_t j = 0; j < w; ++j) pdw[j0 + j] = static_cast<T>(aw[j]);
                     });
        const std::size_t k = normalized_shape.size();
        return make_result<T>(
            std::move(dw), {g, x, mean_t, rstd_t}, op,
            Formula([k, eps](const GradArgs& in) -> std::vector<Tensor> {
                // Σ_rows g⊙x̂: in g, Gw⊙x̂; in x, x̂'s vector-Jacobian product of Gw⊙g, which is
                // layer_norm_backward with Gw as the weight.
                const Tensor &g = in.inputs[0], &x = in.inputs[1], &G = in.grad();
                std::vector<Tensor> d(4);
                if (in.needs(0)) d[0] = G * rstd_and_normalised(x, k, eps).second;
                if (in.needs(1)) d[1] = layer_norm_backward(g, x, G, in.inputs[2], in.inputs[3], G.shape(), eps);
                return d;
            }),
            Saves::only_inputs(0xfu));
    });
}

Tensor layer_norm(const Tensor& x, const IntList& normalized_shape_arg, const Tensor& weight, const Tensor& bias,
                  double eps) {
    const Shape normalized_shape = normalized_shape_arg.shape("layer_norm");
    const Names nm{"layer_norm", "input", "the input is"};
    if (!x.defined()) throw Error("layer_norm: input is an undefined tensor");
    check_args(nm, x, normalized_shape, weight, bias, eps);
    return norm_rows(nm, x, Tensor(), normalized_shape, weight, bias, eps);
}

Tensor add_layer_norm(const Tensor& x, const Tensor& y, const IntList& normalized_shape_arg, const Tensor& weight,
                      const Tensor& bias, double eps) {
    const Shape normalized_shape = normalized_shape_arg.shape("add_layer_norm");
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
