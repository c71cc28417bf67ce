#include "core/sequence_ops.hpp"

#include <fmt/format.h>

#include "core/autograd_function.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"

namespace xgrad {

namespace {

// One node with a.size(axis) outputs: a custom Function, which the engine runs once with every
// output's gradient (materialised as zeros where none arrived).
struct Unbind : autograd::Function<Unbind> {
    static constexpr const char* name = "unbind";
    static autograd::variable_list forward(autograd::AutogradContext* ctx, const Tensor& a, long axis) {
        ctx->saved_data["axis"] = axis;
        const long n = static_cast<long>(a.size(axis));
        autograd::variable_list out;
        out.reserve(static_cast<std::size_t>(n));
        for (long i = 0; i < n; ++i) out.push_back(squeeze(slice(a, axis, i, i + 1), axis));
        return out;
    }
    static autograd::variable_list backward(autograd::AutogradContext* ctx, autograd::variable_list grads) {
        return {stack(grads, ctx->saved_data["axis"].get<long>()), Tensor()};
    }
};

}  // namespace

std::vector<Tensor> unbind(const Tensor& a, long axis) {
    if (!a.defined()) throw Error("unbind: the tensor is undefined");
    const long rank = static_cast<long>(a.dim());
    if (rank == 0 || axis < -rank || axis >= rank)
        throw Error(fmt::format("unbind: axis {} is out of range for a tensor of shape {}", axis, shape_str(a.shape())));
    if (axis < 0) axis += rank;
    if (a.size(axis) == 0) return {};
    return Unbind::apply(a, axis);
}

}  // namespace xgrad
