#pragma once
/// Recurrent layers as torch.nn's: RNN, GRU and LSTM over whole sequences, and their one-step
/// cells RNNCell, GRUCell and LSTMCell, with torch's arguments, parameter names, shapes, gate
/// order, initialisation and return values, so that torch's state_dict loads unchanged.
///
///   torch:  gru = nn.GRU(10, 20, num_layers=2, batch_first=True)
///           out, h_n = gru(x, h0)
///   xgrad:  auto gru = std::make_shared<nn::GRU>(nn::GRUOptions(10, 20).num_layers(2).batch_first(true));
///           auto [out, h_n] = (*gru)(x, h0);
///
/// Variable-length batches (torch's pack_padded_sequence / pad_packed_sequence, d2l's valid
/// lengths) take the lengths directly: `(*gru)(x, h0, lengths)`, lengths int64 (batch,), each in
/// [0, T]. Sequence b then stops at its length: h_n is its state after step lengths[b] − 1 (h0
/// when the length is 0), its outputs past the length are 0, and the reverse direction starts
/// at its own last valid step, as torch's packed sequences give.
#include <cstddef>
#include <string>
#include <tuple>

#include "core/random.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// Which recurrence a layer runs: its gates per step (1, 3 or 4 blocks of hidden_size rows in
/// weight_ih and weight_hh) and its step arithmetic.
enum class RecurrentKind { rnn_tanh, rnn_relu, gru, lstm };

/// The options of RNN, GRU and LSTM, as LibTorch's RNNOptions / GRUOptions / LSTMOptions:
///   nn::GRU gru(nn::GRUOptions(10, 20).num_layers(2).dropout(0.1).bidirectional(true));
/// dropout is applied to the outputs of every layer but the last, in training mode only, and
/// must lie in [0, 1]. nonlinearity ("tanh" or "relu") is read by RNN only; proj_size (below
/// hidden_size) by LSTM only, RNN and GRU refuse a nonzero one as torch does.
struct RecurrentOptions {
    RecurrentOptions(SizeArg input_size, SizeArg hidden_size)
        : m_input_size(input_size.get("RecurrentOptions", "input_size")),
          m_hidden_size(hidden_size.get("RecurrentOptions", "hidden_size")) {}
    XGRAD_SIZE_ARG(RecurrentOptions, input_size, 0);
    XGRAD_SIZE_ARG(RecurrentOptions, hidden_size, 0);
    XGRAD_SIZE_ARG(RecurrentOptions, num_layers, 1);
    XGRAD_ARG(RecurrentOptions, std::string, nonlinearity, "tanh");
    XGRAD_BOOL_ARG(RecurrentOptions, bias, true);
    XGRAD_BOOL_ARG(RecurrentOptions, batch_first, false);
    XGRAD_ARG(RecurrentOptions, double, dropout, 0.0);
    XGRAD_BOOL_ARG(RecurrentOptions, bidirectional, false);
    /// LSTM only: h is projected to proj_size by weight_hr (0: no projection, as torch).
    XGRAD_SIZE_ARG(RecurrentOptions, proj_size, 0);
};
using RNNOptions = RecurrentOptions;
using GRUOptions = RecurrentOptions;
using LSTMOptions = RecurrentOptions;

