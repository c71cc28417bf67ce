// pow with a number as the base and a tensor as the exponent (torch.pow(10000, x),
// torch.pow(2, arange(3))), and the gradient to the exponent that it shares with
// pow(Tensor, Tensor) (ops_elementwise.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/creation.hpp"
#include "core/dispatch.hpp"
#include "core/grad_ops.hpp"
#include "core/int_arith.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/runtime/alloc.hpp"

namespace xgrad {

namespace {
// g·y·ln b where the base b is 0: torch takes 0 where the exponent e ≥ 0 (y·ln 0 would be 0·-inf
// or 1·-inf); elsewhere y·ln 0 is -inf (e < 0, y = inf) or NaN (a NaN e). Constants of e,
// written as such, so that a second derivative there is 0 rather than 0·inf = NaN.
Tensor at_zero_base(const Tensor& g, const Tensor& exponent) {
    return g * zeros_like(g).masked_fill(lt(exponent, 0.0), -INFINITY).masked_fill(ne(exponent, exponent), NAN);
}
}  // namespace

Tensor pow_exponent_backward(const Tensor& g, const Tensor& y, const Tensor& exponent, double base) {
    if (base == 0.0) return at_zero_base(g, exponent);
    return g * (y * std::log(base));
}

Tensor pow_exponent_backward(const Tensor& g, const Tensor& y, const Tensor& exponent, const Tensor& base) {
    // ln b taken of 1 where b is 0, so that the branch where() drops holds no inf to multiply a
    // zero gradient into NaN in a second derivative.
    const Tensor zero_base = eq(base, 0.0);
    const Tensor ln_b = log(where(zero_base, ones({}, base.dtype()), base));
    return where(zero_base, at_zero_base(g, exponent), g * (y * ln_b));
}

Tensor pow(Scalar base_number, const Tensor& exponent) {
    check_defined("pow", exponent, "exponent");
    if (!is_floating(exponent.dtype())) {
        // torch's result_type of the number and the integer tensor: a floating base computes in
        // float32, an integer or bool one in int64 (bool with bool is bool, which pow refuses).
        if (base_number.kind() == kFloat64) return pow(base_number, cast(exponent, kFloat32));
        if (base_number.kind() == kBool && exponent.dtype() == kBool)
            throw Error("pow: a bool base to a bool tensor's power is not supported (as in torch); write the base as 0 or 1");
        const std::int64_t b = base_number.to_int64();
        const AllocContext context("pow", exponent.shape());
        xt::xarray<std::int64_t> r = values<std::int64_t>(cast(exponent, kInt64));
        std::transform(r.begin(), r.end(), r.begin(), [b](std::int64_t e) { return wrapping_pow(b, e); });
        return make_leaf(Storage(std::move(r)));
    }
    const double base = base_number.to_double();
    const AllocContext context("pow", exponent.shape());
    return dispatch_floating("pow", exponent.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T b = static_cast<T>(base);
        const xt::xarray<T>& e = values<T>(exponent);
        xt::xarray<T> y = xt::xarray<T>::from_shape(e.shape());
        const T* pe = e.data();
        T* py = y.data();
        for (std::size_t i = 0; i < e.size(); ++i) py[i] = std::pow(b, pe[i]);
        Formula formula = [base](const GradArgs& in) -> std::vector<Tensor> {
            return {pow_exponent_backward(in.grad(), in.output, in.inputs[0], base)};
        };
        return make_result<T>(std::move(y), {exponent}, "pow", std::move(formula),
                              base == 0.0 ? Saves::only_inputs(1u) : Saves::only_output());
    });
}

}  // namespace xgrad
