#!/usr/bin/env python3
"""Do the explanation heatmaps depend on what the network learned? The model-randomization
sanity check of Adebayo et al. 2018 ("Sanity Checks for Saliency Maps"), cascading from the
head down.

Starting from a trained gridnn checkpoint, the network's blocks are randomized one after
another from the top, cumulatively, in the reverse of network order as the checkpoint's
tensor names give it (for ResAttNet3D: fc, att4, layer4, att3, layer3, layer2, layer1, stem
= conv1 and bn1). Stage 0 is the trained network; stage K has the top K blocks randomized.
For every stage and method, `gridnn-predict --explain` writes heatmaps of the chosen scans,
and each is compared with the trained network's heatmap of the same scan and method by the
Spearman rank correlation (scipy.stats.spearmanr) over all voxels of the scan's grid, or
over the voxels of --mask. A constant map (e.g. all zeros: no positive evidence) has no
ranks; its correlation counts as 0. The table shows the mean over scans.

A method PASSES when the mean correlation is <= --threshold at every stage from the one
where the upper half of the blocks (rounded up; 4 of 8 for ResAttNet3D with both attention
blocks) is randomized: its maps then no longer look like the trained network's, as a
saliency method that reflects the model must. A method whose maps survive randomization
shows the input (edges, intensity) more than the model. Stages not run (--stages) leave
the verdict "not run"; when the trained network's maps are constant for every scan there
is nothing to compare and the verdict is "NO SIGNAL". A map that turns constant once lower
blocks are random counts as 0 too; the line on constant maps under the table says when.

Randomization rule: each weight, bias and affine parameter of a block (not the BatchNorm
running statistics, not the optimizer's state) gets fresh values drawn from N(0, s), where
s is the trained tensor's standard deviation (s = 0.01 when it is 0, e.g. a one-element
tensor such as an attention block's gamma, which so stays near 0 and leaves that block
close to the identity), from a generator seeded by (--seed, the tensor's name), so a block
keeps the same random values in every later stage. Everything else in the
checkpoint (header, metadata with the training configuration that gridnn-predict reads,
all other tensors) is copied byte for byte into OUT/stage-K.safetensors.

Usage: explain_sanity.py --checkpoint FILE|DIR --data MANIFEST --out DIR [--split test]
           [--label 1|0|all] [--limit 10] [--methods gradcam,gradcam++,hirescam]
           [--layer NAME] [--class 1] [--predict PATH] [--mask PATTERN] [--seed 0]
           [--stages N] [--threshold 0.3] [--json FILE]
  --mask: a path pattern with {name} = the scan's file name without .nii/.nii.gz, e.g.
          DATA/masks/{name}_brain.nii.gz (the brain masks of make_atrophy_dataset.py)
  --stages N: only the first N stages (trained included), for a quick check
Writes OUT/scans.csv (the chosen scans), OUT/stage-K.safetensors, OUT/heat-K-METHOD/ and
OUT/pred-K-METHOD.csv. Exit status: 0 when it ran (whether or not a method passes), 1 on
bad input (a missing checkpoint or mask, no scans, gridnn-predict failing), 2 on a usage
error.
"""
import argparse
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import zlib

import numpy as np

try:
    import nibabel as nib
    from scipy import stats
except ImportError as e:  # pragma: no cover
    sys.exit(f"explain_sanity: {e}; install python3-nibabel and python3-scipy (scripts/setup.sh)")

from atrophy_lift import stem  # noqa: E402  (this folder's: a scan file's name without .nii/.nii.gz)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PREDICT = os.path.join("build", "default", "tools", "gridnn-predict")
BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
NOT_MODEL = ("optimizer",)  # top-level name parts that are not the network's
STEM_PARTS = ("conv1", "bn1")  # the stem's top-level names
DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2")}


def fail(msg):
    print(f"explain_sanity: {msg}", file=sys.stderr)
    sys.exit(1)


# --- safetensors ----------------------------------------------------------------------------

