// Elementwise ops, each with its gradient. Binary ops broadcast; their backward reduces each
// input's gradient to that input's shape with sum_to.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>

#include "core/broadcast.hpp"
#include "core/call_context.hpp"
#include "core/fill_value.hpp"
#include "core/grad_ops.hpp"
#include "core/int_arith.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/creation.hpp"
#include "core/runtime/vec_math.hpp"

namespace xgrad {

namespace {

// What a unary op's backward reads: its input x, its output y, or neither.
constexpr Saves kReadsX = Saves::only_inputs(1u);
constexpr Saves kReadsY = Saves::only_output();
constexpr Saves kReadsNone = Saves::none();

// One unary op: y = fwd(x), an xtensor expression instantiated for float and double, and its
// gradient formula dx = grad(x, y, g) in ops on Tensors (see Formula in node.hpp), the one copy
// of the derivative, which both orders run. `reads` must name every tensor grad reads.
// A float32 kernel of runtime/vec_math.hpp, y[i] = f(x[i]) over n elements.
using FloatKernel = void (*)(const float*, float*, std::size_t);

// y = kernel(x) for float x, split over the pool (each element on its own: the same values for
// any thread count).
xt::xarray<float> float_map(const xt::xarray<float>& x, FloatKernel kernel) {
    xt::xarray<float> y = xt::xarray<float>::from_shape(x.shape());
    const float* px = x.data();
    float* py = y.data();
    parallel_for(x.size(), kElementGrain, [&](std::size_t i0, std::size_t i1) { kernel(px + i0, py + i0, i1 - i0); });
    return y;
}

// y = fwd(x) for an elementwise xtensor expression fwd, evaluated on 1-D runs of x split over
// the pool: each element's value is what fwd gives it on the whole array, for any thread count.
// Each chunk goes in runs of at most kElementGrain, each assigned in place (assign, not `=`: `=`
// on an adaptor evaluates into a temporary of the run's size from std::allocator first, the whole
// tensor on one thread, and throws std::bad_alloc when that does not fit); pow's and clamp's fwd
// build an xarray of their run, so short runs keep the op's memory close to its result's.
template <class T, class Fwd> xt::xarray<T> expression_map(const xt::xarray<T>& x, Fwd fwd) {
    xt::xarray<T> y = xt::xarray<T>::from_shape(x.shape());
    const T* px = x.data();
    T* py = y.data();
    parallel_for(x.size(), kElementGrain, [&](std::size_t i0, std::size_t i1) {
        for (std::size_t at = i0; at < i1; at += kElementGrain) {
            const std::size_t len = std::min(kElementGrain, i1 - at);
            const std::array<std::size_t, 1> run{len};
            auto out = xt::adapt(py + at, len, xt::no_ownership(), run);
            out.assign(fwd(xt::adapt(px + at, len, xt::no_ownership(), run)));
        }
    });
    return y;
}

template <class Fwd, class Grad>
Tensor unary(const char* op, const Tensor& a, Saves reads, Fwd fwd, Grad grad, FloatKernel float_kernel = nullptr) {
    const AllocContext context(op, a.shape());
    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y;
        if constexpr (std::is_same_v<T, float>) {
            if (float_kernel) y = float_map(values<float>(a), float_kernel);
        }
        if (float_kernel == nullptr || !std::is_same_v<T, float>) y = expression_map(values<T>(a), fwd);
        return make_result<T>(
            std::move(y), {a}, op,
            Formula([grad](const GradArgs& in) -> std::vector<Tensor> {
                return {grad(in.inputs[0], in.output, in.grad())};
            }),
            reads);
    });
}

// The input of a math op that torch computes in the default dtype for integers: int64 and bool
// become float32 (exp(arange(3)) is float32), floating tensors pass as they are. The cast
// result is a leaf without gradient, as an integer tensor cannot require one.
Tensor floating_input(const char* op, const Tensor& a) {
    check_defined(op, a);
    return a.dtype() == kInt64 || a.dtype() == kBool ? cast(a, kFloat32) : a;
}

