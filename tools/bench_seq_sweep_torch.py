#!/usr/bin/python3
"""bench_seq_sweep_torch.py: PyTorch twin of tools/bench_seq_sweep.cpp (one d2l MultiHeadAttention
self-attention training step, batch 4, d 256, 8 heads, at one sequence length), for
tools/bench_seq_sweep.

    /usr/bin/python3 tools/bench_seq_sweep_torch.py --T N [--mask valid|causal|none]
        [--autocast none|bf16] [--steps K] [--threads 2]

d2l's MultiHeadAttention (four Linear layers without bias, transpose_qkv, bmm, the masked
softmax with -1e6, bmm, transpose_output), mse_loss against a fixed target, Adam, zero_grad;
median of K steps after one warm-up. Prints the line bench_seq_sweep prints.
"""
import argparse
import resource
import statistics
import time

import torch
from torch import nn

B, E, H = 4, 256, 8


def lengths(T):
    return [T * (B - b) // B for b in range(B)]


def logical_flops(T, mask):
    projections = 9 * 2 * B * T * E * E
    if mask == "causal":
        pairs = B * T * (T + 1) / 2
    elif mask == "valid":
        pairs = sum(T * l for l in lengths(T))
    else:
        pairs = B * T * T
    return projections + 6 * 2 * pairs * (E // H) * H


class MHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(E, E, bias=False) for _ in range(4))

    def split(self, x):
        b, n, _ = x.shape
        return x.reshape(b, n, H, -1).permute(0, 2, 1, 3).reshape(b * H, n, -1)

    def forward(self, x, keep):
        q, k, v = self.split(self.W_q(x)), self.split(self.W_k(x)), self.split(self.W_v(x))
        scores = torch.bmm(q, k.transpose(1, 2)) / (q.shape[-1] ** 0.5)
        if keep is not None:
            scores = scores.masked_fill(~keep, -1e6)
        w = torch.softmax(scores, dim=-1)
        o = torch.bmm(w, v)
        b, n = x.shape[0], x.shape[1]
        o = o.reshape(b, H, n, -1).permute(0, 2, 1, 3).reshape(b, n, -1)
        return self.W_o(o)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--mask", default="valid", choices=["valid", "causal", "none"])
    ap.add_argument("--autocast", default="none", choices=["none", "bf16"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    T = a.T
    m = MHA()
    opt = torch.optim.Adam(m.parameters(), lr=1e-4)
    x = torch.rand(B, T, E) * 2 - 1
    target = torch.rand(B, T, E) * 2 - 1
    if a.mask == "causal":
        keep = torch.ones(T, T, dtype=torch.bool).tril().unsqueeze(0)
    elif a.mask == "valid":
        lens = torch.tensor(lengths(T)).repeat_interleave(H)
        keep = (torch.arange(T)[None, None, :] < lens[:, None, None])
    else:
        keep = None

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            out = m(x, keep)
        loss = nn.functional.mse_loss(out.float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad()

    step()
    ms = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(ms)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"step T={T} mask={a.mask} autocast={a.autocast} fused=0 ms={med:.1f} rss_mb={rss:.0f} "
          f"gflops={logical_flops(T, a.mask) / (med * 1e6):.1f} spread={min(ms):.1f}-{max(ms):.1f} threads={a.threads}",
          flush=True)


if __name__ == "__main__":
    main()
