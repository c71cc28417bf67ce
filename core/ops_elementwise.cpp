// Elementwise ops, each with its gradient. Binary ops broadcast; their backward reduces each
// input's gradient to that input's shape with sum_to.
#include <cmath>
#include <functional>
#include <optional>

#include "core/broadcast.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"

namespace xgrad {

namespace {

// What a unary op's backward reads: its input x, its output y, or neither.
constexpr Saves kReadsX = Saves::only_inputs(1u);
constexpr Saves kReadsY = Saves::only_output();
constexpr Saves kReadsNone = Saves::none();

// One unary op: y = fwd(x); dx = bwd(x, y, g). Both are generic lambdas over xtensor
// expressions, instantiated here for float and double. `reads` must name every array bwd reads.
template <class Fwd, class Bwd> Tensor unary(const char* op, const Tensor& a, Saves reads, Fwd fwd, Bwd bwd) {
    const AllocContext context(op, a.shape());
    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = fwd(values<T>(a));
        return make_result<T>(
            std::move(y), {a}, op,
            [op, bwd](Node& self, const Storage& gs) {
                // Fetching an unsaved array is harmless: the engine refused a new dtype or shape
                // of every input before this runs, and bwd does not read it.
                const auto& x = values<T>(self.parents[0]);
                const auto& y = values<T>(self);
                const auto& g = grad_as<T>(gs);
                accumulate<T>(op, self.parents[0], xt::xarray<T>(bwd(x, y, g)));
            },
            reads);
    });
}

// One broadcasting binary op: y = fwd(a, b); (da, db) = (bwd_a(a, b, y, g), bwd_b(...)),
// each at the broadcast shape, then reduced to its input's shape. With Scalar, the lambdas
// also take plain T values, and the broadcasts plan_broadcast knows run as plain loops (the
// reduction fused with bwd, no broadcast-shaped temporary); the others take xtensor's path.
template <bool Scalar = false, class Fwd, class BwdA, class BwdB>
Tensor binary(const char* op, const Tensor& a, const Tensor& b, Saves reads, Fwd fwd, BwdA bwd_a, BwdB bwd_b) {
    check_same_dtype(op, a, b);
    const Shape shape = broadcast_shapes(op, a.shape(), b.shape());
    const AllocContext context(op, shape);
    std::optional<Plan2D> plan;
    if constexpr (Scalar) plan = plan_broadcast(a.shape(), b.shape(), shape);
    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y;
        if constexpr (Scalar) {
            if (plan) {
                y = xt::xarray<T>::from_shape(shape);
                apply_plan<T>(*plan, values<T>(a).data(), values<T>(b).data(), y.data(),
                              [&fwd](T x0, T x1) { return static_cast<T>(fwd(x0, x1)); });
            }
        }
        if (!plan) y = fwd(values<T>(a), values<T>(b));
        return make_result<T>(
            std::move(y), {a, b}, op,
            [op, bwd_a, bwd_b, plan](Node& self, const Storage& gs) {
                const Tensor& ta = self.parents[0];
                const Tensor& tb = self.parents[1];
                // Fetching an unsaved array is harmless: the engine refused a new shape of
                // every input before this runs, and bwd does not read it.
                const auto& x0 = values<T>(ta);
                const auto& x1 = values<T>(tb);
                const auto& y = values<T>(self);
                const auto& g = grad_as<T>(gs);
                if constexpr (Scalar) {
                    if (plan) {
                        const Plan2D p = *plan;
                        const T *pa = x0.data(), *pb = x1.data(), *py = y.data(), *pg = g.data();
                        auto grad_of = [&](const Tensor& t, Steps steps, const auto& bwd) {
                            xt::xarray<T> d = xt::xarray<T>::from_shape(t.shape());
                            detail::with_col_steps(p, [&](auto ca, auto cb) {
                                reduce_plan<T>(p.rows, p.cols, steps, d.data(), [&](std::size_t r, std::size_t c) {
                                    const std::size_t i = r * p.cols + c;
                                    return static_cast<T>(bwd(pa[r * p.a.row + c * ca], pb[r * p.b.row + c * cb], py[i], pg[i]));
                                });
                            });
                            accumulate<T>(op, t, std::move(d));
                        };
                        if (needs_grad(self, 0)) grad_of(ta, p.a, bwd_a);
                        if (needs_grad(self, 1)) grad_of(tb, p.b, bwd_b);
                        return;
                    }
                }
                if (needs_grad(self, 0)) accumulate<T>(op, ta, sum_to<T>(xt::xarray<T>(bwd_a(x0, x1, y, g)), ta.shape()));
                if (needs_grad(self, 1)) accumulate<T>(op, tb, sum_to<T>(xt::xarray<T>(bwd_b(x0, x1, y, g)), tb.shape()));
            },
            reads);
    });
}

