// Selection by a bool mask: where and masked_fill. Any dtype forward; float inputs get gradients.
#include "core/broadcast.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"

namespace xgrad {

namespace {

void check_bool(const char* op, const char* what, const Tensor& t) {
    if (t.dtype() != kBool)
        throw Error(fmt::format("{}: {} must be a bool tensor, got {} (make one with a comparison such as gt)",
                                op, what, dtype_name(t.dtype())));
}

}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
    check_bool("where", "cond", cond);
    check_same_dtype("where", a, b);
    // bfloat16 selects through float32: both conversions are exact, and cast carries the gradient.
    if (a.dtype() == kBFloat16) return cast(where(cond, cast(a, kFloat32), cast(b, kFloat32)), kBFloat16);
    const Shape shape = broadcast_shapes("where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
    const AllocContext context("where", shape);
    return dispatch_computable("where", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = xt::where(values<bool>(cond), values<T>(a), values<T>(b));
        return make_any_result<T>(
            std::move(y), {cond, a, b}, "where",
            floating_backward("where", [](auto gtag, Node& self, const Storage& gs) {
                using G = typename decltype(gtag)::type;
                const auto& c = values<bool>(self.parents[0]);
                const auto& g = grad_as<G>(gs);
                // Each branch's gradient has the result's shape, then sums back to its input.
                if (needs_grad(self, 1)) {
                    const Tensor& ta = self.parents[1];
                    accumulate<G>("where", ta, sum_to<G>(xt::xarray<G>(xt::where(c, g, G(0))), ta.shape()));
                }
                if (needs_grad(self, 2)) {
                    const Tensor& tb = self.parents[2];
                    accumulate<G>("where", tb, sum_to<G>(xt::xarray<G>(xt::where(c, G(0), g)), tb.shape()));
                }
            }), Saves::only_inputs(1u));
    });
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
    check_bool("masked_fill", "mask", mask);
    if (!broadcastable_to(mask.shape(), a.shape()))
        throw Error(fmt::format("masked_fill: mask of shape {} cannot be broadcast to the input's shape {}",
                                shape_str(mask.shape()), shape_str(a.shape())));
    // As torch: the fill value rounds to bfloat16 (through float32, exact for the kept values).
    if (a.dtype() == kBFloat16) return cast(masked_fill(cast(a, kFloat32), mask, value), kBFloat16);
    const AllocContext context("masked_fill", a.shape());
    return dispatch_computable("masked_fill", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // Into int64 the value must fit (NaN or 1e30 would be undefined behaviour, as a cast).
        T fill;
        if constexpr (std::is_same_v<T, std::int64_t>) fill = checked_int64("masked_fill", "value", value);
        else fill = static_cast<T>(value);
        xt::xarray<T> y = xt::where(values<bool>(mask), fill, values<T>(a));
        return make_any_result<T>(std::move(y), {a, mask}, "masked_fill",
                                  floating_backward("masked_fill", [](auto gtag, Node& self, const Storage& gs) {
                                      using G = typename decltype(gtag)::type;
                                      const auto& m = values<bool>(self.parents[1]);
                                      accumulate<G>("masked_fill", self.parents[0],
                                                    xt::xarray<G>(xt::where(m, G(0), grad_as<G>(gs))));
                                  }), Saves::only_inputs(2u));
    });
}

}  // namespace xgrad
