#pragma once
/// Dropout: inverted dropout, as torch.nn.Dropout.
#include "core/random.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// In training mode each element is zeroed with probability p and the survivors are scaled
/// by 1/(1-p), so the expected value is unchanged; in eval mode (or p = 0) it is the identity.
/// y = x ⊙ m / (1-p), m ~ Bernoulli(1-p) drawn from `gen` in x's shape (one uniform draw per
/// element, row-major: the same seed gives the same mask). The gradient is m / (1-p).
/// p must be in [0, 1). Prints as `Dropout(p=0.5, inplace=False)`.
class Dropout : public Module, public Callable<Dropout> {
public:
    /// Draws masks from the default generator of the thread that runs forward (not of the one
    /// that built the module), so a model may be built on one thread and trained on another.
    explicit Dropout(double p = 0.5);
    /// Draws masks from `gen`, which must outlive the module; sharing it between threads
    /// that run forward at the same time is the caller's to synchronise.
    Dropout(double p, Generator& gen);

    Tensor forward(const Tensor& x);

    double p() const { return m_p; }
    std::string extra_repr() const override;

private:
    double m_p;
    Generator* m_gen;  ///< null: the calling thread's default generator
};

}  // namespace xgrad::nn
