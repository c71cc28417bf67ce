#pragma once
/// Linear: the affine map on the last axis, as torch.nn.Linear.
#include <cstddef>

#include "core/random.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// y = x·Wᵀ + b, acting on the last axis of x.
/// Shapes: x (..., in_features) → y (..., out_features), any rank ≥ 1;
/// weight (out_features, in_features), bias (out_features,).
/// Initialised as PyTorch: weight, then bias, uniform in [-1/√in_features, 1/√in_features),
/// drawn from `gen`. Prints as `Linear(in_features=3, out_features=4, bias=True)`.
class Linear : public Module, public Callable<Linear> {
public:
    Linear(SizeArg in_features, SizeArg out_features, BoolArg bias = true, Generator& gen = default_generator());

    Tensor forward(const Tensor& x);

    /// The weight parameter itself (out_features, in_features): the handle aliases it.
    const Tensor& weight() const { return parameter("weight"); }
    /// The bias parameter itself (aliases), or an undefined tensor for Linear(..., bias = false).
    Tensor bias() const { return m_has_bias ? parameter("bias") : Tensor(); }
    std::size_t in_features() const { return m_in; }
    std::size_t out_features() const { return m_out; }

    std::string extra_repr() const override;

private:
    std::size_t m_in;
    std::size_t m_out;
    bool m_has_bias;
};

}  // namespace xgrad::nn
