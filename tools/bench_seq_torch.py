#!/usr/bin/python3
"""bench_seq_torch.py: a PyTorch twin of examples/seq_train on the reverse task, for tools/bench.

    /usr/bin/python3 tools/bench_seq_torch.py [--lr LR] [--seed S] [--schedule constant|cosine]
        [--steps N] [--warmup W] [--batch B] [--eval-every E] [--target A] [--held-out H]
        [--attention torch|d2l] [--optimizer adam|adamw] [--threads T] [--json PATH]
    /usr/bin/python3 tools/bench_seq_torch.py --sweep-lr 1e-3,2e-3,3e-3 --seeds 0,1,2 [...]

The model is seq_train's (examples/seq_train/model.cpp, nn/transformer_model.cpp) at its sizes:
token embedding N(0, 1) unscaled plus a learned position table, 2 post-norm encoder blocks of
d 64, 4 heads, FFN 128 (relu), layer norms eps 1e-5, no dropout, attention projections without
bias, keys past a sequence's valid length masked, and a Linear head to the 11 classes.
--attention torch (default) builds each block's attention with nn.MultiheadAttention
(bias=False, batch_first, key_padding_mask): what a PyTorch user writes. --attention d2l is
d2l's MultiHeadAttention (four Linear layers, masked softmax with -1e6), a line-for-line port of
xgrad's blocks. Everything else is the same torch.nn code in both.

The task and training are seq_train's: reverse sequences of lengths uniform in 1..8 over 10
symbols (token 0 pads), batch 64, cross-entropy over the valid target tokens (padding ignored,
mean over the batch's valid tokens), Adam (or AdamW with weight decay 0.01), gradient norm
clipped at 1, and either a constant lr (default) or seq_train's schedule (--schedule cosine:
linear warm-up over --warmup steps to lr, then cosine decay to 0 at --steps). Data come from
torch's generator (the distribution is seq_train's, the draws are not); the held-out set of
--held-out sequences (1000, as seq_train) has its own generator.

As seq_train counts it, a training step's time runs from drawing the batch to the optimizer
step and the batch's training accuracy; held-out evaluations (every --eval-every steps) are
left out. The run stops at the first evaluation with held-out token accuracy >= --target and
reports the training seconds and step up to it, and the median ms per step. --sweep-lr runs
every lr for every seed in one process and prints the table (median seconds to target per lr).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
from torch import nn

PAD = 0


class Task:
    def __init__(self, max_len=8, num_symbols=10):
        self.max_len, self.num_symbols = max_len, num_symbols
        self.vocab_size = num_symbols + 1

    def batch(self, n, gen):
        """Inputs, reversed targets (both (n, T), PAD past the length) and lengths (n,)."""
        T = self.max_len
        lens = torch.randint(1, T + 1, (n,), generator=gen)
        X = torch.randint(1, self.num_symbols + 1, (n, T), generator=gen)
        pos = torch.arange(T)[None, :]
        valid = pos < lens[:, None]
        X = X.masked_fill(~valid, PAD)
        src = (lens[:, None] - 1 - pos).clamp(min=0)
        Y = torch.gather(X, 1, src).masked_fill(~valid, PAD)
        return X, Y, lens


class D2LAttention(nn.Module):
    """d2l's MultiHeadAttention (bias=False), with d2l's masked softmax (-1e6 past valid_lens)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d, d, bias=False) for _ in range(4))

    def split(self, X):
        B, T, _ = X.shape
        return X.reshape(B, T, self.heads, -1).permute(0, 2, 1, 3).reshape(B * self.heads, T, -1)

    def forward(self, X, pad_mask):
        B, T, d = X.shape
        q, k, v = self.split(self.W_q(X)), self.split(self.W_k(X)), self.split(self.W_v(X))
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        mask = pad_mask.repeat_interleave(self.heads, dim=0)[:, None, :]  # (B·heads, 1, T)
        w = torch.softmax(scores.masked_fill(mask, -1e6), dim=-1)
        out = torch.bmm(w, v).reshape(B, self.heads, T, -1).permute(0, 2, 1, 3).reshape(B, T, d)
        return self.W_o(out)


class TorchAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, bias=False, batch_first=True)

    def forward(self, X, pad_mask):
        return self.mha(X, X, X, key_padding_mask=pad_mask, need_weights=False)[0]


class Block(nn.Module):
    """d2l's TransformerEncoderBlock: Y = ln1(X + attention(X)); ln2(Y + ffn(Y))."""

    def __init__(self, d, heads, ffn, attention):
        super().__init__()
        self.attention = (TorchAttention if attention == "torch" else D2LAttention)(d, heads)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, ffn), nn.ReLU(), nn.Linear(ffn, d))

    def forward(self, X, pad_mask):
        Y = self.ln1(X + self.attention(X, pad_mask))
        return self.ln2(Y + self.ffn(Y))


class SeqEncoder(nn.Module):
    def __init__(self, task, d=64, heads=4, layers=2, ffn=128, attention="torch"):
        super().__init__()
        self.embedding = nn.Embedding(task.vocab_size, d)
        self.positions = nn.Embedding(task.max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads, ffn, attention) for _ in range(layers))
        self.head = nn.Linear(d, task.vocab_size)

    def forward(self, X, lens):
        T = X.shape[1]
        pad_mask = torch.arange(T)[None, :] >= lens[:, None]  # True: a key to ignore
        H = self.embedding(X) + self.positions.weight[:T]
        for blk in self.blocks:
            H = blk(H, pad_mask)
        return self.head(H)