def read_safetensors(path):
    """(raw bytes, header dict, offset of the data) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        fail(f"{path}: not a safetensors file (only {len(raw)} bytes)")
    n = int.from_bytes(raw[:8], "little")
    if n <= 0 or 8 + n > len(raw):
        fail(f"{path}: not a safetensors file (header length {n}, file {len(raw)} bytes)")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        fail(f"{path}: not a safetensors file (header is not JSON: {e})")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(raw) - 8 - n:
            fail(f"{path}: tensor {name}'s data_offsets {info['data_offsets']} lie outside the file")
    return raw, header, 8 + n


def tensor_values(raw, base, info):
    """A tensor's values as float64 (F64, F32, F16, BF16)."""
    begin, end = info["data_offsets"]
    buf = raw[base + begin:base + end]
    if info["dtype"] == "BF16":
        bits = np.frombuffer(buf, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    return np.frombuffer(buf, DTYPES[info["dtype"]]).astype(np.float64)


def encode(values, dtype):
    if dtype == "BF16":  # round to nearest even
        bits = values.astype(np.float32).view(np.uint32)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return bits.astype("<u2").tobytes()
    return values.astype(DTYPES[dtype]).tobytes()


def model_blocks(header):
    """[(block name, [tensor names it randomizes])] in network order (by data offset)."""
    blocks = {}
    first = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        top = name.split(".")[0]
        if top in NOT_MODEL:
            continue
        block = "stem" if top in STEM_PARTS else top
        first[block] = min(first.get(block, math.inf), info["data_offsets"][0])
        if name.split(".")[-1] in BUFFERS:
            continue
        if info["dtype"] not in DTYPES and info["dtype"] != "BF16":
            continue
        blocks.setdefault(block, []).append(name)
    order = sorted(blocks, key=lambda b: first[b])
    return [(b, blocks[b]) for b in order]


def randomized_tensor(raw, base, name, info, seed):
    trained = tensor_values(raw, base, info)
    s = float(trained.std()) if trained.size else 0.0
    if not s > 0 or not math.isfinite(s):
        s = 0.01
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return encode(rng.normal(0.0, s, trained.size), info["dtype"])


def write_stage(raw, header, base, names, seed, path):
    """The checkpoint with tensors `names` randomized, everything else byte for byte."""
    out = bytearray(raw)
    for name in names:
        info = header[name]
        begin, end = info["data_offsets"]
        new = randomized_tensor(raw, base, name, info, seed)
        assert len(new) == end - begin, name
        out[base + begin:base + end] = new
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(out)
    os.replace(tmp, path)


# --- inputs -----------------------------------------------------------------------------------

def find_checkpoint(path):
    if os.path.isfile(path):
        return path
    if os.path.isdir(path):
        steps = []
        for f in os.listdir(path):
            m = re.fullmatch(r"step-(\d+)\.safetensors", f)
            if m:
                steps.append((int(m.group(1)), f))
        if not steps:
            fail(f"--checkpoint {path}: the folder holds no step-*.safetensors; pass a checkpoint "
                 "file or gridnn-train's --checkpoint-dir")
        return os.path.join(path, max(steps)[1])
    fail(f"--checkpoint {path}: no such file or folder")


def choose_scans(manifest, split, label, limit):
    if not os.path.isfile(manifest):
        fail(f"--data {manifest}: no such file (a CSV manifest path,label[,split])")
    with open(manifest, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "path" not in rows[0] or "label" not in rows[0]:
        fail(f"--data {manifest}: not a manifest with the columns path,label[,split]")
    if split != "all" and "split" not in rows[0]:
        fail(f"--data {manifest}: has no split column; pass --split all")
    base = os.path.dirname(os.path.abspath(manifest))
    chosen = [r for r in rows
              if (split == "all" or r.get("split", "").strip() == split)
              and (label == "all" or r["label"].strip() == label)]
    if not chosen:
        fail(f"--data {manifest}: no scans with split {split} and label {label}; change --split or --label")
    chosen = chosen[:limit]
    scans = []
    for r in chosen:
        path = r["path"].strip()
        path = path if os.path.isabs(path) else os.path.join(base, path)
        if not os.path.exists(path):
            fail(f"{path}: no such scan (row of {manifest})")
        scans.append(dict(path=path, label=r["label"].strip(), split=r.get("split", "").strip()))
    # gridnn-predict's heatmap names: the file name without .nii(.gz), numbered when repeated.
    uses = {}
    for s in scans:
        uses[stem(s["path"])] = uses.get(stem(s["path"]), 0) + 1
    for i, s in enumerate(scans):
        s["name"] = stem(s["path"]) + (f"-{i + 1}" if uses[stem(s["path"])] > 1 else "")
    return scans


def load_volume(path, what):
    try:
        img = nib.load(path)
    except Exception as e:  # nibabel raises several types
        fail(f"{path}: cannot read ({what}): {e}")
    data = np.asarray(img.dataobj, dtype=np.float64)
    if data.ndim > 3:
        data = data.reshape(data.shape[:3] + (-1,))[..., 0]
    return img, data


def rank_correlation(a, b):
    """Spearman's rho of two maps; 0 when either is constant (no ranks to compare)."""
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    rho = stats.spearmanr(a, b).correlation
    return float(rho) if math.isfinite(rho) else 0.0


def predict_help(predict):
    try:
        res = subprocess.run([predict, "--help"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        fail(f"--predict {predict}: cannot run it ({e}); build gridnn-predict "
             "(cmake --build --preset default --target gridnn-predict) or pass --predict PATH")
    return res.stdout + res.stderr


def run_predict(args, ckpt, scans_csv, out_csv, heat_dir, method, method_flag):
    cmd = [args.predict, "--checkpoint", ckpt, "--data", scans_csv, "--split", args.split, "--out", out_csv,
           "--explain", heat_dir, "--explain-class", str(args.cls)]
    if method_flag:
        cmd += ["--explain-method", method]
    if args.layer:
        cmd += ["--explain-layer", args.layer]
    shutil.rmtree(heat_dir, ignore_errors=True)
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        if (res.stderr + res.stdout).strip():
            print((res.stderr.rstrip() or res.stdout.rstrip()), file=sys.stderr)
        fail(f"gridnn-predict exited {res.returncode} (its messages above) on {ckpt}, method {method}:\n  "
             + " ".join(cmd))
    return res


def predicted_probability(out_csv, cls):
    """Mean probability of class `cls` over the scans in gridnn-predict's CSV; the errors."""
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    errors = [f"{r['path']}: {r['error']}" for r in rows if r.get("error")]
    probs = [float(r[f"prob_{cls}"]) for r in rows if not r.get("error") and r.get(f"prob_{cls}")]
    return (float(np.mean(probs)) if probs else float("nan")), errors


def heatmap_path(heat_dir, name, method):
    for cand in (f"{name}_gradcam.nii.gz", f"{name}_{method}.nii.gz",
                 f"{name}_{method.replace('+', 'p')}.nii.gz"):
        p = os.path.join(heat_dir, cand)
        if os.path.exists(p):
            return p
    return os.path.join(heat_dir, f"{name}_gradcam.nii.gz")


# --- main -------------------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="a gridnn checkpoint, or a folder (its newest step-*)")
    p.add_argument("--data", required=True, help="CSV manifest path,label[,split]")
    p.add_argument("--out", required=True, help="work folder (created)")
    p.add_argument("--split", default="test", choices=("train", "val", "test", "all"),
                   help="manifest rows to use (default test)")
    p.add_argument("--label", default="1", help="label of the scans to use, or all (default 1)")
    p.add_argument("--limit", type=int, default=10, help="at most N scans (default 10)")
    p.add_argument("--methods", default="gradcam,gradcam++,hirescam",
                   help="comma-separated --explain-method values (default gradcam,gradcam++,hirescam)")
    p.add_argument("--layer", help="passed as --explain-layer (default: gridnn-predict's)")
    p.add_argument("--class", dest="cls", type=int, default=1, help="passed as --explain-class (default 1)")
    p.add_argument("--predict", default=None, help=f"gridnn-predict (default {DEFAULT_PREDICT} in the checkout)")
    p.add_argument("--mask", help="correlate over this mask's nonzero voxels; {name} = the scan's name")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument("--stages", type=int, help="run only the first N stages (trained included)")
    p.add_argument("--threshold", type=float, default=0.3, help="pass: correlation <= this (default 0.3)")
    p.add_argument("--json", help="write the results here as JSON")
    a = p.parse_args(argv)
    if a.limit < 1:
        p.error("--limit must be >= 1")
    if a.stages is not None and a.stages < 2:
        p.error("--stages must be >= 2 (the trained stage and at least one randomized)")
    if a.seed < 0:
        p.error("--seed must be >= 0")
    if a.label != "all" and not re.fullmatch(r"-?\d+", a.label):
        p.error(f"--label must be an integer or all, got {a.label!r}")
    if a.mask is not None and "{name}" not in a.mask:
        p.error("--mask must contain {name} (the scan's file name without .nii/.nii.gz), e.g. "
                "DATA/masks/{name}_brain.nii.gz")
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    if not methods or len(set(methods)) != len(methods):
        p.error(f"--methods must list distinct methods, got {a.methods!r}")
    if not -1 <= a.threshold <= 1:
        p.error("--threshold must be in [-1, 1]")

    ckpt = find_checkpoint(a.checkpoint)
    raw, header, base = read_safetensors(ckpt)
    meta = header.get("__metadata__") or {}
    if "config" not in meta:
        print(f"explain_sanity: warning: {ckpt} has no training config in its metadata; gridnn-predict "
              "may need the network options", file=sys.stderr)
    blocks = model_blocks(header)
    if not blocks:
        fail(f"{ckpt}: no network tensors found (names like conv1.weight, layer1.0.conv1.weight, fc.weight)")
    cascade = list(reversed(blocks))  # top first
    n_blocks = len(cascade)
    half = (n_blocks + 1) // 2  # the stage from which the check applies
    n_stages = n_blocks + 1 if a.stages is None else min(a.stages, n_blocks + 1)

    scans = choose_scans(a.data, a.split, a.label, a.limit)
    a.predict = a.predict or os.path.join(ROOT, DEFAULT_PREDICT)
    if not (os.path.isfile(a.predict) and os.access(a.predict, os.X_OK)):
        fail(f"--predict {a.predict}: not an executable; build gridnn-predict "
             "(cmake --build --preset default --target gridnn-predict) or pass --predict PATH")
    has_method_flag = "--explain-method" in predict_help(a.predict)
    others = [m for m in methods if m != "gradcam"]
    if others and not has_method_flag:
        fail(f"{a.predict} has no --explain-method, so it makes Grad-CAM only; pass --methods gradcam "
             f"or rebuild gridnn-predict (asked for {', '.join(others)})")
    os.makedirs(a.out, exist_ok=True)
    scans_csv = os.path.join(a.out, "scans.csv")
    with open(scans_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label", "split"])
        for s in scans:
            w.writerow([s["path"], s["label"], s["split"] or a.split])
    masks = {}
    for s in scans:
        if a.mask:
            mpath = a.mask.replace("{name}", stem(s["path"]))
            if not os.path.exists(mpath):
                fail(f"{mpath}: no such mask (--mask {a.mask} for {s['path']})")
            masks[s["name"]] = (mpath, load_volume(mpath, "mask")[1] > 0)
            if not masks[s["name"]][1].any():
                fail(f"{mpath}: empty mask")

    print(f"explain_sanity: {ckpt}: {n_blocks} blocks, top first: {', '.join(b for b, _ in cascade)}; "
          f"{len(scans)} scans (split {a.split}, label {a.label}); methods {', '.join(methods)}; "
          f"{n_stages} stages", flush=True)
    t0 = time.time()
    stages = []
    trained_maps = {}  # (method, scan name) -> map values over the mask
    for k in range(n_stages):
        randomized = [b for b, _ in cascade[:k]]
        names = [t for _, ts in cascade[:k] for t in ts]
        stage_path = os.path.join(a.out, f"stage-{k}.safetensors")
        write_stage(raw, header, base, names, a.seed, stage_path)
        label = "none (trained)" if k == 0 else (randomized[0] if k == 1 else f"{randomized[0]}..{randomized[-1]}")
        stage = dict(stage=k, randomized=randomized, label=label, checkpoint=stage_path, tensors=len(names),
                     methods={})
        for m in methods:
            tag = f"{k}-{re.sub(r'[^A-Za-z0-9_.-]', 'p', m)}"
            heat_dir = os.path.join(a.out, f"heat-{tag}")
            out_csv = os.path.join(a.out, f"pred-{tag}.csv")
            run_predict(a, stage_path, scans_csv, out_csv, heat_dir, m, has_method_flag and m != "gradcam")
            prob, errors = predicted_probability(out_csv, a.cls)
            if errors:
                fail("gridnn-predict could not read scans:\n  " + "\n  ".join(errors))
            per_scan = []
            for s in scans:
                hpath = heatmap_path(heat_dir, s["name"], m)
                if not os.path.exists(hpath):
                    fail(f"{hpath}: gridnn-predict wrote no heatmap for {s['path']}")
                img, heat = load_volume(hpath, "heatmap")
                if s["name"] in masks:
                    mpath, mask = masks[s["name"]]
                    if mask.shape != heat.shape:
                        fail(f"{mpath}: the mask's shape {mask.shape} is not the heatmap's {heat.shape} "
                             f"({hpath}); --mask must give masks in each scan's grid")
                    values = heat[mask]
                else:
                    values = heat.ravel()
                values = np.where(np.isfinite(values), values, 0.0)
                if k == 0:
                    trained_maps[(m, s["name"])] = values
                rho = rank_correlation(values, trained_maps[(m, s["name"])])
                per_scan.append(dict(scan=s["path"], heatmap=hpath, rank_correlation=rho,
                                     constant=bool(values.size == 0 or np.ptp(values) == 0)))
            mean = float(np.mean([r["rank_correlation"] for r in per_scan]))
            flat = sum(r["constant"] for r in per_scan)
            stage["methods"][m] = dict(mean_rank_correlation=mean, mean_probability=prob, constant_maps=flat,
                                       heatmaps=heat_dir, scans=per_scan)
        stages.append(stage)
        cells = "  ".join(f"{m} {stage['methods'][m]['mean_rank_correlation']:+.3f}" for m in methods)
        print(f"  stage {k} ({label}): {cells}  [{time.time() - t0:.0f} s]", flush=True)

    verdicts = {}
    for m in methods:
        judged = [s["methods"][m]["mean_rank_correlation"] for s in stages if s["stage"] >= half]
        if not judged:
            verdicts[m] = "not run"
        elif stages[0]["methods"][m]["constant_maps"] == len(scans):
            verdicts[m] = "NO SIGNAL"
        else:
            verdicts[m] = "PASS" if all(r <= a.threshold for r in judged) else "FAIL"

    # The table.
    first = max(len("randomized"), *(len(s["label"]) for s in stages))
    width = max(9, *(len(m) for m in methods))
    print()
    print(f"{'stage':>5}  {'randomized':<{first}}  " + "  ".join(f"{m:>{width}}" for m in methods)
          + f"  p(class {a.cls})")
    for s in stages:
        mark = "*" if s["stage"] >= half else " "
        print(f"{s['stage']:>4}{mark}  {s['label']:<{first}}  "
              + "  ".join(f"{s['methods'][m]['mean_rank_correlation']:>+{width}.3f}" for m in methods)
              + f"  {s['methods'][methods[0]]['mean_probability']:.3f}")
    print(f"mean Spearman rank correlation with the trained network's map over {len(scans)} scans"
          f"{' (mask voxels)' if a.mask else ''}; p(class {a.cls}): mean predicted probability. "
          f"* = judged: {half} of {n_blocks} blocks or more randomized.")
    flat = {m: [s["methods"][m]["constant_maps"] for s in stages] for m in methods}
    if any(any(n) for n in flat.values()):
        print("constant maps (e.g. all zeros: no positive evidence), which correlate 0, per stage: "
              + "; ".join(f"{m} {'/'.join(map(str, n))} of {len(scans)}" for m, n in flat.items() if any(n)))
    for m in methods:
        if verdicts[m] == "not run":
            print(f"{m}: not run (the judged stages start at {half}; --stages {n_stages} stops before)")
        elif verdicts[m] == "NO SIGNAL":
            print(f"{m}: NO SIGNAL (the trained network's maps are constant for every scan: nothing to compare; "
                  "try another --layer or --class, or a better trained checkpoint)")
        elif verdicts[m] == "PASS":
            print(f"{m}: PASS (correlation <= {a.threshold:g} at every judged stage, {half} to {n_stages - 1})")
        else:
            above = [f"{s['stage']} ({s['methods'][m]['mean_rank_correlation']:+.3f})" for s in stages
                     if s["stage"] >= half and s["methods"][m]["mean_rank_correlation"] > a.threshold]
            print(f"{m}: FAIL (correlation > {a.threshold:g} at judged stage{'s' if len(above) > 1 else ''} "
                  f"{', '.join(above)}: its maps survive the randomization)")

    if a.json:
        doc = dict(checkpoint=ckpt, data=os.path.abspath(a.data), split=a.split, label=a.label,
                   explain_class=a.cls, layer=a.layer, mask=a.mask, seed=a.seed, threshold=a.threshold,
                   methods=methods, blocks=[b for b, _ in blocks], cascade=[b for b, _ in cascade],
                   judged_from_stage=half, scans=[s["path"] for s in scans], stages=stages, verdicts=verdicts,
                   seconds=round(time.time() - t0, 1))
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