/// What RNN, GRU and LSTM share: the parameters and the loop over layers, directions and steps.
///
/// Parameters, per layer k and direction (suffix "" forward, "_reverse" backward), registered in
/// torch's order: weight_ih_l{k} (G·hidden, in), weight_hh_l{k} (G·hidden, hidden), and with
/// bias bias_ih_l{k}, bias_hh_l{k} (G·hidden), G the number of gates (RNN 1, GRU 3 in the order
/// r, z, n, LSTM 4 in the order i, f, g, o); in = input_size for layer 0, D·hidden_size above
/// (D = 2 when bidirectional). Each is drawn, in that order, uniform in [−1/√hidden, 1/√hidden).
///
/// Shapes: input (T, batch, input_size), or (batch, T, input_size) with batch_first, or an
/// unbatched (T, input_size); h0 (num_layers·D, batch, hidden) (or (num_layers·D, hidden)
/// unbatched), zeros when undefined. output (T, batch, D·hidden) (batch_first: (batch, T, ·)),
/// the last layer's states, forward and reverse halves side by side; h_n (num_layers·D, batch,
/// hidden), row k·D + d for layer k direction d, whatever batch_first.
///
/// The steps: each layer's input products for all steps and all gates are one product
/// (T·batch, in)·(in, G·hidden) up front (with both biases for RNN and LSTM), and each step one
/// product (batch, hidden)·(hidden, G·hidden) for all gates and the gate arithmetic. A GRU or
/// LSTM direction runs all its steps as one op (recurrent_sequence in core/sequence_ops.hpp,
/// W_hh's gradient one product over all steps); RNN and LSTM with proj_size record each step
/// (LSTM's through lstm_cell). An input with no steps (T = 0) is refused, as torch refuses it.
class RecurrentBase : public Module {
public:
    const RecurrentOptions& options() const { return m_options; }
    RecurrentKind kind() const { return m_kind; }
    std::string extra_repr() const override;

protected:
    RecurrentBase(const char* name, RecurrentKind kind, const RecurrentOptions& options, Generator& gen);
    /// Runs every layer; h0 and c0 may be undefined (zeros), c0 is used by LSTM only. Returns
    /// the output, h_n and (LSTM) c_n.
    std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const Tensor& h0, const Tensor& c0,
                                           const Tensor& lengths);

private:
    RecurrentKind m_kind;
    RecurrentOptions m_options;
};

/// torch.nn.RNN: h_t = act(W_ih·x_t + b_ih + W_hh·h_{t−1} + b_hh), act tanh or relu.
/// Prints as torch's: `RNN(10, 20, num_layers=2)`.
class RNN : public RecurrentBase, public Callable<RNN> {
public:
    RNN(SizeArg input_size, SizeArg hidden_size, SizeArg num_layers = 1, Generator& gen = default_generator());
    explicit RNN(const RNNOptions& options, Generator& gen = default_generator());
    /// (output, h_n); see RecurrentBase for the shapes and lengths.
    std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0 = Tensor(),
                                       const Tensor& lengths = Tensor());
};

/// torch.nn.GRU, gates r, z, n:
///   r = σ(W_ir·x + b_ir + W_hr·h + b_hr),  z = σ(W_iz·x + b_iz + W_hz·h + b_hz),
///   n = tanh(W_in·x + b_in + r ⊙ (W_hn·h + b_hn)),  h' = (1 − z) ⊙ n + z ⊙ h.
/// Prints as torch's: `GRU(10, 20, num_layers=2)`.
class GRU : public RecurrentBase, public Callable<GRU> {
public:
    GRU(SizeArg input_size, SizeArg hidden_size, SizeArg num_layers = 1, Generator& gen = default_generator());
    explicit GRU(const GRUOptions& options, Generator& gen = default_generator());
    /// (output, h_n); see RecurrentBase for the shapes and lengths.
    std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0 = Tensor(),
                                       const Tensor& lengths = Tensor());
};

/// torch.nn.LSTM, gates i, f, g, o:
///   i = σ(·), f = σ(·), g = tanh(·), o = σ(·) of W_i·x + b_i + W_h·h + b_h's four blocks,
///   c' = f ⊙ c + i ⊙ g,  h' = o ⊙ tanh(c').
/// The state is (h, c), both (num_layers·D, batch, hidden).
///
/// With proj_size P > 0 (torch's projections, P < hidden): h' = W_hr·(o ⊙ tanh(c')), of size
/// P, with one more parameter per layer and direction, weight_hr_l{k} (P, hidden), registered
/// and drawn after the biases; weight_hh_l{k} is (4·hidden, P), the layers above the first take
/// D·P inputs, h0, h_n and the output carry P per direction and c0, c_n keep hidden. Such a
/// layer runs its steps as ops (lstm_cell and a product each), not as one fused op.
/// Prints as torch's: `LSTM(10, 20, num_layers=2)`, `LSTM(10, 20, proj_size=5)`.
class LSTM : public RecurrentBase, public Callable<LSTM> {
public:
    LSTM(SizeArg input_size, SizeArg hidden_size, SizeArg num_layers = 1, Generator& gen = default_generator());
    explicit LSTM(const LSTMOptions& options, Generator& gen = default_generator());
    /// (output, (h_n, c_n)), as LibTorch's; hx = (h0, c0), both undefined (zeros) or both given.
    std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                           const std::tuple<Tensor, Tensor>& hx = {},
                                                           const Tensor& lengths = Tensor());
    /// The same with the state given apart: `(*lstm)(x, h0, c0)` (braces do not pass through
    /// the call operator).
    std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input, const Tensor& h0, const Tensor& c0,
                                                           const Tensor& lengths = Tensor());
};

