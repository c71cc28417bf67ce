#include "activation.hpp"

#include <cmath>

#include "core/call_context.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

Tensor ReLU::forward(const Tensor& x) { return as_call("ReLU", [&] { return relu(x); }); }

GELU::GELU(std::string approximate) : Module("GELU"), m_approximate(std::move(approximate)) {
    if (m_approximate != "none" && m_approximate != "tanh")
        throw Error("GELU: approximate must be 'none' or 'tanh', got '" + m_approximate + "'");
}

Tensor GELU::forward(const Tensor& x) {
    return as_call("GELU", [&] {
        if (m_approximate == "none") return gelu(x);
        // torch's tanh form: kBeta = √2·(2/√π)·0.5 = √(2/π), kKappa = 0.044715.
        const double beta = std::sqrt(2.0 / M_PI);
        return x * 0.5 * (tanh((x + x * x * x * 0.044715) * beta) + 1.0);
    });
}

std::string GELU::extra_repr() const { return "approximate='" + m_approximate + "'"; }

}  // namespace xgrad::nn
