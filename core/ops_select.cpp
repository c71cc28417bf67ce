// Selection by a bool mask: where and masked_fill. Any dtype forward; float inputs get gradients.
#include "core/broadcast.hpp"
#include "core/creation.hpp"
#include "core/fill_value.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/runtime/kernel_loops.hpp"

#include <cstdint>
#include <type_traits>

namespace xgrad {

namespace {

void check_bool(const char* op, const char* what, const Tensor& t) {
    if (t.dtype() != kBool)
        throw Error(fmt::format("{}: {} must be a bool tensor, got {} (make one with a comparison such as gt)",
                                op, what, dtype_name(t.dtype())));
}

// How each of several operands is read into a result of shape `out` seen as (rows, cols) (the
// Steps of broadcast.hpp), when every one is full, a scalar, or one same leading or trailing
// block: the split of the first operand that has one, tried on all.
std::optional<std::pair<std::pair<std::size_t, std::size_t>, std::vector<Steps>>>
plan_operands(const std::vector<const Shape*>& shapes, const Shape& out) {
    for (const Shape* s : shapes) {
        const auto split = split_for(*s, out);
        if (!split) return std::nullopt;
        std::vector<Steps> steps;
        for (const Shape* t : shapes) {
            const auto st = steps_for(*t, out, split->first, split->second);
            if (!st) break;
            steps.push_back(*st);
        }
        if (steps.size() == shapes.size()) return std::make_pair(*split, steps);
    }
    return std::nullopt;
}

// m ? u : v as a blend of their bits under a mask made from m: GCC keeps `m ? u : v` on a bool
// loaded as a byte as a branch per element, this form it vectorises. The same value either way:
// one operand's bits, untouched. Any byte but 0 selects u, as numpy and load_npz read a bool: a
// mask whose bytes were written raw (a C array of 0/255 flags copied through data_ptr) must not
// blend the two operands' bits.
template <class T> T select_bits(std::uint8_t m, T u, T v) {
    if constexpr (std::is_arithmetic_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8)) {
        using U = std::conditional_t<sizeof(T) == 1, std::uint8_t,
                                     std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                                        std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
        const U mask = static_cast<U>(U(0) - static_cast<U>(m != 0));
        return __builtin_bit_cast(T, static_cast<U>((__builtin_bit_cast(U, u) & mask) | (__builtin_bit_cast(U, v) & ~mask)));
    } else {
        return m ? u : v;
    }
}

// y[r, c] = m[r, c] ? a[r, c] : b[r, c] over the (rows, cols) split, each read by its Steps:
// a plain loop on the pool, the column steps (0 or 1) constants so that it vectorises.
template <class T>
void select_loop(std::size_t rows, std::size_t cols, const bool* m, Steps sm, const T* a, Steps sa, const T* b, Steps sb,
                 T* y) {
    auto run = [&](auto cm, auto ca, auto cb) {
        parallel_for(rows * cols, kElementGrain, [&](std::size_t begin, std::size_t end) {
            std::size_t r = begin / cols, c0 = begin % cols;
            for (std::size_t i = begin; i < end; ++r, c0 = 0) {
                const std::size_t c1 = std::min(cols, c0 + (end - i));
                // the mask's bytes as integers: GCC vectorises no widening of a bool
                const std::uint8_t* pm = reinterpret_cast<const std::uint8_t*>(m + r * sm.row);
                const T* pa = a + r * sa.row;
                const T* pb = b + r * sb.row;
                T* py = y + r * cols;
                // an operand read with step 0 as a local, not reloaded per element: the store
                // to y might alias it as far as the compiler knows, which stops vectorisation
                const std::uint8_t m0 = pm[0];
                const T a0 = pa[0], b0 = pb[0];
                for (std::size_t c = c0; c < c1; ++c) {
                    const T u = ca ? pa[c] : a0, v = cb ? pb[c] : b0;  // both read: no branch
                    py[c] = select_bits(cm ? pm[c] : m0, u, v);
                }
                i += c1 - c0;
            }
        });
    };
    using zero = std::integral_constant<std::size_t, 0>;
    using one = std::integral_constant<std::size_t, 1>;
    // the mask and the operand that is not a scalar fill are the common cases
    with_flag(sm.col != 0, [&](auto mf) {
        with_flag(sa.col != 0, [&](auto af) {
            with_flag(sb.col != 0, [&](auto bf) {
                run(std::conditional_t<decltype(mf)::value, one, zero>{}, std::conditional_t<decltype(af)::value, one, zero>{},
                    std::conditional_t<decltype(bf)::value, one, zero>{});
            });
        });
    });
}

}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
    check_defined("where", cond, "cond");
    check_defined("where", a, "a");
    check_defined("where", b, "b");
    check_bool("where", "cond", cond);
    check_same_dtype("where", a, b);
    // bfloat16 selects through float32: both conversions are exact, and cast carries the gradient.
    if (a.dtype() == kBFloat16) return cast(where(cond, cast(a, kFloat32), cast(b, kFloat32)), kBFloat16);
    const Shape shape = broadcast_shapes("where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
    const AllocContext context("where", shape);
    return dispatch_computable("where", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y;
        if (const auto plan = plan_operands({&cond.shape(), &a.shape(), &b.shape()}, shape)) {
            y = xt::xarray<T>::from_shape(shape);
            const auto& [split, st] = *plan;
            select_loop<T>(split.first, split.second, values<bool>(cond).data(), st[0], values<T>(a).data(), st[1],
                           values<T>(b).data(), st[2], y.data());
        } else {
            y = xt::where(values<bool>(cond), values<T>(a), values<T>(b));
        }
        return make_any_result<T>(
            std::move(y), {cond, a, b}, "where",
            Formula([](const GradArgs& in) -> std::vector<Tensor> {
                // a gets g where cond, b elsewhere (torch's where(cond, g, 0) and where(cond, 0, g)),
                // each summed back to its shape. Both read cond's bytes as the forward did, so a
                // mask byte other than 0 and 1 routes the gradient where it routed the value.
                const Tensor &c = in.inputs[0], &g = in.grad();
                const Tensor zero = zeros({}, g.dtype());
                return {Tensor(), in.needs(1) ? sum_to(where(c, g, zero), in.inputs[1].shape()) : Tensor(),
                        in.needs(2) ? sum_to(where(c, zero, g), in.inputs[2].shape()) : Tensor()};
            }),
            Saves::only_inputs(1u));
    });
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, Scalar value) { return masked_fill("masked_fill", a, mask, value); }

