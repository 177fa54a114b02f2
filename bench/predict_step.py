#!/usr/bin/env python3
"""The cost model's predicted training step against gridnn-train's measured one, per grid.

For each case W:DxHxW:B (ResAttNet3D-18, width W, input DxHxW, global batch B) it

1. calibrates the machine as a user would before planning, once per process count, since two
   processes on one machine slow each other's memory-bound passes:
       gridnn-calibrate --grid 1x1 --width W --input DxHxW --batches 1,B --sweeps 5 --evict 64 --out F1
       mpiexec -n 2 gridnn-calibrate --grid 2x1 --width W --input DxHxW --batches 1,B --sweeps 5 --evict 64 --out F2
   (α and β of each communicator of F2 and of each of its operations, every layer timed forward + backward at local
   batches 1 and B, and each depth slab the two rows of 2x1 run with the copies around it,
   on 2 ranks both at once, the slower rank's time; each the median of 5 sweeps, each round
   after 64 MiB of other reads);
2. asks the planner for the step of every grid of P = 1 (from F1) and P = 2 (from F2), from gridnn-train's own
   description of its step (`--conv gridnn`; plan/cost_model.h: each layer's measured time
   at the rank's slab, or else scaled to the rank's share of the output, plus the α–β cost
   of every collective and halo):
       gridnn-plan --calibration F --calibration-kind row --conv gridnn --procs P --json ...
3. runs the step it predicts, alternating the grids for --rounds rounds (1x2 only where B >= 2):
       [mpiexec -n 2] gridnn-train --grid G --width W --input DxHxW --batch B --steps 13
                      --train-samples 32 --val-samples 2 --no-progress --profile --seed 3
   with one OpenMP thread a rank, and reads the profile's ms per step (the 12 steps after the
   first: the loader, the optimizer and the gradient all-reduce included).

It prints, per case and grid, the predicted compute and communication, the predicted step, the
measured step (median over the rounds, and its range) and the error (predicted / measured - 1).
With --by-part it then prints, per case and grid, where the two differ: the network by part
(the stem, max pooling, each residual stage, the attention layers, the head), the predicted
compute and communication of its layers against the slowest rank's forward + backward in the
profile of the median round (its communication, waiting included, beside), and the step's
own work the model has no layer for (the gradient sum, the optimizer, the rest).

    /usr/bin/python3 bench/predict_step.py [--bin-dir build/default/tools] [--case W:DxHxW:B ...]
                                           [--rounds R] [--by-part] [--json FILE]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CASES = ["16:96x96x96:2", "16:128x128x128:1", "16:64x64x64:4"]
GRIDS = ["1x1", "2x1", "1x2"]
ONE_THREAD = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def parse_case(text):
    m = re.fullmatch(r"(\d+):(\d+x\d+x\d+):(\d+)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"--case {text!r}: expected W:DxHxW:B, e.g. 16:96x96x96:2")
    return int(m.group(1)), m.group(2), int(m.group(3))


def run(cmd):
    out = subprocess.run(cmd, env=ONE_THREAD, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"predict_step: {' '.join(cmd)} exited with {out.returncode}:\n{(out.stdout + out.stderr)[-3000:]}")
    return out.stdout


def ranks(grid):
    r, c = grid.split("x")
    return int(r) * int(c)


def launch(grid, mpiexec):
    return [] if ranks(grid) == 1 else [mpiexec, "-n", str(ranks(grid))]


def calibrate(bins, mpiexec, procs, width, shape, batch, out):
    run(([mpiexec, "-n", str(procs)] if procs > 1 else []) + [
        os.path.join(bins, "gridnn-calibrate"), "--grid", f"{procs}x1", "--width", str(width), "--input", shape,
        "--batches", f"1,{batch}" if batch > 1 else "1", "--layer-reps", "3", "--sweeps", "5", "--evict", "64", "--out", out])


def predicted(bins, calibrations, width, shape, batch):
    """{grid: plan entry} for every grid of 1 and 2 processes, each from its own calibration."""
    out = {}
    for procs in (1, 2):
        kind = "row" if procs > 1 else "world"
        text = run([os.path.join(bins, "gridnn-plan"), "--calibration", calibrations[procs], "--calibration-kind", kind,
                    "--conv", "gridnn", "--model", "resattnet3d", "--depth", "18", "--width", str(width),
                    "--input", shape, "--batch", str(batch), "--procs", str(procs), "--json", "--explain"])
        for g in json.loads(text)["grids"]:
            out[f"{g['rows']}x{g['cols']}"] = g
    return out


def measured(bins, mpiexec, grid, width, shape, batch):
    """(ms per step, the --profile output)."""
    text = run(launch(grid, mpiexec) + [
        os.path.join(bins, "gridnn-train"), "--grid", grid, "--width", str(width), "--input", shape, "--batch",
        str(batch), "--steps", "13", "--train-samples", "32", "--val-samples", "2", "--no-progress", "--profile",
        "--seed", "3"])
    m = re.search(r"^\| step \| ([0-9.]+) \|", text, re.M)
    if not m:
        sys.exit(f"predict_step: no '| step |' row in gridnn-train --profile's output for {grid}")
    return float(m.group(1)), text


def part_of(layer):
    """The part of ResAttNet3D a layer (or a step's own entry) belongs to."""
    if layer in ("conv1", "bn1"):
        return "stem"
    if layer.startswith("layer"):
        return layer.split(".")[0]
    if layer.startswith("att"):
        return "attention"
    if layer in ("avgpool", "fc", "loss"):
        return "head"
    return layer  # maxpool, gradients


def by_part(plan, profile):
    """{part: [predicted compute ms, predicted comm ms, measured ms, measured comm ms]}."""
    parts = {}
    for l in plan["layers"]:
        e = parts.setdefault(part_of(l["layer"]), [0.0, 0.0, 0.0, 0.0])
        e[0] += l["compute_s"] * 1e3
        e[1] += sum(t["latency_s"] + t["bandwidth_s"] for t in l["terms"]) * 1e3
    own = {"(gradient_sync)": "gradients", "(optimizer)": "optimizer", "(data)": "rest", "(outside layers)": "rest"}
    table = profile[profile.find("| layer |"):]  # the per-layer table, after the kinds'
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] == "(step)" or not re.fullmatch(r"[0-9.]+", cells[1]):
            continue
        values = [float(c) for c in cells[1:] if c]
        if cells[0] in own:  # rank 0's
            parts.setdefault(own[cells[0]], [0.0, 0.0, 0.0, 0.0])[2] += values[0]
        elif len(values) % 3 == 0 and len(values) >= 3:  # fwd, bwd, comm per rank: the slowest rank's
            ranks = [values[i:i + 3] for i in range(0, len(values), 3)]
            e = parts.setdefault(part_of(cells[0]), [0.0, 0.0, 0.0, 0.0])
            e[2] += max(r[0] + r[1] for r in ranks)
            e[3] += max(r[2] for r in ranks)
    return parts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "default", "tools"),
                    help="the folder of gridnn-train, gridnn-plan and gridnn-calibrate")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--case", action="append", default=[], type=parse_case, metavar="W:DxHxW:B")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the grids (median)")
    ap.add_argument("--by-part", action="store_true", help="then where predicted and measured differ, by part")
    ap.add_argument("--json", default=None, metavar="FILE", help="write every number to FILE")
    args = ap.parse_args()
    cases = args.case or [parse_case(c) for c in DEFAULT_CASES]
    raw, breakdowns = [], []
    print("| case | grid | predicted compute ms | predicted comm ms | predicted step ms | measured step ms "
          "(range) | error |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for width, shape, batch in cases:
        with tempfile.TemporaryDirectory() as tmp:
            calibrations = {p: os.path.join(tmp, f"calibration_{p}.json") for p in (1, 2)}
            for procs, path in calibrations.items():
                calibrate(args.bin_dir, args.mpiexec, procs, width, shape, batch, path)
            plans = predicted(args.bin_dir, calibrations, width, shape, batch)
        grids = [g for g in GRIDS if int(g.split("x")[1]) <= batch]  # every batch shard needs a sample
        times, profiles = {g: [] for g in grids}, {g: [] for g in grids}
        for _ in range(args.rounds):
            for g in grids:
                ms, text = measured(args.bin_dir, args.mpiexec, g, width, shape, batch)
                times[g].append(ms)
                profiles[g].append(text)
        name = f"w{width} {shape.replace('x', '×', 2)} b{batch}"
        for g in grids:
            p, t = plans[g], times[g]
            median = statistics.median(t)
            median_round = min(range(len(t)), key=lambda i: abs(t[i] - median))
            breakdowns.append((name, g, by_part(p, profiles[g][median_round])))
            error = p["total_s"] * 1e3 / median - 1
            print(f"| {name} | {g} | {p['compute_s'] * 1e3:.1f} | {p['comm_s'] * 1e3:.2f} | {p['total_s'] * 1e3:.1f} | "
                  f"{median:.1f} ({min(t):.1f}-{max(t):.1f}) | {error:+.1%} |", flush=True)
            raw.append({"width": width, "input": shape, "batch": batch, "grid": g, "predicted": p,
                        "measured_ms": t})
    if args.by_part:
        for name, g, parts in breakdowns:
            print(f"\n{name}, {g}: predicted against measured by part (ms a step; measured: the slowest rank's "
                  "forward + backward in the median round, its communication and waiting beside)")
            print("| part | predicted compute | predicted comm | measured | measured comm | measured - predicted |")
            print("|---|--:|--:|--:|--:|--:|")
            for part, (pc, pm, m, mc) in parts.items():
                print(f"| {part} | {pc:.2f} | {pm:.2f} | {m:.2f} | {mc:.2f} | {m - pc - pm:+.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
