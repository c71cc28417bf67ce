#pragma once
/// Finite-difference check of a function's gradients, as torch.autograd.gradcheck.
///
/// Every input is converted to float64. The analytic gradient is the backward of the
/// non-uniform scalar sum(f(x) ⊙ R), R a fixed random tensor (a plain sum would hide errors
/// that cancel across outputs). The numeric one is the central difference
/// (L(x + eps) − L(x − eps)) / 2eps for every element of every input that requires grad.
/// An element passes when |analytic − numeric| ≤ atol + rtol·|numeric|.
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace xgrad {

struct GradcheckOptions {
    double eps = 1e-6;
    double atol = 1e-5;
    double rtol = 1e-3;
    std::uint64_t seed = 0;  ///< seed of the random weighting R
    std::string name = "f";  ///< what the report calls the function
};

struct GradcheckResult {
    bool passed = true;
    /// Empty on success; otherwise names the function, the input, the worst element's index
    /// and its analytic and numeric values.
    std::string report;
    explicit operator bool() const { return passed; }
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Checks `f` at `inputs`. Inputs that are floating-point and have requires_grad set are
/// checked; the others (indices, masks) are passed through unchanged.
GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

/// Checks `f`'s second derivatives, as torch.autograd.gradgradcheck: gradcheck of the function
/// (inputs, v) -> the gradients of sum(f(inputs) ⊙ v) with respect to the checked inputs, made
/// by autograd::grad with create_graph, v a fixed random tensor of f's output shape that is
/// itself checked. So every op on the way must have a gradient that is differentiable again
/// (one that is not throws, naming itself, and the check reports it).
GradcheckResult gradgradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {});

}  // namespace xgrad
