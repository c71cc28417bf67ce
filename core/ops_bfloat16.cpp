// Conversions to and from bfloat16 (Tensor::to), with their gradients. Rounding is torch's: a
// float32 rounds to nearest even (the vectorised loops of runtime/bfloat16.hpp); a float64 or an
// int64 goes through float32 first, so it may round twice, as c10::BFloat16(float(x)) does.
#include "core/ops.hpp"
#include "core/ops_util.hpp"

namespace xgrad {

namespace {

// Arrays of bfloat16 are arrays of their bits (dtype.hpp asserts the layout).
std::uint16_t* bits(bfloat16* p) { return reinterpret_cast<std::uint16_t*>(p); }
const std::uint16_t* bits(const bfloat16* p) { return reinterpret_cast<const std::uint16_t*>(p); }

template <class From> xt::xarray<bfloat16> to_bf16(const xt::xarray<From>& x) {
    auto y = xt::xarray<bfloat16>::from_shape(x.shape());
    if constexpr (std::is_same_v<From, float>) {
        bf16_from_float(x.data(), bits(y.data()), x.size());
    } else {
        const From* in = x.data();
        bfloat16* out = y.data();
        for (std::size_t i = 0, n = x.size(); i < n; ++i) out[i] = bfloat16(static_cast<float>(in[i]));
    }
    return y;
}

template <class To> xt::xarray<To> from_bf16(const xt::xarray<bfloat16>& x) {
    auto y = xt::xarray<To>::from_shape(x.shape());
    if constexpr (std::is_same_v<To, float>) {
        bf16_to_float(bits(x.data()), y.data(), x.size());
    } else {
        check_convertible<To>("cast", x.data(), x.size());  // NaN, ±inf and out-of-range values into int64
        const bfloat16* in = x.data();
        To* out = y.data();
        for (std::size_t i = 0, n = x.size(); i < n; ++i) out[i] = static_cast<To>(in[i]);
    }
    return y;
}

// A cast's gradient: g cast back to the input's dtype (to bfloat16 rounding to nearest even,
// from it exactly), as torch's _to_copy_backward.
Formula back_to_input() {
    return [](const GradArgs& in) -> std::vector<Tensor> { return {cast(in.grad(), in.inputs[0].dtype())}; };
}

}  // namespace

Tensor cast_bfloat16(const Tensor& a, Dtype d) {
    if (a.dtype() == d) return a;
    const AllocContext context("cast", a.shape());
    if (d == kBFloat16) {
        return dispatch_all(a.dtype(), [&](auto tag) {
            using From = typename decltype(tag)::type;
            if constexpr (std::is_same_v<From, bfloat16>) {
                return a;  // not reached: same dtype returned above
            } else {
                xt::xarray<bfloat16> y;
                if constexpr (std::is_same_v<From, bool>) y = to_bf16(xt::xarray<bool>(bool_values(a)));
                else y = to_bf16(values<From>(a));
                if constexpr (!std::is_floating_point_v<From>) {
                    return make_leaf(Storage(std::move(y)));  // int64 and bool carry no gradient
                } else {
                    // d(bf16(x))/dx = 1: the bfloat16 gradient goes back to the source type (exact),
                    // by a cast, whose own gradient is the cast back.
                    return make_result<bfloat16>(std::move(y), {a}, "cast", back_to_input(), Saves::none());
                }
            }
        });
    }
    const auto& x = values<bfloat16>(a);
    return dispatch_all(d, [&](auto tag) {
        using To = typename decltype(tag)::type;
        if constexpr (std::is_same_v<To, bfloat16>) {
            return a;  // not reached
        } else {
            xt::xarray<To> y = from_bf16<To>(x);
            if constexpr (!std::is_floating_point_v<To>) {
                return make_leaf(Storage(std::move(y)));
            } else {
                // The gradient comes back to the bfloat16 input rounded to nearest even, as torch's.
                return make_result<To>(std::move(y), {a}, "cast", back_to_input(), Saves::none());
            }
        }
    });
}

}  // namespace xgrad