// One broadcasting binary op: y = fwd(a, b), and the gradient formulas grad_a(a, b, y, g) and
// grad_b(...) in ops, each at the broadcast shape, then summed back to its input's shape. With
// Scalar, fwd also takes plain T values, and the broadcasts plan_broadcast knows run as plain
// loops; the others take xtensor's path.
template <bool Scalar = false, class Fwd, class GradA, class GradB>
Tensor binary(const char* op, const Tensor& a, const Tensor& b, Saves reads, Fwd fwd, GradA grad_a, GradB grad_b) {
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
            Formula([grad_a, grad_b](const GradArgs& in) -> std::vector<Tensor> {
                const Tensor &x0 = in.inputs[0], &x1 = in.inputs[1];
                return {in.needs(0) ? sum_to(grad_a(x0, x1, in.output, in.grad()), x0.shape()) : Tensor(),
                        in.needs(1) ? sum_to(grad_b(x0, x1, in.output, in.grad()), x1.shape()) : Tensor()};
            }),
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
        const auto x = bool_values(a);
        const auto y = bool_values(b);
        const bool any = k == Arith::add || k == Arith::max;
        xt::xarray<bool> r = any ? xt::xarray<bool>(x || y) : xt::xarray<bool>(x && y);
        return make_leaf(Storage(std::move(r)));
    }
    // + - * wrap around at the int64 limits as torch's do, through wrapping_* (no signed overflow).
    const auto& x = values<std::int64_t>(a);
    const auto& y = values<std::int64_t>(b);
    auto each = [&](auto f) {
        xt::xarray<std::int64_t> out = xt::xarray<std::int64_t>::from_shape(shape);
        auto bx = xt::broadcast(x, shape);
        auto by = xt::broadcast(y, shape);
        std::transform(bx.begin(), bx.end(), by.begin(), out.begin(), f);
        return out;
    };
    xt::xarray<std::int64_t> r;
    if (k == Arith::add) r = each([](std::int64_t u, std::int64_t v) { return wrapping_add(u, v); });
    else if (k == Arith::sub) r = each([](std::int64_t u, std::int64_t v) { return wrapping_sub(u, v); });
    else if (k == Arith::max) r = xt::maximum(x, y);
    else if (k == Arith::min) r = xt::minimum(x, y);
    else r = each([](std::int64_t u, std::int64_t v) { return wrapping_mul(u, v); });
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
        [](const Tensor&, const Tensor&, const Tensor&, const Tensor& g) { return g; },
        [](const Tensor&, const Tensor&, const Tensor&, const Tensor& g) { return g; }); });
}

Tensor sub(const Tensor& a, const Tensor& b) {
    return promoted("sub", Arith::sub, a, b, [](const Tensor& a, const Tensor& b) { return binary<true>(
        "sub", a, b, Saves::none(), [](const auto& x, const auto& y) { return x - y; },
        [](const Tensor&, const Tensor&, const Tensor&, const Tensor& g) { return g; },
        [](const Tensor&, const Tensor&, const Tensor&, const Tensor& g) { return -g; }); });
}

Tensor mul(const Tensor& a, const Tensor& b) {
    return promoted("mul", Arith::mul, a, b, [](const Tensor& a, const Tensor& b) { return binary<true>(
        "mul", a, b, Saves::only_inputs(3u), [](const auto& x, const auto& y) { return x * y; },
        [](const Tensor&, const Tensor& x1, const Tensor&, const Tensor& g) { return g * x1; },
        [](const Tensor& x0, const Tensor&, const Tensor&, const Tensor& g) { return g * x0; }); });
}

Tensor div(const Tensor& a, const Tensor& b) {
    // d(a/b)/da = 1/b; d(a/b)/db = -a/b² = -y/b.
    return promoted("div", Arith::div, a, b, [](const Tensor& a, const Tensor& b) { return binary<true>(
        "div", a, b, Saves{2u, true}, [](const auto& x, const auto& y) { return x / y; },
        [](const Tensor&, const Tensor& x1, const Tensor&, const Tensor& g) { return g / x1; },
        [](const Tensor&, const Tensor& x1, const Tensor& y, const Tensor& g) { return -g * y / x1; }); });
}

