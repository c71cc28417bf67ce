// Reductions: sum, mean, max and argmax, var and std, cumsum and norm, each with its gradient
// (argmax has none), and the backward ops of the fused ones (core/grad_ops.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/arguments.hpp"
#include "core/broadcast.hpp"
#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/grad_ops.hpp"
#include "core/int_arith.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/reduce_rules.hpp"

namespace xgrad {

namespace {

std::vector<long> as_dims(const Shape& s) { return std::vector<long>(s.begin(), s.end()); }
std::vector<long> as_axes(const std::vector<std::size_t>& axes) { return std::vector<long>(axes.begin(), axes.end()); }

// t (a reduction's result or its gradient) with the reduced axes kept as length 1.
Tensor as_kept(const Tensor& t, const Shape& kept) { return t.shape() == kept ? t : reshape(t, as_dims(kept)); }

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
                const auto wrapped = [&](const auto& e) -> xt::xarray<std::int64_t> {
                    const xt::xarray<std::uint64_t> u = xt::sum(xt::cast<std::uint64_t>(xt::cast<std::int64_t>(e)), axes,
                                                                xt::evaluation_strategy::immediate);
                    return xt::cast<std::int64_t>(u);
                };
                // a mask counts its bytes that are not 0 (bool_values), whatever their value
                if constexpr (std::is_same_v<std::decay_t<decltype(x)>, xt::xarray<bool>>) return wrapped(bool_values(a));
                else return wrapped(x);
            },
            a.node().data());
        r.reshape(out_shape);
        return make_leaf(Storage(std::move(r)));
    }

    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // A leading or trailing block of axes (or all of them) is summed by plain loops, each
        // element in one fixed order in double for float (core/broadcast.hpp); other axes by
        // xtensor's reducer, whose float sums round in float. That reducer crashes on an empty
        // input when only some axes are reduced: an empty sum is 0.
        xt::xarray<T> r;
        const xt::xarray<T>& x = values<T>(a);
        const auto split = split_for(kept, in);
        const auto steps = split ? steps_for(kept, in, split->first, split->second) : std::nullopt;
        if (x.size() == 0) {
            r = xt::zeros<T>(kept);
        } else if (steps) {
            r = xt::xarray<T>::from_shape(kept);
            const T* px = x.data();
            const std::size_t cols = split->second;
            reduce_plan<T>(split->first, cols, *steps, r.data(),
                           [px, cols](std::size_t i, std::size_t j) { return px[i * cols + j]; });
        } else {
            r = xt::sum(x, axes, xt::evaluation_strategy::immediate);
        }
        if (mean) r /= static_cast<T>(count);
        r.reshape(out_shape);
        // The gradient spreads back over the summed axes (divided by their count for a mean).
        return make_result<T>(std::move(r), {a}, op,
                              Formula([kept = kept, count, mean](const GradArgs& in) -> std::vector<Tensor> {
                                  Tensor g = in.grad().shape() == kept ? in.grad() : reshape(in.grad(), as_dims(kept));
                                  if (mean) g = g / static_cast<double>(count);
                                  return {expand(g, in.inputs[0].shape())};
                              }),
                              Saves::none());
    });
}

// Index of the maximum (or minimum) along the middle axis of (outer, n, inner), first one on
// ties; a NaN wins and stays (beats), so that it propagates, as in torch. Values go to `best`.
template <class T, bool Largest = true>
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
            for (std::size_t i = 0; i < s.inner; ++i)
                if (beats<Largest>(row[i], b[i])) {
                    b[i] = row[i];
                    bi[i] = k;
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

// What max, min, argmax and argmin call the set they cannot take over an empty axis.
const char* extreme_name(bool largest, bool index) {
    if (index) return largest ? "the index of the maximum" : "the index of the minimum";
    return largest ? "the maximum" : "the minimum";
}

}  // namespace

Tensor sum(const Tensor& a) {
    check_defined("sum", a);
    return reduce_sum("sum", a, reduce_axes("sum", {}, a.shape()), false, false);
}

Tensor sum(const Tensor& a, const IntList& axes, bool keepdims) {
    check_defined("sum", a);
    axes.check("sum");
    return reduce_sum("sum", a, reduce_axes("sum", axes, a.shape()), keepdims, false);
}

