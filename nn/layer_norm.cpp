#include "layer_norm.hpp"

#include <algorithm>
#include <cmath>

#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"
#include "nn/functional.hpp"

namespace xgrad::nn {

LayerNorm::LayerNorm(const IntList& normalized_shape, double eps, BoolArg elementwise_affine, BoolArg bias)
    : Module("LayerNorm"), m_eps(eps), m_affine(elementwise_affine), m_bias(elementwise_affine && bias) {
    normalized_shape.check("LayerNorm");
    if (normalized_shape.empty() ||
        std::any_of(normalized_shape.begin(), normalized_shape.end(), [](long s) { return s <= 0; }))
        throw Error(fmt::format("LayerNorm: normalized_shape must be non-empty with positive sizes, got ({})",
                                fmt::join(normalized_shape, ", ")));
    m_shape = normalized_shape.shape("LayerNorm");
    // An infinite eps would scale every output to 0 without a word.
    if (!(eps > 0) || !std::isfinite(eps))
        throw Error(fmt::format("LayerNorm: eps must be positive and finite, got {}", eps));
    // Running out of memory for the parameters names LayerNorm, not the ones and zeros that make them.
    if (m_affine) as_call("LayerNorm", [&] {
        register_parameter("weight", ones(m_shape));
        if (m_bias) register_parameter("bias", zeros(m_shape));
    });
}

void LayerNorm::check_input(const char* arg, const Tensor& x) const {
    if (!x.defined()) throw Error(fmt::format("LayerNorm: {} is an undefined tensor", arg));
    // x: (..., *normalized_shape); statistics over the last k axes
    const std::size_t k = m_shape.size();
    if (x.shape().size() < k || !std::equal(m_shape.begin(), m_shape.end(), x.shape().end() - static_cast<long>(k)))
        throw Error(fmt::format("LayerNorm: {} must end with the normalized shape {}, got shape {}", arg,
                                shape_str(m_shape), shape_str(x.shape())));
    if (m_affine) check_input_dtype("LayerNorm", arg, x, weight().dtype());
}

Tensor LayerNorm::forward(const Tensor& x) {
    return as_call("LayerNorm", [&]() -> Tensor {
        check_input("input", x);
        return layer_norm(x, m_shape, weight(), bias(), m_eps);
    });
}

Tensor LayerNorm::forward_residual(const Tensor& x, const Tensor& residual) {
    check_input("input", x);
    check_input("residual", residual);
    if (residual.shape() != x.shape() || residual.dtype() != x.dtype())
        throw Error(fmt::format("LayerNorm: residual must have the input's shape and dtype, {} {}, got {} {}",
                                shape_str(x.shape()), dtype_name(x.dtype()), shape_str(residual.shape()),
                                dtype_name(residual.dtype())));
    return add_layer_norm(x, residual, m_shape, weight(), bias(), m_eps);
}

std::string LayerNorm::extra_repr() const {
    return fmt::format("{}, eps={}, elementwise_affine={}", shape_str(m_shape), python_float(m_eps),
                       python_bool(m_affine));
}

}  // namespace xgrad::nn
