#include "rnn.hpp"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/creation.hpp"
#include "core/ops.hpp"
#include "core/sequence_ops.hpp"
#include "nn/functional.hpp"

namespace xgrad::nn {

namespace {

std::size_t gates_of(RecurrentKind kind) {
    switch (kind) {
        case RecurrentKind::gru: return 3;
        case RecurrentKind::lstm: return 4;
        default: return 1;
    }
}

RecurrentKind rnn_kind(const char* who, const std::string& nonlinearity) {
    if (nonlinearity == "tanh") return RecurrentKind::rnn_tanh;
    if (nonlinearity == "relu") return RecurrentKind::rnn_relu;
    throw Error(fmt::format("{}: nonlinearity must be \"tanh\" or \"relu\", got \"{}\"", who, nonlinearity));
}

void check_sizes(const char* who, std::size_t input_size, std::size_t hidden_size) {
    if (input_size == 0 || hidden_size == 0)
        throw Error(fmt::format("{}: input_size and hidden_size must be positive, got {} and {}", who, input_size,
                                hidden_size));
}

// Registers weight_ih, weight_hh, bias_ih, bias_hh with `suffix`, drawn in that order as torch
// draws every parameter: uniform in [−1/√hidden, 1/√hidden).
// With proj > 0 (LSTM's proj_size), weight_hh reads the projected state and weight_hr
// (proj, hidden) follows the biases, as torch registers and draws it.
template <class Register>
void make_weights(Register&& reg, const std::string& suffix, std::size_t gates, std::size_t in, std::size_t hidden,
                  bool bias, Generator& gen, std::size_t proj = 0) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
    reg("weight_ih" + suffix, uniform({gates * hidden, in}, -bound, bound, kFloat32, gen));
    reg("weight_hh" + suffix, uniform({gates * hidden, proj ? proj : hidden}, -bound, bound, kFloat32, gen));
    if (bias) {
        reg("bias_ih" + suffix, uniform({gates * hidden}, -bound, bound, kFloat32, gen));
        reg("bias_hh" + suffix, uniform({gates * hidden}, -bound, bound, kFloat32, gen));
    }
    if (proj) reg("weight_hr" + suffix, uniform({proj, hidden}, -bound, bound, kFloat32, gen));
}

// One step of the recurrence from the gates' input part gi = W_ih·x + b_ih and hidden part
// gh = W_hh·h + b_hh, both (batch, G·hidden): (h', c'), c' for LSTM only. The GRU and LSTM gate
// arithmetic is one fused core op each (core/sequence_ops.hpp).
std::pair<Tensor, Tensor> cell_step(RecurrentKind kind, const Tensor& gi, const Tensor& gh, const Tensor& h,
                                    const Tensor& c, std::size_t hidden) {
    switch (kind) {
        case RecurrentKind::rnn_tanh: return {tanh(gi + gh), Tensor()};
        case RecurrentKind::rnn_relu: return {relu(gi + gh), Tensor()};
        case RecurrentKind::gru: return {gru_cell(gi, gh, h), Tensor()};
        case RecurrentKind::lstm: {
            const Tensor hc = lstm_cell(gi + gh, c);  // [h' | c']
            const long H = static_cast<long>(hidden);
            return {slice(hc, 1, 0, H), slice(hc, 1, H, 2 * H)};
        }
    }
    return {};
}

// The state given for a step or a layer: `given` checked against `expected` (its shape), or
// zeros of that shape in the parameters' dtype when undefined.
Tensor state_or_zeros(const char* who, const char* arg, const Tensor& given, const Shape& expected, Dtype dtype) {
    if (!given.defined()) return zeros(expected, dtype);
    if (given.shape() != expected)
        throw Error(fmt::format("{}: {} must have shape {}, got {}", who, arg, shape_str(expected),
                                shape_str(given.shape())));
    check_input_dtype(who, arg, given, dtype);
    return given;
}

// Inverted dropout between layers (torch's dropout, p in [0, 1]), masks from the calling
// thread's default generator.
Tensor dropout_between_layers(const Tensor& x, double p) {
    if (p >= 1.0) return x * 0.0;
    return x * dropout_mask(x.shape(), p, x.dtype());
}

}  // namespace

