#!/usr/bin/env python3
"""Memory per rank of a large-volume training step on several grids: predicted and measured.

Usage: bench/memory_scale.py [--train build/default/tools/gridnn-train] [--input 128x128x128]
                             [--batch 2] [--width 16] [--grids 1x1,2x1,4x1,1x2,2x2]
                             [--recompute none|blocks] [--torch]

For each grid, gridnn-train runs 2 steps of ResAttNet3D-18 on synthetic volumes (one thread
per rank) with --metrics; the table gives, for the rank with the largest peak, the peak the
memory model predicted, the allocator's measured peak (the run's high-water mark of bytes in
use), the process's peak RSS (ru_maxrss through /usr/bin/time), the median step time, and the
activation part of the predicted peak against the 1x1 run's divided by Pr (the depth split).
With --torch (run it with a Python that has torch, /usr/bin/python3 on Debian), PyTorch's
training step of the same network (bench/compare_train_torch.py's worker: one warm-up step and
one timed, one thread) runs too, and its process's peak RSS is printed beside the 1x1 row.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def run_grid(train, grid, args):
    rows, cols = (int(x) for x in grid.split("x"))
    procs = rows * cols
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = ["mpiexec", "-n", str(procs), "/usr/bin/time", "-f", "maxrss_kib %M", train, "--grid", grid,
               "--input", args.input, "--batch", str(args.batch), "--width", str(args.width), "--steps", "2",
               "--train-samples", str(2 * args.batch), "--val-samples", str(args.batch), "--no-progress",
               "--metrics", metrics, "--memory-report", "--recompute", args.recompute]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise SystemExit(f"{grid}: exit {r.returncode}\n{r.stderr[-1500:]}")
        events = [json.loads(line) for line in open(metrics)]
    memory = [e for e in events if e["event"] == "memory" and e["when"] == "end"]
    worst = max(memory, key=lambda e: e["predicted_peak_bytes"])
    steps = [e["seconds"] for e in events if e["event"] == "train"]
    step_s = steps[-1] - steps[-2] if len(steps) >= 2 else float("nan")
    rss = max(int(x) for x in re.findall(r"maxrss_kib (\d+)", r.stderr))
    resident = re.search(r"rank %d: predicted peak" % worst["rank"], r.stdout)
    return {"grid": grid, "rows": rows, "predicted": worst["predicted_peak_bytes"],
            "measured": worst["measured_peak_bytes"], "rss_kib": rss, "step_s": step_s,
            "report": r.stdout[resident.start():] if resident else ""}


def run_torch(args):
    """PyTorch's step of the same network and batch on one thread: its peak RSS and step time."""
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare_train_torch.py")
    spec = {"width": args.width, "input": [int(x) for x in args.input.split("x")], "batch": args.batch,
            "warmup": 1, "steps": 1, "threads": 1, "device": "cpu", "precision": "fp32"}
    cmd = ["/usr/bin/time", "-f", "maxrss_kib %M", sys.executable, worker, "--torch-worker", json.dumps(spec)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"torch: exit {r.returncode}\n{r.stderr[-1500:]}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    rss = max(int(x) for x in re.findall(r"maxrss_kib (\d+)", r.stderr))
    return rss, result["median_s"], result["rss_after_import_kib"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", default="build/default/tools/gridnn-train")
    p.add_argument("--input", default="128x128x128")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--grids", default="1x1,2x1,4x1,1x2,2x2")
    p.add_argument("--recompute", default="none", choices=["none", "blocks"])
    p.add_argument("--torch", action="store_true", help="PyTorch's peak RSS for the same step, one process")
    args = p.parse_args()
    results = [run_grid(args.train, g, args) for g in args.grids.split(",")]
    mib = 2.0**20
    print(f"ResAttNet3D-18 w{args.width}, input {args.input}, batch {args.batch}, 2 steps, 1 thread per rank, "
          f"--recompute {args.recompute}")
    print("| grid | predicted peak/rank MiB | measured MiB | error | peak RSS MiB | step s |")
    print("|---|--:|--:|--:|--:|--:|")
    for r in results:
        err = 100.0 * (r["predicted"] - r["measured"]) / r["measured"]
        print(f"| {r['grid']} | {r['predicted'] / mib:.1f} | {r['measured'] / mib:.1f} | {err:+.1f}% | "
              f"{r['rss_kib'] / 1024:.1f} | {r['step_s']:.2f} |")
    one = next((r for r in results if r["grid"] == "1x1"), None)
    if one:
        print("\nmeasured peak per rank against the 1x1 run's / Pr (Pc = 1 grids):")
        for r in results:
            if r["grid"].endswith("x1"):
                print(f"  {r['grid']}: {r['measured'] / mib:.1f} MiB, 1x1 / Pr = {one['measured'] / mib / r['rows']:.1f} MiB")
        print("\nthe 1x1 run's report:\n" + one["report"])
    if args.torch:
        rss, step_s, imported = run_torch(args)
        print(f"PyTorch {__import__('torch').__version__}, the same step in one process, 1 thread: peak RSS "
              f"{rss / 1024:.1f} MiB ({imported / 1024:.1f} MiB after importing torch), step {step_s:.2f} s"
              + (f"; gridnn 1x1: {one['rss_kib'] / 1024:.1f} MiB" if one else ""))


if __name__ == "__main__":
    main()
