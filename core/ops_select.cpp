// Selection by a bool mask: where and masked_fill. Any dtype forward, by the elements' bits;
// floating inputs (bfloat16 too) get gradients.
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
// one operand's bits, untouched (a NaN's payload, a signalling NaN, bfloat16's 16 bits too). Any
// byte but 0 selects u, as numpy and load_npz read a bool: a mask whose bytes were written raw
// (a C array of 0/255 flags copied through data_ptr) must not blend the two operands' bits.
template <class T> T select_bits(std::uint8_t m, T u, T v) {
    static_assert(std::is_trivially_copyable_v<T> &&
                  (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8));
    using U = std::conditional_t<sizeof(T) == 1, std::uint8_t,
                                 std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                                    std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
    const U mask = static_cast<U>(U(0) - static_cast<U>(m != 0));
    return __builtin_bit_cast(T, static_cast<U>((__builtin_bit_cast(U, u) & mask) | (__builtin_bit_cast(U, v) & ~mask)));
}

// The element type a select runs in: a bool's storage is read as its byte (reading a byte
// other than 0 and 1 as bool is undefined), every other type as itself.
template <class T> using select_t = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;

// The storage of t (dtype T) as select_t<T>: a bool's bytes through unsigned char, which may
// read any object.
template <class T> const select_t<T>* select_data(const Tensor& t) {
    return reinterpret_cast<const select_t<T>*>(values<T>(t).data());
}