// --- RecurrentBase -----------------------------------------------------------------------------

RecurrentBase::RecurrentBase(const char* name, RecurrentKind kind, const RecurrentOptions& options, Generator& gen)
    : Module(name), m_kind(kind), m_options(options) {
    check_sizes(name, options.input_size(), options.hidden_size());
    if (options.num_layers() == 0) throw Error(fmt::format("{}: num_layers must be positive, got 0", name));
    if (!(options.dropout() >= 0.0 && options.dropout() <= 1.0))
        throw Error(fmt::format("{}: dropout must be a number in [0, 1], got {}", name, options.dropout()));
    const std::size_t D = options.bidirectional() ? 2 : 1, H = options.hidden_size(), P = options.proj_size();
    if (P != 0 && kind != RecurrentKind::lstm)
        throw Error(fmt::format("{}: proj_size is only supported for LSTM, not RNN or GRU, got proj_size={}", name, P));
    if (P >= H && P != 0)
        throw Error(fmt::format("{}: proj_size must be smaller than hidden_size ({}), got {}", name, H, P));
    auto reg = [this](const std::string& n, Tensor t) { register_parameter(n, std::move(t)); };
    for (std::size_t k = 0; k < options.num_layers(); ++k)
        for (std::size_t d = 0; d < D; ++d)
            make_weights(reg, fmt::format("_l{}{}", k, d ? "_reverse" : ""), gates_of(kind),
                         k == 0 ? options.input_size() : D * (P ? P : H), H, options.bias(), gen, P);
}

std::string RecurrentBase::extra_repr() const {
    const RecurrentOptions& o = m_options;
    std::string s = fmt::format("{}, {}", o.input_size(), o.hidden_size());
    if (o.proj_size() != 0) s += fmt::format(", proj_size={}", o.proj_size());
    if (o.num_layers() != 1) s += fmt::format(", num_layers={}", o.num_layers());
    if (!o.bias()) s += ", bias=False";
    if (o.batch_first()) s += ", batch_first=True";
    if (o.dropout() != 0.0) s += ", dropout=" + python_float(o.dropout());
    if (o.bidirectional()) s += ", bidirectional=True";
    return s;
}