Tensor mean(const Tensor& a) {
    check_defined("mean", a);
    return reduce_sum("mean", a, reduce_axes("mean", {}, a.shape()), false, true);
}

Tensor mean(const Tensor& a, const IntList& axes, bool keepdims) {
    check_defined("mean", a);
    axes.check("mean");
    return reduce_sum("mean", a, reduce_axes("mean", axes, a.shape()), keepdims, true);
}

namespace {

template <bool Largest> ValuesIndices extreme(const char* op, const Tensor& a, long axis, bool keepdims) {
    check_defined(op, a);
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis(op, axis, in);
    check_empty_reduction(op, EmptyReduction::refuse, in, {ax}, extreme_name(Largest, false));
    const axis_split s = split_at(in, ax);
    const Shape out_shape = without_axis(in, ax, keepdims);
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> best = xt::xarray<T>::from_shape(out_shape);
        std::vector<std::size_t> idx = argmax_along<T, Largest>(values<T>(a), s, best);
        xt::xarray<std::int64_t> where = xt::xarray<std::int64_t>::from_shape(out_shape);
        std::copy(idx.begin(), idx.end(), where.begin());
        // The gradient goes to the one element each value came from (torch's scatter of g).
        for (std::size_t o = 0; o < s.outer; ++o)
            for (std::size_t i = 0; i < s.inner; ++i) {
                std::size_t& k = idx[o * s.inner + i];
                k = (o * s.n + k) * s.inner + i;
            }
        Tensor values = make_any_result<T>(
            std::move(best), {a}, op,
            Formula([at = FlatOffsets(std::make_shared<const std::vector<std::size_t>>(std::move(idx)))](
                        const GradArgs& in) -> std::vector<Tensor> {
                return {scatter_flat(in.grad(), at, in.inputs[0].shape())};
            }),
            Saves::none());
        return ValuesIndices{values, make_leaf(Storage(std::move(where)))};
    });
}

// The elements of x that do not reach m, the max or min of all of them (a bool constant), and
// how many do: those equal to it, or the NaNs when it is NaN. One pass, as the old loop.
std::pair<Tensor, std::size_t> misses(const Tensor& x, const Tensor& m) {
    return dispatch_floating("max", x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* px = values<T>(x).data();
        const T best = values<T>(m)();
        const bool nan = std::isnan(best);
        xt::xarray<bool> miss = xt::xarray<bool>::from_shape(x.shape());
        bool* pm = miss.data();
        std::size_t count = 0;
        for (std::size_t i = 0, n = x.numel(); i < n; ++i) {
            const bool hit = nan ? std::isnan(px[i]) : px[i] == best;
            pm[i] = !hit;
            count += hit;
        }
        return std::pair{make_leaf(Storage(std::move(miss))), count};
    });
}

// max or min of every element; ties share the gradient evenly (torch's amax/amin backward).
template <bool Largest> Tensor extreme_all(const char* op, const Tensor& a) {
    check_defined(op, a);
    std::vector<std::size_t> every(a.dim());
    std::iota(every.begin(), every.end(), std::size_t{0});
    if (a.numel() == 0) check_empty_reduction(op, EmptyReduction::refuse, a.shape(), every, extreme_name(Largest, false));
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* x = values<T>(a).data();
        T best = x[0];
        for (std::int64_t i = 1; i < a.numel() && !is_nan_value(best); ++i)
            if (beats<Largest>(x[i], best)) best = x[i];
        xt::xarray<T> y = xt::zeros<T>(Shape{});
        y() = best;
        return make_any_result<T>(std::move(y), {a}, op, Formula([](const GradArgs& in) -> std::vector<Tensor> {
            // torch's evenly_distribute_backward: g / (how many reach the result) on each of
            // them, the NaNs when it is NaN. Linear in g; the mask is constant in x.
            const auto [miss, count] = misses(in.inputs[0], in.output);
            return {masked_fill(expand(in.grad() / static_cast<double>(count), in.inputs[0].shape()), miss, 0.0)};
        }));
    });
}

}  // namespace

