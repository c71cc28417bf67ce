#include "dropout.hpp"

#include <cmath>

#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

namespace {
double checked_p(double p) {
    if (!(p >= 0.0 && p < 1.0)) throw Error(fmt::format("Dropout: p must be in [0, 1), got {}", p));
    return p;
}
}  // namespace

Dropout::Dropout(double p) : Module("Dropout"), m_p(checked_p(p)), m_gen(nullptr) {}

Dropout::Dropout(double p, Generator& gen) : Module("Dropout"), m_p(checked_p(p)), m_gen(&gen) {}

Tensor Dropout::forward(const Tensor& x) {
    return as_call("Dropout", [&]() -> Tensor {
        if (!is_training() || m_p == 0.0) return x;
        // keep where u >= p, so that P(keep) = 1 - p; the scaled mask is a constant of the graph.
        Generator& gen = m_gen ? *m_gen : default_generator();
        return x * dropout_mask(x.shape(), m_p, x.dtype(), gen);
    });
}

std::string Dropout::extra_repr() const { return fmt::format("p={}, inplace=False", python_float(m_p)); }

}  // namespace xgrad::nn
