#pragma once
/// Activation modules, for layers whose printed tree names them (d2l's PositionWiseFFN,
/// nanoGPT's MLP).
#include <string>

#include "nn/module.hpp"

namespace xgrad::nn {

/// max(x, 0) elementwise, as torch.nn.ReLU. Prints as `ReLU()`.
class ReLU : public Module, public Callable<ReLU> {
public:
    ReLU() : Module("ReLU") {}
    Tensor forward(const Tensor& x);
};

/// GELU elementwise, as torch.nn.GELU: approximate "none" (the default) is the exact x·Φ(x)
/// (the core op gelu); "tanh" is 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), composed of core
/// ops. Any other `approximate` is refused here (torch refuses it at the first forward).
/// Prints as `GELU(approximate='none')`.
class GELU : public Module, public Callable<GELU> {
public:
    explicit GELU(std::string approximate = "none");
    Tensor forward(const Tensor& x);
    const std::string& approximate() const { return m_approximate; }
    std::string extra_repr() const override;

private:
    std::string m_approximate;
};

}  // namespace xgrad::nn