Tensor scatter_flat(const Tensor& g, const FlatOffsets& at, const Shape& shape) {
    if (!at || static_cast<std::size_t>(g.numel()) != at->size())
        throw Error(fmt::format("scatter_flat: gradient of shape {} for {} offsets", shape_str(g.shape()),
                                at ? at->size() : 0));
    const AllocContext context("scatter_flat", shape);
    return dispatch_floating("scatter_flat", g.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> out = xt::zeros<T>(shape);
        const T* pg = values<T>(g).data();
        T* d = out.data();
        const std::vector<std::size_t>& offsets = *at;
        for (std::size_t i = 0; i < offsets.size(); ++i) d[offsets[i]] = pg[i];
        return make_result<T>(std::move(out), {g}, "scatter_flat", Formula([at](const GradArgs& in) -> std::vector<Tensor> {
            return {gather_flat(in.grad(), at, in.inputs[0].shape())};
        }), Saves::none());
    });
}

Tensor gather_flat(const Tensor& x, const FlatOffsets& at, const Shape& shape) {
    std::size_t count = 1;
    for (std::size_t d : shape) count *= d;
    if (!at || count != at->size())
        throw Error(fmt::format("gather_flat: result of shape {} for {} offsets", shape_str(shape), at ? at->size() : 0));
    const AllocContext context("gather_flat", shape);
    return dispatch_floating("gather_flat", x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> out = xt::xarray<T>::from_shape(shape);
        const T* px = values<T>(x).data();
        T* d = out.data();
        const std::vector<std::size_t>& offsets = *at;
        for (std::size_t i = 0; i < offsets.size(); ++i) d[i] = px[offsets[i]];
        return make_result<T>(std::move(out), {x}, "gather_flat", Formula([at](const GradArgs& in) -> std::vector<Tensor> {
            return {scatter_flat(in.grad(), at, in.inputs[0].shape())};
        }), Saves::none());
    });
}

ValuesIndices max(const Tensor& a, long axis, bool keepdims) {
    return extreme<true>("max", canonical_bools(a), axis, keepdims);
}
ValuesIndices min(const Tensor& a, long axis, bool keepdims) {
    return extreme<false>("min", canonical_bools(a), axis, keepdims);
}
Tensor max(const Tensor& a) { return extreme_all<true>("max", canonical_bools(a)); }
Tensor min(const Tensor& a) { return extreme_all<false>("min", canonical_bools(a)); }

namespace {

template <bool Largest> Tensor arg_extreme(const char* op, const Tensor& a, long axis, bool keepdims) {
    check_defined(op, a);
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis(op, axis, in);
    check_empty_reduction(op, EmptyReduction::refuse, in, {ax}, extreme_name(Largest, true));
    const axis_split s = split_at(in, ax);
    const Shape out_shape = without_axis(in, ax, keepdims);
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> best = xt::xarray<T>::from_shape(out_shape);
        std::vector<std::size_t> idx = argmax_along<T, Largest>(values<T>(a), s, best);
        xt::xarray<std::int64_t> r = xt::xarray<std::int64_t>::from_shape(out_shape);
        std::copy(idx.begin(), idx.end(), r.begin());
        return make_leaf(Storage(std::move(r)));
    });
}

}  // namespace

Tensor argmax(const Tensor& a, long axis, bool keepdims) {
    return arg_extreme<true>("argmax", canonical_bools(a), axis, keepdims);
}
Tensor argmin(const Tensor& a, long axis, bool keepdims) {
    return arg_extreme<false>("argmin", canonical_bools(a), axis, keepdims);
}

// --- var and std -------------------------------------------------------------------------

