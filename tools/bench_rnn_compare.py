#!/usr/bin/python3
"""bench_rnn beside bench_rnn_torch.py, interleaved: for every configuration, kind and thread
count, N rounds, each round one xgrad run and one torch run in flipping order (own processes).
Prints a table: median wall ms of each side over rounds, the median of the per-round ratios
xgrad/torch and their spread (min-max), and the same ratio of the calling thread's CPU time (the
fairer figure with 1 thread on a loaded machine; with 2 threads only the wall ratio counts). xgrad gets XGRAD_NUM_THREADS=n, torch set_num_threads(n);
both OPENBLAS_NUM_THREADS=1; OpenBLAS picks its core as xgrad fixes it.
--baseline DIR adds a second xgrad build (DIR/tools/bench_rnn, e.g. before a change) to every
round and its ratios to torch as two more columns.
   bench_rnn_compare.py [--build DIR] [--baseline DIR] [--rounds N] [--seconds S] [--threads 1,2]
                        [--configs d2l,small,...] [--kinds gru,lstm]"""
import argparse
import os
import re
import statistics
import subprocess

here = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("--build", default=os.path.join(os.path.dirname(here), "build"))
p.add_argument("--baseline", default="")
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--seconds", type=float, default=1.0)
p.add_argument("--threads", default="1,2")
p.add_argument("--configs", default="d2l,small,medium,medium2,bidir,large")
p.add_argument("--kinds", default="gru,lstm")
a = p.parse_args()

env = dict(os.environ, OPENBLAS_NUM_THREADS="1")



def run(cmd, extra):
    out = subprocess.run(cmd, env=dict(env, **extra), check=True, capture_output=True, text=True).stdout
    m = re.search(r"(GRU|LSTM) ([0-9.]+) ms \(cpu ([0-9.]+)\)", out)
    return float(m.group(2)), float(m.group(3))


extra = " baseline ratio | baseline cpu ratio |" if a.baseline else ""
print("| config | kind | threads | xgrad ms | torch ms | ratio | spread | cpu ratio | cpu spread |" + extra)
print("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if a.baseline else ""))
for threads in a.threads.split(","):
    for config in a.configs.split(","):
        for kind in a.kinds.split(","):
            xs, ts, rs, cs, bs, brs, bcs = [], [], [], [], [], [], []
            for r in range(a.rounds):
                xcmd = [os.path.join(a.build, "tools", "bench_rnn"), "--seconds", str(a.seconds), "--config", config,
                        "--kind", kind]
                tcmd = ["/usr/bin/python3", os.path.join(here, "bench_rnn_torch.py"), "--seconds", str(a.seconds),
                        "--config", config, "--kind", kind, "--threads", threads]
                order = [(xcmd, {"XGRAD_NUM_THREADS": threads}, xs), (tcmd, {}, ts)]
                if a.baseline:
                    bcmd = [os.path.join(a.baseline, "tools", "bench_rnn")] + xcmd[1:]
                    order.insert(1, (bcmd, {"XGRAD_NUM_THREADS": threads}, bs))
                for cmd, extra, into in (order if r % 2 == 0 else order[::-1]):
                    into.append(run(cmd, extra))
                rs.append(xs[-1][0] / ts[-1][0])
                cs.append(xs[-1][1] / ts[-1][1])
                if a.baseline:
                    brs.append(bs[-1][0] / ts[-1][0])
                    bcs.append(bs[-1][1] / ts[-1][1])
            print(f"| {config} | {kind} | {threads} | {statistics.median(x[0] for x in xs):.2f} | "
                  f"{statistics.median(t[0] for t in ts):.2f} | {statistics.median(rs):.2f} | "
                  f"{min(rs):.2f}-{max(rs):.2f} | {statistics.median(cs):.2f} | {min(cs):.2f}-{max(cs):.2f} |" +
                  (f" {statistics.median(brs):.2f} | {statistics.median(bcs):.2f} |" if a.baseline else ""),
                  flush=True)
