#!/usr/bin/env python3
"""Localization lift of several explanation settings over trained simulated-atrophy runs.

For every run folder given (each holding ckpt/, the checkpoints of a `scripts/run_atrophy.sh`
or `gridnn-train` run on the dataset DATA made by scripts/make_atrophy_dataset.py), and every
setting METHOD:LAYERS[:TTA] (e.g. gradcam:att4, hirescam:layer3+:4), this runs
`gridnn-predict --explain` on the test split for class 1 and scores the heatmaps with
scripts/atrophy_lift.py (the share of the hottest 1% of brain voxels inside the dilated
atrophy region over that region's share of the brain; 1 = chance). It prints one markdown
table: per run (grid and seed from the checkpoint), test accuracy and AUC, and the mean lift
per setting; then per setting the number of runs at or above --target; and writes --json.

Usage: bench/explain_lift.py DATA RUN_DIR... [--settings gradcam:att4,hirescam:layer3+]
           [--predict build/default/tools/gridnn-predict] [--grid 1x1] [--target 3] [--json F]
Each run is predicted on --grid (default 1x1; with more ranks under `mpiexec -n`), which does
not change the maps beyond 1e-5. Exit status: 0 when every run was scored, 1 otherwise.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd, what):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(f"explain_lift: {what} failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}\n")
        return None, time.time() - t
    return p.stdout, time.time() - t


def parse_setting(text):
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise argparse.ArgumentTypeError(f"setting '{text}': give METHOD:LAYERS[:TTA], e.g. hirescam:layer3+:4")
    tta = int(parts[2]) if len(parts) == 3 else 1
    return dict(name=text, method=parts[0], layer=parts[1], tta=tta)


def checkpoint_config(run_dir):
    """The grid and seed the run trained with (from its newest checkpoint's metadata)."""
    ckpt = os.path.join(run_dir, "ckpt")
    files = sorted(f for f in os.listdir(ckpt) if re.fullmatch(r"step-\d+\.safetensors", f)) if os.path.isdir(
        ckpt) else []
    if not files:
        return None
    with open(os.path.join(ckpt, files[-1]), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(f.read(n)).get("__metadata__", {})
    for value in meta.values():
        try:
            config = json.loads(value)
        except (ValueError, TypeError):
            continue
        if isinstance(config, dict) and "seed" in config:
            return config
    return {}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="the dataset folder (manifest.csv, masks/)")
    p.add_argument("runs", nargs="+", help="run folders, each with ckpt/")
    p.add_argument("--settings", default="gradcam:att4", help="comma-separated METHOD:LAYERS[:TTA]")
    p.add_argument("--predict", default=os.path.join(ROOT, "build/default/tools/gridnn-predict"))
    p.add_argument("--grid", default="1x1")
    p.add_argument("--target", type=float, default=3.0, help="the lift a run should reach (default 3)")
    p.add_argument("--out", default=None, help="where heatmaps go (default RUN/explain-<setting>)")
    p.add_argument("--keep", action="store_true", help="keep the heatmaps")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    # A layer list has commas too: split settings at commas that start a new METHOD:.
    settings = [parse_setting(s) for s in re.split(r",(?=[a-z+]+:)", a.settings)]
    m = re.fullmatch(r"(\d+)x(\d+)", a.grid)
    if not m:
        p.error(f"--grid must be PrxPc, got '{a.grid}'")
    procs = int(m.group(1)) * int(m.group(2))
    launch = ["mpiexec", "-n", str(procs)] if procs > 1 else []
    manifest = os.path.join(a.data, "manifest.csv")
    if not os.path.exists(manifest):
        sys.exit(f"explain_lift: {manifest}: no such file")

    rows, ok = [], True
    for run_dir in a.runs:
        config = checkpoint_config(run_dir)
        if config is None:
            sys.stderr.write(f"explain_lift: {run_dir}: no checkpoint in {run_dir}/ckpt\n")
            ok = False
            continue
        row = dict(run=run_dir, grid=config.get("grid", "?"), seed=config.get("seed", "?"), lift={}, seconds={})
        for s in settings:
            safe = re.sub(r"[^A-Za-z0-9.+]+", "_", s["name"])
            heat = os.path.join(a.out or run_dir, f"explain-{safe}")
            csv_out = os.path.join(a.out or run_dir, f"explain-{safe}.csv")
            out, seconds = run(launch + [a.predict, "--checkpoint", os.path.join(run_dir, "ckpt"), "--data", manifest,
                                         "--split", "test", "--out", csv_out, "--explain", heat, "--explain-class", "1",
                                         "--explain-method", s["method"], "--explain-layer", s["layer"],
                                         "--explain-tta", str(s["tta"]), "--grid", a.grid],
                               f"gridnn-predict ({s['name']})")
            if out is None:
                ok = False
                continue
            metrics = json.load(open(csv_out[:-4] + "_metrics.json"))
            row["accuracy"], row["auc"] = metrics["accuracy"], metrics.get("auc")
            lift_out, _ = run([sys.executable, os.path.join(ROOT, "scripts/atrophy_lift.py"), a.data, heat, "--split",
                               "test", "--label", "1", "--json"], "atrophy_lift.py")
            if lift_out is None:
                ok = False
                continue
            row["lift"][s["name"]] = json.loads(lift_out)["mean_lift"]
            row["seconds"][s["name"]] = round(seconds, 1)
            if not a.keep:
                subprocess.run(["rm", "-rf", heat])
            print(f"explain_lift: {run_dir} {s['name']}: lift {row['lift'][s['name']]:.2f} ({seconds:.0f} s)",
                  file=sys.stderr)
        rows.append(row)

    names = [s["name"] for s in settings]
    print("| run | grid | seed | test accuracy | test AUC | " + " | ".join(f"lift {n}" for n in names) + " |")
    print("|---|---|--:|--:|--:|" + "--:|" * len(names))
    for r in rows:
        lifts = " | ".join(f"{r['lift'][n]:.2f}" if n in r["lift"] else "-" for n in names)
        acc = f"{r['accuracy']:.3f}" if "accuracy" in r else "-"
        auc = f"{r['auc']:.3f}" if r.get("auc") is not None else "-"
        print(f"| {os.path.basename(os.path.normpath(r['run']))} | {r['grid']} | {r['seed']} | {acc} | {auc} | {lifts} |")
    print()
    for n in names:
        scored = [r["lift"][n] for r in rows if n in r["lift"]]
        for grid in sorted({r["grid"] for r in rows}):
            on = [r["lift"][n] for r in rows if n in r["lift"] and r["grid"] == grid]
            print(f"{n} on {grid}: {sum(v >= a.target for v in on)} of {len(on)} runs at lift >= {a.target:g}"
                  + (f", mean {sum(on) / len(on):.2f}, min {min(on):.2f}" if on else ""))
        if not scored:
            ok = False
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(settings=names, target=a.target, runs=rows), f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