namespace {

// x − mean(x) over `axes`, the mean kept as length 1.
template <class T> xt::xarray<T> centred(const xt::xarray<T>& x, const std::vector<std::size_t>& axes, std::size_t count) {
    xt::xarray<T> mu = xt::sum(x, axes, xt::keep_dims | xt::evaluation_strategy::immediate);
    mu /= static_cast<T>(count);
    return xt::xarray<T>(x - mu);
}

Tensor moments(const char* op, const Tensor& a, const std::vector<long>& axes_in, double correction, bool keepdims,
               bool take_sqrt) {
    check_defined(op, a);
    // A NaN or infinite correction would divide by NaN or 0 and give NaN or inf without a word.
    check_finite_argument(op, "correction", correction);
    const std::vector<std::size_t> axes = reduce_axes(op, axes_in, a.shape());
    const Shape out_shape = reduced_shapes(a.shape(), axes, keepdims).second;
    std::size_t count = 1;
    for (std::size_t ax : axes) count *= a.shape()[ax];
    // torch divides by max(0, N − correction): a zero divisor gives inf, or NaN for 0/0. Its
    // backward divides by N − correction itself (see var_backward).
    const double dof = static_cast<double>(count) - correction;
    const double denom = std::max(0.0, dof);
    // Its temporaries have the input's size, the result only the reduced shape it names.
    const AllocContext context(op, out_shape);
    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const xt::xarray<T> d = centred(values<T>(a), axes, count);
        xt::xarray<T> v = xt::sum(d * d, axes, xt::keep_dims | xt::evaluation_strategy::immediate);
        v /= static_cast<T>(denom);
        if (take_sqrt) v = xt::sqrt(v);
        v.reshape(out_shape);
        // std's gradient reads its own result, var's only its input (as torch's).
        return make_result<T>(std::move(v), {a}, op, Formula([axes, dof, take_sqrt](const GradArgs& in) -> std::vector<Tensor> {
            if (take_sqrt) return {std_backward(in.grad(), in.inputs[0], in.output, axes, dof)};
            return {var_backward(in.grad(), in.inputs[0], axes, dof)};
        }), take_sqrt ? Saves::all() : Saves::only_inputs(1u));
    });
}

// var_backward and std_backward: dx = (x − mean)·h, h = 2g/dof, or for std 2g/(2·std·dof)
// where std ≠ 0 and 0 where it is. `s` is std's result (undefined for var).
Tensor moments_backward(const char* op, const Tensor& g, const Tensor& x, const Tensor& s,
                        const std::vector<std::size_t>& axes, double dof) {
    const bool is_std = s.defined();
    check_same_dtype(op, g, x);
    if (is_std) check_same_dtype(op, s, x);
    Shape kept = x.shape();
    std::size_t count = 1;
    for (std::size_t ax : axes) {
        if (ax >= kept.size()) throw Error(fmt::format("{}: axis {} out of range for shape {}", op, ax, shape_str(x.shape())));
        count *= kept[ax];
        kept[ax] = 1;
    }
    std::size_t kept_numel = 1;
    for (std::size_t d : kept) kept_numel *= d;
    if (static_cast<std::size_t>(g.numel()) != kept_numel || (is_std && s.shape() != g.shape()))
        throw Error(fmt::format("{}: gradient of shape {} for a reduction of shape {} to {}", op, shape_str(g.shape()),
                                shape_str(x.shape()), shape_str(kept)));
    const AllocContext context(op, x.shape());
    return dispatch_floating(op, x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> scale = values<T>(g);
        scale.reshape(kept);
        scale = scale * static_cast<T>(2 / dof);
        if (is_std) {
            // g/(2·std) with 0 where std is 0, as torch (not 0/0).
            xt::xarray<T> sv = values<T>(s);
            sv.reshape(kept);
            scale = xt::where(xt::equal(sv, static_cast<T>(0)), static_cast<T>(0), scale / (static_cast<T>(2) * sv));
        }
        xt::xarray<T> dx = centred(values<T>(x), axes, count) * scale;
        std::vector<Tensor> inputs{g, x};
        if (is_std) inputs.push_back(s);
        return make_result<T>(std::move(dx), std::move(inputs), op,
                              Formula([axes, dof, kept](const GradArgs& in) -> std::vector<Tensor> {
            // The derivatives of torch's composite, (2/dof)·h·(x − mean(x)) with h = g, or for
            // std h = masked_fill(g / (std·2), std == 0, 0): the same ops, so the same values
            // (and the same NaNs where std is 0) as torch's double backward.
            const Tensor &g = in.inputs[0], &x = in.inputs[1], &gg = in.grad();
            const bool is_std = in.inputs.size() == 3;
            const std::vector<long> ax = as_axes(axes);
            const double c = 2 / dof;
            const Tensor gk = as_kept(g, kept);
            Tensor sk, two_s, zero_std, h = gk;
            if (is_std) {
                sk = as_kept(in.inputs[2], kept);
                two_s = sk * 2.0;
                zero_std = eq(sk, 0.0);
                h = masked_fill(gk / two_s, zero_std, 0.0);
            }
            std::vector<Tensor> out(in.inputs.size());
            if (in.needs(0) || (is_std && in.needs(2))) {
                const Tensor t = sum(gg * (x - mean(x, ax, true)), ax, true) * c;  // the gradient of h
                if (!is_std) {
                    out[0] = reshape(t, as_dims(g.shape()));
                } else {
                    const Tensor q = masked_fill(t, zero_std, 0.0);
                    if (in.needs(0)) out[0] = reshape(q / two_s, as_dims(g.shape()));
                    if (in.needs(2)) out[2] = reshape(-q * gk / (two_s * two_s) * 2.0, as_dims(in.inputs[2].shape()));
                }
            }
            if (in.needs(1)) {
                const Tensor u = gg * (h * c);
                out[1] = u - mean(u, ax, true);
            }
            return out;
        }));
    });
}

}  // namespace

