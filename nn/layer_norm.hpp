#pragma once
/// Layer normalisation, as torch.nn.LayerNorm.
#include "nn/module.hpp"

namespace xgrad::nn {

/// y = (x − mean) / √(var + eps) ⊙ weight + bias, with the mean and the biased variance taken
/// over the last len(normalized_shape) axes of x.
/// Shapes: x (..., *normalized_shape) → same; weight and bias normalized_shape, initialised to
/// 1 and 0 (only when elementwise_affine). The core op layer_norm, fused.
/// Prints as `LayerNorm((32,), eps=1e-05, elementwise_affine=True)`.
class LayerNorm : public Module, public Callable<LayerNorm> {
public:
    explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, BoolArg elementwise_affine = true);

    Tensor forward(const Tensor& x);
    /// forward(x + residual) as one op (core add_layer_norm), for a residual block's AddNorm:
    /// residual must have x's shape and dtype.
    Tensor forward_residual(const Tensor& x, const Tensor& residual);

    const Shape& normalized_shape() const { return m_shape; }
    double eps() const { return m_eps; }
    /// The parameters themselves (the handles alias them); undefined when built without
    /// elementwise_affine.
    Tensor weight() const { return m_affine ? parameter("weight") : Tensor(); }
    Tensor bias() const { return m_affine ? parameter("bias") : Tensor(); }
    std::string extra_repr() const override;

private:
    void check_input(const char* arg, const Tensor& x) const;

    Shape m_shape;
    double m_eps;
    bool m_affine;
};

}  // namespace xgrad::nn
