#pragma once
/// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ (torch 1.13).
#include <vector>

#include "core/tensor.hpp"

namespace xgrad::optim {

/// Scales the gradients of `parameters` in place so that their joint norm is at most max_norm,
/// and returns the joint norm from before the scaling:
///
///   total = ‖(‖g₁‖, ‖g₂‖, …)‖   (p-norms, norm_type p; for p = ∞ the largest |gᵢⱼ|)
///   gᵢ ← gᵢ · min(1, max_norm / (total + 1e-6))
///
/// Parameters without a gradient are skipped; with none at all the result is 0. A NaN gradient
/// makes the total NaN (and every gradient NaN), as torch. norm_type is read as torch's norms
/// read p, through float32: 1e300 is INFINITY. Throws for max_norm < 0 or NaN, and for a
/// norm_type that is NaN, <= 0 or rounds to 0 in float32; max_norm = INFINITY never clips.
double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0);

}  // namespace xgrad::optim
