#!/usr/bin/env python3
"""Time per training step of gridnn-train for pipeline stages combined with grids.

For each job (stages Ps, grid Pr x Pc, micro-batches M) it runs
    mpiexec -n Ps*Pr*Pc gridnn-train --stages Ps --grid PrxPc --micro-batches M ... --metrics F
and reads the per-step timestamps from the metrics file (JSON lines); it prints the median
seconds per step (steps after the first two), the speedup over the 1-process run and the
placement gridnn-train chose. Only the Python standard library is needed.

    python3 bench/pipeline_steps.py --bin build/default/tools/gridnn-train --procs 1 2 4
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def jobs(procs):
    """(stages, rows, cols) for every factorization of each P, stages in 1, 2, 4."""
    out = []
    for p in procs:
        for s in (1, 2, 4):
            if p % s:
                continue
            rest = p // s
            for r in range(1, rest + 1):
                if rest % r == 0:
                    out.append((s, r, rest // r))
    return out


def run(args, stages, rows, cols, micro):
    procs = stages * rows * cols
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = [args.bin, "--stages", str(stages), "--grid", f"{rows}x{cols}", "--micro-batches", str(micro),
               "--placement", args.placement, "--width", str(args.width), "--input", args.input,
               "--batch", str(args.batch), "--steps", str(args.steps), "--optimizer", "sgd", "--momentum", "0.9",
               "--lr", "0.05", "--no-progress", "--metrics", metrics, "--val-samples", "8"]
        if procs > 1:
            cmd = ["mpiexec", "-n", str(procs)] + cmd
        env = dict(os.environ, OMP_NUM_THREADS=str(max(1, args.cores // procs)), OMP_WAIT_POLICY="passive")
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            return None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"
        times = [json.loads(line)["seconds"] for line in open(metrics) if '"train"' in line]
        steps = [b - a for a, b in zip(times, times[1:])][1:]
        placement = next((l.split(": ", 1)[1] for l in out.stdout.splitlines() if l.startswith("pipeline")), "")
        return statistics.median(steps), placement


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="gridnn-train")
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--micro-batches", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--placement", default="even")
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--input", default="32x32x32")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="OpenMP threads shared by the ranks")
    args = ap.parse_args()
    base = None
    print(f"{'Ps':>3} {'grid':>5} {'M':>3} {'procs':>5} {'s/step':>8} {'speedup':>8}  placement")
    for stages, rows, cols in jobs(args.procs):
        for micro in args.micro_batches:
            if stages == 1 and micro > 1 and (rows, cols) != (1, 1):
                continue
            if args.batch // cols < micro:
                continue
            t, what = run(args, stages, rows, cols, micro)
            if t is None:
                print(f"{stages:>3} {rows}x{cols:<3} {micro:>3} {stages*rows*cols:>5}   failed: {what}")
                continue
            if base is None:
                base = t
            print(f"{stages:>3} {rows}x{cols:<3} {micro:>3} {stages*rows*cols:>5} {t:8.3f} {base/t:8.2f}  {what}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
