#!/usr/bin/python3
"""bench_torch.py: tools/bench_mha.cpp's workloads in PyTorch, for a side-by-side comparison.

    /usr/bin/python3 tools/bench_torch.py [--config tiny|small|medium|large|all] [--seconds S]
                                          [--json PATH] [--threads N] [--autocast bf16]

d2l's MultiHeadAttention (bias=False, dropout 0) in float32 with torch.set_num_threads(2):
one training step (forward with 1-D valid_lens, mse_loss against a fixed target, backward,
Adam step, zero_grad) and one inference forward under torch.no_grad(), each the median over
~S seconds after a warm-up. --json also records the OpenBLAS core and threads torch ran on.
--autocast bf16 runs each forward (and the loss) under torch.autocast("cpu", dtype=torch.bfloat16),
as a PyTorch user turns it on; backward and the optimizer stay outside, as torch's recipe has it.
--json then records whether this CPU does bfloat16 natively (avx512_bf16 or amx_bf16) or oneDNN
emulates it, and torch's CPU capability.
Installs Debian's python3-torch with apt-get if torch is missing.
"""
import argparse
import contextlib
import ctypes
import json
import math
import resource
import subprocess
import sys
import time

try:
    import torch
except ImportError:
    print("bench_torch: torch is missing; installing Debian's python3-torch", file=sys.stderr)
    subprocess.run(["apt-get", "install", "-y", "python3-torch"], check=True)
    import torch
from torch import nn

CONFIGS = {
    # name: (batch, queries, keys/values, num_hiddens, num_heads)
    "tiny": (2, 4, 6, 100, 5),
    "small": (32, 32, 32, 128, 4),
    "medium": (32, 128, 128, 256, 8),
    "large": (16, 256, 256, 512, 8),
}


def valid_lens(name, batch, keys):
    # As bench_mha.cpp: the seeds' lengths for tiny, else every fourth row full.
    if name == "tiny":
        return torch.tensor([3, 2])
    return torch.tensor([keys - (i % 4) * (keys // 8) for i in range(batch)])


# d2l's code (chapter 11), unchanged apart from eager Linear layers of known size.
def sequence_mask(X, valid_len, value=0):
    maxlen = X.size(1)
    mask = torch.arange((maxlen), dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def masked_softmax(X, valid_lens):
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    X = sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return nn.functional.softmax(X.reshape(shape), dim=-1)


class DotProductAttention(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class MultiHeadAttention(nn.Module):
    def __init__(self, num_hiddens, num_heads, dropout, bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens):
        queries = self.transpose_qkv(self.W_q(queries))
        keys = self.transpose_qkv(self.W_k(keys))
        values = self.transpose_qkv(self.W_v(values))
        if valid_lens is not None:
            valid_lens = torch.repeat_interleave(valid_lens, repeats=self.num_heads, dim=0)
        output = self.attention(queries, keys, values, valid_lens)
        return self.W_o(self.transpose_output(output))

    def transpose_qkv(self, X):
        X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)
        X = X.permute(0, 2, 1, 3)
        return X.reshape(-1, X.shape[2], X.shape[3])

    def transpose_output(self, X):
        X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])
        X = X.permute(0, 2, 1, 3)
        return X.reshape(X.shape[0], X.shape[1], -1)


def openblas_in_use():
    """Each OpenBLAS this process has loaded (torch links it as libblas.so.3 and libopenblas.so.0,
    which may be two copies): library path, the core it runs and its thread count. Asked of
    the libraries themselves, so the table says what ran, not what OPENBLAS_CORETYPE asked for.
    Empty when torch runs another BLAS."""
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and "blas" in fields[5].rsplit("/", 1)[-1]:
                paths.add(fields[5])
    found = []
    for path in sorted(paths):
        lib = ctypes.CDLL(path)  # already loaded: the same instance torch uses
        try:
            corename = lib.openblas_get_corename
        except AttributeError:
            continue
        corename.restype = ctypes.c_char_p
        found.append({"library": path, "core": corename().decode(), "threads": lib.openblas_get_num_threads()})
    return found


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def time_steps(step, seconds):
    """Each step's wall and process CPU milliseconds (as bench_mha.cpp)."""
    for _ in range(3):
        step()
    ms, cpu = [], []
    start = time.perf_counter()
    while len(ms) < 5 or time.perf_counter() - start < seconds:
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return ms, cpu


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def bf16_info():
    """What torch's bfloat16 runs on here: oneDNN's availability, whether the CPU has bfloat16
    instructions (else oneDNN emulates them with AVX-512 float32), torch's CPU capability."""
    flags = cpu_flags()
    native = sorted(flags & {"avx512_bf16", "amx_bf16"})
    capability = next((line.split(":", 1)[1].strip() for line in torch.__config__.show().splitlines()
                       if "CPU capability usage" in line), "?")
    return {"mkldnn_available": torch.backends.mkldnn.is_available(), "native_bf16": bool(native),
            "cpu_bf16_flags": native, "cpu_capability": capability}


def run(name, seconds, autocast=None):
    batch, nq, nk, h, heads = CONFIGS[name]
    base = peak_rss_mb()
    torch.manual_seed(42)
    mha = MultiHeadAttention(h, heads, 0.0)
    X = torch.randn(batch, nq, h)
    Y = X if nk == nq else torch.randn(batch, nk, h)
    target = torch.randn(batch, nq, h)
    lens = valid_lens(name, batch, nk)
    opt = torch.optim.Adam(mha.parameters(), lr=1e-3)

    def forward_context():
        if autocast == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def train_step():
        with forward_context():
            loss = nn.functional.mse_loss(mha(X, Y, Y, lens), target)
        loss.backward()
        opt.step()
        opt.zero_grad()

    def infer_step():
        with torch.no_grad(), forward_context():
            mha(X, Y, Y, lens)

    train, train_cpu = time_steps(train_step, seconds)
    infer, infer_cpu = time_steps(infer_step, seconds)
    return {"config": name, "train_ms": median(train), "train_reps": len(train),
            "infer_ms": median(infer), "infer_reps": len(infer),
            "train_cpu_ms": median(train_cpu), "infer_cpu_ms": median(infer_cpu),
            "base_rss_mb": base, "peak_rss_mb": peak_rss_mb()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="all", choices=["all", *CONFIGS])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--autocast", choices=["bf16"], help="forward under torch.autocast(\"cpu\", torch.bfloat16)")
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    names = list(CONFIGS) if a.config == "all" else [a.config]
    info = bf16_info()
    precision = "float32" if not a.autocast else (
        "autocast bfloat16, " + ("native (" + ", ".join(info["cpu_bf16_flags"]) + ")" if info["native_bf16"]
                                 else "emulated by oneDNN (no avx512_bf16 on this CPU)"))
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s), {precision}")
    print(f"{'config':7} {'train ms':>10} {'infer ms':>10} {'peak MB':>9}")
    results = []
    for n in names:
        r = run(n, a.seconds, a.autocast)
        results.append(r)
        print(f"{n:7} {r['train_ms']:10.3f} {r['infer_ms']:10.3f} {r['peak_rss_mb']:9.1f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"framework": "pytorch", "version": torch.__version__, "threads": torch.get_num_threads(),
                       "autocast": a.autocast or "", "bf16": info, "openblas": openblas_in_use(),
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
