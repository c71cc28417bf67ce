#pragma once
/// Drawing from distributions given as tensors, as torch's: multinomial, bernoulli and normal,
/// each from a Generator (the calling thread's default one unless given; core/random.hpp).
/// The in-place forms (t.uniform_, t.normal_, t.bernoulli_) are Tensor's (core/tensor.hpp).
///
/// Not differentiable, as torch's: when an input requires grad the result does too, with a
/// zero gradient to that input (torch's derivative of a draw); multinomial's int64 indices
/// never require grad. Arguments are checked at entry with torch's rules and messages, before
/// anything is drawn, so a refused call leaves the generator where it was.
#include <cstdint>

#include "core/random.hpp"
#include "core/tensor.hpp"

namespace xgrad {

/// `num_samples` category indices (int64) per row of `probs` (1-D [n] → [num_samples], 2-D
/// [rows, n] → [rows, num_samples]), category i drawn with probability probs[i] / sum(probs)
/// (the weights need not sum to 1). Without replacement a category is drawn at most once per
/// row, the later ones in proportion to the weights left. Refused: a probs tensor not 1-D or
/// 2-D or not floating-point, num_samples < 1, a weight that is negative, NaN or inf, a row that
/// sums to 0, and without replacement num_samples above the number of categories of non-zero
/// weight in some row (torch's documented rule).
Tensor multinomial(const Tensor& probs, std::int64_t num_samples, bool replacement = false,
                   Generator& gen = default_generator());

/// 1 with probability p[i] and 0 otherwise, of p's shape and (floating-point) dtype; every p
/// in [0, 1].
Tensor bernoulli(const Tensor& p, Generator& gen = default_generator());
/// 1 with probability p and 0 otherwise, of `like`'s shape and dtype (torch.bernoulli(input, p)).
Tensor bernoulli(const Tensor& like, double p, Generator& gen = default_generator());

/// Normal draws with the given means and standard deviations (broadcast together, as torch's):
/// mean + std · z, z from randn of the result's shape and dtype (mean's, or std's when mean is
/// a number). std >= 0 everywhere (a NaN std is refused); number arguments are finite.
Tensor normal(const Tensor& mean, const Tensor& std, Generator& gen = default_generator());
Tensor normal(const Tensor& mean, double std = 1.0, Generator& gen = default_generator());
Tensor normal(double mean, const Tensor& std, Generator& gen = default_generator());
Tensor normal(double mean, double std, const Shape& shape, TensorOptions opts = {},
              Generator& gen = default_generator());

}  // namespace xgrad
