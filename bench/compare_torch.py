#!/usr/bin/env python3
"""Times the layers of bench/bench_layers.cpp in gridnn and in PyTorch, in one run.

Same cases, shapes, batch (2 on the CPU, 8 on the GPU) and dtype (f32) as bench_layers:
the 3D-ResAttNet-18 shapes (docs/design.md §5) for width 16, one input channel, cubic inputs of 64
and 128. Case by case, it runs the gridnn binary on that one case
(--benchmark_format=json --benchmark_filter=^<case>(/|$) with repetitions; the median is
taken) and then the same op in PyTorch (median of as many repetitions, each the mean of
enough calls to last --min-time seconds), at each thread count of --threads, and prints one
table with three columns per thread count T:

    case | gridnn ms Tt | torch ms Tt | torch/gridnn Tt | ...   (ratio > 1: gridnn faster)

and, per thread count, the geometric mean of the ratios and the smallest ratio (with its case).
The table covers every fp32 case bench_layers has on the device: conv3d_fwd, conv3d_bwd_data
and conv3d_bwd_filter of stem and layer1..layer4, maxpool3d_fwd/_bwd, batchnorm3d_fwd/_bwd
and attention_fwd/_bwd of att3 and att4, each at 64 and 128.

The PyTorch ops are the ones autograd runs: F.conv3d and aten.convolution_backward (input or
weight gradient alone), max_pool3d_with_indices(_backward), native_batch_norm(_backward) in
training mode, and for attention the module's forward with autograd recording, then
torch.autograd.grad for x and all parameters (gridnn's backward also computes both).

    /usr/bin/python3 bench/compare_torch.py [build/default/bench/bench_layers] [--quick]
        [--threads 2,1]

--threads: a comma list of CPU thread counts for both sides (torch.set_num_threads, and
OMP_NUM_THREADS and OPENBLAS_NUM_THREADS for the gridnn binary); each case is measured at
each count. Default "2,1" on the CPU, 2 on the GPU; --quick (64^3 cases only, 3 repetitions)
takes the first count only unless --threads is given. On a machine whose cores are busy with
other work, multi-threaded timings (both libraries' OpenMP barriers) jump by whole scheduler
time slices (15-30 ms per call, even for 0.1 ms ops); the 1-thread columns are the fairer
comparison then. The load average is printed at the start and the end.

On a GPU machine run it with the torch installed there; --device cuda is the default when
torch sees a GPU (times then include a torch.cuda.synchronize() after every call, as
bench_layers synchronizes after every call).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "parity"))
from torch_modules import SelfAttention3d  # noqa: E402

WIDTH = 16

# layer, in channels, out channels, kernel, stride, padding, input size for a 64^3 input
CONV_CASES = [
    ("stem", 1, WIDTH, 7, 2, 3, 64),
    ("layer1", WIDTH, WIDTH, 3, 1, 1, 16),
    ("layer2", WIDTH, 2 * WIDTH, 3, 2, 1, 16),
    ("layer3", 2 * WIDTH, 4 * WIDTH, 3, 2, 1, 8),
    ("layer4", 4 * WIDTH, 8 * WIDTH, 3, 2, 1, 4),
]


def make_cases(sizes, batch, dev):
    """(name, setup) pairs; setup() builds the tensors and returns the function to time."""
    cases = []
    rnd = lambda *shape: torch.rand(*shape, device=dev) * 2 - 1

    for size in sizes:
        scale = size // 64
        tail = f"/{size}/{'cpu' if dev == 'cpu' else 'cuda'}"
        for layer, ci, co, k, s, p, in64 in CONV_CASES:
            def conv_setup(op, ci=ci, co=co, k=k, s=s, p=p, n=in64 * scale):
                x, w = rnd(batch, ci, n, n, n), rnd(co, ci, k, k, k)
                y = F.conv3d(x, w, None, s, p)
                dy = rnd(*y.shape)
                if op == "fwd":
                    return lambda: F.conv3d(x, w, None, s, p)
                mask = [True, False, False] if op == "bwd_data" else [False, True, False]
                return lambda: torch.ops.aten.convolution_backward(
                    dy, x, w, None, [s] * 3, [p] * 3, [1] * 3, False, [0] * 3, 1, mask)
            for op in ("fwd", "bwd_data", "bwd_filter"):
                cases.append((f"conv3d_{op}/{layer}{tail}", lambda op=op, f=conv_setup: f(op)))

        def pool_setup(bwd, n=32 * scale):
            x = rnd(batch, WIDTH, n, n, n)
            if not bwd:
                return lambda: F.max_pool3d(x, 3, 2, 1, return_indices=True)
            y, idx = F.max_pool3d(x, 3, 2, 1, return_indices=True)
            dy = rnd(*y.shape)
            return lambda: torch.ops.aten.max_pool3d_with_indices_backward(
                dy, x, [3] * 3, [2] * 3, [1] * 3, [1] * 3, False, idx)

        def bn_setup(bwd, n=16 * scale):
            x = rnd(batch, WIDTH, n, n, n)
            w, b = torch.ones(WIDTH, device=dev), torch.zeros(WIDTH, device=dev)
            rm, rv = torch.zeros(WIDTH, device=dev), torch.ones(WIDTH, device=dev)
            fwd = lambda: torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
            if not bwd:
                return fwd
            _, mean, invstd = fwd()
            dy = rnd(*x.shape)
            return lambda: torch.ops.aten.native_batch_norm_backward(
                dy, x, w, rm, rv, mean, invstd, True, 1e-5, [True, True, True])

        def att_setup(bwd, c, n):
            att = SelfAttention3d(c, gamma=0.5).to(dev)
            x = rnd(batch, c, n, n, n).requires_grad_()
            if not bwd:
                return lambda: att(x)
            y = att(x)
            dy = rnd(*y.shape)
            inputs = [x] + list(att.parameters())
            return lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)

        for bwd in (False, True):
            op = "_bwd" if bwd else "_fwd"
            cases.append((f"maxpool3d{op}/stem{tail}", lambda bwd=bwd, f=pool_setup: f(bwd)))
            cases.append((f"batchnorm3d{op}/layer1{tail}", lambda bwd=bwd, f=bn_setup: f(bwd)))
            cases.append((f"attention{op}/att3{tail}",
                          lambda bwd=bwd, f=att_setup, s=scale: f(bwd, 4 * WIDTH, 4 * s)))
            cases.append((f"attention{op}/att4{tail}",
                          lambda bwd=bwd, f=att_setup, s=scale: f(bwd, 8 * WIDTH, 2 * s)))
    return cases


def time_torch(fn, reps, min_time, sync):
    """Median over reps of the mean time per call (ms), each rep lasting about min_time."""
    fn()  # warm-up
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    once = time.perf_counter() - t0
    inner = max(1, int(min_time / max(once, 1e-7)))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
            sync()
        samples.append((time.perf_counter() - t0) / inner * 1e3)
    return statistics.median(samples)


UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def time_gridnn(binary, name, reps, min_time, env):
    """Median real time (ms) of case `name` from the gridnn binary's JSON output."""
    cmd = [binary, "--benchmark_format=json", f"--benchmark_filter=^{name}(/|$)",
           f"--benchmark_repetitions={reps}", "--benchmark_report_aggregates_only=true",
           f"--benchmark_min_time={min_time}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            return b["real_time"] * UNIT_MS[b["time_unit"]]
    # A single repetition reports no aggregates.
    for b in json.loads(out)["benchmarks"]:
        return b["real_time"] * UNIT_MS[b["time_unit"]]
    raise RuntimeError(f"{binary} reported no benchmark matching {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default="build/default/bench/bench_layers")
    ap.add_argument("--device", choices=["cpu", "cuda"],
                    default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true",
                    help="64^3 cases only, 3 repetitions, the first thread count unless --threads is given")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 5; 3 with --quick)")
    ap.add_argument("--min-time", type=float, default=0.05,
                    help="seconds per repetition (gridnn: --benchmark_min_time)")
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    ap.add_argument("--threads", default=None,
                    help="comma list of CPU thread counts for both, each case measured at each: "
                         "torch.set_num_threads, and OMP_NUM_THREADS and OPENBLAS_NUM_THREADS for "
                         "the gridnn binary (default: 2,1 on the CPU, 2 on the GPU)")
    args = ap.parse_args()
    reps = args.reps or (3 if args.quick else 5)
    sizes = [64] if args.quick else [64, 128]
    batch = 2 if args.device == "cpu" else 8
    if args.threads is not None:
        try:
            threads = [int(t) for t in args.threads.split(",") if t.strip()]
        except ValueError:
            threads = []
        if not threads or min(threads) < 1:
            sys.exit(f"compare_torch: --threads wants a comma list of positive counts, got {args.threads!r}")
        threads = list(dict.fromkeys(threads))  # in the given order, without repeats
    else:
        threads = [2, 1] if args.device == "cpu" else [2]
        if args.quick:
            threads = threads[:1]
    torch.manual_seed(0)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# torch {torch.__version__}, device {args.device}, threads {','.join(map(str, threads))}, "
          f"batch {batch}, f32, {reps} repetitions of >= {args.min_time} s, medians; "
          f"load average at start {load()}", flush=True)
    rows, start = [], time.perf_counter()
    for name, setup in make_cases(sizes, batch, args.device):
        if args.filter not in name:
            continue
        fn, cells = setup(), []
        for n in threads:
            env = dict(os.environ, OMP_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n))
            g = time_gridnn(args.binary, name, reps, args.min_time, env)
            torch.set_num_threads(n)
            t = time_torch(fn, reps, args.min_time, sync)
            cells.append((g, t))
            print(f"  {name}, {n} thread{'s' if n > 1 else ''}: gridnn {g:.3f} ms, torch {t:.3f} ms",
                  file=sys.stderr, flush=True)
        rows.append((name, cells))
    if not rows:
        sys.exit(f"compare_torch: no case matches --filter {args.filter!r}")

    def fmt(ms):
        return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"

    heads = ["case"] + [h.format(n=n) for n in threads
                        for h in ("gridnn ms {n}t", "torch ms {n}t", "torch/gridnn {n}t")]
    body = [[name] + [c for g, t in cells for c in (fmt(g), fmt(t), f"{t / g:.2f}")] for name, cells in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(heads)]
    line = lambda cols: "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                         for i, (c, w) in enumerate(zip(cols, widths))) + " |"
    print(line(heads))
    print("|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|")
    for r in body:
        print(line(r))
    for i, n in enumerate(threads):
        ratios = [(cells[i][1] / cells[i][0], name) for name, cells in rows]
        geo = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios))
        low = min(ratios)
        print(f"{n} thread{'s' if n > 1 else ''}: geometric mean of torch/gridnn over {len(ratios)} "
              f"case{'s' if len(ratios) > 1 else ''} {geo:.2f}, minimum {low[0]:.2f} ({low[1]})")
    print(f"total {time.perf_counter() - start:.0f} s; load average at end {load()}")


if __name__ == "__main__":
    main()
