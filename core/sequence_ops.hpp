#pragma once
/// Ops for walking a tensor step by step (the recurrent layers' loops): torch.unbind.
#include <vector>

#include "core/tensor.hpp"

namespace xgrad {

/// torch.unbind: the slices of `a` along `axis`, each without that axis, as one op with one
/// output per slice (any floating dtype; int64 and bool without gradient). Its gradient is
/// stack(grads, axis), zeros for the slices no gradient reached, made once for all of them:
/// a loop over T steps costs O(T) in backward, where T slice()s would each send back a zero
/// tensor of a's whole shape. Differentiable again (stack's gradient is unbind's forward).
std::vector<Tensor> unbind(const Tensor& a, long axis = 0);

}  // namespace xgrad

namespace xgrad {

/// One GRU step's gate arithmetic, fused (torch's gate order r, z, n):
///   r = σ(gi_r + gh_r),  z = σ(gi_z + gh_z),  n = tanh(gi_n + r ⊙ gh_n),  h' = n + z ⊙ (h − n)
/// from the input part gi = x·W_ihᵀ + b_ih and the hidden part gh = h·W_hhᵀ + b_hh.
/// Shapes: gi, gh (batch, 3·hidden), h (batch, hidden) → h' (batch, hidden); one floating dtype.
/// One pass forward; the backward is one pass too (an op of its own that recomputes the gates),
/// differentiable again.
Tensor gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h);

/// One LSTM step's gate arithmetic, fused (torch's gate order i, f, g, o), from the summed
/// pre-activations a = x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh:
///   c' = σ(a_f) ⊙ c + σ(a_i) ⊙ tanh(a_g),  h' = σ(a_o) ⊙ tanh(c').
/// Shapes: a (batch, 4·hidden), c (batch, hidden) → (batch, 2·hidden) holding [h' | c'] (one
/// op has one output: slice the halves). Backward one pass, differentiable again.
Tensor lstm_cell(const Tensor& a, const Tensor& c);

}  // namespace xgrad
