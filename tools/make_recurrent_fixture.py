#!/usr/bin/python3
"""Writes tests/data/npz/recurrent_torch.npz: torch 1.13's RNN, GRU and LSTM weights, inputs,
outputs, final states and gradients, in float64, for tests/nn/test_recurrent.cpp.

Each case `name` stores its module's state_dict as `name.<torch name>`, its inputs
(`name:x`, `name:h0`, `name:c0`, `name:lengths`), what torch returns (`name:out`, `name:h_n`,
`name:c_n`), the weights R of the loss sum(out*R_out) + sum(h_n*R_h) (+ sum(c_n*R_c)), and the
gradients of that loss (`name:grad:x`, `name:grad:h0`, `name:grad:<param>`). Variable-length
batches go through pack_padded_sequence(enforce_sorted=False) and pad_packed_sequence."""
import numpy as np
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
out = {}


def case(name, module, T, B, lengths=None, initial=True):
    mod = module
    batch_first = mod.batch_first
    D = 2 if mod.bidirectional else 1
    L, H = mod.num_layers, mod.hidden_size
    x = torch.randn((B, T, mod.input_size) if batch_first else (T, B, mod.input_size), requires_grad=True)
    is_lstm = isinstance(mod, torch.nn.LSTM)
    Hh = mod.proj_size if is_lstm and mod.proj_size else H  # LSTM's proj_size projects h
    h0 = torch.randn(L * D, B, Hh, requires_grad=True) if initial else None
    c0 = torch.randn(L * D, B, H, requires_grad=True) if initial and is_lstm else None
    state = (h0, c0) if is_lstm and initial else h0
    if lengths is not None:
        packed = pack_padded_sequence(x, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=False)
        y, hn = mod(packed, state)
        y, _ = pad_packed_sequence(y, batch_first=batch_first, total_length=T)
    else:
        y, hn = mod(x, state)
    hs = hn if is_lstm else (hn,)
    loss = 0
    R = torch.randn(y.shape)
    out[name + ":R_out"] = R.numpy()
    loss = loss + (y * R).sum()
    for key, t in zip(["h", "c"], hs):
        r = torch.randn(t.shape)
        out[name + ":R_" + key] = r.numpy()
        loss = loss + (t * r).sum()
    loss.backward()
    for k, v in mod.state_dict().items():
        out[name + "." + k] = v.numpy()
    for k, p in mod.named_parameters():
        out[name + ":grad:" + k] = p.grad.numpy()
    out[name + ":x"] = x.detach().numpy()
    out[name + ":grad:x"] = x.grad.numpy()
    if initial:
        out[name + ":h0"] = h0.detach().numpy()
        out[name + ":grad:h0"] = h0.grad.numpy()
        if is_lstm:
            out[name + ":c0"] = c0.detach().numpy()
            out[name + ":grad:c0"] = c0.grad.numpy()
    if lengths is not None:
        out[name + ":lengths"] = np.array(lengths, dtype=np.int64)
    out[name + ":out"] = y.detach().numpy()
    out[name + ":h_n"] = hs[0].detach().numpy()
    if is_lstm:
        out[name + ":c_n"] = hs[1].detach().numpy()


case("gru", torch.nn.GRU(3, 4, num_layers=2, bidirectional=True), T=5, B=3, lengths=[5, 2, 3])
case("gru_plain", torch.nn.GRU(3, 4), T=4, B=2, initial=False)
case("lstm", torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True), T=5, B=3, lengths=[3, 5, 1])
case("lstm_nobias", torch.nn.LSTM(2, 3, bias=False), T=3, B=2)
case("rnn_tanh", torch.nn.RNN(3, 4, num_layers=2, bidirectional=True), T=4, B=3, lengths=[4, 1, 3])
case("rnn_relu", torch.nn.RNN(3, 4, nonlinearity="relu", batch_first=True), T=4, B=2, initial=False)



def cell_case(name, cell, B):
    x = torch.randn(B, cell.input_size, requires_grad=True)
    h = torch.randn(B, cell.hidden_size, requires_grad=True)
    is_lstm = isinstance(cell, torch.nn.LSTMCell)
    c = torch.randn(B, cell.hidden_size, requires_grad=True) if is_lstm else None
    res = cell(x, (h, c)) if is_lstm else (cell(x, h),)
    loss = 0
    for key, t in zip(["h", "c"], res):
        r = torch.randn(t.shape)
        out[name + ":R_" + key] = r.numpy()
        out[name + ":" + key + "1"] = t.detach().numpy()
        loss = loss + (t * r).sum()
    loss.backward()
    for k, v in cell.state_dict().items():
        out[name + "." + k] = v.numpy()
    for k, p in cell.named_parameters():
        out[name + ":grad:" + k] = p.grad.numpy()
    out[name + ":x"] = x.detach().numpy()
    out[name + ":h0"] = h.detach().numpy()
    out[name + ":grad:x"] = x.grad.numpy()
    out[name + ":grad:h0"] = h.grad.numpy()
    if is_lstm:
        out[name + ":c0"] = c.detach().numpy()
        out[name + ":grad:c0"] = c.grad.numpy()


cell_case("gru_cell", torch.nn.GRUCell(3, 4), B=2)
cell_case("lstm_cell", torch.nn.LSTMCell(3, 4), B=2)
cell_case("rnn_cell", torch.nn.RNNCell(3, 4, nonlinearity="relu"), B=2)

# Cases added later come last, so that the earlier ones keep their random draws.
case("lstm_proj", torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2), T=4, B=3, lengths=[4, 2, 3])
case("lstm_proj_plain", torch.nn.LSTM(2, 4, proj_size=3, batch_first=True), T=3, B=2, initial=False)

np.savez_compressed("tests/data/npz/recurrent_torch.npz", **out)
print(len(out), "arrays")
