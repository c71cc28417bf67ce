// pow with a number as the base and a tensor as the exponent: torch.pow(10000, x).
#include <cmath>

#include "core/creation.hpp"
#include "core/dispatch.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/runtime/alloc.hpp"

namespace xgrad {

Tensor pow(double base, const Tensor& exponent) {
    check_defined("pow", exponent, "exponent");
    const AllocContext context("pow", exponent.shape());
    return dispatch_floating("pow", exponent.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T b = static_cast<T>(base);
        const xt::xarray<T>& e = values<T>(exponent);
        xt::xarray<T> y = xt::xarray<T>::from_shape(e.shape());
        const T* pe = e.data();
        T* py = y.data();
        for (std::size_t i = 0; i < e.size(); ++i) py[i] = std::pow(b, pe[i]);
        // torch's pow_backward_exponent: g·(y·ln base). For base 0 torch takes 0 where the
        // exponent is ≥ 0 (y·ln 0 would be 0·-inf there) and y·ln 0 = -inf elsewhere: both
        // constants, so written as such (a product with y would give NaN second derivatives).
        Formula formula = [base](const GradArgs& in) -> std::vector<Tensor> {
            if (base == 0.0) return {in.grad() * zeros_like(in.grad()).masked_fill(lt(in.inputs[0], 0.0), -INFINITY)};
            return {in.grad() * (in.output * std::log(base))};
        };
        return make_result<T>(std::move(y), {exponent}, "pow", std::move(formula),
                              base == 0.0 ? Saves::only_inputs(1u) : Saves::only_output());
    });
}

}  // namespace xgrad
