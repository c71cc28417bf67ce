#pragma once
/// Activation modules, for layers whose printed tree names them (d2l's PositionWiseFFN).
#include "nn/module.hpp"

namespace xgrad::nn {

/// max(x, 0) elementwise, as torch.nn.ReLU. Prints as `ReLU()`.
class ReLU : public Module, public Callable<ReLU> {
public:
    ReLU() : Module("ReLU") {}
    Tensor forward(const Tensor& x);
};

}  // namespace xgrad::nn
