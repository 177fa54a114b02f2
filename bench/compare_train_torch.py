#!/usr/bin/env python3
"""Times one training step of ResAttNet3D in gridnn (gridnn-train) and in PyTorch, in one run.

Same network (ResAttNet3D-18, attention after layer3 and layer4, one input channel, two
classes; test/parity/torch_modules.py mirrors models/nets/resattnet3d.h), same input shape
and batch, same optimizer (SGD, lr 0.01, momentum 0.9), f32. Case by case, it runs

    gridnn-train --model resattnet3d --depth 18 --width W --input NxNxN --batch B
                 --steps WARMUP+STEPS+1 --optimizer sgd --momentum 0.9 --lr 0.01
                 --train-samples B*(WARMUP+STEPS+1) --val-samples 8 --eval-every <never>
                 --no-progress --metrics FILE --device DEV

and takes the differences of consecutive "seconds" of its "train" metrics lines (wall time
since the run started), drops the first WARMUP steps and any step with a validation in
between, and reports the median. This is the trainer's whole step: synthetic data generation
(on the loader's background prefetch thread, overlapped), forward, loss, backward, optimizer.
Then, in this process, the PyTorch module: forward on a random batch of the same shape,
F.cross_entropy, zero_grad, backward, SGD step; WARMUP steps, then the median of STEPS
(each timed alone; with torch.cuda.synchronize() before and after on the GPU). The two never
run at the same time. One table:

    case | gridnn s/step | torch s/step | torch/gridnn   (ratio > 1: gridnn faster)

and a geometric mean of the ratios.

    /usr/bin/python3 bench/compare_train_torch.py [--gridnn PATH] [--quick] [--device cuda]

Cases (ResAttNet3D-18, width / input / batch): w8 32^3 b8 (the README's default job), w16
64^3 b8 and w32 64^3 b4; --device cuda adds w16 128^3 b4 and w32 128^3 b4. --quick runs the
first case only, with fewer steps. --threads (default: os.cpu_count()) sets
torch.set_num_threads and OMP_NUM_THREADS / OPENBLAS_NUM_THREADS for gridnn-train.
OMP_WAIT_POLICY=passive is set for both sides (gridnn-train's environment, and this process's
before torch loads libgomp) unless the environment already sets OMP_WAIT_POLICY: spinning
OpenMP threads lose badly on a shared machine. The policy used is printed in the header, with
the load average at the start and the end; per-step min-max go to stderr.

--device cuda passes --device cuda (and --precision) to gridnn-train and moves the torch model
and data to the GPU; it exits with status 2 and a message when torch sees no GPU, and with
status 1 (showing gridnn-train's stderr) when gridnn-train fails, e.g. when it was built
without CUDA. --precision: fp32 turns TF32 off in torch (cuDNN and matmul), tf32 turns it
on, bf16 runs the torch step under torch.autocast(dtype=torch.bfloat16).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Both frameworks wait passively in OpenMP unless the environment says otherwise: spinning
# threads lose badly on a shared machine. libgomp reads this when it loads, so before torch.
USER_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "parity"))
from torch_modules import ResAttNet3D  # noqa: E402

DEPTH = 18
# (width, cubic input size, batch)
CPU_CASES = [(8, 32, 8), (16, 64, 8), (32, 64, 4)]
GPU_EXTRA_CASES = [(16, 128, 4), (32, 128, 4)]
SEARCH_DIRS = ["build/default/tools", "build/cpu/tools", "build/lead/tools"]


def case_name(width, size, batch):
    return f"resattnet3d-{DEPTH} w{width} {size}^3 b{batch}"


def find_gridnn(device):
    dirs = (["build-gpu/models"] if device == "cuda" else []) + SEARCH_DIRS
    for d in dirs:
        path = os.path.join(ROOT, d, "gridnn-train")
        if os.access(path, os.X_OK):
            return path
    sys.exit("compare_train_torch: no gridnn-train found in " + ", ".join(dirs) +
             " (build the gridnn-train target, or pass --gridnn PATH)")


def time_gridnn(binary, width, size, batch, warmup, steps, args, env, tmpdir):
    """Per-step wall seconds (after warm-up, no validation in between) from gridnn-train."""
    total = warmup + steps + 1  # step 1's time includes setup: it is never a difference
    metrics = os.path.join(tmpdir, f"w{width}_{size}_b{batch}.jsonl")
    cmd = [binary, "--model", "resattnet3d", "--depth", str(DEPTH), "--width", str(width),
           "--input", f"{size}x{size}x{size}", "--batch", str(batch), "--steps", str(total),
           "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.01",
           "--train-samples", str(batch * total), "--val-samples", "8",
           "--eval-every", str(total + 1), "--no-progress", "--metrics", metrics,
           "--device", args.device]
    if args.precision != "fp32":
        cmd += ["--precision", args.precision]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        print(f"compare_train_torch: gridnn-train timed out after {args.timeout} s:\n  "
              + " ".join(cmd) + "\n" + err, file=sys.stderr)
        sys.exit(1)
    if proc.returncode != 0:
        print(f"compare_train_torch: gridnn-train failed (exit status {proc.returncode}):\n  "
              + " ".join(cmd) + "\n--- stderr ---\n" + proc.stderr.rstrip() +
              "\n--- stdout (last lines) ---\n" + "\n".join(proc.stdout.splitlines()[-10:]),
              file=sys.stderr)
        sys.exit(1)
    times, prev, val_since = [], None, False
    with open(metrics) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("event") == "validation":
                val_since = True
            elif ev.get("event") == "train":
                if prev is not None and ev["step"] > warmup + 1 and not val_since:
                    times.append(ev["seconds"] - prev)
                prev, val_since = ev["seconds"], False
    if not times:
        sys.exit(f"compare_train_torch: no timed steps in {metrics}")
    return statistics.median(times), times


def time_torch(width, size, batch, warmup, steps, args):
    """Per-step wall seconds of the same training step in PyTorch."""
    dev = args.device
    torch.manual_seed(0)
    model = ResAttNet3D(DEPTH, width, 1, 2).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 1, size, size, size, device=dev)
    y = torch.randint(0, 2, (batch,), device=dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if args.precision == "bf16" \
        else None

    def step():
        if autocast:
            with autocast():
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    times = []
    for i in range(warmup + steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gridnn", default=None,
                    help="gridnn-train binary (default: the first of build-gpu/models (cuda "
                         "only), " + ", ".join(SEARCH_DIRS) + ")")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                    help="GPU math (gridnn-train --precision; torch TF32 flags / bf16 autocast)")
    ap.add_argument("--quick", action="store_true", help="first case only, fewer steps")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 3; 2 with --quick)")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps (default 8 on the CPU, 20 on the GPU; 4 with --quick)")
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="CPU threads for both: torch.set_num_threads, and OMP_NUM_THREADS and "
                         "OPENBLAS_NUM_THREADS for gridnn-train (default: os.cpu_count())")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per gridnn-train run")
    args = ap.parse_args()

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"compare_train_torch: --device cuda, but torch {torch.__version__} sees no GPU "
              f"(torch.version.cuda = {torch.version.cuda}); run it with a CUDA build of torch "
              "on a GPU machine", file=sys.stderr)
        sys.exit(2)
    if args.device == "cpu" and args.precision != "fp32":
        sys.exit("compare_train_torch: --precision applies to --device cuda only")
    binary = args.gridnn or find_gridnn(args.device)
    if not os.access(binary, os.X_OK):
        sys.exit(f"compare_train_torch: {binary} is not an executable")

    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 3)
    steps = args.steps or (4 if args.quick else (20 if args.device == "cuda" else 8))
    cases = CPU_CASES + (GPU_EXTRA_CASES if args.device == "cuda" else [])
    if args.quick:
        cases = cases[:1]
    cases = [c for c in cases if args.filter in case_name(*c)]
    if not cases:
        sys.exit(f"compare_train_torch: no case matches --filter {args.filter!r}")

    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))

    policy_from = "from the environment" if USER_WAIT_POLICY else "set by this script"
    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())
    gpu = f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""
    shown = os.path.relpath(binary, ROOT)
    shown = binary if shown.startswith("..") else shown
    print(f"# {shown} vs torch {torch.__version__}, device {args.device}{gpu}, "
          f"{args.precision}, threads {torch.get_num_threads()}, OMP_WAIT_POLICY="
          f"{env['OMP_WAIT_POLICY']} for both ({policy_from}); SGD momentum 0.9; {warmup} "
          f"warm-up + {steps} timed steps, medians; load average at start {load()}", flush=True)
    rows, start = [], time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="compare_train_torch.") as tmpdir:
        for width, size, batch in cases:
            name = case_name(width, size, batch)
            g, gt = time_gridnn(binary, width, size, batch, warmup, steps, args, env, tmpdir)
            t, tt = time_torch(width, size, batch, warmup, steps, args)
            if args.device == "cuda":
                torch.cuda.empty_cache()
            rows.append((name, g, t))
            print(f"  {name}: gridnn {g:.4f} s/step ({min(gt):.4f}-{max(gt):.4f}, "
                  f"{len(gt)} steps), torch {t:.4f} s/step ({min(tt):.4f}-{max(tt):.4f}, {len(tt)} steps)",
                  file=sys.stderr, flush=True)

    def fmt(s):
        return f"{s:.4f}" if s < 1 else f"{s:.3f}"

    w = max(len(r[0]) for r in rows)
    print(f"| {'case':<{w}} | gridnn s/step | torch s/step | torch/gridnn |")
    print(f"|{'-' * (w + 2)}|--------------:|-------------:|-------------:|")
    for name, g, t in rows:
        print(f"| {name:<{w}} | {fmt(g):>13} | {fmt(t):>12} | {t / g:>12.2f} |")
    geo = math.exp(sum(math.log(t / g) for _, g, t in rows) / len(rows))
    print(f"geometric mean of torch/gridnn over {len(rows)} cases: {geo:.2f}; "
          f"total {time.perf_counter() - start:.0f} s; load average at end {load()}")


if __name__ == "__main__":
    main()