std::tuple<Tensor, Tensor, Tensor> RecurrentBase::run(const Tensor& input, const Tensor& h0, const Tensor& c0,
                                                      const Tensor& lengths) {
    const char* who = name().c_str();
    const RecurrentOptions& o = m_options;
    const std::size_t L = o.num_layers(), D = o.bidirectional() ? 2 : 1, H = o.hidden_size();
    const bool is_lstm = m_kind == RecurrentKind::lstm, has_bias = o.bias();
    if (!input.defined() || (input.dim() != 2 && input.dim() != 3))
        throw Error(fmt::format("{}: input must be 3-D ({}, input_size) or unbatched (T, input_size), got {}", who,
                                o.batch_first() ? "batch, T" : "T, batch",
                                input.defined() ? shape_str(input.shape()) : std::string("an undefined tensor")));
    check_last_axis(who, "input", input, "input_size", o.input_size());
    const Dtype dtype = parameter("weight_ih_l0").dtype();
    check_input_dtype(who, "input", input, dtype);
    const bool batched = input.dim() == 3;
    // x: (T, batch, input_size) from here on.
    const Tensor x = !batched ? unsqueeze(input, 1) : o.batch_first() ? transpose(input, 0, 1) : input;
    const std::size_t T = x.size(0), B = x.size(1);
    if (T == 0) throw Error(fmt::format("{}: the input has no steps (T = 0, shape {}), as torch refuses", who,
                                        shape_str(input.shape())));
    // Hp: the size of h (proj_size when LSTM projects, else hidden_size); c keeps H.
    const std::size_t P = o.proj_size(), Hp = P ? P : H;
    const Shape state_shape = batched ? Shape{L * D, B, Hp} : Shape{L * D, Hp};
    const Shape cell_shape = batched ? Shape{L * D, B, H} : Shape{L * D, H};
    Tensor h_init = state_or_zeros(who, "h0", h0, state_shape, dtype);
    Tensor c_init = is_lstm ? state_or_zeros(who, "c0", c0, cell_shape, dtype) : Tensor();
    if (!batched) {
        h_init = unsqueeze(h_init, 1);
        if (is_lstm) c_init = unsqueeze(c_init, 1);
    }

    // Per step, which sequences are still running (t < length), when some stop early: as
    // numbers for the fused GRU and LSTM sequences, as masks for RNN's steps.
    std::vector<Tensor> running;
    std::vector<std::int64_t> short_lengths;
    const bool fused = m_kind == RecurrentKind::gru || (is_lstm && P == 0);
    if (lengths.defined()) {
        if (lengths.dtype() != kInt64 || lengths.dim() != 1 || lengths.shape()[0] != B)
            throw Error(fmt::format("{}: lengths must be int64 of shape ({},), one per sequence, got {} {}", who, B,
                                    dtype_name(lengths.dtype()), shape_str(lengths.shape())));
        const std::vector<std::int64_t> len = lengths.to_vector<std::int64_t>();
        bool any_short = false;
        for (std::size_t b = 0; b < B; ++b) {
            if (len[b] < 0 || len[b] > static_cast<std::int64_t>(T))
                throw Error(fmt::format("{}: lengths[{}] = {} is outside [0, {}] (the input has {} steps)", who, b,
                                        len[b], T, T));
            any_short = any_short || len[b] < static_cast<std::int64_t>(T);
        }
        if (any_short && fused) short_lengths = len;
        if (any_short && !fused) {
            const Tensor len_col = reshape(lengths, {static_cast<long>(B), 1});
            for (std::size_t t = 0; t < T; ++t) running.push_back(gt(len_col, static_cast<std::int64_t>(t)));
        }
    }
    const Tensor no_output = running.empty() ? Tensor() : zeros({B, Hp}, dtype);

    // The initial state of layer k, direction d, is row k·D + d.
    const std::vector<Tensor> h_rows = unbind(h_init, 0);
    const std::vector<Tensor> c_rows = is_lstm ? unbind(c_init, 0) : std::vector<Tensor>();
    std::vector<Tensor> h_n, c_n;
    Tensor layer_input = x;
    for (std::size_t k = 0; k < L; ++k) {
        std::vector<Tensor> directions;
        for (std::size_t d = 0; d < D; ++d) {
            const std::string suffix = fmt::format("_l{}{}", k, d ? "_reverse" : "");
            const Tensor& w_ih = parameter("weight_ih" + suffix);
            const Tensor& w_hh = parameter("weight_hh" + suffix);
            // All steps' input products, every gate: (T, batch, in)·(in, G·hidden) → (T, batch, G·hidden).
            Tensor xi = matmul_t(layer_input, w_ih, false, true);
            // RNN and LSTM add both biases to the same sum: once here for every step. GRU's
            // hidden bias sits inside r ⊙ (W_hn·h + b_hn), so it is added per step.
            const bool hidden_bias_per_step = has_bias && m_kind == RecurrentKind::gru;
            if (has_bias)
                xi = xi + (hidden_bias_per_step ? parameter("bias_ih" + suffix)
                                                : parameter("bias_ih" + suffix) + parameter("bias_hh" + suffix));
            Tensor h = h_rows[k * D + d];
            Tensor c = is_lstm ? c_rows[k * D + d] : Tensor();
            if (fused) {
                // The whole direction as one op: every step's hidden product and gates.
                const std::vector<Tensor> seq = recurrent_sequence(
                    is_lstm ? SequenceCell::lstm : SequenceCell::gru, xi, h, c, w_hh,
                    hidden_bias_per_step ? parameter("bias_hh" + suffix) : Tensor(), short_lengths, d == 1);
                directions.push_back(seq[0]);
                h_n.push_back(seq[1]);
                if (is_lstm) c_n.push_back(seq[2]);
                continue;
            }
            // Step t reads its own slice; one op makes them all.
            const std::vector<Tensor> xi_steps = unbind(xi, 0);
            std::vector<Tensor> steps(T);
            for (std::size_t s = 0; s < T; ++s) {
                const std::size_t t = d == 0 ? s : T - 1 - s;
                const Tensor& gi = xi_steps[t];
                // (batch, hidden)·(hidden, G·hidden): every gate's hidden product at once.
                Tensor gh = matmul_t(h, w_hh, false, true);
                if (hidden_bias_per_step) gh = gh + parameter("bias_hh" + suffix);
                auto [h_next, c_next] = cell_step(m_kind, gi, gh, h, c, H);
                // (batch, hidden)·(hidden, proj): LSTM's projection of h.
                if (P) h_next = matmul_t(h_next, parameter("weight_hr" + suffix), false, true);
                if (running.empty()) {
                    h = h_next;
                    c = c_next;
                    steps[t] = h_next;
                } else {
                    // A sequence past its length keeps its state and outputs 0.
                    h = where(running[t], h_next, h);
                    if (is_lstm) c = where(running[t], c_next, c);
                    steps[t] = where(running[t], h_next, no_output);
                }
            }
            directions.push_back(stack(steps, 0));
            h_n.push_back(h);
            if (is_lstm) c_n.push_back(c);
        }
        layer_input = D == 1 ? directions[0] : concat(directions, -1);
        if (k + 1 < L && is_training() && o.dropout() > 0.0)
            layer_input = dropout_between_layers(layer_input, o.dropout());
    }
    Tensor output = layer_input, h_last = stack(h_n, 0), c_last = is_lstm ? stack(c_n, 0) : Tensor();
    if (!batched) {
        output = squeeze(output, 1);
        h_last = squeeze(h_last, 1);
        if (is_lstm) c_last = squeeze(c_last, 1);
    } else if (o.batch_first()) {
        output = transpose(output, 0, 1);
    }
    return {output, h_last, c_last};
}

