#include "linear.hpp"

#include <cmath>

#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"
#include "nn/functional.hpp"

namespace xgrad::nn {

Linear::Linear(SizeArg in_features_arg, SizeArg out_features_arg, BoolArg bias, Generator& gen)
    : Module("Linear"),
      m_in(in_features_arg.get("Linear", "in_features")),
      m_out(out_features_arg.get("Linear", "out_features")),
      m_has_bias(bias) {
    const std::size_t in_features = m_in, out_features = m_out;
    if (in_features == 0 || out_features == 0)
        throw Error(fmt::format("Linear: in_features and out_features must be positive, got {} and {}",
                                in_features, out_features));
    // kaiming_uniform_(a=√5) reduces to this bound, the same one PyTorch uses for the bias.
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    // Running out of memory for the parameters names Linear, not the uniform that draws them.
    as_call("Linear", [&] {
        register_parameter("weight", uniform({out_features, in_features}, -bound, bound, kFloat32, gen));
        if (bias) register_parameter("bias", uniform({out_features}, -bound, bound, kFloat32, gen));
    });
}

Tensor Linear::forward(const Tensor& x) {
    return as_call("Linear", [&]() -> Tensor {
        if (x.dim() == 0 || x.shape().back() != m_in)
            throw Error(fmt::format("Linear: input must have last axis in_features = {}, got shape {}", m_in,
                                    shape_str(x.shape())));
        check_input_dtype("Linear", "input", x, weight().dtype());
        return linear(x, weight(), m_has_bias ? bias() : Tensor());
    });
}

std::string Linear::extra_repr() const {
    return fmt::format("in_features={}, out_features={}, bias={}", m_in, m_out, python_bool(m_has_bias));
}

}  // namespace xgrad::nn