Tensor var_backward(const Tensor& g, const Tensor& x, const std::vector<std::size_t>& axes, double dof) {
    return moments_backward("var_backward", g, x, Tensor(), axes, dof);
}

Tensor std_backward(const Tensor& g, const Tensor& x, const Tensor& result, const std::vector<std::size_t>& axes,
                    double dof) {
    if (!result.defined()) throw Error("std_backward: result is an undefined tensor");
    return moments_backward("std_backward", g, x, result, axes, dof);
}

Tensor var(const Tensor& a, const IntList& axes, bool unbiased, bool keepdims) {
    axes.check("var");
    return moments("var", a, axes, unbiased ? 1 : 0, keepdims, false);
}
Tensor var(const Tensor& a, const IntList& axes, Correction correction, bool keepdims) {
    axes.check("var");
    return moments("var", a, axes, correction.value, keepdims, false);
}
Tensor std(const Tensor& a, const IntList& axes, bool unbiased, bool keepdims) {
    axes.check("std");
    return moments("std", a, axes, unbiased ? 1 : 0, keepdims, true);
}
Tensor std(const Tensor& a, const IntList& axes, Correction correction, bool keepdims) {
    axes.check("std");
    return moments("std", a, axes, correction.value, keepdims, true);
}

// --- cumsum -----------------------------------------------------------------------------------

namespace {

// Running sums along the middle axis of (outer, n, inner), in place, forward or from the end.
template <class V> void running_sum(V* p, const axis_split& s, bool reverse) {
    for (std::size_t o = 0; o < s.outer; ++o)
        for (std::size_t k = 1; k < s.n; ++k) {
            const std::size_t to = reverse ? s.n - 1 - k : k, from = reverse ? to + 1 : to - 1;
            V* dst = p + (o * s.n + to) * s.inner;
            const V* src = p + (o * s.n + from) * s.inner;
            if constexpr (std::is_same_v<V, std::int64_t>)  // wraps as torch's, without signed overflow
                for (std::size_t i = 0; i < s.inner; ++i) dst[i] = wrapping_add(dst[i], src[i]);
            else
                for (std::size_t i = 0; i < s.inner; ++i) dst[i] += src[i];
        }
}

// cumsum (forward) and cumsum_backward (reverse): each is the other's gradient.
Tensor running(const char* op, const Tensor& a, long axis, bool reverse) {
    check_defined(op, a);
    // A 0-d tensor runs as one element along axis 0 (or -1), as torch.
    const Shape in = a.dim() == 0 ? Shape{1} : a.shape();
    const std::size_t ax = normalize_axis(op, axis, in);
    const AllocContext context(op, a.shape());
    const axis_split s = split_at(in, ax);
    if (!is_floating(a.dtype()) && !reverse) {
        // int64 and bool accumulate in int64, as torch.
        xt::xarray<std::int64_t> y = values<std::int64_t>(cast(a, kInt64));
        running_sum(y.data(), s, false);
        return make_leaf(Storage(std::move(y)));
    }
    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = values<T>(a);
        running_sum(y.data(), s, reverse);
        return make_result<T>(std::move(y), {a}, op, Formula([axis, reverse](const GradArgs& in) -> std::vector<Tensor> {
            return {reverse ? cumsum(in.grad(), axis) : cumsum_backward(in.grad(), axis)};
        }), Saves::none());
    });
}

}  // namespace

Tensor cumsum(const Tensor& a, long axis) { return running("cumsum", a, axis, false); }

Tensor cumsum_backward(const Tensor& g, long axis) { return running("cumsum_backward", g, axis, true); }

// --- norm -------------------------------------------------------------------------------------

