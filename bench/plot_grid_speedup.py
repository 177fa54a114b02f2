#!/usr/bin/env python3
"""Speedup per grid shape from bench_grid's JSON.

    mpiexec -n 2 bench_grid ... --benchmark_out=p2.json --benchmark_out_format=json
    mpiexec -n 4 bench_grid ... --benchmark_out=p4.json --benchmark_out_format=json
    python3 bench/plot_grid_speedup.py p2.json p4.json -o bench/grid_speedup.png

Top panel: per P (one group of bars each), the speedup of every grid Pr x Pc over the
single-process run and over pure batch (1 x P). Middle panel, when the runs had bench_grid
--calibration: the median step measured beside the cost model's predicted step. Bottom panel:
received words per step (max over ranks) measured from the comm log beside the cost model's
prediction. Runs of different models or sizes in one file set are kept apart (one group per
model and P).
"""
import argparse
import json
import sys


def load(paths):
    """[(group label, [run dict, ...])] in file order; a run is one grid of one file."""
    groups = {}
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"{path}: not a bench_grid JSON file ({e}); write one with "
                     "--benchmark_out=FILE --benchmark_out_format=json")
        for b in doc.get("benchmarks", []):
            if b.get("error_occurred"):
                print(f"{path}: {b['name']} skipped: {b.get('error_message', '')}", file=sys.stderr)
                continue
            if b.get("run_type", "iteration") != "iteration":
                continue
            # name: grid/<model>/P<procs>/<Pr>x<Pc>/iterations:1/...; label: "<config> grid RxC ..."
            _, model, procs, shape = b["name"].split("/")[:4]
            label = b.get("label", "")
            config = label.split(" grid ")[0] if " grid " in label else model
            key = f"{config}, P = {procs[1:]}"
            groups.setdefault(key, []).append({
                "shape": shape + (" (1 proc)" if shape == "1x1" else ""),
                "vs_1proc": b.get("speedup_vs_1proc", 0.0),
                "vs_1xP": b.get("speedup_vs_1xP", 0.0),
                "words_meas": b.get("words_meas", 0.0),
                "words_pred": b.get("words_pred", 0.0),
                "step_s": b.get("step_s", 0.0),
                "step_s_pred": b.get("step_s_pred", 0.0),
            })
    return list(groups.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="+", help="bench_grid --benchmark_out files (JSON)")
    parser.add_argument("-o", "--output", default="grid_speedup.png", help="the PNG to write")
    parser.add_argument("--dpi", type=int, default=80)
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_grid_speedup.py needs matplotlib: sudo apt-get install -y python3-matplotlib "
              "(Debian's package serves /usr/bin/python3: run the script with that interpreter)",
              file=sys.stderr)
        return 2
    groups = load(args.json)
    if not groups:
        print("no bench_grid runs in " + ", ".join(args.json), file=sys.stderr)
        return 1

    # One x position per run, a gap between groups.
    xs, names, centers, at = [], [], [], 0.0
    for key, runs in groups:
        first = at
        for r in runs:
            xs.append(at)
            names.append(f"{r['shape']}\n{r['step_s'] * 1e3:.0f} ms")
            at += 1
        centers.append(((first + at - 1) / 2, key))
        at += 1
    runs = [r for _, rs in groups for r in rs]
    w = 0.38
    predicted = any(r["step_s_pred"] > 0 for r in runs)
    panels = 3 if predicted else 2
    fig, axes = plt.subplots(panels, 1, figsize=(max(6, 0.7 * len(xs) + 2), 3.5 * panels), sharex=True)
    top, bottom = axes[0], axes[-1]
    if predicted:
        middle = axes[1]
        middle.bar([x - w / 2 for x in xs], [r["step_s"] * 1e3 for r in runs], w, label="measured (median)")
        middle.bar([x + w / 2 for x in xs], [r["step_s_pred"] * 1e3 for r in runs], w,
                   label="predicted (calibrated cost model)")
        middle.set_ylabel("step (ms)")
        middle.legend(fontsize=8)
    top.bar([x - w / 2 for x in xs], [r["vs_1proc"] for r in runs], w, label="over 1 process")
    top.bar([x + w / 2 for x in xs], [r["vs_1xP"] for r in runs], w, label="over 1 x P (pure batch)")
    top.axhline(1.0, color="gray", linewidth=0.8)
    top.set_ylabel("speedup (median step)")
    top.legend(fontsize=8)
    log = any(r["words_meas"] > 0 for r in runs)  # log scale; the 1-process runs move nothing
    bottom.bar([x - w / 2 for x in xs], [r["words_meas"] for r in runs], w, log=log, label="measured (comm log)")
    bottom.bar([x + w / 2 for x in xs], [r["words_pred"] for r in runs], w, log=log, label="predicted (cost model)")
    bottom.set_ylabel("received words / step\n(max over ranks)")
    bottom.legend(fontsize=8)
    bottom.set_xticks(xs)
    bottom.set_xticklabels(names, fontsize=7)
    for c, key in centers:
        top.annotate(key, (c, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 4),
                     textcoords="offset points", ha="center", fontsize=7)
    fig.suptitle("bench_grid: training step per grid shape Pr x Pc", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.output, dpi=args.dpi)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
