#!/usr/bin/env python3
"""How far each part of a one-thread gridnn step keeps it from the machine's sgemm rate.

For every case W:DxHxW:B (ResAttNet3D-18, as in compare_train_torch.py) and each of --rounds
rounds, it times this machine's one-thread sgemm (compare_train_torch.py's sgemm worker: the
faster of torch.mm and oneDNN's dnnl_sgemm, 2048^3, the best of 5) and right after it runs

    gridnn-train --model resattnet3d --depth 18 --width W --input DxHxW --batch B --steps 11
                 --optimizer sgd --momentum 0.9 --lr 0.001 --train-samples 60 --val-samples 8
                 --eval-every 13 --no-progress --profile

with OMP_NUM_THREADS=1, and reads the profile's milliseconds per step (core/profile.h: the
steps after the first). The step's convolution and linear FLOPs are counted from the network
as compare_train_torch.py counts them. Each row prints the FLOPs over the sgemm rate three
ways:

    step        the whole step (what compare_train_torch.py's gridnn/sgemm 1t column reports);
    no reorder  the step less its reorders between gridnn's layout and oneDNN's: the most that
                keeping weights and activations in the convolutions' layouts could give;
    conv only   the convolutions alone: the most that any change outside the convolution
                kernels could give.

    /usr/bin/python3 bench/step_ceiling.py [--gridnn PATH] [--case W:DxHxW:B ...] [--rounds R]
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_train_torch as bench  # noqa: E402  (the network, FLOP count, sgemm worker)

DEFAULT_CASES = ["12:72x88x64:3", "16:56x64x48:6", "20:48x56x40:4", "24:40x48x40:4", "16:64x80x64:2"]
ONE_THREAD = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", OPENBLAS_NUM_THREADS="1",
                  MKL_NUM_THREADS="1")


def run(cmd):
    out = subprocess.run(cmd, env=ONE_THREAD, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"step_ceiling: {' '.join(cmd)} exited with {out.returncode}:\n{out.stderr[-2000:]}")
    return out.stdout + out.stderr


def sgemm_rate():
    """One-thread sgemm GFLOP/s: the faster library's."""
    text = run([sys.executable, bench.__file__, "--sgemm-worker"])
    return bench.fastest(json.loads(text.strip().splitlines()[-1]))


def profile(binary, width, dhw, batch):
    """The profile's ms per step by kind of work."""
    text = run([binary, "--model", "resattnet3d", "--depth", str(bench.DEPTH), "--width", str(width), "--input",
                "x".join(map(str, dhw)), "--batch", str(batch), "--steps", "11", "--optimizer", "sgd", "--momentum",
                "0.9", "--lr", "0.001", "--train-samples", "60", "--val-samples", "8", "--eval-every", "13",
                "--no-progress", "--profile"])
    ms = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| (\w+) \| ([\d.]+) \|", text, re.M)}
    for kind in ("step", "reorder", "convolution"):
        if kind not in ms:
            sys.exit(f"step_ceiling: no '{kind}' row in gridnn-train's --profile table")
    return ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gridnn", help="the gridnn-train binary (default: the first built one)")
    ap.add_argument("--case", action="append", type=bench.parse_case, help="W:DxHxW:B (repeatable)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds wants a positive count, got {args.rounds}")
    binary = args.gridnn or bench.find_gridnn("cpu")
    cases = args.case or [bench.parse_case(c) for c in DEFAULT_CASES]
    print("| case | GFLOP/step | sgemm 1t GFLOP/s | step ms | convolution | reorder | batchnorm_relu "
          "| share: step | no reorder | conv only |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for width, dhw, batch in cases:
        bench.torch.manual_seed(0)
        model = bench.ResAttNet3D(bench.DEPTH, width, 1, 2).train()
        gflop = bench.step_flops(model, bench.torch.randn(batch, 1, *dhw)) * 1e-9
        for _ in range(args.rounds):
            sgemm = sgemm_rate()
            ms = profile(binary, width, dhw, batch)
            share = lambda t: f"{100 * gflop / (t * 1e-3) / sgemm:.0f}%"  # noqa: E731
            print(f"| {bench.case_name(width, dhw, batch)} | {gflop:.2f} | {sgemm:.0f} | {ms['step']:.1f} "
                  f"| {ms['convolution']:.1f} | {ms['reorder']:.1f} | {ms.get('batchnorm_relu', 0):.1f} "
                  f"| {share(ms['step'])} | {share(ms['step'] - ms['reorder'])} | {share(ms['convolution'])} |",
                  flush=True)


if __name__ == "__main__":
    main()
