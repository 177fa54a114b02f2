#!/usr/bin/env python3
"""The per-rank memory model against the allocators, and --memory-limit's pre-flight check.

Usage: check_memory.py GRIDNN_TRAIN MPIEXEC WORKDIR

1. Prediction, an upper bound: gridnn-train runs two steps of several networks and grids with
   --metrics; on every "memory" line at the end (each rank) the predicted peak is at least the
   run's peak that the allocator measured, and at most 5% above it (docs/design.md §6a); two
   of them with --halo overlap (its parts' copies, micro-batches of two stages). One
   case runs twice: the measured peaks are the same bytes on every rank. Runs resumed from
   their checkpoint (1x1, 2x1) hold the same bound: setup reads the whole file.
2. Pre-flight: with --memory-limit exactly the predicted peak (and the peak plus one byte), on
   1x1, 2x1 and 1x2, every run completes under the allocators' cap. A limit below the predicted peak ends every rank of a 2-rank job with exit
   status 1 before any step, names the peak, the limit and what fits, and creates neither the
   metrics file nor the checkpoint folder; a limit above it trains under the allocators' cap.
   Malformed sizes are refused. With the check switched off (GRIDNN_MEMORY_PREFLIGHT=off, as
   a prediction too low would pass it), the allocators' cap ends the job mid-run, naming the
   layer.
3. gridnn-predict --memory-report on 1x1, 2x1 and 1x2: the same bound for a prediction job
   (setup reads the checkpoint: every tensor in it beside the network's own); with --explain
   (heatmaps of a batch of 4, one case over 2 transforms), the bound alone.
4. Planner: a case where memory changes the chosen grid, in gridnn-plan --memory-per-rank and
   in gridnn-train --grid auto --memory-limit.
"""
import json
import os
import re
import random
import shutil
import struct
import subprocess
import sys

OVER = 0.05  # the prediction is at most this much above the measured peak, and never below
# Validation after each step: the second step runs beside what the first validation left (the
# workspace grown to the validation's batch), as every step after a run's first validation does.
COMMON = ["--steps", "2", "--eval-every", "1", "--train-samples", "8", "--val-samples", "4", "--no-progress", "--seed",
          "3"]


