#!/usr/bin/env python3
"""The per-rank memory bound on configurations drawn at random (docs/design.md §6a).

Usage: check_memory_random.py GRIDNN_TRAIN MPIEXEC WORKDIR [--count N] [--seed S] [--standin]

A seeded generator draws small training jobs: ResAttNet3D-18 or -34 (width, attention, input
shape, channels, classes) or the MLP; the grid (1x1, 2x1, 1x2, 2x2) or 2 pipeline stages with
micro-batches; the batch; --recompute; the precision; the optimizer; with rows, --halo. Each runs two steps, each
followed by a validation of an uneven last batch, and on every rank the predicted peak must be at least the
allocator's measured peak and at most 5% above it (as check_memory.py on its fixed cases).
The model counts the loader's prefetched batch whether or not its thread has read it by the
moment of the peak; a job more than 5% above is run twice more and judged by each rank's
largest peak. --standin runs them on the device stand-in (GRIDNN_DEVICE_STANDIN=1, --device
cuda), whose allocator counts by the CUDA size classes. The same seed draws the same jobs; a
failure prints the command that reproduces it.
"""
import argparse
import json
import os
import random
import shlex
import subprocess
import sys

OVER = 0.05  # as check_memory.py


def draw(rng):
    """One job: (ranks, gridnn-train arguments)."""
    if rng.random() < 0.1:
        grid = rng.choice(["1x1", "2x1"])
        rows, cols = (int(v) for v in grid.split("x"))
        batch = cols * rng.choice([2, 4])
        side = lambda: rng.choice([16, 24, 32]) * rows  # noqa: E731
        args = ["--model", "mlp", "--grid", grid, "--input", f"{side()}x{rng.choice([16, 24])}x{rng.choice([16, 24])}",
                "--batch", str(batch)]
        return rows * cols, args, batch
    layout = rng.choice(["1x1", "2x1", "1x2", "2x2", "stages"])
    stages, micro = (2, rng.choice([1, 2])) if layout == "stages" else (1, 1)
    grid = "1x1" if layout == "stages" else layout
    rows, cols = (int(v) for v in grid.split("x"))
    depth = rng.choice([32, 40, 48, 56, 64])
    shape = f"{depth}x{rng.choice([24, 32, 40])}x{rng.choice([24, 32, 40])}"
    # Batch norm needs more than one value per channel where the volume is 1x1x1: a grid's
    # ranks normalize together, a micro-batch alone.
    batch = cols * micro * rng.choice([1, 2, 3] if micro == 1 else [2, 3])
    if batch == 1:
        batch = 2
    args = ["--grid", grid, "--input", shape, "--batch", str(batch),
            "--depth", rng.choice(["18", "34"]), "--width", str(rng.choice([8, 12, 16])),
            "--attention", rng.choice(["both", "layer3", "layer4", "none"]),
            "--in-channels", str(rng.choice([1, 2])), "--classes", str(rng.choice([2, 3])),
            "--recompute", rng.choice(["none", "blocks"]), "--precision", rng.choice(["fp32", "bf16"])]
    optimizer = rng.choice(["sgd", "sgd-momentum", "adam"])
    args += ["--optimizer", "sgd", "--momentum", "0.9"] if optimizer == "sgd-momentum" else ["--optimizer", optimizer]
    if stages > 1:
        args += ["--stages", str(stages), "--micro-batches", str(micro)]
    if rows > 1:
        args += ["--halo", rng.choice(["blocking", "overlap"])]
    return rows * cols * stages, args, batch


def run(train, mpiexec, workdir, procs, args, batch, env):
    """One run of the job: (command, error or None, {rank: (predicted, measured)})."""
    metrics = os.path.join(workdir, "random.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    # Two steps, each followed by a validation (as check_memory.py) that ends on an uneven
    # batch (one sample more than a batch).
    common = ["--steps", "2", "--eval-every", "1", "--train-samples", str(2 * batch), "--val-samples",
              str(batch + 1), "--no-progress", "--seed", "3", "--metrics", metrics]
    cmd = [mpiexec, "-n", str(procs), train, *args, *common]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    where = " ".join(shlex.quote(c) for c in cmd)
    if r.returncode != 0:
        return where, f"exit {r.returncode}: {where}\n{(r.stdout + r.stderr)[-800:]}", {}
    ends = [json.loads(line) for line in open(metrics) if '"memory"' in line and '"end"' in line]
    if len(ends) != procs:
        return where, f"{len(ends)} memory lines at the end, expected {procs}: {where}", {}
    return where, None, {m["rank"]: (m["predicted_peak_bytes"], m["measured_peak_bytes"]) for m in ends}


def check(train, mpiexec, workdir, procs, args, batch, env):
    where, failure, peaks = run(train, mpiexec, workdir, procs, args, batch, env)
    if failure:
        return [failure], []
    for _ in range(2):  # a loose rank again, for the prefetch's timing (see the docstring)
        if all((p - q) / q <= OVER for p, q in peaks.values()):
            break
        where, failure, again = run(train, mpiexec, workdir, procs, args, batch, env)
        if failure:
            return [failure], []
        peaks = {r: (p, max(q, again[r][1])) for r, (p, q) in peaks.items()}
    failures, errors = [], []
    for rank, (p, q) in sorted(peaks.items()):
        error = (p - q) / q
        errors.append(error)
        if error < 0:
            failures.append(f"rank {rank}: predicted {p}, measured {q} ({100 * error:+.2f}%): {where}")
        elif error > OVER:
            failures.append(f"rank {rank}: predicted {p}, measured at most {q} in three runs "
                            f"({100 * error:+.2f}%, more than {100 * OVER:.0f}% above): {where}")
    return failures, errors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("train")
    parser.add_argument("mpiexec")
    parser.add_argument("workdir")
    parser.add_argument("--count", type=int, default=30)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--standin", action="store_true")
    o = parser.parse_args()
    os.makedirs(o.workdir, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rng = random.Random(o.seed)
    failures, errors = [], []
    for i in range(o.count):
        procs, args, batch = draw(rng)
        if o.standin:
            env["GRIDNN_DEVICE_STANDIN"] = "1"
            args = [*args, "--device", "cuda"]
        f, e = check(o.train, o.mpiexec, o.workdir, procs, args, batch, env)
        errors += e
        span = f"{100 * min(e):+.2f}% to {100 * max(e):+.2f}%" if e else "no result"
        print(f"  {i + 1:3d} np {procs} {' '.join(args):150s} {span}")
        failures += f
    for f in failures:
        print("FAIL:", f)
    if errors:
        print(f"{len(errors)} rank reports from {o.count} jobs: predicted minus measured {100 * min(errors):+.2f}% to "
              f"{100 * max(errors):+.2f}% of the measured peak; {sum(e < 0 for e in errors)} below it, "
              f"{sum(e > OVER for e in errors)} more than {100 * OVER:.0f}% above it")
    print("random memory checks:", "failed" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
