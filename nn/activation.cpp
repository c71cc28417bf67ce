#include "activation.hpp"

#include "core/ops.hpp"

namespace xgrad::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

}  // namespace xgrad::nn
