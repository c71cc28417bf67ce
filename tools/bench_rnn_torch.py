#!/usr/bin/python3
"""PyTorch twin of bench_rnn: one forward-backward of nn.GRU and nn.LSTM, float32, median ms.
   bench_rnn_torch.py [--seconds S] [--threads N]"""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=2.0)
p.add_argument("--threads", type=int, default=1)
a = p.parse_args()
torch.set_num_threads(a.threads)


def median_ms(step):
    """Median wall and thread-CPU milliseconds of one step."""
    step()
    wall, cpu = [], []
    start = time.perf_counter()
    while len(wall) < 5 or time.perf_counter() - start < a.seconds:
        t0, c0 = time.perf_counter(), time.thread_time()
        step()
        cpu.append((time.thread_time() - c0) * 1e3)
        wall.append((time.perf_counter() - t0) * 1e3)
    wall.sort()
    cpu.sort()
    return "%.3f ms (cpu %.3f)" % (wall[len(wall) // 2], cpu[len(cpu) // 2])


for name, T, B, I, H, L in [("d2l", 10, 64, 32, 32, 2), ("medium", 50, 32, 128, 256, 1)]:
    torch.manual_seed(0)
    x = torch.randn(T, B, I)
    gru, lstm = torch.nn.GRU(I, H, L), torch.nn.LSTM(I, H, L)

    def g():
        out, h = gru(x)
        (out.sum() + h.sum()).backward()
        gru.zero_grad()

    def l():
        out, (h, c) = lstm(x)
        (out.sum() + h.sum()).backward()
        lstm.zero_grad()

    print(f"{name:7s} T={T} batch={B} input={I} hidden={H} layers={L}  GRU {median_ms(g)}  LSTM {median_ms(l)}")