namespace {

// torch's sgn for real numbers: −1, 0 or 1, and 0 for NaN.
template <class T> xt::xarray<T> sgn(const xt::xarray<T>& x) {
    return xt::where(xt::isnan(x), static_cast<T>(0), xt::sign(x));
}

// sgn(x) as a constant (its derivative is 0 wherever it has one).
Tensor sgn_leaf(const Tensor& x) {
    return dispatch_floating("norm_backward", x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        return make_leaf(Storage(sgn(values<T>(x))));
    });
}

// Where p = inf's gradient goes: the elements that reach the norm n (broadcast) or are NaN, as
// 0 or 1 in x's dtype (a constant).
Tensor inf_norm_mask(const Tensor& x, const Tensor& n) {
    return dispatch_floating("norm_backward", x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const xt::xarray<T>& xv = values<T>(x);
        return make_leaf(Storage(xt::xarray<T>(xt::cast<T>(xt::equal(xt::abs(xv), values<T>(n)) || xt::isnan(xv)))));
    });
}

// The derivatives of norm_backward in g, x and n: those of torch's norm_backward composite, op
// by op, so that the values and the NaNs (at a zero norm, at a zero element for p < 1, for
// 1 < p < 2 and for 2 < p < 3) are those of torch's double backward. g and n broadcast over the
// reduced axes as `kept`.
std::vector<Tensor> norm_double_backward(const GradArgs& in, double p, const std::vector<std::size_t>& axes,
                                         const Shape& kept) {
    const Tensor &g = in.inputs[0], &x = in.inputs[1], &n = in.inputs[2], &gg = in.grad();
    const std::vector<long> ax = as_axes(axes);
    const Tensor gk = as_kept(g, kept), nk = as_kept(n, kept);
    const Tensor sg = sgn_leaf(x);
    auto like_g = [&](const Tensor& t) { return reshape(t, as_dims(g.shape())); };
    auto like_n = [&](const Tensor& t) { return reshape(t, as_dims(n.shape())); };
    std::vector<Tensor> out(3);
    if (p == 0) {
        // norm_backward is 0 whatever g, x and n are.
        if (in.needs(0)) out[0] = zeros_like(g);
        if (in.needs(1)) out[1] = zeros_like(x);
        return out;
    }
    if (std::isinf(p)) {
        // sgn(x)·((g / count)·mask): linear in g; x reaches it only through sgn (gradient 0).
        const Tensor mask = inf_norm_mask(x, nk);
        if (in.needs(0)) out[0] = like_g(sum(gg * sg * mask, ax, true) / sum(mask, ax, true));
        if (in.needs(1)) out[1] = zeros_like(x);
        return out;
    }
    if (p == 1) {
        // sgn(x)·g.
        if (in.needs(0)) out[0] = like_g(sum(gg * sg, ax, true));
        if (in.needs(1)) out[1] = zeros_like(x);
        return out;
    }
    if (p == 2) {
        // g·masked_fill(x / n, n == 0, 0).
        const Tensor zero_norm = eq(nk, 0.0);
        if (in.needs(0)) out[0] = like_g(sum(gg * masked_fill(x / nk, zero_norm, 0.0), ax, true));
        if (in.needs(1) || in.needs(2)) {
            const Tensor q = masked_fill(gg * gk, zero_norm, 0.0);
            if (in.needs(1)) out[1] = q / nk;
            if (in.needs(2)) out[2] = like_n(sum(-q * x / (nk * nk), ax, true));
        }
        return out;
    }
    if (p < 1) {
        // (s·g)·n^(1−p), s = masked_fill(sgn(x)|x|^(p−1), x == 0, 0).
        const Tensor zero_x = eq(x, 0.0);
        const Tensor s = masked_fill(sg * pow(abs(x), p - 1), zero_x, 0.0);
        const Tensor a = gg * pow(nk, 1 - p);
        if (in.needs(0)) out[0] = like_g(sum(a * s, ax, true));
        if (in.needs(1)) out[1] = masked_fill(a * gk, zero_x, 0.0) * sg * ((p - 1) * pow(abs(x), p - 2)) * sg;
        if (in.needs(2)) out[2] = like_n(sum(gg * (s * gk), ax, true) * ((1 - p) * pow(nk, -p)));
        return out;
    }
    // s·masked_fill(g / n^(p−1), n == 0, 0), s = sgn(x)|x|^(p−1) for p < 2, x·|x|^(p−2) above.
    const Tensor zero_norm = eq(nk, 0.0);
    const Tensor np1 = pow(nk, p - 1);
    if (in.needs(0) || in.needs(2)) {
        const Tensor s = p < 2 ? sg * pow(abs(x), p - 1) : x * pow(abs(x), p - 2);
        const Tensor q = masked_fill(sum(gg * s, ax, true), zero_norm, 0.0);
        if (in.needs(0)) out[0] = like_g(q / np1);
        if (in.needs(2)) out[2] = like_n(-q * gk / (np1 * np1) * ((p - 1) * pow(nk, p - 2)));
    }
    if (in.needs(1)) {
        const Tensor d = gg * masked_fill(gk / np1, zero_norm, 0.0);
        if (p < 2)
            out[1] = d * sg * ((p - 1) * pow(abs(x), p - 2)) * sg;
        else
            out[1] = d * pow(abs(x), p - 2) + d * x * ((p - 2) * pow(abs(x), p - 3)) * sg;
    }
    return out;
}

}  // namespace