// y[r, c] = m[r, c] ? a[r, c] : b[r, c] over the (rows, cols) split, each read by its Steps:
// a plain loop on the pool, the column steps (0 or 1) constants so that it vectorises. m is the
// mask's bytes. T = std::uint8_t is a bool's storage: the result byte is 1 where the selected
// byte is not 0, so a raw operand byte comes out as a bool the rest of xgrad may read.
template <class T>
void select_loop(std::size_t rows, std::size_t cols, const std::uint8_t* m, Steps sm, const T* a, Steps sa, const T* b,
                 Steps sb, T* y) {
    auto run = [&](auto cm, auto ca, auto cb) {
        parallel_for(rows * cols, kElementGrain, [&](std::size_t begin, std::size_t end) {
            std::size_t r = begin / cols, c0 = begin % cols;
            for (std::size_t i = begin; i < end; ++r, c0 = 0) {
                const std::size_t c1 = std::min(cols, c0 + (end - i));
                const std::uint8_t* pm = m + r * sm.row;
                const T* pa = a + r * sa.row;
                const T* pb = b + r * sb.row;
                T* py = y + r * cols;
                // an operand read with step 0 as a local, not reloaded per element: the store
                // to y might alias it as far as the compiler knows, which stops vectorisation
                const std::uint8_t m0 = pm[0];
                const T a0 = pa[0], b0 = pb[0];
                for (std::size_t c = c0; c < c1; ++c) {
                    const T u = ca ? pa[c] : a0, v = cb ? pb[c] : b0;  // both read: no branch
                    if constexpr (std::is_same_v<T, std::uint8_t>)
                        py[c] = static_cast<std::uint8_t>(select_bits(cm ? pm[c] : m0, u, v) != 0);
                    else
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

// The values of `data` (shape `s`) broadcast to `out` and copied whole: for the broadcasts
// plan_operands does not split, which then select as full operands. A copy moves the bits as
// they are.
template <class T> xt::xarray<T> expanded(const T* data, const Shape& s, const Shape& out) {
    std::size_t n = 1;
    for (const std::size_t d : s) n *= d;
    return xt::broadcast(xt::adapt(data, n, xt::no_ownership(), s), out);
}

// y = m ? a : b, each given by its storage and shape and broadcast to `out` (m the mask's
// bytes): by the plain loop when plan_operands splits them, else on full copies.
template <class S>
void select_into(S* y, const Shape& out, const std::uint8_t* m, const Shape& ms, const S* a, const Shape& as, const S* b,
                 const Shape& bs) {
    if (const auto plan = plan_operands({&ms, &as, &bs}, out)) {
        const auto& [split, st] = *plan;
        select_loop<S>(split.first, split.second, m, st[0], a, st[1], b, st[2], y);
        return;
    }
    const xt::xarray<std::uint8_t> mf = expanded(m, ms, out);
    const xt::xarray<S> af = expanded(a, as, out), bf = expanded(b, bs, out);
    select_loop<S>(1, mf.size(), mf.data(), Steps{0, 1}, af.data(), Steps{0, 1}, bf.data(), Steps{0, 1}, y);
}

// The result of a select of dtype T: a bfloat16 one keeps its gradient (its Formula sums in
// float32), the others as make_any_result.
template <class T>
Tensor select_result(xt::xarray<T>&& y, std::vector<Tensor> inputs, const char* op, Formula formula, Saves saves) {
    if constexpr (std::is_same_v<T, bfloat16>)
        return make_result<T>(std::move(y), std::move(inputs), op, std::move(formula), saves);
    else
        return make_any_result<T>(std::move(y), std::move(inputs), op, std::move(formula), saves);
}

}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
    check_defined("where", cond, "cond");
    check_defined("where", a, "a");
    check_defined("where", b, "b");
    check_bool("where", "cond", cond);
    check_same_dtype("where", a, b);
    const Shape shape = broadcast_shapes("where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
    const AllocContext context("where", shape);
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using S = select_t<T>;
        xt::xarray<T> y = xt::xarray<T>::from_shape(shape);
        select_into<S>(reinterpret_cast<S*>(y.data()), shape, select_data<bool>(cond), cond.shape(), select_data<T>(a),
                       a.shape(), select_data<T>(b), b.shape());
        return select_result<T>(
            std::move(y), {cond, a, b}, "where",
            Formula([](const GradArgs& in) -> std::vector<Tensor> {
                // a gets g where cond, b elsewhere (torch's where(cond, g, 0) and where(cond, 0, g)),
                // each summed back to its shape. Both read cond's bytes as the forward did, so a
                // mask byte other than 0 and 1 routes the gradient where it routed the value. A
                // bfloat16 g is summed in float32 and rounded once, as through a cast.
                const Tensor& c = in.inputs[0];
                const bool bf16 = in.grad().dtype() == kBFloat16;
                const Tensor g = bf16 ? cast(in.grad(), kFloat32) : in.grad();
                const Tensor zero = zeros({}, g.dtype());
                const auto back = [&](const Tensor& t, std::size_t i) {
                    const Tensor s = sum_to(t, in.inputs[i].shape());
                    return bf16 ? cast(s, kBFloat16) : s;
                };
                return {Tensor(), in.needs(1) ? back(where(c, g, zero), 1) : Tensor(),
                        in.needs(2) ? back(where(c, zero, g), 2) : Tensor()};
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
    const AllocContext context(op, a.shape());
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using S = select_t<T>;
        // An integer value as it is (an int64 keeps all 64 bits), a floating one converted
        // (into int64 truncated; check_fill_value made sure it fits; into bfloat16 through
        // float32, rounding as torch).
        const T fill = value.kind() == kFloat64 ? static_cast<T>(value.to_double()) : static_cast<T>(value.to_int64());
        const S fill_s = static_cast<S>(fill);
        xt::xarray<T> y = xt::xarray<T>::from_shape(a.shape());
        select_into<S>(reinterpret_cast<S*>(y.data()), a.shape(), select_data<bool>(mask), mask.shape(), &fill_s, Shape{},
                       select_data<T>(a), a.shape());
        // The filled positions get no gradient: masked_fill(g, mask, 0), which is also its
        // own gradient.
        return select_result<T>(std::move(y), {a, mask}, "masked_fill",
                                Formula([](const GradArgs& in) -> std::vector<Tensor> {
                                    return {masked_fill(in.grad(), in.inputs[1], 0.0), Tensor()};
                                }),
                                Saves::only_inputs(2u));
    });
}

}  // namespace xgrad