// The value_type of an xtensor expression, to cast scalars (xtensor would otherwise promote a
// float expression times a double to double).
template <class E> using value_t = typename std::decay_t<E>::value_type;

// --- type promotion, as torch.result_type ---------------------------------------------------

// torch's combine_categories: a lower-priority operand only matters when it is of a higher
// category (a float beside integers, anything beside bool).
std::optional<Dtype> combine_categories(std::optional<Dtype> higher, std::optional<Dtype> lower) {
    if (!higher) return lower;
    if (!lower || is_floating(*higher)) return higher;
    if (*higher == kBool || is_floating(*lower)) return promote_types(*higher, *lower);
    return higher;
}

struct PromotionState {
    std::optional<Dtype> dims, zero_dim, wrapped;
    void add(const Tensor& t) {
        auto& slot = t.dim() > 0 ? dims : zero_dim;
        slot = slot ? promote_types(*slot, t.dtype()) : t.dtype();
    }
    void add(const Scalar& s) {
        // A floating number counts as the default dtype, as torch's wrapped Python floats.
        const Dtype d = s.kind() == kFloat64 ? kFloat32 : s.kind();
        wrapped = wrapped ? promote_types(*wrapped, d) : d;
    }
    Dtype result() const { return *combine_categories(dims, combine_categories(zero_dim, wrapped)); }
};

void check_defined(const char* op, const Tensor& a, const char* arg = "input") {
    if (!a.defined()) throw Error(fmt::format("{}: {} is an undefined tensor", op, arg));
}

// A 0-d tensor holding s as dtype d (an int64 keeps all 64 bits).
Tensor scalar_tensor(const Scalar& s, Dtype d) {
    return dispatch_all(d, [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> v = xt::zeros<T>(Shape{});
        if constexpr (is_floating_v<T>)
            v() = static_cast<T>(s.to_double());
        else
            v() = static_cast<T>(s.kind() == kFloat64 ? static_cast<std::int64_t>(s.to_double()) : s.to_int64());
        return make_leaf(Storage(std::move(v)));
    });
}

enum class Arith { add, sub, mul, div, max, min };

// Torch refuses `-` with any bool operand (for a mask, logical_not is meant).
void check_no_bool_sub(Dtype a, Dtype b) {
    if (a == kBool || b == kBool)
        throw Error(fmt::format("sub: subtraction, the `-` operator, with a bool operand is not supported (as in "
                                "torch); got {} and {}. To invert a mask use logical_not() or ~",
                                dtype_name(a), dtype_name(b)));
}

// The dtype `a k b` computes in: the promoted one, and float32 for a true division of integers.
Dtype arith_dtype(Arith k, Dtype promoted) {
    if (k == Arith::div && !is_floating(promoted)) return kFloat32;
    return promoted;
}

// int64 and bool arithmetic (no gradient, as in torch): for bool, + is `or` and * is `and`.
Tensor integer_arith(const char* op, Arith k, const Tensor& a, const Tensor& b) {
    const Shape shape = broadcast_shapes(op, a.shape(), b.shape());
    const AllocContext context(op, shape);
    if (a.dtype() == kBool) {
        const auto& x = values<bool>(a);
        const auto& y = values<bool>(b);
        const bool any = k == Arith::add || k == Arith::max;
        xt::xarray<bool> r = any ? xt::xarray<bool>(x || y) : xt::xarray<bool>(x && y);
        return make_leaf(Storage(std::move(r)));
    }
    const auto& x = values<std::int64_t>(a);
    const auto& y = values<std::int64_t>(b);
    xt::xarray<std::int64_t> r;
    if (k == Arith::add) r = x + y;
    else if (k == Arith::sub) r = x - y;
    else if (k == Arith::max) r = xt::maximum(x, y);
    else if (k == Arith::min) r = xt::minimum(x, y);
    else r = x * y;
    return make_leaf(Storage(std::move(r)));
}

