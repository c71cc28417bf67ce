#pragma once
/// The ops of the recurrent layers' loops (nn/rnn.hpp): torch.unbind, to hand out the steps, and
/// the fused GRU and LSTM steps.
#include <vector>

#include "core/tensor.hpp"

namespace xgrad {

/// torch.unbind: the slices of `a` along `axis`, each without that axis, as one op with one
/// output per slice (any floating dtype; int64 and bool without gradient). Its gradient is
/// stack(grads, axis), zeros for the slices no gradient reached, made once for all of them:
/// a loop over T steps costs O(T) in backward, where T slice()s would each send back a zero
/// tensor of a's whole shape. Differentiable again (stack's gradient is unbind's forward).
std::vector<Tensor> unbind(const Tensor& a, long axis = 0);

/// One GRU step's gate arithmetic, fused (torch's gate order r, z, n):
///   r = σ(gi_r + gh_r),  z = σ(gi_z + gh_z),  n = tanh(gi_n + r ⊙ gh_n),  h' = n + z ⊙ (h − n)
/// from the input part gi = x·W_ihᵀ + b_ih and the hidden part gh = h·W_hhᵀ + b_hh.
/// Shapes: gi, gh (batch, 3·hidden), h (batch, hidden) → h' (batch, hidden); one floating dtype.
/// One pass forward, which keeps r, z and n when it records a graph; the backward is one pass
/// over them (an op of its own), differentiable again (its gradient recomputes the gates in ops).
Tensor gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h);

/// One LSTM step's gate arithmetic, fused (torch's gate order i, f, g, o), from the summed
/// pre-activations a = x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh:
///   c' = σ(a_f) ⊙ c + σ(a_i) ⊙ tanh(a_g),  h' = σ(a_o) ⊙ tanh(c').
/// Shapes: a (batch, 4·hidden), c (batch, hidden) → (batch, 2·hidden) holding [h' | c'] (one
/// op has one output: slice the halves). The forward keeps the gates and tanh(c') when it records
/// a graph, and the backward is one pass over them, differentiable again.
Tensor lstm_cell(const Tensor& a, const Tensor& c);

}  // namespace xgrad
