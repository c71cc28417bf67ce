// Selection by a bool mask: where and masked_fill. Any dtype forward; float inputs get gradients.
#include "core/broadcast.hpp"
#include "core/fill_value.hpp"
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
        xt::xarray<T> y = xt::where(values<bool>(cond), values<T>(a), values<T>(b));
        return make_any_result<T>(
            std::move(y), {cond, a, b}, "where",
            Formula([](const GradArgs& in) -> std::vector<Tensor> {
                // a gets g where cond, b elsewhere (torch's where(cond, g, 0) and where(cond, 0, g),
                // written as masked_fill, the same selection), each summed back to its shape.
                const Tensor &c = in.inputs[0], &g = in.grad();
                return {Tensor(), in.needs(1) ? sum_to(masked_fill(g, logical_not(c), 0.0), in.inputs[1].shape()) : Tensor(),
                        in.needs(2) ? sum_to(masked_fill(g, c, 0.0), in.inputs[2].shape()) : Tensor()};
            }),
            Saves::only_inputs(1u));
    });
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) { return masked_fill("masked_fill", a, mask, value); }

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
        xt::xarray<T> y = xt::where(values<bool>(mask), fill, values<T>(a));
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
