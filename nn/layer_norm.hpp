#pragma once
/// Layer normalisation, as torch.nn.LayerNorm.
#include <initializer_list>

#include "nn/module.hpp"

namespace xgrad::nn {

/// y = (x − mean) / √(var + eps) ⊙ weight + bias, with the mean and the biased variance taken
/// over the last len(normalized_shape) axes of x.
/// Shapes: x (..., *normalized_shape) → same; weight and bias normalized_shape, initialised to
/// 1 and 0 (only when elementwise_affine; bias only when bias too, as torch ≥ 2.1's
/// LayerNorm(C, bias=False) and nanoGPT's LayerNorm(ndim, bias)). The core op layer_norm, fused.
/// Prints as `LayerNorm((32,), eps=1e-05, elementwise_affine=True)` (bias or not, as torch 2.1).
class LayerNorm : public Module, public Callable<LayerNorm> {
public:
    /// normalized_shape as torch's: a list ({C}, {T, C}, x.shape() entries of any integer
    /// type) or one integer (`LayerNorm(128)`); every size positive. The arguments are torch
    /// 2.1's, in its order: LayerNorm(C, 1e-5, true, /*bias=*/false) is nanoGPT's
    /// LayerNorm(C, bias=False).
    explicit LayerNorm(const IntList& normalized_shape, double eps = 1e-5, BoolArg elementwise_affine = true,
                       BoolArg bias = true);
    /// The braced form, chosen over reading `LayerNorm({32})` as a copy of LayerNorm(32).
    explicit LayerNorm(std::initializer_list<IntList::Entry> normalized_shape, double eps = 1e-5,
                       BoolArg elementwise_affine = true, BoolArg bias = true)
        : LayerNorm(IntList(normalized_shape), eps, elementwise_affine, bias) {}
    /// (eps only floating-point, so that `LayerNorm({T, C})` cannot read as LayerNorm(T, eps = C))
    template <class I, class E = double, std::enable_if_t<is_index_v<I> && std::is_floating_point_v<E>, int> = 0>
    explicit LayerNorm(I normalized_shape, E eps = 1e-5, BoolArg elementwise_affine = true, BoolArg bias = true)
        : LayerNorm(IntList{normalized_shape}, eps, elementwise_affine, bias) {}
    /// A bool where eps goes (nanoGPT's LayerNorm(ndim, bias) read as torch's LayerNorm(ndim,
    /// eps)) stops here with one line saying what to write.
    template <class S, class B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
    LayerNorm(const S&, B, BoolArg = true, BoolArg = true) : LayerNorm(IntList{1}) {
        static_assert(!sizeof(S*),
                      "nn::LayerNorm(normalized_shape, eps, elementwise_affine, bias): the second argument is eps, "
                      "as torch's; for nanoGPT's LayerNorm(ndim, bias) write nn::LayerNorm(ndim, 1e-5, true, bias)");
    }
    template <class B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
    LayerNorm(std::initializer_list<IntList::Entry> s, B b, BoolArg = true, BoolArg = true)
        : LayerNorm(IntList(s), b) {}
    /// Anything else as normalized_shape (128.0, a string, a vector of doubles) stops here,
    /// with one line saying what is wanted instead of a list of candidates.
    template <class T, std::enable_if_t<!is_index_v<std::decay_t<T>> && !std::is_convertible_v<T, IntList> &&
                                            !std::is_base_of_v<Module, std::decay_t<T>>,
                                        int> = 0>
    explicit LayerNorm(T&&, double = 1e-5, BoolArg = true, BoolArg = true) : LayerNorm(IntList{1}) {
        static_assert(!sizeof(T*),
                      "nn::LayerNorm(normalized_shape): normalized_shape is an integer (LayerNorm(128)) or a "
                      "list of integers (LayerNorm({T, C}), LayerNorm(x.shape())), as torch's");
    }

    Tensor forward(const Tensor& x);
    /// forward(x + residual) as one op (core add_layer_norm), for a residual block's AddNorm:
    /// residual must have x's shape and dtype.
    Tensor forward_residual(const Tensor& x, const Tensor& residual);

    const Shape& normalized_shape() const { return m_shape; }
    double eps() const { return m_eps; }
    /// The parameters themselves (the handles alias them); undefined when built without
    /// elementwise_affine (bias also without bias).
    Tensor weight() const { return m_affine ? parameter("weight") : Tensor(); }
    Tensor bias() const { return m_bias ? parameter("bias") : Tensor(); }
    std::string extra_repr() const override;

private:
    void check_input(const char* arg, const Tensor& x) const;

    Shape m_shape;
    double m_eps;
    bool m_affine;
    bool m_bias;  // a bias parameter: elementwise_affine and bias
};

}  // namespace xgrad::nn