Tensor neg(const Tensor& a) {
    check_defined("neg", a);
    if (a.dtype() == kBool)
        throw Error("neg: negation, the `-` operator, on a bool tensor is not supported (as in torch); to invert a "
                    "mask use logical_not() or ~");
    if (a.dtype() == kInt64) {  // -INT64_MIN wraps to INT64_MIN, as torch
        xt::xarray<std::int64_t> r = values<std::int64_t>(a);
        std::transform(r.begin(), r.end(), r.begin(), [](std::int64_t v) { return wrapping_neg(v); });
        return make_leaf(Storage(std::move(r)));
    }
    return unary(
        "neg", a, kReadsNone, [](const auto& x) { return -x; },
        [](const Tensor&, const Tensor&, const Tensor& g) { return -g; });
}

Tensor pow(const Tensor& a, Scalar exponent) {
    check_defined("pow", a);
    if (!is_floating(a.dtype())) {
        // torch's a ** p for an integer or bool a: a floating p computes in float32, an integer
        // one stays in int64 (bool too: result_type(bool, 2) is int64), wrapping as torch's.
        // An int64 a to a bool power is a to 0 or 1 (torch's t ** True is t); bool ** bool is
        // result_type bool, which torch's pow refuses.
        if (exponent.kind() == kFloat64) return pow(cast(a, kFloat32), exponent);
        if (exponent.kind() == kBool && a.dtype() == kBool)
            throw Error("pow: a bool tensor to a bool power is not supported (as in torch); write the exponent as 0 or 1");
        const std::int64_t e = exponent.to_int64();
        if (e < 0)
            throw Error(fmt::format("pow: integers to negative integer powers are not allowed (as in torch); got a {} "
                                    "tensor to the power {}: use a floating exponent ({}.0) or cast the tensor to float",
                                    dtype_name(a.dtype()), e, e));
        const AllocContext context("pow", a.shape());
        xt::xarray<std::int64_t> r = values<std::int64_t>(cast(a, kInt64));
        std::transform(r.begin(), r.end(), r.begin(), [e](std::int64_t b) { return wrapping_pow(b, e); });
        return make_leaf(Storage(std::move(r)));
    }
    const double p = exponent.to_double();
    return unary(
        "pow", a, kReadsX,
        [p](const auto& x) {
            using T = value_t<decltype(x)>;
            // The exponents torch computes without pow, for its roundings (1/sqrt(x) and pow(x, -0.5)
            // differ in the last bit for a quarter of float32 inputs) and its signed zeros
            // (torch's (-0.0) ** -0.5 is -inf): products, sqrt and reciprocals.
            if (p == 2.0) return xt::xarray<T>(x * x);
            if (p == 3.0) return xt::xarray<T>(x * x * x);
            if (p == 0.5) return xt::xarray<T>(xt::sqrt(x));
            if (p == -0.5) return xt::xarray<T>(static_cast<T>(1) / xt::sqrt(x));
            if (p == -1.0) return xt::xarray<T>(static_cast<T>(1) / x);
            if (p == -2.0) return xt::xarray<T>(static_cast<T>(1) / (x * x));
            return xt::xarray<T>(xt::pow(x, static_cast<T>(p)));
        },
        [p](const Tensor& x, const Tensor&, const Tensor& g) {
            // x^0 is constant: its gradient is 0 even at x = 0, where p·x^(p-1) is 0·inf = NaN.
            if (p == 0) return zeros_like(g);
            return g * p * pow(x, p - 1);
        });
}

Tensor pow(const Tensor& base, const Tensor& exponent) {
    check_defined("pow", base, "base");
    check_defined("pow", exponent, "exponent");
    const Dtype d = result_type(base, exponent);
    if (d == kBool) throw Error("pow: bool base and exponent are not supported (as in torch); cast one to int64 or float");
    const Tensor b = cast(base, d), e = cast(exponent, d);
    if (d == kInt64) {
        const Shape shape = broadcast_shapes("pow", b.shape(), e.shape());
        const AllocContext context("pow", shape);
        auto bb = xt::broadcast(values<std::int64_t>(b), shape);
        auto be = xt::broadcast(values<std::int64_t>(e), shape);
        xt::xarray<std::int64_t> r = xt::xarray<std::int64_t>::from_shape(shape);
        std::transform(bb.begin(), bb.end(), be.begin(), r.begin(), wrapping_pow);
        return make_leaf(Storage(std::move(r)));
    }
    // Gradients as torch's pow_backward_self and pow_backward_exponent.
    return binary<true>(
        "pow", b, e, Saves::all(),
        [](const auto& x, const auto& y) {
            using std::pow;
            return pow(x, y);
        },
        [](const Tensor& x0, const Tensor& x1, const Tensor&, const Tensor& g) {
            // base^0 is constant: 0 even at base 0, where e·base^(e−1) is 0·inf.
            return where(eq(x1, 0.0), zeros({}, g.dtype()), g * (x1 * pow(x0, x1 - 1.0)));
        },
        [](const Tensor& x0, const Tensor& x1, const Tensor& y, const Tensor& g) {
            return pow_exponent_backward(g, y, x1, x0);
        });
}

