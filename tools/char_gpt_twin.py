#!/usr/bin/python3
"""char_gpt_twin.py: a PyTorch twin of examples/char_gpt, for tools/bench and for checking it.

    /usr/bin/python3 tools/char_gpt_twin.py [--text FILE] [--steps N] [--batch B] [--block T]
        [--d-model D] [--heads H] [--layers L] [--dropout P] [--lr LR] [--min-lr LR] [--warmup W]
        [--weight-decay WD] [--beta1 B1] [--beta2 B2] [--clip C] [--eval-every E]
        [--eval-batches N] [--seed S] [--threads T] [--json PATH]

The same program in torch 1.13 (nanoGPT's model.py and train.py at the time, which had no
scaled_dot_product_attention), with char_gpt's defaults for every flag:
- data: the text's bytes, the vocabulary their sorted set, the first 90% to train on and the
  rest to validate; a batch is --batch windows of --block + 1 bytes at uniform offsets;
- model: token and position embeddings, --layers pre-LayerNorm blocks of causal multi-head
  self-attention (separate query, key and value Linear layers with bias and an output Linear,
  as xgrad's MultiHeadAttention) and a GELU MLP of width 4·d, a final LayerNorm, and the head
  tied to the token embedding; nanoGPT's initialisation (N(0, 0.02), the two projections back
  into the residual stream N(0, 0.02/sqrt(2·layers)), biases 0);
- training: AdamW with weight decay on the Linear weights only (configure_optimizers), linear
  warm-up then cosine decay to --min-lr (char_gpt's WarmupCosineLR: step i trains at
  lr·(i+1)/warmup during warm-up), gradient norm clipped at --clip;
- evaluation: the mean loss over --eval-batches batches of each split, the same batches every
  time (a generator of their own), every --eval-every steps and at the last.
The draws come from torch's generators, so the numbers are char_gpt's in distribution, not
bit for bit. A training step's time runs from drawing the batch to the scheduler step (the
loss read included), as char_gpt counts it; evaluations are left out. It prints the median
and mean ms per step and the last validation loss.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, d, heads, block, dropout):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d, d) for _ in range(4))
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)
        self.attn_dropout = nn.Dropout(dropout)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("causal", torch.tril(torch.ones(block, block, dtype=torch.bool)))

    def attention(self, x):
        B, T, d = x.shape
        split = lambda t: t.view(B, T, self.heads, d // self.heads).transpose(1, 2)  # (B, H, T, hd)
        q, k, v = split(self.W_q(x)), split(self.W_k(x)), split(self.W_v(x))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.masked_fill(~self.causal[:T, :T], float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        return self.W_o((att @ v).transpose(1, 2).contiguous().view(B, T, d))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.dropout(self.c_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class CharGpt(nn.Module):
    def __init__(self, vocab, block, d, heads, layers, dropout):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(d, heads, block, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        for b in self.h:
            for proj in (b.W_o, b.c_proj):
                nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, idx):
        T = idx.shape[1]
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T)))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()  # weight tying: the head is the token embedding


def lr_at(step, a):
    """char_gpt's WarmupCosineLR."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    q = min(1.0, (step - a.warmup) / max(1, a.steps - a.warmup))
    return a.min_lr + (a.lr - a.min_lr) * (1 + math.cos(math.pi * q)) / 2


def draw(data, a, gen):
    ix = torch.randint(len(data) - a.block, (a.batch,), generator=gen)
    x = torch.stack([data[i:i + a.block] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + a.block] for i in ix])
    return x, y


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr", type=float, default=2e-4)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    raw = open(a.text, "rb").read()
    vocab = sorted(set(raw))
    index = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([index[c] for c in raw], dtype=torch.long)
    n = int(0.9 * len(ids))
    train, val = ids[:n], ids[n:]
    model = CharGpt(len(vocab), a.block, a.d_model, a.heads, a.layers, a.dropout)
    decay = [p for name, p in model.named_parameters() if p.dim() >= 2 and not name.startswith(("wte.", "wpe."))]
    no_decay = [p for name, p in model.named_parameters() if not (p.dim() >= 2 and not name.startswith(("wte.", "wpe.")))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(a.beta1, a.beta2))
    data_gen = torch.Generator().manual_seed(a.seed + 1)

    @torch.no_grad()
    def evaluate(split):
        model.eval()
        gen = torch.Generator().manual_seed(a.seed + 2)
        losses = [F.cross_entropy(model(x).view(-1, len(vocab)), y.view(-1)).item()
                  for x, y in (draw(split, a, gen) for _ in range(a.eval_batches))]
        model.train()
        return sum(losses) / len(losses)

    print(f"text {a.text}: {len(ids)} characters, {len(vocab)} distinct; "
          f"{sum(p.numel() for p in model.parameters())} parameters; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    times, evals = [], [(0, evaluate(train), evaluate(val))]
    for step in range(a.steps):
        start = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        x, y = draw(train, a, data_gen)
        loss = F.cross_entropy(model(x).view(-1, len(vocab)), y.view(-1))
        value = loss.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        times.append(time.perf_counter() - start)
        if (a.eval_every > 0 and (step + 1) % a.eval_every == 0) or step + 1 == a.steps:
            evals.append((step + 1, evaluate(train), evaluate(val)))
            print(f"step {step + 1}: loss {value:.4f}, train split {evals[-1][1]:.4f}, val {evals[-1][2]:.4f}",
                  flush=True)
    ms = 1e3 * statistics.median(times)
    mean_ms = 1e3 * sum(times) / len(times)
    print(f"ms per step {ms:.2f} (median; mean {mean_ms:.2f}), val loss {evals[-1][2]:.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"framework": "pytorch", "version": torch.__version__, "threads": torch.get_num_threads(),
                       "results": [{"ms_per_step": ms, "mean_ms_per_step": mean_ms, "val_loss": evals[-1][2],
                                    "eval_steps": [e[0] for e in evals], "eval_train_loss": [e[1] for e in evals],
                                    "eval_val_loss": [e[2] for e in evals]}]}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