Tensor masked_fill(const char* op, const Tensor& a, const Tensor& mask, const Scalar& value) {
    check_defined(op, a);
    check_defined(op, mask, "mask");
    check_bool(op, "mask", mask);
    if (!broadcastable_to(mask.shape(), a.shape()))
        throw Error(fmt::format("{}: mask of shape {} cannot be broadcast to the input's shape {}", op,
                                shape_str(mask.shape()), shape_str(a.shape())));
    // The value must fit a's dtype, as torch: 1e300 into float32 is refused, not stored as inf.
    check_fill_value(op, "value", value, a.dtype());
    // As torch: the fill value rounds to bfloat16 (through float32, exact for the kept values).
    if (a.dtype() == kBFloat16) return cast(masked_fill(op, cast(a, kFloat32), mask, value), kBFloat16);
    const AllocContext context(op, a.shape());
    return dispatch_computable(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // An integer value as it is (an int64 keeps all 64 bits), a floating one converted
        // (into int64 truncated; check_fill_value made sure it fits).
        const T fill = value.kind() == kFloat64 ? static_cast<T>(value.to_double()) : static_cast<T>(value.to_int64());
        xt::xarray<T> y;
        if (const auto plan = plan_operands({&mask.shape(), &a.shape()}, a.shape())) {
            y = xt::xarray<T>::from_shape(a.shape());
            const auto& [split, st] = *plan;
            select_loop<T>(split.first, split.second, values<bool>(mask).data(), st[0], &fill, Steps{0, 0},
                           values<T>(a).data(), st[1], y.data());
        } else {
            y = xt::where(values<bool>(mask), fill, values<T>(a));
        }
        // The filled positions get no gradient: masked_fill(g, mask, 0), which is also its
        // own gradient.
        return make_any_result<T>(std::move(y), {a, mask}, "masked_fill",
                                  Formula([](const GradArgs& in) -> std::vector<Tensor> {
                                      return {masked_fill(in.grad(), in.inputs[1], 0.0), Tensor()};
                                  }),
                                  Saves::only_inputs(2u));
    });
}

}  // namespace xgrad