Tensor exp(const Tensor& a) {
    return unary(
        "exp", floating_input("exp", a), kReadsY, [](const auto& x) { return xt::exp(x); },
        [](const Tensor&, const Tensor& y, const Tensor& g) { return g * y; }, vec::exp);
}

Tensor log(const Tensor& a) {
    return unary(
        "log", floating_input("log", a), kReadsX, [](const auto& x) { return xt::log(x); },
        [](const Tensor& x, const Tensor&, const Tensor& g) { return g / x; });
}

Tensor sqrt(const Tensor& a) {
    return unary(
        "sqrt", floating_input("sqrt", a), kReadsY, [](const auto& x) { return xt::sqrt(x); },
        [](const Tensor&, const Tensor& y, const Tensor& g) { return g / (2.0 * y); });
}

Tensor tanh(const Tensor& a) {
    return unary(
        "tanh", floating_input("tanh", a), kReadsY, [](const auto& x) { return xt::tanh(x); },
        [](const Tensor&, const Tensor& y, const Tensor& g) { return g * (1.0 - y * y); }, vec::tanh);
}

Tensor sigmoid(const Tensor& a) {
    return unary(
        "sigmoid", floating_input("sigmoid", a), kReadsY,
        [](const auto& x) {
            using T = value_t<decltype(x)>;
            return static_cast<T>(1) / (static_cast<T>(1) + xt::exp(-x));
        },
        [](const Tensor&, const Tensor& y, const Tensor& g) { return g * y * (1.0 - y); }, vec::sigmoid);
}

Tensor relu(const Tensor& a) {
    // The subgradient at 0 is 0, as in PyTorch. NaN passes through, as in torch (a maximum
    // with 0 would turn it into 0 and hide it), and so does its gradient. Plain loops over the
    // pool: both directions are one comparison per element.
    check_defined("relu", a);
    if (a.dtype() == kBool) throw Error("relu: bool inputs are not supported (as in torch); cast the mask to int64 or float");
    const AllocContext context("relu", a.shape());
    if (a.dtype() == kInt64) {  // stays int64, as torch's (no gradient)
        xt::xarray<std::int64_t> r = xt::maximum(values<std::int64_t>(a), std::int64_t{0});
        return make_leaf(Storage(std::move(r)));
    }
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
            Formula([](const GradArgs& in) -> std::vector<Tensor> { return {threshold_backward(in.grad(), in.inputs[0])}; }),
            kReadsX);
    });
}

Tensor threshold_backward(const Tensor& g, const Tensor& x) {
    // g where x > 0 (NaN included, as relu passes it), else 0: linear in g, so its gradient
    // is itself for g, and 0 for x (a step).
    check_same_dtype("threshold_backward", g, x);
    if (g.shape() != x.shape())
        throw Error(fmt::format("threshold_backward: gradient of shape {} for an input of shape {}",
                                shape_str(g.shape()), shape_str(x.shape())));
    const AllocContext context("threshold_backward", x.shape());
    return dispatch_floating("threshold_backward", x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* px = values<T>(x).data();
        const T* pg = values<T>(g).data();
        xt::xarray<T> d = xt::xarray<T>::from_shape(x.shape());
        T* pd = d.data();
        parallel_for(x.numel(), kElementGrain, [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) {
                const T gi = pg[i];  // read unconditionally, so the loop vectorises
                pd[i] = px[i] <= T(0) ? T(0) : gi;
            }
        });
        return make_result<T>(
            std::move(d), {g, x}, "threshold_backward",
            Formula([](const GradArgs& in) -> std::vector<Tensor> {
                return {in.needs(0) ? threshold_backward(in.grad(), in.inputs[1]) : Tensor(), Tensor()};
            }),
            Saves::only_inputs(2u));
    });
}