namespace {

// |x| folded over `axes` into an array of the kept shape: acc = f(acc, |x_i|) from `init`, in
// row-major order. The ±inf norms (nan_max, nan_min) and the 0 norm (a count) take this path;
// it is not the float hot path (the sums are).
template <class T, class F>
xt::xarray<T> fold_abs(const xt::xarray<T>& x, const Shape& kept, T init, F f) {
    xt::xarray<T> y = xt::xarray<T>::from_shape(kept);
    std::fill(y.begin(), y.end(), init);
    const std::size_t rank = kept.size();
    if (x.size() == 0) return y;
    if (rank == 0) {
        y() = f(init, static_cast<T>(std::abs(x())));
        return y;
    }
    // The output offset moves by out_step[d] along axis d: 0 along the reduced axes.
    std::vector<std::size_t> out_step = row_major_strides(kept);
    for (std::size_t d = 0; d < rank; ++d)
        if (kept[d] != x.shape()[d]) out_step[d] = 0;
    std::vector<std::size_t> idx(rank, 0);
    const T* px = x.data();
    T* py = y.data();
    std::size_t out = 0;
    for (std::size_t i = 0, n = x.size(); i < n; ++i) {
        py[out] = f(py[out], static_cast<T>(std::abs(px[i])));
        // Next element: the last axis first, carrying into the ones before it.
        for (std::size_t d = rank; d-- > 0;) {
            out += out_step[d];
            if (++idx[d] < x.shape()[d]) break;
            out -= out_step[d] * idx[d];
            idx[d] = 0;
        }
    }
    return y;
}

}  // namespace

Tensor norm(const Tensor& a, double p_arg, const IntList& axes_in, bool keepdims) {
    constexpr const char* op = "norm";
    check_defined(op, a);
    axes_in.check(op);
    const double p = norm_order(op, p_arg);
    const std::vector<std::size_t> axes = reduce_axes(op, axes_in, a.shape());
    const auto shapes = reduced_shapes(a.shape(), axes, keepdims);
    const Shape& kept = shapes.first;
    const Shape out_shape = shapes.second;
    // Σ|x|^p over nothing is 0 for p ≥ 0; the ±inf norms and p < 0 have no identity (torch).
    if (a.numel() == 0)
        check_empty_reduction(op, p < 0 || std::isinf(p) ? EmptyReduction::refuse : EmptyReduction::identity,
                              a.shape(), axes, fmt::format("the {} norm", p).c_str());
    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const xt::xarray<T>& x = values<T>(a);
        xt::xarray<T> y;
        if (x.size() == 0) {
            y = xt::zeros<T>(kept);
        } else if (p == INFINITY) {
            // max|x|, NaN wherever a NaN is (nan_max), from 0 as torch.
            y = fold_abs<T>(x, kept, T(0), [](T acc, T v) { return nan_max(acc, v); });
        } else if (p == -INFINITY) {
            y = fold_abs<T>(x, kept, std::numeric_limits<T>::infinity(), [](T acc, T v) { return nan_min(acc, v); });
        } else if (p == 0) {
            // How many are not 0 (NaN counts), as torch.
            y = fold_abs<T>(x, kept, T(0), [](T acc, T v) { return acc + T(v != T(0)); });
        } else {
            const xt::xarray<T> m = xt::abs(x);
            if (p == 1) {
                y = xt::sum(m, axes, xt::keep_dims | xt::evaluation_strategy::immediate);
            } else if (p == 2) {
                y = xt::sqrt(xt::eval(xt::sum(m * m, axes, xt::keep_dims | xt::evaluation_strategy::immediate)));
            } else {
                // The order and its inverse in T, as torch's kernel holds them.
                const T pt = static_cast<T>(p);
                y = xt::pow(xt::eval(xt::sum(xt::pow(m, pt), axes, xt::keep_dims | xt::evaluation_strategy::immediate)),
                            T(1) / pt);
            }
        }
        y.reshape(out_shape);
        return make_result<T>(std::move(y), {a}, op, Formula([p, axes](const GradArgs& in) -> std::vector<Tensor> {
            return {norm_backward(in.grad(), in.inputs[0], in.output, p, axes)};
        }));
    });
}