// Promotes a and b as torch, then runs `floating(a', b')` or the integer kernel.
template <class F> Tensor promoted(const char* op, Arith k, const Tensor& a, const Tensor& b, F floating) {
    check_defined(op, a);
    check_defined(op, b, "other");
    if (k == Arith::sub) check_no_bool_sub(a.dtype(), b.dtype());
    const Dtype d = arith_dtype(k, result_type(a, b));
    const Tensor ca = cast(a, d), cb = cast(b, d);
    if (!is_floating(d)) return integer_arith(op, k, ca, cb);
    return floating(ca, cb);
}

}  // namespace

Dtype result_type(const Tensor& a, const Tensor& b) {
    check_defined("result_type", a);
    check_defined("result_type", b, "other");
    PromotionState st;
    st.add(a);
    st.add(b);
    return st.result();
}

Dtype result_type(const Tensor& a, const Scalar& s) {
    check_defined("result_type", a);
    PromotionState st;
    st.add(a);
    st.add(s);
    return st.result();
}

Tensor add(const Tensor& a, const Tensor& b) {
    return promoted("add", Arith::add, a, b, [](const Tensor& a, const Tensor& b) { return binary<true>(
        "add", a, b, Saves::none(), [](const auto& x, const auto& y) { return x + y; },
        [](const auto&, const auto&, const auto&, const auto& g) { return g; },
        [](const auto&, const auto&, const auto&, const auto& g) { return g; }); });
}

Tensor sub(const Tensor& a, const Tensor& b) {
    return promoted("sub", Arith::sub, a, b, [](const Tensor& a, const Tensor& b) { return binary<true>(
        "sub", a, b, Saves::none(), [](const auto& x, const auto& y) { return x - y; },
        [](const auto&, const auto&, const auto&, const auto& g) { return g; },
        [](const auto&, const auto&, const auto&, const auto& g) { return -g; }); });
}

Tensor mul(const Tensor& a, const Tensor& b) {
    return promoted("mul", Arith::mul, a, b, [](const Tensor& a, const Tensor& b) { return binary<true>(
        "mul", a, b, Saves::only_inputs(3u), [](const auto& x, const auto& y) { return x * y; },
        [](const auto&, const auto& x1, const auto&, const auto& g) { return g * x1; },
        [](const auto& x0, const auto&, const auto&, const auto& g) { return g * x0; }); });
}

Tensor div(const Tensor& a, const Tensor& b) {
    // d(a/b)/da = 1/b; d(a/b)/db = -a/b² = -y/b.
    return promoted("div", Arith::div, a, b, [](const Tensor& a, const Tensor& b) { return binary<true>(
        "div", a, b, Saves{2u, true}, [](const auto& x, const auto& y) { return x / y; },
        [](const auto&, const auto& x1, const auto&, const auto& g) { return g / x1; },
        [](const auto&, const auto& x1, const auto& y, const auto& g) { return -g * y / x1; }); });
}

Tensor neg(const Tensor& a) {
    check_defined("neg", a);
    if (a.dtype() == kBool)
        throw Error("neg: negation, the `-` operator, on a bool tensor is not supported (as in torch); to invert a "
                    "mask use logical_not() or ~");
    if (a.dtype() == kInt64) {
        xt::xarray<std::int64_t> r = -values<std::int64_t>(a);
        return make_leaf(Storage(std::move(r)));
    }
    return unary(
        "neg", a, kReadsNone, [](const auto& x) { return -x; },
        [](const auto&, const auto&, const auto& g) { return -g; });
}

Tensor pow(const Tensor& a, double p) {
    return unary(
        "pow", a, kReadsX, [p](const auto& x) { return xt::pow(x, static_cast<value_t<decltype(x)>>(p)); },
        [p](const auto& x, const auto&, const auto& g) {
            using T = value_t<decltype(x)>;
            // x^0 is constant: its gradient is 0 even at x = 0, where p·x^(p-1) is 0·inf = NaN.
            if (p == 0) return xt::xarray<T>(xt::zeros<T>(g.shape()));
            return xt::xarray<T>(g * static_cast<T>(p) * xt::pow(x, static_cast<T>(p - 1)));
        });
}