Tensor gelu(const Tensor& a) {
    // gelu(x) = x·Φ(x), Φ the normal CDF.
    return unary(
        "gelu", a, kReadsX,
        [](const auto& x) {
            using T = value_t<decltype(x)>;
            return static_cast<T>(0.5) * x * (static_cast<T>(1) + xt::erf(x * static_cast<T>(M_SQRT1_2)));
        },
        [](const Tensor& x, const Tensor&, const Tensor& g) { return gelu_backward(g, x); }, vec::gelu);
}

Tensor gelu_backward(const Tensor& g, const Tensor& x) {
    // g·gelu'(x), gelu' = Φ(x) + x·φ(x), φ the normal density; gelu'' = φ(x)·(2 − x²).
    check_same_dtype("gelu_backward", g, x);
    if (g.shape() != x.shape())
        throw Error(fmt::format("gelu_backward: gradient of shape {} for an input of shape {}", shape_str(g.shape()),
                                shape_str(x.shape())));
    const AllocContext context("gelu_backward", x.shape());
    return dispatch_floating("gelu_backward", x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const auto& xv = values<T>(x);
        xt::xarray<T> d;
        if constexpr (std::is_same_v<T, float>) {
            // the same formula, vectorised (runtime/vec_math.hpp)
            d = xt::xarray<float>::from_shape(xv.shape());
            const float *px = xv.data(), *pg = values<float>(g).data();
            float* pd = d.data();
            parallel_for(xv.size(), kElementGrain, [&](std::size_t i0, std::size_t i1) {
                vec::gelu_backward(pg + i0, px + i0, pd + i0, i1 - i0);
            });
        } else {
            auto cdf = static_cast<T>(0.5) * (static_cast<T>(1) + xt::erf(xv * static_cast<T>(M_SQRT1_2)));
            auto pdf = xt::exp(static_cast<T>(-0.5) * xv * xv) * static_cast<T>(0.5 * M_2_SQRTPI * M_SQRT1_2);
            d = values<T>(g) * (cdf + xv * pdf);
        }
        return make_result<T>(
            std::move(d), {g, x}, "gelu_backward",
            Formula([](const GradArgs& in) -> std::vector<Tensor> {
                const Tensor &g = in.inputs[0], &x = in.inputs[1], &gg = in.grad();
                Tensor dx;
                if (in.needs(1)) {
                    const Tensor pdf = exp(x * x * -0.5) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
                    dx = gg * g * pdf * (2.0 - x * x);
                }
                return {in.needs(0) ? gelu_backward(gg, x) : Tensor(), dx};
            }),
            Saves::all());
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
        "sin", floating_input("sin", a), kReadsX, [](const auto& x) { return xt::sin(x); },
        [](const Tensor& x, const Tensor&, const Tensor& g) { return g * cos(x); });
}

Tensor cos(const Tensor& a) {
    return unary(
        "cos", floating_input("cos", a), kReadsX, [](const auto& x) { return xt::cos(x); },
        [](const Tensor& x, const Tensor&, const Tensor& g) { return -g * sin(x); });
}

Tensor abs(const Tensor& a) {
    check_defined("abs", a);
    if (a.dtype() == kInt64) {  // abs(INT64_MIN) wraps to INT64_MIN, as torch
        xt::xarray<std::int64_t> r = values<std::int64_t>(a);
        std::transform(r.begin(), r.end(), r.begin(), [](std::int64_t v) { return wrapping_abs(v); });
        return make_leaf(Storage(std::move(r)));
    }
    // sign(0) = 0: the gradient at 0 is 0, as torch.
    return unary(
        "abs", a, kReadsX, [](const auto& x) { return xt::abs(x); },
        [](const Tensor& x, const Tensor&, const Tensor& g) { return g * sign(x); });
}

