#!/usr/bin/python3
"""PyTorch twin of bench_rnn: one forward-backward of nn.GRU and nn.LSTM, float32, median ms.
   bench_rnn_torch.py [--seconds S] [--threads N] [--config NAME|all] [--kind gru|lstm|both]"""
import argparse
import time

import torch

# The configurations, the same list as bench_rnn.cpp's: name, T, batch, input, hidden, layers, bidirectional.
CONFIGS = [("d2l", 10, 64, 32, 32, 2, False), ("small", 32, 64, 64, 64, 1, False),
           ("medium", 50, 32, 128, 256, 1, False), ("medium2", 50, 64, 128, 256, 2, False),
           ("bidir", 50, 32, 128, 128, 2, True), ("large", 50, 64, 256, 512, 1, False)]

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=2.0)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--config", default="all")
p.add_argument("--kind", default="both", choices=["gru", "lstm", "both"])
a = p.parse_args()
torch.set_num_threads(a.threads)


def median_ms(step):
    """Median wall and thread-CPU milliseconds of one step."""
    step()
    wall, cpu = [], []
    start = time.perf_counter()
    while len(wall) < 3 or time.perf_counter() - start < a.seconds:
        t0, c0 = time.perf_counter(), time.thread_time()
        step()
        cpu.append((time.thread_time() - c0) * 1e3)
        wall.append((time.perf_counter() - t0) * 1e3)
    wall.sort()
    cpu.sort()
    return "%.3f ms (cpu %.3f)" % (wall[len(wall) // 2], cpu[len(cpu) // 2])


found = False
for name, T, B, I, H, L, bi in CONFIGS:
    if a.config not in ("all", name):
        continue
    found = True
    torch.manual_seed(0)
    x = torch.randn(T, B, I)
    line = f"{name:8s} T={T} batch={B} input={I} hidden={H} layers={L}{' bidirectional' if bi else ''}"
    if a.kind != "lstm":
        gru = torch.nn.GRU(I, H, L, bidirectional=bi)

        def g():
            out, h = gru(x)
            (out.sum() + h.sum()).backward()
            gru.zero_grad()
        line += f"  GRU {median_ms(g)}"
    if a.kind != "gru":
        lstm = torch.nn.LSTM(I, H, L, bidirectional=bi)

        def l():
            out, (h, c) = lstm(x)
            (out.sum() + h.sum()).backward()
            lstm.zero_grad()
        line += f"  LSTM {median_ms(l)}"
    print(line, flush=True)
if not found:
    raise SystemExit(f"bench_rnn_torch.py: no configuration named {a.config}")
