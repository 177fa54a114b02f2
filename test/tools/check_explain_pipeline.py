#!/usr/bin/env python3
"""Test explain_pipeline: the simulated-atrophy recipe (scripts/run_atrophy.sh) in small,
end to end: scripts/make_atrophy_dataset.py (16 subjects at 4 mm), gridnn-train with the
recipe's flags for a few steps, gridnn-predict --explain on the test split,
scripts/atrophy_lift.py and scripts/explain_sanity.py (2 scans, 3 stages). It checks the
pipeline, not how good the model or its heatmaps are: every file exists, every heatmap has
its scan's grid, the numbers are finite, and both JSON reports have their fields.

Usage: check_explain_pipeline.py SCRIPTS_DIR GRIDNN_TRAIN GRIDNN_PREDICT WORK_DIR
Exits 77 (skipped) when numpy, scipy, nibabel or mricron-data's templates are missing,
unless GRIDNN_REQUIRE_PARITY=1 (set by CI): then it fails.
"""
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time

from atrophy_check_support import check, failures, require_tools

SUBJECTS, SPACING, SEED, STEPS = 16, 4, 0, 6
INPUT = "48x64x48"  # 4 mm canonical volumes are 46x55x46; the recipe's multiples of 16


require_tools("explanation pipeline")
import numpy as np
import nibabel as nib

def run(what, cmd, timings):
    t = time.time()
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    timings[what] = time.time() - t
    if res.returncode != 0:
        print(res.stdout + res.stderr, end="")
    check(res.returncode == 0, f"{what} exited {res.returncode} ({timings[what]:.1f} s)")
    return res


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def same_grid(a, b):
    return a.shape[:3] == b.shape[:3] and np.allclose(a.affine, b.affine, atol=1e-4)


def check_heatmaps(heat_dir, scans, what, paths=None):
    """Every scan's heatmap (NIfTI and PNG; <name>_gradcam.nii.gz, or `paths`) exists, on its
    scan's grid, finite, in [0, 1]."""
    bad = []
    for i, (name, scan) in enumerate(scans):
        nii = paths[i] if paths else os.path.join(heat_dir, name + "_gradcam.nii.gz")
        if not os.path.exists(nii) or not os.path.exists(nii[: -len(".nii.gz")] + ".png"):
            bad.append(f"{name}: missing")
            continue
        h = nib.load(nii)
        v = np.asarray(h.dataobj, dtype=np.float64)
        if not same_grid(h, scan):
            bad.append(f"{name}: grid {h.shape} {np.round(h.affine, 3).tolist()} is not the scan's {scan.shape}")
        elif not (np.isfinite(v).all() and v.min() >= 0 and v.max() <= 1):
            bad.append(f"{name}: values not finite in [0, 1] ({v.min()}..{v.max()})")
    check(not bad, f"{what}: {len(scans)} heatmaps (.nii.gz and .png) on their scans' grids, finite, in [0, 1]"
          + (f": {bad}" if bad else ""))