Tensor sign(const Tensor& a) {
    check_defined("sign", a);
    if (a.dtype() == kInt64) {
        xt::xarray<std::int64_t> r = xt::sign(values<std::int64_t>(a));
        return make_leaf(Storage(std::move(r)));
    }
    if (a.dtype() == kBool) {  // the sign of true is 1, true: a bool copy, as torch's
        xt::xarray<bool> r = bool_values(a);
        return make_leaf(Storage(std::move(r)));
    }
    // A step: its gradient is 0 wherever it has one. Comparisons, as torch's: NaN and -0.0 give
    // +0.0 (xt::sign keeps NaN and the zero's sign), and so abs's gradient there is 0.
    return unary(
        "sign", a, kReadsNone,
        [](const auto& x) {
            using T = value_t<decltype(x)>;
            return xt::where(x > T(0), T(1), xt::where(x < T(0), T(-1), T(0)));
        },
        [](const Tensor&, const Tensor&, const Tensor& g) { return zeros_like(g); });
}

namespace {
// clamp, clamp_min and clamp_max, named `op` in errors and in the graph.
Tensor clamp_as(const char* op, const Tensor& a_in, std::optional<Scalar> min_in, std::optional<Scalar> max_in) {
    check_defined(op, a_in);
    if (!min_in && !max_in) throw Error(fmt::format("{}: at least one of min and max must be given (as torch)", op));
    const auto bound = [op](const char* name, const std::optional<Scalar>& s) -> std::optional<double> {
        if (!s) return std::nullopt;
        // torch 1.13 ignores a lone NaN bound (clamp(x, nan) is x) but fills NaN when both are
        // given (clamp(x, 0, nan)), and later torch propagates it: refused rather than guessed.
        if (std::isnan(s->to_double()))
            throw Error(fmt::format("{}: {} is NaN; the bounds must be numbers{}", op, name,
                                    std::strcmp(op, "clamp") == 0 ? " (leave a bound out with std::nullopt)" : ""));
        return s->to_double();
    };
    const std::optional<double> min = bound("min", min_in), max = bound("max", max_in);
    // The result's dtype is result_type(a, min, max), as torch's: an int64 tensor with integer
    // bounds stays int64, a floating bound makes it float32.
    PromotionState st;
    st.add(a_in);
    if (min_in) st.add(*min_in);
    if (max_in) st.add(*max_in);
    const Dtype d = st.result();
    if (d == kBool)
        throw Error(fmt::format("{}: a bool tensor with bool bounds is not supported (as in torch); cast the mask to int64",
                                op));
    if (d == kInt64) {
        const std::int64_t lo = min_in ? min_in->to_int64() : INT64_MIN, hi = max_in ? max_in->to_int64() : INT64_MAX;
        const AllocContext context(op, a_in.shape());
        xt::xarray<std::int64_t> r = values<std::int64_t>(cast(a_in, kInt64));
        // Lower bound first, then upper, as the floating path.
        std::transform(r.begin(), r.end(), r.begin(), [lo, hi](std::int64_t v) { return std::min(std::max(v, lo), hi); });
        return make_leaf(Storage(std::move(r)));
    }
    const Tensor a = cast(a_in, d);
    // torch converts the bounds to a's dtype and refuses one that does not fit (1e300 for float32).
    if (is_floating(a.dtype())) {
        if (min) check_fill_value(op, "min", *min, a.dtype());
        if (max) check_fill_value(op, "max", *max, a.dtype());
    }
    const double lo = min.value_or(-INFINITY), hi = max.value_or(INFINITY);
    // Lower bound first, then upper: with lo > hi everything becomes hi, as torch. Comparisons
    // with NaN are false, so NaN passes through.
    return unary(
        op, a, kReadsX,
        [lo, hi](const auto& x) {
            using T = value_t<decltype(x)>;
            const T l = static_cast<T>(lo), h = static_cast<T>(hi);
            if (l > h) return xt::xarray<T>(xt::where(xt::isnan(x), x, h));
            return xt::xarray<T>(xt::where(x < l, l, xt::where(x > h, h, x)));
        },
        [lo, hi](const Tensor& x, const Tensor&, const Tensor& g) {
            // Compared in x's type, as the forward pass clamps.
            const Tensor l = cast(full({}, lo, kFloat64), x.dtype()), h = cast(full({}, hi, kFloat64), x.dtype());
            return where(mul(ge(x, l), le(x, h)), g, zeros({}, g.dtype()));
        });
}
}  // namespace

Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
    return clamp_as("clamp", a, min, max);
}
Tensor clamp_min(const Tensor& a, Scalar min) { return clamp_as("clamp_min", a, min, std::nullopt); }
Tensor clamp_max(const Tensor& a, Scalar max) { return clamp_as("clamp_max", a, std::nullopt, max); }

