#include "activation.hpp"

#include "core/call_context.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

Tensor ReLU::forward(const Tensor& x) { return as_call("ReLU", [&] { return relu(x); }); }

}  // namespace xgrad::nn