RNN::RNN(SizeArg input_size, SizeArg hidden_size, SizeArg num_layers, Generator& gen)
    : RNN(RNNOptions(input_size, hidden_size).num_layers(num_layers), gen) {}
RNN::RNN(const RNNOptions& options, Generator& gen)
    : RecurrentBase("RNN", rnn_kind("RNN", options.nonlinearity()), options, gen) {}
std::tuple<Tensor, Tensor> RNN::forward(const Tensor& input, const Tensor& h0, const Tensor& lengths) {
    auto [output, h_n, c_n] = run(input, h0, Tensor(), lengths);
    return {output, h_n};
}

GRU::GRU(SizeArg input_size, SizeArg hidden_size, SizeArg num_layers, Generator& gen)
    : GRU(GRUOptions(input_size, hidden_size).num_layers(num_layers), gen) {}
GRU::GRU(const GRUOptions& options, Generator& gen) : RecurrentBase("GRU", RecurrentKind::gru, options, gen) {}
std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& h0, const Tensor& lengths) {
    auto [output, h_n, c_n] = run(input, h0, Tensor(), lengths);
    return {output, h_n};
}

LSTM::LSTM(SizeArg input_size, SizeArg hidden_size, SizeArg num_layers, Generator& gen)
    : LSTM(LSTMOptions(input_size, hidden_size).num_layers(num_layers), gen) {}
LSTM::LSTM(const LSTMOptions& options, Generator& gen) : RecurrentBase("LSTM", RecurrentKind::lstm, options, gen) {}
std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(const Tensor& input, const std::tuple<Tensor, Tensor>& hx,
                                                             const Tensor& lengths) {
    return forward(input, std::get<0>(hx), std::get<1>(hx), lengths);
}
std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(const Tensor& input, const Tensor& h0, const Tensor& c0,
                                                             const Tensor& lengths) {
    if (h0.defined() != c0.defined())
        throw Error("LSTM: hx = (h0, c0) must give both or neither (zeros), got only one");
    auto [output, h_n, c_n] = run(input, h0, c0, lengths);
    return {output, {h_n, c_n}};
}

// --- cells ---------------------------------------------------------------------------------------

RecurrentCellBase::RecurrentCellBase(const char* name, RecurrentKind kind, const RecurrentCellOptions& options,
                                     Generator& gen)
    : Module(name), m_kind(kind), m_options(options) {
    check_sizes(name, options.input_size(), options.hidden_size());
    auto reg = [this](const std::string& n, Tensor t) { register_parameter(n, std::move(t)); };
    make_weights(reg, "", gates_of(kind), options.input_size(), options.hidden_size(), options.bias(), gen);
}

