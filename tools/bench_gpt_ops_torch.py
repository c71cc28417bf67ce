#!/usr/bin/python3
"""PyTorch twin of tools/bench_gpt_ops.cpp: the same nanoGPT-style model composed from ops, ms per
training step.

    /usr/bin/python3 tools/bench_gpt_ops_torch.py [--threads N] [--steps N] [--warmup N] [--batch B]
        [--block T] [--d-model D] [--heads H] [--layers L] [--vocab V] [--dropout P]
        [--gelu erf|tanh] [--seed S] [--json PATH]

nanoGPT's model.py as of torch 1.13 (no scaled_dot_product_attention): token and position
embeddings, pre-LayerNorm blocks with a fused qkv Linear split in three, view + transpose into
heads, q @ k^T * scale, a causal masked_fill with -inf, softmax, dropout, @ v, transpose back,
an output Linear; a GELU MLP (erf: F.gelu; tanh: nanoGPT's new_gelu from ops); the final
LayerNorm and logits against the token embedding (weight tying); cross_entropy over (B*T, V);
AdamW with decay (2-D weights) and no-decay groups; clip_grad_norm_ at 1. Random token batches.
A step runs from zero_grad to the optimizer step, the loss read included.
"""
import argparse
import json
import math
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F


def new_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.ln_1 = nn.LayerNorm(a.d_model)
        self.c_attn = nn.Linear(a.d_model, 3 * a.d_model)
        self.c_proj = nn.Linear(a.d_model, a.d_model)
        self.ln_2 = nn.LayerNorm(a.d_model)
        self.c_fc = nn.Linear(a.d_model, 4 * a.d_model)
        self.mlp_proj = nn.Linear(4 * a.d_model, a.d_model)
        self.attn_dropout = nn.Dropout(a.dropout)
        self.resid_dropout = nn.Dropout(a.dropout)
        self.mlp_dropout = nn.Dropout(a.dropout)

    def attention(self, x, future):
        B, T, C = x.shape
        H = self.a.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = att.masked_fill(future, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))

    def forward(self, x, future):
        x = x + self.attention(self.ln_1(x), future)
        h = self.c_fc(self.ln_2(x))
        h = new_gelu(h) if self.a.gelu == "tanh" else F.gelu(h)
        return x + self.mlp_dropout(self.mlp_proj(h))


class Gpt(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.d_model)
        self.wpe = nn.Embedding(a.block, a.d_model)
        self.drop = nn.Dropout(a.dropout)
        self.h = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.d_model)
        self.register_buffer("future", ~torch.tril(torch.ones(a.block, a.block, dtype=torch.bool)))

    def forward(self, idx):
        T = idx.shape[1]
        pos = torch.arange(T, dtype=torch.long)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        future = self.future[:T, :T]
        for b in self.h:
            x = b(x, future)
        return self.ln_f(x) @ self.wte.weight.t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--gelu", choices=("erf", "tanh"), default="erf")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Gpt(a)
    params = list(model.parameters())
    decay = [q for q in params if q.dim() >= 2]
    no_decay = [q for q in params if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    model.train()
    ms, cpu = [], []
    loss_value = 0.0
    for i in range(a.warmup + a.steps):
        x = torch.randint(0, a.vocab, (a.batch, a.block))
        y = torch.randint(0, a.vocab, (a.batch, a.block))
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, a.vocab), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = loss.item()
        if i >= a.warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
    median, mean = statistics.median(ms), statistics.mean(ms)
    print(f"bench_gpt_ops_torch: B={a.batch} T={a.block} d={a.d_model} heads={a.heads} layers={a.layers} "
          f"vocab={a.vocab} dropout={a.dropout} gelu={a.gelu} threads={torch.get_num_threads()}: "
          f"median {median:.2f} ms (CPU {statistics.median(cpu):.2f}), mean {mean:.2f} ms per step over {a.steps} (loss {loss_value:.4f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"framework": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
                       "gelu": a.gelu, "median_ms": median, "cpu_ms": statistics.median(cpu), "mean_ms": mean, "steps": a.steps, "loss": loss_value}, f)


if __name__ == "__main__":
    main()
