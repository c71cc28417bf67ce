// Elementwise ops, each with its gradient. Binary ops broadcast; their backward reduces each
// input's gradient to that input's shape with sum_to.
#include <cmath>

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
// each at the broadcast shape, then reduced to its input's shape.
template <class Fwd, class BwdA, class BwdB>
Tensor binary(const char* op, const Tensor& a, const Tensor& b, Saves reads, Fwd fwd, BwdA bwd_a, BwdB bwd_b) {
    check_same_dtype(op, a, b);
    const Shape shape = broadcast_shapes(op, a.shape(), b.shape());
    const AllocContext context(op, shape);
    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = fwd(values<T>(a), values<T>(b));
        return make_result<T>(
            std::move(y), {a, b}, op,
            [op, bwd_a, bwd_b](Node& self, const Storage& gs) {
                const Tensor& ta = self.parents[0];
                const Tensor& tb = self.parents[1];
                const auto& x0 = values<T>(ta);
                const auto& x1 = values<T>(tb);
                const auto& y = values<T>(self);
                const auto& g = grad_as<T>(gs);
                if (needs_grad(self, 0)) accumulate<T>(op, ta, sum_to<T>(xt::xarray<T>(bwd_a(x0, x1, y, g)), ta.shape()));
                if (needs_grad(self, 1)) accumulate<T>(op, tb, sum_to<T>(xt::xarray<T>(bwd_b(x0, x1, y, g)), tb.shape()));
            },
            reads);
    });
}

// The value_type of an xtensor expression, to cast scalars (xtensor would otherwise promote a
// float expression times a double to double).
template <class E> using value_t = typename std::decay_t<E>::value_type;

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
    return binary(
        "add", a, b, Saves::none(), [](const auto& x, const auto& y) { return x + y; },
        [](const auto&, const auto&, const auto&, const auto& g) { return g; },
        [](const auto&, const auto&, const auto&, const auto& g) { return g; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
    return binary(
        "sub", a, b, Saves::none(), [](const auto& x, const auto& y) { return x - y; },
        [](const auto&, const auto&, const auto&, const auto& g) { return g; },
        [](const auto&, const auto&, const auto&, const auto& g) { return -g; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
    return binary(
        "mul", a, b, Saves::only_inputs(3u), [](const auto& x, const auto& y) { return x * y; },
        [](const auto&, const auto& x1, const auto&, const auto& g) { return g * x1; },
        [](const auto& x0, const auto&, const auto&, const auto& g) { return g * x0; });
}

Tensor div(const Tensor& a, const Tensor& b) {
    // d(a/b)/da = 1/b; d(a/b)/db = -a/b² = -y/b.
    return binary(
        "div", a, b, Saves{2u, true}, [](const auto& x, const auto& y) { return x / y; },
        [](const auto&, const auto& x1, const auto&, const auto& g) { return g / x1; },
        [](const auto&, const auto& x1, const auto& y, const auto& g) { return -g * y / x1; });
}

Tensor neg(const Tensor& a) {
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
    // with 0 would turn it into 0 and hide it), and so does its gradient.
    return unary(
        "relu", a, kReadsX,
        [](const auto& x) {
            using T = value_t<decltype(x)>;
            return xt::where(x <= static_cast<T>(0), static_cast<T>(0), x);
        },
        [](const auto& x, const auto&, const auto& g) {
            using T = value_t<decltype(x)>;
            return xt::where(x <= static_cast<T>(0), static_cast<T>(0), g);
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

Tensor add(const Tensor& a, double s) {
    return unary(
        "add", a, kReadsNone, [s](const auto& x) { return x + static_cast<value_t<decltype(x)>>(s); },
        [](const auto&, const auto&, const auto& g) { return g; });
}

Tensor sub(const Tensor& a, double s) { return add(a, -s); }

Tensor mul(const Tensor& a, double s) {
    return unary(
        "mul", a, kReadsNone, [s](const auto& x) { return x * static_cast<value_t<decltype(x)>>(s); },
        [s](const auto&, const auto&, const auto& g) { return g * static_cast<value_t<decltype(g)>>(s); });
}

Tensor div(const Tensor& a, double s) {
    return unary(
        "div", a, kReadsNone, [s](const auto& x) { return x / static_cast<value_t<decltype(x)>>(s); },
        [s](const auto&, const auto&, const auto& g) { return g / static_cast<value_t<decltype(g)>>(s); });
}

Tensor rsub(double s, const Tensor& a) {
    return unary(
        "rsub", a, kReadsNone, [s](const auto& x) { return static_cast<value_t<decltype(x)>>(s) - x; },
        [](const auto&, const auto&, const auto& g) { return -g; });
}

Tensor rdiv(double s, const Tensor& a) {
    // d(s/x)/dx = -s/x² = -y/x.
    return unary(
        "rdiv", a, Saves{1u, true}, [s](const auto& x) { return static_cast<value_t<decltype(x)>>(s) / x; },
        [](const auto& x, const auto& y, const auto& g) { return -g * y / x; });
}

Tensor cast(const Tensor& a, Dtype d) {
    if (a.dtype() == d) return a;
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

template <class Cmp> Tensor compare(const char* op, const Tensor& a, const Tensor& b, Cmp cmp) {
    check_same_dtype(op, a, b);
    const Shape shape = broadcast_shapes(op, a.shape(), b.shape());
    const AllocContext context(op, shape);
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<bool> r = cmp(values<T>(a), values<T>(b));
        return make_leaf(Storage(std::move(r)));
    });
}

// `cmp` must return a materialised array here: a lazy expression would refer to its by-value
// scalar parameter after it has gone.
template <class Cmp> Tensor compare(const char* op, const Tensor& a, double s, Cmp cmp) {
    if (a.dtype() == kBool) throw Error(fmt::format("{}: cannot compare a bool tensor with a number", op));
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // An int64 tensor compares with the number itself (torch: tensor([2]) < 2.5 is true);
        // casting 2.5 to int64 would compare with 2.
        xt::xarray<bool> r = std::is_floating_point_v<T> ? cmp(values<T>(a), static_cast<T>(s))
                                                         : cmp(xt::xarray<double>(xt::cast<double>(values<T>(a))), s);
        return make_leaf(Storage(std::move(r)));
    });
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
Tensor lt(const Tensor& a, double s) {
    return compare("lt", a, s, [](const auto& x, auto y) { return xt::xarray<bool>(xt::less(x, y)); });
}
Tensor gt(const Tensor& a, double s) {
    return compare("gt", a, s, [](const auto& x, auto y) { return xt::xarray<bool>(xt::greater(x, y)); });
}
Tensor eq(const Tensor& a, double s) {
    return compare("eq", a, s, [](const auto& x, auto y) { return xt::xarray<bool>(xt::equal(x, y)); });
}

Tensor logical_not(const Tensor& mask) {
    if (mask.dtype() != kBool)
        throw Error(fmt::format("logical_not: expected a bool tensor, got {}", dtype_name(mask.dtype())));
    xt::xarray<bool> r = !values<bool>(mask);
    return make_leaf(Storage(std::move(r)));
}

}  // namespace xgrad