/// The options of the cells, as LibTorch's RNNCellOptions / GRUCellOptions / LSTMCellOptions;
/// nonlinearity ("tanh" or "relu") is read by RNNCell only.
struct RecurrentCellOptions {
    RecurrentCellOptions(SizeArg input_size, SizeArg hidden_size)
        : m_input_size(input_size.get("RecurrentCellOptions", "input_size")),
          m_hidden_size(hidden_size.get("RecurrentCellOptions", "hidden_size")) {}
    XGRAD_SIZE_ARG(RecurrentCellOptions, input_size, 0);
    XGRAD_SIZE_ARG(RecurrentCellOptions, hidden_size, 0);
    XGRAD_BOOL_ARG(RecurrentCellOptions, bias, true);
    XGRAD_ARG(RecurrentCellOptions, std::string, nonlinearity, "tanh");
};
using RNNCellOptions = RecurrentCellOptions;
using GRUCellOptions = RecurrentCellOptions;
using LSTMCellOptions = RecurrentCellOptions;

/// What the cells share: one step of the layer's recurrence, parameters weight_ih (G·hidden,
/// input_size), weight_hh (G·hidden, hidden), bias_ih, bias_hh (G·hidden), drawn in that order
/// uniform in [−1/√hidden, 1/√hidden). Shapes: input (batch, input_size) or unbatched
/// (input_size); h (batch, hidden) or (hidden), zeros when undefined.
class RecurrentCellBase : public Module {
public:
    const RecurrentCellOptions& options() const { return m_options; }
    RecurrentKind kind() const { return m_kind; }
    std::string extra_repr() const override;

protected:
    RecurrentCellBase(const char* name, RecurrentKind kind, const RecurrentCellOptions& options, Generator& gen);
    /// One step: (h', c'), c' undefined but for LSTMCell.
    std::tuple<Tensor, Tensor> step(const Tensor& input, const Tensor& h, const Tensor& c);

private:
    RecurrentKind m_kind;
    RecurrentCellOptions m_options;
};

/// torch.nn.RNNCell: h' = act(W_ih·x + b_ih + W_hh·h + b_hh). Prints `RNNCell(3, 4)`.
class RNNCell : public RecurrentCellBase, public Callable<RNNCell> {
public:
    RNNCell(SizeArg input_size, SizeArg hidden_size, BoolArg bias = true, Generator& gen = default_generator());
    explicit RNNCell(const RNNCellOptions& options, Generator& gen = default_generator());
    Tensor forward(const Tensor& input, const Tensor& h = Tensor());
};

/// torch.nn.GRUCell: one GRU step (see GRU). Prints `GRUCell(3, 4)`.
class GRUCell : public RecurrentCellBase, public Callable<GRUCell> {
public:
    GRUCell(SizeArg input_size, SizeArg hidden_size, BoolArg bias = true, Generator& gen = default_generator());
    explicit GRUCell(const GRUCellOptions& options, Generator& gen = default_generator());
    Tensor forward(const Tensor& input, const Tensor& h = Tensor());
};

/// torch.nn.LSTMCell: one LSTM step (see LSTM); returns (h', c'). Prints `LSTMCell(3, 4)`.
class LSTMCell : public RecurrentCellBase, public Callable<LSTMCell> {
public:
    LSTMCell(SizeArg input_size, SizeArg hidden_size, BoolArg bias = true, Generator& gen = default_generator());
    explicit LSTMCell(const LSTMCellOptions& options, Generator& gen = default_generator());
    std::tuple<Tensor, Tensor> forward(const Tensor& input, const std::tuple<Tensor, Tensor>& hx = {});
    /// The same with the state given apart: `cell(x, h, c)`.
    std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h, const Tensor& c);
};

}  // namespace xgrad::nn