Tensor exp(const Tensor& a) {
    return unary(
        "exp", a, kReadsY, [](const auto& x) { return xt::exp(x); },
        [](const auto&, const auto& y, const auto& g) { return g * y; });
}

Tensor log(const Tensor& a) {
    return unary(
        "log", a, kReadsX, [](const auto& x) { return xt::log(x); },
        [](const auto& x, const auto&, const auto& g) { return g / x; });
}

Tensor sqrt(const Tensor& a) {
    return unary(
        "sqrt", a, kReadsY, [](const auto& x) { return xt::sqrt(x); },
        [](const auto&, const auto& y, const auto& g) {
            return g / (static_cast<value_t<decltype(y)>>(2) * y);
        });
}

Tensor tanh(const Tensor& a) {
    return unary(
        "tanh", a, kReadsY, [](const auto& x) { return xt::tanh(x); },
        [](const auto&, const auto& y, const auto& g) {
            return g * (static_cast<value_t<decltype(y)>>(1) - y * y);
        });
}

Tensor sigmoid(const Tensor& a) {
    return unary(
        "sigmoid", a, kReadsY,
        [](const auto& x) {
            using T = value_t<decltype(x)>;
            return static_cast<T>(1) / (static_cast<T>(1) + xt::exp(-x));
        },
        [](const auto&, const auto& y, const auto& g) {
            return g * y * (static_cast<value_t<decltype(y)>>(1) - y);
        });
}

Tensor relu(const Tensor& a) {
    // The subgradient at 0 is 0, as in PyTorch. NaN passes through, as in torch (a maximum
    // with 0 would turn it into 0 and hide it), and so does its gradient. Plain loops over the
    // pool: both directions are one comparison per element.
    check_defined("relu", a);
    const AllocContext context("relu", a.shape());
    return dispatch_floating("relu", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const xt::xarray<T>& xv = values<T>(a);
        xt::xarray<T> y = xt::xarray<T>::from_shape(a.shape());
        const T* x = xv.data();
        T* py = y.data();
        parallel_for(xv.size(), kElementGrain, [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) py[i] = x[i] <= T(0) ? T(0) : x[i];
        });
        return make_result<T>(
            std::move(y), {a}, "relu",
            [](Node& self, const Storage& gs) {
                const Tensor& in = self.parents[0];
                const T* x = values<T>(in).data();
                const T* g = grad_as<T>(gs).data();
                xt::xarray<T> d = xt::xarray<T>::from_shape(in.shape());
                T* pd = d.data();
                parallel_for(in.numel(), kElementGrain, [&](std::size_t i0, std::size_t i1) {
                    for (std::size_t i = i0; i < i1; ++i) {
                        const T gi = g[i];  // read unconditionally, so the loop vectorises
                        pd[i] = x[i] <= T(0) ? T(0) : gi;
                    }
                });
                accumulate<T>("relu", in, std::move(d));
            },
            kReadsX);
    });
}

Tensor gelu(const Tensor& a) {
    // gelu(x) = x·Φ(x); d/dx = Φ(x) + x·φ(x), Φ the normal CDF, φ its density.
    return unary(
        "gelu", a, kReadsX,
        [](const auto& x) {
            using T = value_t<decltype(x)>;
            return static_cast<T>(0.5) * x * (static_cast<T>(1) + xt::erf(x * static_cast<T>(M_SQRT1_2)));
        },
        [](const auto& x, const auto&, const auto& g) {
            using T = value_t<decltype(x)>;
            // Locals would be held by reference in the returned lazy expression: move them in.
            auto cdf = static_cast<T>(0.5) * (static_cast<T>(1) + xt::erf(x * static_cast<T>(M_SQRT1_2)));
            auto pdf = xt::exp(static_cast<T>(-0.5) * x * x) * static_cast<T>(0.5 * M_2_SQRTPI * M_SQRT1_2);
            return g * (std::move(cdf) + x * std::move(pdf));
        });
}