def lr_at(step, a):
    """seq_train's WarmupCosineLR (optim/lr_scheduler.cpp) or a constant."""
    if a.schedule == "constant":
        return a.lr
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    q = 1.0 if a.steps == a.warmup else min(1.0, (step - a.warmup) / (a.steps - a.warmup))
    return a.lr * (1 + math.cos(math.pi * q)) / 2


def evaluate(model, held):
    X, Y, lens = held
    model.eval()
    # With grad enabled: torch 1.13's no-grad fast path of nn.MultiheadAttention fails without
    # biases (_native_multi_head_attention wants a qkv_bias tensor). Evaluation is not timed.
    pred = model(X, lens).detach().argmax(-1)
    model.train()
    valid = Y != PAD
    return ((pred == Y) & valid).sum().item() / valid.sum().item()


def run(a, lr, seed):
    """One run to --target (or --steps): its step times, the step and seconds it reached it."""
    torch.manual_seed(seed)
    task = Task()
    model = SeqEncoder(task, attention=a.attention)
    held = task.batch(a.held_out, torch.Generator().manual_seed(0x4E1D0 + seed))
    data = torch.Generator().manual_seed(seed)
    params = list(model.parameters())
    opt = (torch.optim.AdamW(params, lr=lr, weight_decay=0.01) if a.optimizer == "adamw"
           else torch.optim.Adam(params, lr=lr))
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD, reduction="sum")
    b = argparse.Namespace(**vars(a))
    b.lr = lr
    step_ms, train_s, acc, reached = [], 0.0, evaluate(model, held), None
    evals = [(0, 0.0, acc)]
    for step in range(a.max_steps):
        t0 = time.perf_counter()
        X, Y, lens = task.batch(a.batch, data)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, b)
        logits = model(X, lens)
        # PAD targets are the ignored class: seq_train's loss is the sum over valid tokens / their count.
        loss = loss_fn(logits.reshape(-1, task.vocab_size), Y.reshape(-1)) / (Y != PAD).sum()
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ((logits.argmax(-1) == Y) & (Y != PAD)).sum().item()  # the training accuracy, as seq_train's step
        dt = time.perf_counter() - t0
        step_ms.append(dt * 1e3)
        train_s += dt
        if not math.isfinite(loss.item()):
            break
        n = step + 1
        if n % a.eval_every == 0:
            acc = evaluate(model, held)
            evals.append((n, train_s, acc))
            if acc >= a.target:
                reached = (n, train_s)
                break
    return {"lr": lr, "seed": seed, "ms_per_step": statistics.median(step_ms), "steps_run": len(step_ms),
            "reached_step": reached[0] if reached else None, "reached_seconds": reached[1] if reached else None,
            "final_accuracy": evals[-1][2], "evals": evals}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=5e-3, help="its best constant lr by --sweep-lr")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--steps", type=int, default=300, help="cosine: the step the decay reaches 0")
    p.add_argument("--warmup", type=int, default=30, help="cosine: linear warm-up steps")
    p.add_argument("--max-steps", type=int, default=1000, help="give up after this many steps")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--held-out", type=int, default=1000)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--target", type=float, default=0.99, help="held-out token accuracy to stop at")
    p.add_argument("--attention", choices=["torch", "d2l"], default="torch")
    p.add_argument("--optimizer", choices=["adam", "adamw"], default="adam")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sweep-lr", help="comma-separated lrs: run each for every --seeds seed")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--json")
    a = p.parse_args()
    if a.schedule == "cosine" and not 0 <= a.warmup <= a.steps:
        p.error(f"--warmup ({a.warmup}) must be in 0..--steps ({a.steps})")
    if a.eval_every < 1 or a.batch < 1 or a.held_out < 1:
        p.error("--eval-every, --batch and --held-out must be positive")
    torch.set_num_threads(a.threads)
    head = (f"PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s), attention {a.attention}, "
            f"{a.optimizer}, {a.schedule} lr" + (f" (warm-up {a.warmup}, {a.steps} steps)" if a.schedule == "cosine" else ""))
    print(head, flush=True)
    if a.sweep_lr:
        lrs = [float(x) for x in a.sweep_lr.split(",")]
        seeds = [int(x) for x in a.seeds.split(",")]
    else:
        lrs, seeds = [a.lr], [a.seed]
    results = []
    # Seeds outermost: each lr meets the machine's load at every stage of the sweep.
    for seed in seeds:
        for lr in lrs:
            r = run(a, lr, seed)
            results.append(r)
            got = (f"{r['reached_seconds']:.2f} s (step {r['reached_step']})" if r["reached_step"]
                   else f"not reached in {r['steps_run']} steps (accuracy {r['final_accuracy']:.4f})")
            print(f"lr {lr:g} seed {seed}: {r['ms_per_step']:.2f} ms/step, {100 * a.target:g}% at {got}", flush=True)
    if a.sweep_lr:
        print(f"\n| lr | ms/step (median) | steps to {100 * a.target:g}% per seed | seconds per seed | median s |")
        print("|---|---|---|---|---|")
        for lr in lrs:
            rs = [r for r in results if r["lr"] == lr]
            secs = [r["reached_seconds"] if r["reached_step"] else math.inf for r in rs]
            print(f"| {lr:g} | {statistics.median(r['ms_per_step'] for r in rs):.2f} | "
                  + ", ".join(str(r["reached_step"] or "-") for r in rs) + " | "
                  + ", ".join(f"{s:.2f}" if math.isfinite(s) else "-" for s in secs)
                  + f" | {statistics.median(secs):.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"framework": "pytorch", "version": torch.__version__, "threads": torch.get_num_threads(),
                       "attention": a.attention, "schedule": a.schedule, "target": a.target,
                       "eval_every": a.eval_every, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
