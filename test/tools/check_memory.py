#!/usr/bin/env python3
"""The per-rank memory model against the allocators, and --memory-limit's pre-flight check.

Usage: check_memory.py GRIDNN_TRAIN MPIEXEC WORKDIR

1. Prediction: gridnn-train runs two steps of several networks and grids with --metrics; every
   "memory" line at the end (each rank) must have its predicted peak within 10% of the run's
   peak that the allocator measured (docs/design.md §6a).
2. Pre-flight: a limit below the predicted peak ends every rank of a 2-rank job with exit
   status 1 before any step, names the peak, the limit and what fits, and creates neither the
   metrics file nor the checkpoint folder; a limit above it trains under the allocators' cap.
   Malformed sizes are refused.
"""
import json
import os
import subprocess
import sys

TOLERANCE = 0.10
COMMON = ["--steps", "2", "--train-samples", "8", "--val-samples", "4", "--no-progress", "--seed", "3"]


def run(cmd, timeout=600):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def check_prediction(train, mpiexec, workdir, procs, args):
    metrics = os.path.join(workdir, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    r = run([mpiexec, "-n", str(procs), train, *args, *COMMON, "--metrics", metrics])
    if r.returncode != 0:
        return [f"{args}: exit {r.returncode}: {r.stderr[-800:]}"]
    lines = [json.loads(line) for line in open(metrics) if '"memory"' in line]
    failures = []
    if len(lines) != 2 * procs:
        failures.append(f"{args}: {len(lines)} memory lines, expected {2 * procs}")
    for m in lines:
        p, q = m["predicted_peak_bytes"], m["measured_peak_bytes"]
        error = (p - q) / q
        print(f"  {' '.join(args):70s} rank {m['rank']} {m['when']:10s} predicted {p / 2**20:8.2f} MiB "
              f"measured {q / 2**20:8.2f} MiB ({100 * error:+.1f}%)")
        # The run's high-water mark: the first step's comes before the optimizer's state
        # exists and before validation, so it is lower than the prediction of the run.
        if m["when"] == "end" and abs(error) > TOLERANCE:
            failures.append(f"{args} rank {m['rank']} {m['when']}: predicted {p}, measured {q} ({100 * error:+.1f}%)")
    return failures


def predicted_peak(train, mpiexec, workdir, grid, args):
    metrics = os.path.join(workdir, "peak.jsonl")
    r = run([mpiexec, "-n", "2", train, "--grid", grid, *args, "--metrics", metrics])
    if r.returncode != 0:
        raise SystemExit(f"{grid}: exit {r.returncode}: {r.stderr[-600:]}")
    return max(json.loads(line)["predicted_peak_bytes"] for line in open(metrics) if '"memory"' in line)


def check_refusal(train, mpiexec, workdir):
    failures = []
    metrics = os.path.join(workdir, "refused.jsonl")
    ckpt = os.path.join(workdir, "refused-ckpt")
    base = ["--input", "64x48x48", "--batch", "2", *COMMON]
    peak = predicted_peak(train, mpiexec, workdir, "1x2", base)
    args = [*base, "--metrics", metrics, "--checkpoint-dir", ckpt]
    # Below the predicted peak: every rank ends before any step, and nothing is written.
    r = run([mpiexec, "-n", "2", train, "--grid", "1x2", "--memory-limit", str(peak - 2**20), *args], timeout=300)
    text = r.stdout + r.stderr
    if r.returncode != 1:
        failures.append(f"refusal: exit status {r.returncode}, expected 1: {text[-600:]}")
    for needed in ["--memory-limit ", "would need", "Nothing was run or written", "fits"]:
        if needed not in text:
            failures.append(f"refusal: the message lacks '{needed}': {text[-800:]}")
    if "step 1" in text:
        failures.append("refusal: a step ran")
    for path in (metrics, ckpt):
        if os.path.exists(path):
            failures.append(f"refusal: {path} was created")
    # Above it, the same job trains under the allocators' cap.
    r = run([mpiexec, "-n", "2", train, "--grid", "1x2", "--memory-limit", str(peak + 8 * 2**20), *base], timeout=300)
    if r.returncode != 0:
        failures.append(f"under the limit: exit {r.returncode}: {(r.stdout + r.stderr)[-600:]}")
    # Malformed sizes are refused with the accepted forms.
    for bad in ["6GB?", "-1", "0"]:
        r = run([train, "--memory-limit", bad, *base], timeout=60)
        if r.returncode == 0 or "KiB, MiB, GiB" not in r.stderr:
            failures.append(f"--memory-limit {bad}: exit {r.returncode}: {r.stderr[-300:]}")
    return failures


def main():
    train, mpiexec, workdir = sys.argv[1:4]
    os.makedirs(workdir, exist_ok=True)
    cases = [
        (1, ["--input", "64x64x64", "--batch", "2"]),
        (1, ["--input", "40x48x32", "--batch", "3", "--optimizer", "adam", "--width", "8"]),
        (1, ["--depth", "34", "--input", "48x48x48", "--batch", "2", "--momentum", "0.9"]),
        (2, ["--grid", "2x1", "--input", "64x64x64", "--batch", "2"]),
        (2, ["--grid", "1x2", "--input", "56x48x40", "--batch", "4"]),
        (4, ["--grid", "2x2", "--input", "64x64x64", "--batch", "4", "--depth", "34"]),
    ]
    failures = []
    for procs, args in cases:
        failures += check_prediction(train, mpiexec, workdir, procs, args)
    failures += check_refusal(train, mpiexec, workdir)
    for f in failures:
        print("FAIL:", f)
    print("memory checks:", "failed" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