namespace {
// The gradient maximum and minimum hand one operand: g where it alone wins, half of g on a tie.
Tensor extremum_grad(const Tensor& wins, const Tensor& x0, const Tensor& x1, const Tensor& g) {
    const Tensor zero = zeros({}, g.dtype());
    return where(wins, g, where(eq(x0, x1), g * 0.5, zero));
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
    // The gradient goes to the larger input, half to each on a tie (torch 1.13).
    return promoted("maximum", Arith::max, a, b, [](const Tensor& a, const Tensor& b) {
        return binary(
            "maximum", a, b, Saves::only_inputs(3u),
            [](const auto& x, const auto& y) { return xt::where(x > y || xt::isnan(x), x, y); },
            [](const Tensor& x0, const Tensor& x1, const Tensor&, const Tensor& g) { return extremum_grad(x0 > x1, x0, x1, g); },
            [](const Tensor& x0, const Tensor& x1, const Tensor&, const Tensor& g) { return extremum_grad(x1 > x0, x0, x1, g); });
    });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
    return promoted("minimum", Arith::min, a, b, [](const Tensor& a, const Tensor& b) {
        return binary(
            "minimum", a, b, Saves::only_inputs(3u),
            [](const auto& x, const auto& y) { return xt::where(x < y || xt::isnan(x), x, y); },
            [](const Tensor& x0, const Tensor& x1, const Tensor&, const Tensor& g) { return extremum_grad(x0 < x1, x0, x1, g); },
            [](const Tensor& x0, const Tensor& x1, const Tensor&, const Tensor& g) { return extremum_grad(x1 < x0, x0, x1, g); });
    });
}

Tensor add(const Tensor& a, Scalar s) {
    return scalar_arith("add", Arith::add, a, s, [](const Tensor& a, double s) {
        return unary(
            "add", a, kReadsNone, [s](const auto& x) { return x + static_cast<value_t<decltype(x)>>(s); },
            [](const Tensor&, const Tensor&, const Tensor& g) { return g; });
    });
}

Tensor sub(const Tensor& a, Scalar s) {
    return scalar_arith("sub", Arith::sub, a, s, [](const Tensor& a, double s) { return add(a, -s); });
}

Tensor mul(const Tensor& a, Scalar s) {
    return scalar_arith("mul", Arith::mul, a, s, [](const Tensor& a, double s) {
        return unary(
            "mul", a, kReadsNone, [s](const auto& x) { return x * static_cast<value_t<decltype(x)>>(s); },
            [s](const Tensor&, const Tensor&, const Tensor& g) { return g * s; });
    });
}

Tensor div(const Tensor& a, Scalar s) {
    return scalar_arith("div", Arith::div, a, s, [](const Tensor& a, double s) {
        return unary(
            "div", a, kReadsNone, [s](const auto& x) { return x / static_cast<value_t<decltype(x)>>(s); },
            [s](const Tensor&, const Tensor&, const Tensor& g) { return g / s; });
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
        [](const Tensor&, const Tensor&, const Tensor& g) { return -g; });
}

Tensor rdiv(Scalar s, const Tensor& a) {
    // d(s/x)/dx = -s/x² = -y/x.
    check_defined("rdiv", a);
    const double v = s.to_double();
    return unary(
        "rdiv", cast(a, arith_dtype(Arith::div, result_type(a, s))), Saves{1u, true},
        [v](const auto& x) { return static_cast<value_t<decltype(x)>>(v) / x; },
        [](const Tensor& x, const Tensor& y, const Tensor& g) { return -g * y / x; });
}

Tensor cast(const Tensor& a, Dtype d) {
    check_defined("cast", a);
    if (a.dtype() == d) return a;
    if (a.dtype() == kBFloat16 || d == kBFloat16) return cast_bfloat16(a, d);
    const AllocContext context("cast", a.shape());
    return dispatch_all(d, [&](auto to_tag) {
        using To = typename decltype(to_tag)::type;
        xt::xarray<To> y = std::visit(
            [&a](const auto& x) {
                if constexpr (std::is_same_v<std::decay_t<decltype(x)>, xt::xarray<bool>>) {
                    return xt::xarray<To>(xt::cast<To>(bool_values(a)));
                } else {
                    check_convertible<To>("cast", x.data(), x.size());
                    return xt::xarray<To>(xt::cast<To>(x));
                }
            },
            a.node().data());
        if constexpr (std::is_floating_point_v<To>) {
            if (is_floating(a.dtype()))
                return make_result<To>(std::move(y), {a}, "cast", Formula([](const GradArgs& in) -> std::vector<Tensor> {
                    return {cast(in.grad(), in.inputs[0].dtype())};
                }), Saves::none());
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
            xt::xarray<bool> r;
            if constexpr (std::is_same_v<T, bool>) r = cmp(bool_values(ca), bool_values(cb));
            else r = cmp(values<T>(ca), values<T>(cb));
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
    xt::xarray<bool> r = !bool_values(mask);
    return make_leaf(Storage(std::move(r)));
}

namespace {

// torch's truth of a value for the logical ops: non-zero is true (NaN too), any dtype.
Tensor truth(const char* op, const Tensor& t, const char* arg) {
    check_defined(op, t, arg);
    return t.dtype() == kBool ? t : as_call(op, [&] { return ne(t, 0); });
}

template <class Fn> Tensor logical(const char* op, const Tensor& a, const Tensor& b, Fn fn) {
    return compare(op, truth(op, a, "input"), truth(op, b, "other"), fn);
}

// `&`, `|`, `^`: logical for two masks, bitwise for integers (a mask counting as 0 and 1), refused
// for floating dtypes, as torch.
template <class Fn>
Tensor bitwise(const char* op, const char* sign, const Tensor& a, const Tensor& b, Tensor (*on_masks)(const Tensor&, const Tensor&),
               Fn fn) {
    check_defined(op, a);
    check_defined(op, b, "other");
    const auto integral = [](Dtype d) { return d == kBool || d == kInt64; };
    if (!integral(a.dtype()) || !integral(b.dtype()))
        throw Error(fmt::format("{}: the `{}` operator needs bool or int64 tensors (as in torch), got {} and {}", op,
                                sign, dtype_name(a.dtype()), dtype_name(b.dtype())));
    if (a.dtype() == kBool && b.dtype() == kBool) return as_call(op, [&] { return on_masks(a, b); });
    const Tensor ia = cast(a, kInt64), ib = cast(b, kInt64);
    const Shape shape = broadcast_shapes(op, a.shape(), b.shape());
    const AllocContext context(op, shape);
    xt::xarray<std::int64_t> r = fn(values<std::int64_t>(ia), values<std::int64_t>(ib));
    return make_leaf(Storage(std::move(r)));
}

}  // namespace

Tensor logical_and(const Tensor& a, const Tensor& b) {
    return logical("logical_and", a, b, [](const auto& x, const auto& y) { return x && y; });
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
    return logical("logical_or", a, b, [](const auto& x, const auto& y) { return x || y; });
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
    return logical("logical_xor", a, b, [](const auto& x, const auto& y) { return xt::not_equal(x, y); });
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

Tensor operator&(const Tensor& a, const Tensor& b) {
    return bitwise("bitwise_and", "&", a, b, logical_and, [](const auto& x, const auto& y) { return x & y; });
}
Tensor operator|(const Tensor& a, const Tensor& b) {
    return bitwise("bitwise_or", "|", a, b, logical_or, [](const auto& x, const auto& y) { return x | y; });
}
Tensor operator^(const Tensor& a, const Tensor& b) {
    return bitwise("bitwise_xor", "^", a, b, logical_xor, [](const auto& x, const auto& y) { return x ^ y; });
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

// The compound operators (+= ...) are the in-place ops of ops_inplace.cpp.

}  // namespace xgrad