std::string RecurrentCellBase::extra_repr() const {
    std::string s = fmt::format("{}, {}", m_options.input_size(), m_options.hidden_size());
    if (!m_options.bias()) s += ", bias=False";
    if (m_kind == RecurrentKind::rnn_relu) s += ", nonlinearity=relu";
    return s;
}

std::tuple<Tensor, Tensor> RecurrentCellBase::step(const Tensor& input, const Tensor& h, const Tensor& c) {
    const char* who = name().c_str();
    const std::size_t H = m_options.hidden_size();
    if (!input.defined() || (input.dim() != 1 && input.dim() != 2))
        throw Error(fmt::format("{}: input must be 2-D (batch, input_size) or unbatched (input_size), got {}", who,
                                input.defined() ? shape_str(input.shape()) : std::string("an undefined tensor")));
    check_last_axis(who, "input", input, "input_size", m_options.input_size());
    const Dtype dtype = parameter("weight_ih").dtype();
    check_input_dtype(who, "input", input, dtype);
    const bool batched = input.dim() == 2;
    const Tensor x = batched ? input : unsqueeze(input, 0);
    const Shape state_shape = batched ? Shape{x.size(0), H} : Shape{H};
    const bool is_lstm = m_kind == RecurrentKind::lstm;
    Tensor h0 = state_or_zeros(who, "h", h, state_shape, dtype);
    Tensor c0 = is_lstm ? state_or_zeros(who, "c", c, state_shape, dtype) : Tensor();
    if (!batched) {
        h0 = unsqueeze(h0, 0);
        if (is_lstm) c0 = unsqueeze(c0, 0);
    }
    Tensor gi = matmul_t(x, parameter("weight_ih"), false, true);
    Tensor gh = matmul_t(h0, parameter("weight_hh"), false, true);
    if (m_options.bias()) {
        gi = gi + parameter("bias_ih");
        gh = gh + parameter("bias_hh");
    }
    auto [h1, c1] = cell_step(m_kind, gi, gh, h0, c0, H);
    if (!batched) {
        h1 = squeeze(h1, 0);
        if (is_lstm) c1 = squeeze(c1, 0);
    }
    return {h1, c1};
}

RNNCell::RNNCell(SizeArg input_size, SizeArg hidden_size, BoolArg bias, Generator& gen)
    : RNNCell(RNNCellOptions(input_size, hidden_size).bias(bias), gen) {}
RNNCell::RNNCell(const RNNCellOptions& options, Generator& gen)
    : RecurrentCellBase("RNNCell", rnn_kind("RNNCell", options.nonlinearity()), options, gen) {}
Tensor RNNCell::forward(const Tensor& input, const Tensor& h) { return std::get<0>(step(input, h, Tensor())); }

GRUCell::GRUCell(SizeArg input_size, SizeArg hidden_size, BoolArg bias, Generator& gen)
    : GRUCell(GRUCellOptions(input_size, hidden_size).bias(bias), gen) {}
GRUCell::GRUCell(const GRUCellOptions& options, Generator& gen)
    : RecurrentCellBase("GRUCell", RecurrentKind::gru, options, gen) {}
Tensor GRUCell::forward(const Tensor& input, const Tensor& h) { return std::get<0>(step(input, h, Tensor())); }

LSTMCell::LSTMCell(SizeArg input_size, SizeArg hidden_size, BoolArg bias, Generator& gen)
    : LSTMCell(LSTMCellOptions(input_size, hidden_size).bias(bias), gen) {}
LSTMCell::LSTMCell(const LSTMCellOptions& options, Generator& gen)
    : RecurrentCellBase("LSTMCell", RecurrentKind::lstm, options, gen) {}
std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input, const std::tuple<Tensor, Tensor>& hx) {
    return forward(input, std::get<0>(hx), std::get<1>(hx));
}
std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input, const Tensor& h, const Tensor& c) {
    if (h.defined() != c.defined())
        throw Error("LSTMCell: hx = (h, c) must give both or neither (zeros), got only one");
    return step(input, h, c);
}

}  // namespace xgrad::nn