namespace {

// `a k s` with a Scalar: promoted as torch; a floating result runs `floating(a', s)` (one
// pass, no broadcast), an integer one the integer kernel against a 0-d tensor.
template <class F> Tensor scalar_arith(const char* op, Arith k, const Tensor& a, const Scalar& s, F floating) {
    check_defined(op, a);
    if (k == Arith::sub) check_no_bool_sub(a.dtype(), s.kind());
    const Dtype d = arith_dtype(k, result_type(a, s));
    if (!is_floating(d)) return integer_arith(op, k, cast(a, d), scalar_tensor(s, d));
    dispatch_floating(op, d, [](auto) {});  // refuses bfloat16 as `op`, not as the op `floating` calls
    return floating(cast(a, d), s.to_double());
}

}  // namespace

Tensor sin(const Tensor& a) {
    return unary(
        "sin", a, kReadsX, [](const auto& x) { return xt::sin(x); },
        [](const auto& x, const auto&, const auto& g) { return g * xt::cos(x); });
}

Tensor cos(const Tensor& a) {
    return unary(
        "cos", a, kReadsX, [](const auto& x) { return xt::cos(x); },
        [](const auto& x, const auto&, const auto& g) { return -g * xt::sin(x); });
}

Tensor abs(const Tensor& a) {
    check_defined("abs", a);
    if (a.dtype() == kInt64) {
        xt::xarray<std::int64_t> r = xt::abs(values<std::int64_t>(a));
        return make_leaf(Storage(std::move(r)));
    }
    // sign(0) = 0: the gradient at 0 is 0, as torch.
    return unary(
        "abs", a, kReadsX, [](const auto& x) { return xt::abs(x); },
        [](const auto& x, const auto&, const auto& g) { return g * xt::sign(x); });
}

Tensor clamp(const Tensor& a, std::optional<double> min, std::optional<double> max) {
    check_defined("clamp", a);
    if (!min && !max) throw Error("clamp: at least one of min and max must be given (as torch)");
    if ((min && std::isnan(*min)) || (max && std::isnan(*max)))
        throw Error("clamp: a bound is NaN; the bounds must be numbers");
    const double lo = min.value_or(-INFINITY), hi = max.value_or(INFINITY);
    // Lower bound first, then upper: with lo > hi everything becomes hi, as torch. Comparisons
    // with NaN are false, so NaN passes through.
    return unary(
        "clamp", a, kReadsX,
        [lo, hi](const auto& x) {
            using T = value_t<decltype(x)>;
            const T l = static_cast<T>(lo), h = static_cast<T>(hi);
            if (l > h) return xt::xarray<T>(xt::where(xt::isnan(x), x, h));
            return xt::xarray<T>(xt::where(x < l, l, xt::where(x > h, h, x)));
        },
        [lo, hi](const auto& x, const auto&, const auto& g) {
            using T = value_t<decltype(x)>;
            const T l = static_cast<T>(lo), h = static_cast<T>(hi);
            return xt::xarray<T>(xt::where(x >= l && x <= h, g, static_cast<T>(0)));
        });
}

Tensor maximum(const Tensor& a, const Tensor& b) {
    // The gradient goes to the larger input, half to each on a tie (torch 1.13).
    return promoted("maximum", Arith::max, a, b, [](const Tensor& a, const Tensor& b) {
        return binary(
            "maximum", a, b, Saves::only_inputs(3u),
            [](const auto& x, const auto& y) { return xt::where(x > y || xt::isnan(x), x, y); },
            [](const auto& x0, const auto& x1, const auto&, const auto& g) {
                using T = value_t<decltype(g)>;
                return xt::where(x0 > x1, g, xt::where(xt::equal(x0, x1), g * static_cast<T>(0.5), static_cast<T>(0)));
            },
            [](const auto& x0, const auto& x1, const auto&, const auto& g) {
                using T = value_t<decltype(g)>;
                return xt::where(x1 > x0, g, xt::where(xt::equal(x0, x1), g * static_cast<T>(0.5), static_cast<T>(0)));
            });
    });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
    return promoted("minimum", Arith::min, a, b, [](const Tensor& a, const Tensor& b) {
        return binary(
            "minimum", a, b, Saves::only_inputs(3u),
            [](const auto& x, const auto& y) { return xt::where(x < y || xt::isnan(x), x, y); },
            [](const auto& x0, const auto& x1, const auto&, const auto& g) {
                using T = value_t<decltype(g)>;
                return xt::where(x0 < x1, g, xt::where(xt::equal(x0, x1), g * static_cast<T>(0.5), static_cast<T>(0)));
            },
            [](const auto& x0, const auto& x1, const auto&, const auto& g) {
                using T = value_t<decltype(g)>;
                return xt::where(x1 < x0, g, xt::where(xt::equal(x0, x1), g * static_cast<T>(0.5), static_cast<T>(0)));
            });
    });
}