def run(cmd, timeout=600, env=None):
    env = dict(env or os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def check_prediction(train, mpiexec, workdir, procs, args, common=COMMON):
    metrics = os.path.join(workdir, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    r = run([mpiexec, "-n", str(procs), train, *args, *common, "--metrics", metrics])
    if r.returncode != 0:
        return [f"{args}: exit {r.returncode}: {r.stderr[-800:]}"], {}
    lines = [json.loads(line) for line in open(metrics) if '"memory"' in line]
    failures = []
    peaks = {m["rank"]: m["measured_peak_bytes"] for m in lines if m["when"] == "end"}
    if len(lines) != 2 * procs:
        failures.append(f"{args}: {len(lines)} memory lines, expected {2 * procs}")
    for m in lines:
        p, q = m["predicted_peak_bytes"], m["measured_peak_bytes"]
        error = (p - q) / q
        print(f"  {' '.join(args):70s} rank {m['rank']} {m['when']:10s} predicted {p / 2**20:8.2f} MiB "
              f"measured {q / 2**20:8.2f} MiB ({100 * error:+.1f}%)")
        # The run's high-water mark: the first step's comes before the optimizer's state
        # exists and before validation, so it is lower than the prediction of the run.
        if m["when"] == "end" and not 0 <= error <= OVER:
            failures.append(f"{args} rank {m['rank']} {m['when']}: predicted {p}, measured {q} ({100 * error:+.2f}%)")
    return failures, peaks


def check_resume(train, mpiexec, workdir, procs, args):
    """A run resumed from its checkpoint (Adam's two moments in the file): setup reads the
    whole file beside the network and the optimizer's state, and is the peak of a small
    network; the bound holds there too."""
    ckpt = os.path.join(workdir, "resume-ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    with_ckpt = [*args, "--optimizer", "adam", "--checkpoint-dir", ckpt]
    r = run([mpiexec, "-n", str(procs), train, *with_ckpt, *COMMON])
    if r.returncode != 0:
        return [f"{with_ckpt}: exit {r.returncode}: {r.stderr[-800:]}"]
    third = list(COMMON)
    third[third.index("--steps") + 1] = "3"
    return check_prediction(train, mpiexec, workdir, procs, [*with_ckpt, "--resume"], third)[0]


def check_limit_at_peak(train, mpiexec, workdir, procs, args):
    """--memory-limit at exactly the predicted peak, and one byte more: the pre-flight check
    passes and no allocation crosses the cap (a prediction below the real peak would stop the
    run mid-step, naming the layer), the end's --memory-report included, with a block for
    every rank."""
    failures = []
    metrics = os.path.join(workdir, "limit.jsonl")
    peak = predicted_peak(train, mpiexec, workdir, None, [*args, *COMMON], procs)
    for limit in (peak, peak + 1):
        if os.path.exists(metrics):
            os.remove(metrics)
        r = run([mpiexec, "-n", str(procs), train, *args, *COMMON, "--memory-limit", str(limit), "--metrics", metrics,
                 "--memory-report"], timeout=300)
        if r.returncode != 0:
            failures.append(f"{args} --memory-limit {limit} (the predicted peak{'' if limit == peak else ' + 1'}): "
                            f"exit {r.returncode}: {(r.stdout + r.stderr)[-600:]}")
            continue
        blocks = re.findall(r"^rank (\d+): predicted peak .*\n  resident ", r.stdout, re.M)
        if sorted(int(b) for b in blocks) != list(range(procs)):
            failures.append(f"{args} --memory-limit {limit}: --memory-report has the blocks of ranks {blocks}, "
                            f"expected 0..{procs - 1}: {r.stdout[-600:]}")
        measured = max(json.loads(line)["measured_peak_bytes"] for line in open(metrics) if '"memory"' in line)
        print(f"  {' '.join(args):70s} --memory-limit {limit}: completed, measured peak {measured}")
    return failures


def predicted_peak(train, mpiexec, workdir, grid, args, procs=2):
    metrics = os.path.join(workdir, "peak.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    r = run([mpiexec, "-n", str(procs), train, *(["--grid", grid] if grid else []), *args, "--metrics", metrics])
    if r.returncode != 0:
        raise SystemExit(f"{grid}: exit {r.returncode}: {r.stderr[-600:]}")
    return max(json.loads(line)["predicted_peak_bytes"] for line in open(metrics) if '"memory"' in line)


def check_refusal(train, mpiexec, workdir):
    failures = []
    metrics = os.path.join(workdir, "refused.jsonl")
    ckpt = os.path.join(workdir, "refused-ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    if os.path.exists(metrics):
        os.remove(metrics)
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
    # Past the pre-flight check (switched off, as a prediction too low would pass it), the
    # allocators' cap ends the job mid-run: every rank exits, and the message names the layer.
    env = dict(os.environ, GRIDNN_MEMORY_PREFLIGHT="off")
    r = run([mpiexec, "-n", "2", train, "--grid", "1x2", "--memory-limit", str(peak * 3 // 4), *args], timeout=300,
            env=env)
    text = r.stdout + r.stderr
    if r.returncode == 0 or not re.search(r"memory limit: the (forward|backward) of (block )?\w", text):
        failures.append(f"cap crossed mid-run: exit {r.returncode}, expected a message naming the layer: {text[-800:]}")
    # Malformed sizes are refused with the accepted forms.
    for bad in ["6GB?", "-1", "0"]:
        r = run([train, "--memory-limit", bad, *base], timeout=60)
        if r.returncode == 0 or "KiB, MiB, GiB" not in r.stderr:
            failures.append(f"--memory-limit {bad}: exit {r.returncode}: {r.stderr[-300:]}")
    return failures


def write_nifti(path, shape, rng):
    """A float32 NIfTI-1 volume of uniform noise, scanner axes at 1 mm."""
    x, y, z = shape
    h = bytearray(352)
    struct.pack_into("<i", h, 0, 348)
    struct.pack_into("<8h", h, 40, 3, x, y, z, 1, 1, 1, 1)
    struct.pack_into("<hh", h, 70, 16, 32)  # datatype float32, 32 bits
    struct.pack_into("<8f", h, 76, 1, 1, 1, 1, 1, 1, 1, 1)
    struct.pack_into("<3f", h, 108, 352, 1, 0)  # vox_offset, scl_slope, scl_inter
    h[123] = 2  # millimetres
    struct.pack_into("<hh", h, 252, 1, 1)  # qform and sform: scanner
    for row, at in enumerate((280, 296, 312)):
        struct.pack_into("<4f", h, at, *[1.0 if i == row else 0.0 for i in range(4)])
    h[344:348] = b"n+1\0"
    with open(path, "wb") as f:
        f.write(bytes(h) + struct.pack(f"<{x * y * z}f", *(rng.random() for _ in range(x * y * z))))


def check_predict(train, mpiexec, workdir):
    """gridnn-predict --memory-report: each rank's exact bytes ("memory in bytes" line)."""
    predict = os.path.join(os.path.dirname(train), "gridnn-predict")
    ckpt, scans = os.path.join(workdir, "predict-ckpt"), os.path.join(workdir, "predict-scans")
    shutil.rmtree(ckpt, ignore_errors=True)
    os.makedirs(scans, exist_ok=True)
    r = run([train, "--input", "32x32x32", "--batch", "2", "--width", "8", "--steps", "1", "--train-samples", "2",
             "--val-samples", "2", "--no-progress", "--checkpoint-dir", ckpt, "--optimizer", "adam"])
    if r.returncode != 0:
        return [f"predict: training the checkpoint: exit {r.returncode}: {r.stderr[-600:]}"]
    rng = random.Random(5)
    for i in range(3):
        write_nifti(os.path.join(scans, f"scan{i}.nii"), (32, 32, 32), rng)
    failures = []
    for procs, grid in [(1, "1x1"), (2, "2x1"), (2, "1x2")]:
        failures += predict_within(mpiexec, procs, [predict, "--checkpoint", ckpt, "--data", scans, "--batch", "2",
                                                    "--grid", grid, "--out", os.path.join(workdir, "predictions.csv")],
                                   f"--grid {grid}", OVER)
    return failures + check_explain(predict, train, mpiexec, workdir)


def predict_within(mpiexec, procs, command, label, over):
    """Runs gridnn-predict COMMAND --memory-report on PROCS ranks and checks each rank's exact
    bytes ("memory in bytes" line): predicted at least measured, and at most OVER above it
    (None: the bound alone). Returns the failures."""
    r = run([mpiexec, "-n", str(procs), *command, "--memory-report"], timeout=300)
    found = re.findall(r"rank (\d+) predicted (\d+) measured (\d+)", r.stdout)
    if r.returncode != 0 or len(found) != procs:
        return [f"gridnn-predict {label}: exit {r.returncode}: {(r.stdout + r.stderr)[-600:]}"]
    failures = []
    for rank, p, q in found:
        error = (int(p) - int(q)) / int(q)
        print(f"  gridnn-predict {label:40s} rank {rank}: predicted {int(p) / 2**20:.2f} MiB measured "
              f"{int(q) / 2**20:.2f} MiB ({100 * error:+.2f}%)")
        if error < 0 or (over is not None and error > over):
            failures.append(f"gridnn-predict {label} rank {rank}: predicted {p}, measured {q}")
    return failures


def check_explain(predict, train, mpiexec, workdir):
    """gridnn-predict --explain: heatmaps of a batch of 4 whose activations outweigh the
    weights file, scans larger than the model's input; the bound only (the fusing's volumes
    after the step are a bound: at most four of a moment)."""
    ckpt, scans = os.path.join(workdir, "explain-ckpt"), os.path.join(workdir, "explain-scans")
    shutil.rmtree(ckpt, ignore_errors=True)
    os.makedirs(scans, exist_ok=True)
    r = run([train, "--input", "48x48x48", "--batch", "2", "--width", "4", "--steps", "1", "--train-samples", "2",
             "--val-samples", "2", "--no-progress", "--checkpoint-dir", ckpt])
    if r.returncode != 0:
        return [f"explain: training the checkpoint: exit {r.returncode}: {r.stderr[-600:]}"]
    rng = random.Random(9)
    for i in range(4):
        write_nifti(os.path.join(scans, f"scan{i}.nii"), (64, 56, 48), rng)
    failures = []
    for procs, grid, extra in [(1, "1x1", []), (1, "1x1", ["--explain-tta", "2"]), (2, "2x1", []), (2, "1x2", [])]:
        failures += predict_within(mpiexec, procs, [predict, "--checkpoint", ckpt, "--data", scans, "--batch", "4",
                                                    "--grid", grid, "--out", os.path.join(workdir, "explained.csv"),
                                                    "--explain", os.path.join(workdir, "heat"), *extra],
                                   f"--explain --grid {grid} {' '.join(extra)}", None)
    return failures


def check_planner(train, plan, mpiexec):
    """Batch 3 of 40^3 on 2 ranks: 1x2 gives one rank 2 whole samples, 2x1 each rank 3 half
    ones, so 2x1 needs a little less memory while the cost model prefers the pure batch 1x2. A
    limit between the two moves both gridnn-plan's best grid and --grid auto to 2x1 (the
    choice is checked; the run may then meet the allocators' cap, the limit being that tight)."""
    failures = []
    base = ["--input", "40x40x40", "--batch", "3"]
    r = run([plan, *base, "--procs", "2", "--conv", "gridnn", "--memory-per-rank", "1TiB"], timeout=120)
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line[:3] in ("1x2", "2x1")}
    if r.returncode != 0 or set(rows) != {"1x2", "2x1"} or "<- best" not in rows["1x2"]:
        return [f"gridnn-plan without a binding limit: expected 1x2 best: {r.stdout}{r.stderr}"]
    peak = {g: float(line.split()[-5 if "<- best" in line else -3]) for g, line in rows.items()}
    if not peak["2x1"] < peak["1x2"]:
        return [f"expected 2x1's peak below 1x2's: {peak}"]
    limit = f"{(peak['2x1'] + peak['1x2']) / 2:.2f}MiB"
    r = run([plan, *base, "--procs", "2", "--conv", "gridnn", "--memory-per-rank", limit], timeout=120)
    best = [line.split()[0] for line in r.stdout.splitlines() if "<- best" in line]
    if best != ["2x1"]:
        failures.append(f"gridnn-plan --memory-per-rank {limit}: expected 2x1 best: {r.stdout}{r.stderr}")
    # Just under 1x2's peak it fits only with --recompute blocks, and says so.
    r = run([plan, *base, "--procs", "2", "--conv", "gridnn", "--memory-per-rank", f"{peak['1x2'] - 0.02:.2f}MiB"],
            timeout=120)
    row = [line for line in r.stdout.splitlines() if line.startswith("1x2")]
    if not row or "recompute" not in row[0]:
        failures.append(f"gridnn-plan just under 1x2's peak: expected 'recompute' on its row: {r.stdout}{r.stderr}")
    args = [*base, *COMMON, "--train-samples", "6"]
    r = run([mpiexec, "-n", "2", train, "--grid", "auto", *args], timeout=300)
    if r.returncode != 0 or "--grid auto: 1x2" not in r.stdout:
        failures.append(f"--grid auto: expected 1x2: {(r.stdout + r.stderr)[:600]}")
    r = run([mpiexec, "-n", "2", train, "--grid", "auto", "--memory-limit", limit, *args], timeout=300)
    if "--grid auto: 2x1" not in r.stdout:
        failures.append(f"--grid auto --memory-limit {limit}: expected 2x1: {(r.stdout + r.stderr)[:600]}")
    return failures


def main():
    train, mpiexec, workdir = sys.argv[1:4]
    plan = os.path.join(os.path.dirname(train), "gridnn-plan")
    os.makedirs(workdir, exist_ok=True)
    cases = [
        (1, ["--input", "64x64x64", "--batch", "2"]),
        (1, ["--input", "40x48x32", "--batch", "3", "--optimizer", "adam", "--width", "8"]),
        (1, ["--depth", "34", "--input", "48x48x48", "--batch", "2", "--momentum", "0.9"]),
        (2, ["--grid", "2x1", "--input", "64x64x64", "--batch", "2"]),
        (2, ["--grid", "1x2", "--input", "56x48x40", "--batch", "4"]),
        (4, ["--grid", "2x2", "--input", "64x64x64", "--batch", "4", "--depth", "34"]),
        (2, ["--stages", "2", "--input", "64x64x64", "--batch", "4", "--micro-batches", "2"]),
        (4, ["--grid", "2x1", "--stages", "2", "--input", "64x64x64", "--batch", "4", "--micro-batches", "2"]),
        (4, ["--grid", "2x1", "--stages", "2", "--input", "64x64x64", "--batch", "4", "--micro-batches", "2",
             "--halo", "overlap"]),
        (2, ["--grid", "2x1", "--input", "48x40x40", "--batch", "3", "--precision", "bf16", "--halo", "overlap"]),
        (1, ["--input", "64x64x64", "--batch", "2", "--recompute", "blocks"]),
        (2, ["--grid", "2x1", "--input", "64x64x64", "--batch", "2", "--recompute", "blocks"]),
        (1, ["--model", "mlp", "--input", "16x16x16", "--batch", "4", "--optimizer", "adam"]),
        (2, ["--model", "mlp", "--grid", "2x1", "--input", "24x16x16", "--batch", "4"]),
    ]
    failures = []
    for procs, args in cases:
        failures += check_prediction(train, mpiexec, workdir, procs, args)[0]
    # Two identical runs: the same peak on every rank (the allocators count size classes, so
    # the loader thread's timing and the blocks that happen to be cached do not move it).
    again = (2, ["--grid", "1x2", "--input", "56x48x40", "--batch", "4"])
    first, second = (check_prediction(train, mpiexec, workdir, *again)[1] for _ in range(2))
    print(f"  two runs of {' '.join(again[1])}: measured peaks {first} and {second}")
    if first != second or not first:
        failures.append(f"two identical runs measured different peaks: {first} and {second}")
    for procs, args in [(1, ["--input", "48x40x40", "--batch", "2"]),
                        (2, ["--grid", "2x1", "--input", "48x40x40", "--batch", "2"]),
                        (2, ["--grid", "1x2", "--input", "40x48x32", "--batch", "4", "--depth", "34"])]:
        failures += check_limit_at_peak(train, mpiexec, workdir, procs, args)
    for procs, args in [(1, ["--input", "32x32x32", "--batch", "2", "--width", "8"]),
                        (2, ["--grid", "2x1", "--input", "32x32x32", "--batch", "2", "--width", "8"])]:
        failures += check_resume(train, mpiexec, workdir, procs, args)
    failures += check_refusal(train, mpiexec, workdir)
    failures += check_predict(train, mpiexec, workdir)
    failures += check_planner(train, plan, mpiexec)
    for f in failures:
        print("FAIL:", f)
    print("memory checks:", "failed" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
