#!/usr/bin/env python3
"""Does an explanation heatmap point at the simulated atrophy?

For the dataset made by scripts/make_atrophy_dataset.py (simulated atrophy on one template
brain, not clinical data) and the Grad-CAM heatmaps written by `gridnn-predict --explain`
(HEATMAP_DIR/<scan stem>_gradcam.nii.gz, in the scan's own grid), this measures, per scan
of the chosen split and label:

  lift = (share of the hottest --top fraction of brain voxels that lie in the region)
         / (share of brain voxels that lie in the region)

where the region is masks/<stem>_region.nii.gz (hippocampal region and lateral ventricles)
dilated by --dilate voxels, and "brain voxels" are masks/<stem>_brain.nii.gz. 1.0 is
chance; the largest possible value is 1 / (the region's share of the brain).

Usage: atrophy_lift.py DATASET_DIR HEATMAP_DIR [--split test|train|val|all] [--top 0.01]
           [--dilate 2] [--label 1|0|all] [--json]
Exit status: 0 on success, 1 on a missing or mismatched file.
"""
import argparse
import csv
import json
import os
import sys

import numpy as np

try:
    import nibabel as nib
    from scipy import ndimage as ndi
except ImportError as e:  # pragma: no cover
    sys.exit(f"atrophy_lift: {e}; install python3-nibabel and python3-scipy (scripts/setup.sh)")


def stem(path):
    name = os.path.basename(path)
    for ext in (".nii.gz", ".nii"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def fail(msg):
    print(f"atrophy_lift: {msg}", file=sys.stderr)
    sys.exit(1)


def load(path, what):
    if not os.path.exists(path):
        fail(f"{path}: no such file ({what})")
    try:
        return nib.load(path)
    except Exception as e:  # nibabel raises several types
        fail(f"{path}: cannot read ({what}): {e}")


def same_grid(a, b):
    return a.shape[:3] == b.shape[:3] and np.allclose(a.affine, b.affine, atol=1e-3)


def lift_for(scan_path, heat_path, region_path, brain_path, top, dilate):
    scan = load(scan_path, "scan")
    heat_img = load(heat_path, "heatmap")
    region_img = load(region_path, "region mask")
    brain_img = load(brain_path, "brain mask")
    for img, path, what in ((heat_img, heat_path, "heatmap"), (region_img, region_path, "region mask"),
                            (brain_img, brain_path, "brain mask")):
        if not same_grid(img, scan):
            fail(f"{path}: the {what}'s grid (shape {tuple(img.shape)}, affine "
                 f"{np.round(img.affine, 3).tolist()}) is not the scan's {scan_path} (shape "
                 f"{tuple(scan.shape)}, affine {np.round(scan.affine, 3).tolist()})")
    heat = np.asarray(heat_img.dataobj, dtype=np.float64)
    if heat.ndim > 3:
        heat = heat.reshape(heat.shape[:3] + (-1,))[..., 0]
    heat = np.where(np.isfinite(heat), heat, -np.inf)
    brain = np.asarray(brain_img.dataobj) > 0
    region = np.asarray(region_img.dataobj) > 0
    if dilate > 0:
        region = ndi.binary_dilation(region, ndi.generate_binary_structure(3, 1), iterations=dilate)
    n_brain = int(brain.sum())
    if n_brain == 0:
        fail(f"{brain_path}: empty brain mask")
    in_region = region[brain]
    base = float(in_region.mean())
    if base == 0:
        fail(f"{region_path}: the region does not overlap the brain")
    k = max(1, int(round(top * n_brain)))
    values = heat[brain]
    top_idx = np.argpartition(-values, k - 1)[:k]
    share = float(in_region[top_idx].mean())
    return dict(scan=os.path.basename(scan_path), lift=share / base, top_share=share,
                region_share=base, brain_voxels=n_brain, top_voxels=k)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="folder with manifest.csv and masks/ (make_atrophy_dataset.py)")
    p.add_argument("heatmaps", help="folder with <scan stem>_gradcam.nii.gz")
    p.add_argument("--split", default="test", help="train, val, test or all (default test)")
    p.add_argument("--top", type=float, default=0.01, help="hottest fraction of brain voxels (default 0.01)")
    p.add_argument("--dilate", type=int, default=2, help="dilate the region mask by N voxels (default 2)")
    p.add_argument("--label", default="1", help="label of the scans to score, or all (default 1: AD-like)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    a = p.parse_args(argv)
    if not 0 < a.top <= 1:
        p.error("--top must be in (0, 1]")
    if a.dilate < 0:
        p.error("--dilate must be >= 0")

    manifest = os.path.join(a.dataset, "manifest.csv")
    if not os.path.exists(manifest):
        fail(f"{manifest}: no such file")
    with open(manifest, newline="") as f:
        rows = [r for r in csv.DictReader(f)]
    chosen = [r for r in rows
              if (a.split == "all" or r.get("split", "") == a.split)
              and (a.label == "all" or r["label"].strip() == a.label)]
    if not chosen:
        fail(f"{manifest}: no rows with split {a.split} and label {a.label}")

    results = []
    for r in chosen:
        scan_path = os.path.join(a.dataset, r["path"])
        s = stem(r["path"])
        masks = os.path.join(a.dataset, os.path.dirname(r["path"]), "masks")
        results.append(lift_for(scan_path, os.path.join(a.heatmaps, s + "_gradcam.nii.gz"),
                                os.path.join(masks, s + "_region.nii.gz"),
                                os.path.join(masks, s + "_brain.nii.gz"), a.top, a.dilate))
    mean = float(np.mean([r["lift"] for r in results]))
    if a.json:
        print(json.dumps(dict(split=a.split, label=a.label, top=a.top, dilate=a.dilate,
                              mean_lift=mean, subjects=results)))
    else:
        for r in results:
            print(f"{r['scan']}: lift {r['lift']:.2f} ({100 * r['top_share']:.1f}% of the top "
                  f"{r['top_voxels']} voxels in the region, which is {100 * r['region_share']:.1f}% "
                  f"of the brain)")
        print(f"mean lift {mean:.2f} over {len(results)} scans (split {a.split}, label {a.label}, "
              f"top {a.top:g}, dilate {a.dilate}; 1.0 = chance)")


if __name__ == "__main__":
    main()