Tensor add(const Tensor& a, Scalar s) {
    return scalar_arith("add", Arith::add, a, s, [](const Tensor& a, double s) {
        return unary(
            "add", a, kReadsNone, [s](const auto& x) { return x + static_cast<value_t<decltype(x)>>(s); },
            [](const auto&, const auto&, const auto& g) { return g; });
    });
}

Tensor sub(const Tensor& a, Scalar s) {
    return scalar_arith("sub", Arith::sub, a, s, [](const Tensor& a, double s) { return add(a, -s); });
}

Tensor mul(const Tensor& a, Scalar s) {
    return scalar_arith("mul", Arith::mul, a, s, [](const Tensor& a, double s) {
        return unary(
            "mul", a, kReadsNone, [s](const auto& x) { return x * static_cast<value_t<decltype(x)>>(s); },
            [s](const auto&, const auto&, const auto& g) { return g * static_cast<value_t<decltype(g)>>(s); });
    });
}

Tensor div(const Tensor& a, Scalar s) {
    return scalar_arith("div", Arith::div, a, s, [](const Tensor& a, double s) {
        return unary(
            "div", a, kReadsNone, [s](const auto& x) { return x / static_cast<value_t<decltype(x)>>(s); },
            [s](const auto&, const auto&, const auto& g) { return g / static_cast<value_t<decltype(g)>>(s); });
    });
}

Tensor rsub(Scalar s, const Tensor& a) {
    check_defined("rsub", a);
    check_no_bool_sub(s.kind(), a.dtype());
    const Dtype d = result_type(a, s);
    if (!is_floating(d)) return integer_arith("rsub", Arith::sub, scalar_tensor(s, d), cast(a, d));
    const double v = s.to_double();
    return unary(
        "rsub", cast(a, d), kReadsNone, [v](const auto& x) { return static_cast<value_t<decltype(x)>>(v) - x; },
        [](const auto&, const auto&, const auto& g) { return -g; });
}

Tensor rdiv(Scalar s, const Tensor& a) {
    // d(s/x)/dx = -s/x² = -y/x.
    check_defined("rdiv", a);
    const double v = s.to_double();
    return unary(
        "rdiv", cast(a, arith_dtype(Arith::div, result_type(a, s))), Saves{1u, true},
        [v](const auto& x) { return static_cast<value_t<decltype(x)>>(v) / x; },
        [](const auto& x, const auto& y, const auto& g) { return -g * y / x; });
}

Tensor cast(const Tensor& a, Dtype d) {
    if (a.dtype() == d) return a;
    if (a.dtype() == kBFloat16 || d == kBFloat16) return cast_bfloat16(a, d);
    const AllocContext context("cast", a.shape());
    return dispatch_all(d, [&](auto to_tag) {
        using To = typename decltype(to_tag)::type;
        xt::xarray<To> y = std::visit(
            [](const auto& x) {
                check_convertible<To>("cast", x.data(), x.size());
                return xt::xarray<To>(xt::cast<To>(x));
            },
            a.node().data);
        if constexpr (std::is_floating_point_v<To>) {
            if (is_floating(a.dtype()))
                return make_result<To>(std::move(y), {a}, "cast", [](Node& self, const Storage& gs) {
                    const Tensor& in = self.parents[0];
                    dispatch_floating("cast", in.dtype(), [&](auto from_tag) {
                        using From = typename decltype(from_tag)::type;
                        accumulate<From>("cast", in, xt::xarray<From>(xt::cast<From>(grad_as<To>(gs))));
                    });
                }, Saves::none());
        }
        // Integer and bool results carry no gradient (as torch: they cannot require one).
        return make_leaf(Storage(std::move(y)));
    });
}