def main():
    scripts, train_exe, predict_exe, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    py = sys.executable
    timings = {}
    data, ckpt, heat = (os.path.join(work, d) for d in ("data", "ckpt", "heat"))

    # 1. The dataset.
    res = run("make_atrophy_dataset.py", [py, os.path.join(scripts, "make_atrophy_dataset.py"), data,
                                          "--subjects", str(SUBJECTS), "--spacing", str(SPACING), "--seed",
                                          str(SEED), "--severity", "0.3,0.5", "--jobs", "2"], timings)
    if res.returncode != 0:
        return
    manifest = os.path.join(data, "manifest.csv")
    with open(manifest, newline="") as f:
        rows = list(csv.DictReader(f))
    test = [r for r in rows if r["split"] == "test"]
    check(len(rows) == SUBJECTS and len(test) >= 2, f"manifest: {len(rows)} rows, {len(test)} test")

    def scan_of(r):
        return r["path"][: -len(".nii.gz")], nib.load(os.path.join(data, r["path"]))

    # 2. Training with the recipe's flags (scripts/run_atrophy.sh), a few steps.
    metrics = os.path.join(work, "metrics.jsonl")
    res = run("gridnn-train", [train_exe, "--data", manifest, "--input", INPUT, "--fit", "crop", "--width", "2",
                               "--batch", "4", "--steps", str(STEPS), "--optimizer", "adamw", "--lr", "0.001",
                               "--schedule", "cosine", "--warmup-steps", "2", "--no-augment", "--cache-data",
                               "--seed", str(SEED), "--checkpoint-dir", ckpt, "--metrics", metrics,
                               "--no-progress"], timings)
    if res.returncode != 0:
        return
    saved = sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))
    check(len(saved) >= 1, f"a checkpoint in {ckpt} ({saved})")

    # 3. Prediction and Grad-CAM of the test split, as the recipe runs them.
    test_csv = os.path.join(work, "test.csv")
    res = run("gridnn-predict --explain", [predict_exe, "--checkpoint", ckpt, "--data", manifest, "--split", "test",
                                           "--out", test_csv, "--explain", heat, "--explain-class", "1"], timings)
    if res.returncode != 0:
        return
    with open(test_csv, newline="") as f:
        pred = list(csv.DictReader(f))
    check(len(pred) == len(test) and all(p["error"] == "" and finite(float(p["prob_0"]))
                                         and finite(float(p["prob_1"])) for p in pred),
          f"test.csv: {len(pred)} rows with finite probabilities, no errors")
    with open(os.path.join(work, "test_metrics.json")) as f:
        tm = json.load(f)
    check(all(k in tm for k in ("samples", "accuracy", "auc", "sensitivity", "specificity")),
          f"test_metrics.json has the fields run_atrophy.sh reads ({sorted(tm)})")
    check_heatmaps(heat, [scan_of(r) for r in test], "gridnn-predict --explain")

    # 4. The localization lift.
    res = run("atrophy_lift.py", [py, os.path.join(scripts, "atrophy_lift.py"), data, heat, "--split", "test",
                                  "--label", "1", "--json"], timings)
    if res.returncode == 0:
        lift = json.loads(res.stdout)
        subjects = lift.get("subjects", [])
        fields = ("scan", "lift", "top_share", "region_share", "brain_voxels", "top_voxels")
        check(all(k in lift for k in ("split", "label", "top", "dilate", "mean_lift", "subjects"))
              and finite(lift["mean_lift"]) and len(subjects) == sum(r["label"] == "1" for r in test)
              and all(all(k in s for k in fields) and finite(s["lift"]) for s in subjects),
              f"lift JSON: mean_lift {lift.get('mean_lift')} over {len(subjects)} scans, fields {list(fields)}")

    # 5. The model-randomization sanity check: 2 scans, 3 stages, brain voxels.
    help_text = subprocess.run([predict_exe, "--help"], capture_output=True, text=True).stdout
    methods = ["gradcam", "gradcam++", "hirescam"] if "--explain-method" in help_text else ["gradcam"]
    sanity_dir, sanity_json = os.path.join(work, "sanity"), os.path.join(work, "sanity.json")
    res = run("explain_sanity.py", [py, os.path.join(scripts, "explain_sanity.py"), "--checkpoint", ckpt,
                                    "--data", manifest, "--split", "test", "--label", "1", "--limit", "2",
                                    "--stages", "3", "--methods", ",".join(methods), "--predict", predict_exe,
                                    "--mask", os.path.join(data, "masks", "{name}_brain.nii.gz"),
                                    "--out", sanity_dir, "--json", sanity_json], timings)
    if res.returncode != 0:
        return
    print(res.stdout, end="")
    check(all(m + ": " in res.stdout for m in methods) and "stage" in res.stdout, "the sanity table is printed")
    with open(sanity_json) as f:
        s = json.load(f)
    top = ("checkpoint", "methods", "blocks", "cascade", "judged_from_stage", "scans", "stages", "verdicts",
           "threshold", "seed")
    check(all(k in s for k in top), f"sanity JSON has {list(top)}")
    check(s.get("cascade", [None])[0] == "fc" and s.get("cascade", [None])[-1] == "stem"
          and len(s.get("cascade", [])) == 8, f"cascade fc .. stem, 8 blocks ({s.get('cascade')})")
    check(len(s.get("scans", [])) == 2 and len(s.get("stages", [])) == 3, "2 scans, 3 stages")
    check(set(s.get("verdicts", {})) == set(methods)
          and all(v in ("PASS", "FAIL", "NO SIGNAL", "not run") for v in s["verdicts"].values()),
          f"a verdict per method ({s.get('verdicts')})")
    sanity_scans = [scan_of(r) for r in test if r["label"] == "1"][:2]
    numbers_ok = True
    for st in s.get("stages", []):
        check(st.get("randomized") == s["cascade"][: st["stage"]] and os.path.exists(st["checkpoint"]),
              f"stage {st['stage']}: randomized {st.get('randomized')}, {os.path.basename(st['checkpoint'])}")
        for m in methods:
            r = st["methods"].get(m, {})
            per = [x.get("rank_correlation") for x in r.get("scans", [])]
            numbers_ok &= finite(r.get("mean_rank_correlation")) and -1 <= r["mean_rank_correlation"] <= 1
            numbers_ok &= len(per) == 2 and all(finite(x) and -1 <= x <= 1 for x in per)
            numbers_ok &= finite(r.get("mean_probability"))
            if st["stage"] == 0:  # the trained maps against themselves: 1, or 0 for a flat map
                numbers_ok &= all(x == 0 or abs(x - 1) < 1e-9 for x in per)
            paths = [x.get("heatmap", "") for x in r.get("scans", [])]
            check(all(os.path.dirname(x) == r.get("heatmaps") for x in paths),
                  f"stage {st['stage']} {m}: heatmaps in {r.get('heatmaps')}")
            check_heatmaps(r.get("heatmaps", ""), sanity_scans, f"stage {st['stage']} {m}",
                           paths if len(paths) == len(sanity_scans) else None)
    check(numbers_ok, "sanity: every correlation and probability finite, in range; stage 0 correlates 1 with itself")

    # The stage checkpoints: header and metadata, and every tensor outside the randomized
    # blocks, byte for byte; the randomized ones changed.
    with open(os.path.join(ckpt, saved[-1]), "rb") as f:
        orig = f.read()
    n = int.from_bytes(orig[:8], "little")
    header, base = json.loads(orig[8:8 + n]), 8 + n
    for st in s.get("stages", []):
        with open(st["checkpoint"], "rb") as f:
            new = f.read()
        blocks = set(st["randomized"])
        changed, kept_bad = [], []
        for name, info in header.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            same = orig[base + b:base + e] == new[base + b:base + e]
            top_name = "stem" if name.split(".")[0] in ("conv1", "bn1") else name.split(".")[0]
            randomizable = top_name in blocks and name.split(".")[-1] not in (
                "running_mean", "running_var", "num_batches_tracked")
            if randomizable and not same:
                changed.append(name)
            elif not randomizable and not same:
                kept_bad.append(name)
        check(len(new) == len(orig) and new[:base] == orig[:base] and not kept_bad
              and (bool(changed) == bool(blocks)),
              f"stage {st['stage']} checkpoint: header and {len(header) - 1 - len(changed)} tensors kept byte for "
              f"byte, {len(changed)} randomized" + (f"; changed unexpectedly: {kept_bad[:5]}" if kept_bad else ""))
    print("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))


if __name__ == "__main__":
    t = time.time()
    main()
    print(f"{len(failures)} failure(s) in {time.time() - t:.1f} s")
    sys.exit(1 if failures else 0)
