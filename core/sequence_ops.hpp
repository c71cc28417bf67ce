#pragma once
/// The ops of the recurrent layers' loops (nn/rnn.hpp): torch.unbind, to hand out the steps, the
/// fused GRU and LSTM steps, and the fused GRU and LSTM sequences (a whole layer as one op).
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"

namespace xgrad {

/// torch.unbind (ops.hpp says what it returns).
std::vector<Tensor> unbind(const Tensor& a, long axis);

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

/// The recurrence a fused sequence runs.
enum class SequenceCell { gru, lstm };

/// One direction of one GRU or LSTM layer over a whole sequence, as one op (what nn::GRU and
/// nn::LSTM run): every step's hidden product h·W_hhᵀ (+ b_hh) and its fused gate arithmetic
/// (gru_cell's, lstm_cell's), with no op or allocation per step.
///   xi (T, batch, G·hidden): every step's input part of the gates (x·W_ihᵀ + b_ih, for LSTM
///      + b_hh as well), G = 3 (GRU) or 4 (LSTM);
///   h0, c0 (batch, hidden): the initial state (c0 for LSTM only; undefined for GRU);
///   w_hh (G·hidden, hidden); b_hh (G·hidden) or undefined: added to each step's hidden product
///      (GRU's b_hn sits inside r ⊙ (W_hn·h + b_hn), so GRU takes it here);
///   lengths: empty, or one per batch row in [0, T]: row b runs steps t < lengths[b] only, keeps
///      its state after and outputs 0 (torch's packed sequences);
///   reverse: the steps run from t = T − 1 down to 0.
/// Returns {output (T, batch, hidden) indexed by t, h_n (batch, hidden), and for LSTM c_n}.
/// Forward keeps each step's gates and states when it records a graph; the backward is one
/// pass back over the steps with one product per step for dh, and W_hh's gradient as one
/// product over all steps at the end. Under create_graph the backward is written in
/// differentiable ops (the steps' fused backward ops), so the sequence is differentiable twice.
std::vector<Tensor> recurrent_sequence(SequenceCell cell, const Tensor& xi, const Tensor& h0, const Tensor& c0,
                                       const Tensor& w_hh, const Tensor& b_hh,
                                       const std::vector<std::int64_t>& lengths, bool reverse);

}  // namespace xgrad