// --- comparisons --------------------------------------------------------------------------

namespace {

// Both operands promoted to their common dtype first, as torch compares.
template <class Cmp> Tensor compare(const char* op, const Tensor& a, const Tensor& b, Cmp cmp) {
    check_defined(op, a);
    check_defined(op, b, "other");
    // bfloat16 compares as its float32 values: the conversion is exact, so the answers are the same.
    const Dtype d = result_type(a, b) == kBFloat16 ? kFloat32 : result_type(a, b);
    const Tensor ca = cast(a, d), cb = cast(b, d);
    const Shape shape = broadcast_shapes(op, a.shape(), b.shape());
    const AllocContext context(op, shape);
    return dispatch_all(d, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, bfloat16>) {
            return Tensor();  // not reached: d is float32 instead
        } else {
            xt::xarray<bool> r = cmp(values<T>(ca), values<T>(cb));
            return make_leaf(Storage(std::move(r)));
        }
    });
}

template <class Cmp> Tensor compare(const char* op, const Tensor& a, const Scalar& s, Cmp cmp) {
    check_defined(op, a);
    return compare(op, a, scalar_tensor(s, result_type(a, s)), cmp);
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) {
    return compare("eq", a, b, [](const auto& x, const auto& y) { return xt::equal(x, y); });
}
Tensor ne(const Tensor& a, const Tensor& b) {
    return compare("ne", a, b, [](const auto& x, const auto& y) { return xt::not_equal(x, y); });
}
Tensor lt(const Tensor& a, const Tensor& b) {
    return compare("lt", a, b, [](const auto& x, const auto& y) { return xt::less(x, y); });
}
Tensor le(const Tensor& a, const Tensor& b) {
    return compare("le", a, b, [](const auto& x, const auto& y) { return xt::less_equal(x, y); });
}
Tensor gt(const Tensor& a, const Tensor& b) {
    return compare("gt", a, b, [](const auto& x, const auto& y) { return xt::greater(x, y); });
}
Tensor ge(const Tensor& a, const Tensor& b) {
    return compare("ge", a, b, [](const auto& x, const auto& y) { return xt::greater_equal(x, y); });
}
Tensor eq(const Tensor& a, Scalar s) {
    return compare("eq", a, s, [](const auto& x, const auto& y) { return xt::equal(x, y); });
}
Tensor ne(const Tensor& a, Scalar s) {
    return compare("ne", a, s, [](const auto& x, const auto& y) { return xt::not_equal(x, y); });
}
Tensor lt(const Tensor& a, Scalar s) {
    return compare("lt", a, s, [](const auto& x, const auto& y) { return xt::less(x, y); });
}
Tensor le(const Tensor& a, Scalar s) {
    return compare("le", a, s, [](const auto& x, const auto& y) { return xt::less_equal(x, y); });
}
Tensor gt(const Tensor& a, Scalar s) {
    return compare("gt", a, s, [](const auto& x, const auto& y) { return xt::greater(x, y); });
}
Tensor ge(const Tensor& a, Scalar s) {
    return compare("ge", a, s, [](const auto& x, const auto& y) { return xt::greater_equal(x, y); });
}

Tensor logical_not(const Tensor& mask) {
    if (mask.dtype() != kBool)
        throw Error(fmt::format("logical_not: expected a bool tensor, got {}", dtype_name(mask.dtype())));
    xt::xarray<bool> r = !values<bool>(mask);
    return make_leaf(Storage(std::move(r)));
}

// --- operators ----------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, Scalar s) { return add(a, s); }
Tensor operator-(const Tensor& a, Scalar s) { return sub(a, s); }
Tensor operator*(const Tensor& a, Scalar s) { return mul(a, s); }
Tensor operator/(const Tensor& a, Scalar s) { return div(a, s); }
Tensor operator+(Scalar s, const Tensor& a) { return add(a, s); }
Tensor operator-(Scalar s, const Tensor& a) { return rsub(s, a); }
Tensor operator*(Scalar s, const Tensor& a) { return mul(a, s); }
Tensor operator/(Scalar s, const Tensor& a) { return rdiv(s, a); }