Tensor norm_backward(const Tensor& g, const Tensor& x, const Tensor& n, double p, const std::vector<std::size_t>& axes) {
    constexpr const char* op = "norm_backward";
    check_same_dtype(op, g, x);
    check_same_dtype(op, n, x);
    Shape kept = x.shape();
    for (std::size_t ax : axes) {
        if (ax >= kept.size()) throw Error(fmt::format("{}: axis {} out of range for shape {}", op, ax, shape_str(x.shape())));
        kept[ax] = 1;
    }
    std::size_t kept_numel = 1;
    for (std::size_t d : kept) kept_numel *= d;
    if (static_cast<std::size_t>(g.numel()) != kept_numel || n.shape() != g.shape())
        throw Error(fmt::format("{}: gradient of shape {} and norm of shape {} for a reduction of shape {} to {}", op,
                                shape_str(g.shape()), shape_str(n.shape()), shape_str(x.shape()), shape_str(kept)));
    const bool inf = std::isinf(p);
    const AllocContext context(op, x.shape());
    return dispatch_floating(op, x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const xt::xarray<T>& xv = values<T>(x);
        xt::xarray<T> gk = values<T>(g);
        xt::xarray<T> nk = values<T>(n);
        gk.reshape(kept);
        nk.reshape(kept);
        const xt::xarray<T> sign = sgn(xv);
        xt::xarray<T> dx;
        if (p == 0) {
            // The count of non-zeros is flat wherever it has a derivative (torch returns none).
            dx = xt::zeros<T>(xv.shape());
        } else if (inf) {
            // sgn(x)·g / (how many reach the max), on the elements that reach it or are NaN.
            const xt::xarray<T> hit = xt::cast<T>(xt::equal(xt::abs(xv), nk) || xt::isnan(xv));
            xt::xarray<T> ties = xt::sum(hit, axes, xt::keep_dims | xt::evaluation_strategy::immediate);
            dx = sign * hit * gk / ties;
        } else if (p == 1) {
            dx = sign * gk;
        } else {
            // d‖x‖_p/dx = sgn(x)|x|^(p−1) / ‖x‖^(p−1); 0 where the norm is 0, as torch, and for
            // p < 1 where x is 0 (where |x|^(p−1) is infinite).
            const xt::xarray<T> safe = xt::where(xt::equal(nk, static_cast<T>(0)), static_cast<T>(1), nk);
            const xt::xarray<T> scale =
                xt::where(xt::equal(nk, static_cast<T>(0)), static_cast<T>(0), gk / xt::pow(safe, static_cast<T>(p - 1)));
            if (p == 2)
                dx = xv * scale;
            else if (p < 1)
                dx = xt::where(xt::equal(xv, static_cast<T>(0)), static_cast<T>(0),
                               sign * xt::pow(xt::abs(xv), static_cast<T>(p - 1))) * scale;
            else
                dx = sign * xt::pow(xt::abs(xv), static_cast<T>(p - 1)) * scale;
        }
        return make_result<T>(std::move(dx), {g, x, n}, op, Formula([p, axes, kept](const GradArgs& in) -> std::vector<Tensor> {
            return norm_double_backward(in, p, axes, kept);
        }));
    });
}

}  // namespace xgrad