Tensor operator~(const Tensor& a) {
    check_defined("bitwise_not", a);
    if (a.dtype() == kBool) return logical_not(a);
    if (a.dtype() != kInt64)
        throw Error(fmt::format("bitwise_not: the `~` operator needs a bool or int64 tensor, got {} (as in torch)",
                                dtype_name(a.dtype())));
    xt::xarray<std::int64_t> r = ~values<std::int64_t>(a);
    return make_leaf(Storage(std::move(r)));
}

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, Scalar s) { return eq(a, s); }
Tensor operator!=(const Tensor& a, Scalar s) { return ne(a, s); }
Tensor operator<(const Tensor& a, Scalar s) { return lt(a, s); }
Tensor operator<=(const Tensor& a, Scalar s) { return le(a, s); }
Tensor operator>(const Tensor& a, Scalar s) { return gt(a, s); }
Tensor operator>=(const Tensor& a, Scalar s) { return ge(a, s); }
// s < a is a > s, and so on: the comparison turns around with the operands.
Tensor operator==(Scalar s, const Tensor& a) { return eq(a, s); }
Tensor operator!=(Scalar s, const Tensor& a) { return ne(a, s); }
Tensor operator<(Scalar s, const Tensor& a) { return gt(a, s); }
Tensor operator<=(Scalar s, const Tensor& a) { return ge(a, s); }
Tensor operator>(Scalar s, const Tensor& a) { return lt(a, s); }
Tensor operator>=(Scalar s, const Tensor& a) { return le(a, s); }

namespace {

// Writes `result` (computed out of place) into a's storage as torch's in-place ops do; see
// tensor.hpp for the rules.
const Tensor& assign_in_place(const char* op, const Tensor& a, bool other_requires_grad,
                              const std::function<Tensor()>& compute) {
    check_defined(op, a);
    if (grad_enabled() && a.requires_grad() && a.is_leaf())
        throw Error(fmt::format("{}: a leaf tensor that requires grad cannot be changed in place while gradients are "
                                "recorded (as in torch); do it under NoGradGuard",
                                op));
    if (grad_enabled() && (a.requires_grad() || other_requires_grad))
        throw Error(fmt::format("{}: xgrad does not record in-place ops in the autograd graph; write `a = a + b` "
                                "(a new tensor) instead, or run it under NoGradGuard",
                                op));
    Tensor result;
    {
        NoGradGuard no_grad;
        result = compute();
    }
    if (!can_cast(result.dtype(), a.dtype()))
        throw Error(fmt::format("{}: result type {} can't be cast to the desired output type {} (as in torch)", op,
                                dtype_name(result.dtype()), dtype_name(a.dtype())));
    if (result.shape() != a.shape())
        throw Error(fmt::format("{}: output with shape {} doesn't match the broadcast shape {}", op,
                                shape_str(a.shape()), shape_str(result.shape())));
    a.set_data(cast(result, a.dtype()));
    return a;
}

}  // namespace

const Tensor& operator+=(const Tensor& a, const Tensor& b) {
    return assign_in_place("add_", a, b.defined() && b.requires_grad(), [&] { return add(a, b); });
}
const Tensor& operator-=(const Tensor& a, const Tensor& b) {
    return assign_in_place("sub_", a, b.defined() && b.requires_grad(), [&] { return sub(a, b); });
}
const Tensor& operator*=(const Tensor& a, const Tensor& b) {
    return assign_in_place("mul_", a, b.defined() && b.requires_grad(), [&] { return mul(a, b); });
}
const Tensor& operator/=(const Tensor& a, const Tensor& b) {
    return assign_in_place("div_", a, b.defined() && b.requires_grad(), [&] { return div(a, b); });
}
const Tensor& operator+=(const Tensor& a, Scalar s) { return assign_in_place("add_", a, false, [&] { return add(a, s); }); }
const Tensor& operator-=(const Tensor& a, Scalar s) { return assign_in_place("sub_", a, false, [&] { return sub(a, s); }); }
const Tensor& operator*=(const Tensor& a, Scalar s) { return assign_in_place("mul_", a, false, [&] { return mul(a, s); }); }
const Tensor& operator/=(const Tensor& a, Scalar s) { return assign_in_place("div_", a, false, [&] { return div(a, s); }); }

}  // namespace xgrad
