#!/usr/bin/env python3
"""Test atrophy_dataset: scripts/make_atrophy_dataset.py on tiny settings, checked, then
scripts/atrophy_lift.py on made-up heatmaps.

Usage: check_atrophy_dataset.py SCRIPTS_DIR WORK_DIR
Exits 77 (skipped) when numpy, scipy, nibabel or mricron-data's templates are missing,
unless GRIDNN_REQUIRE_PARITY=1 (set by CI): then it fails.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import time

from atrophy_check_support import check, failures, require_tools

require_tools("atrophy dataset")
import numpy as np
import nibabel as nib
from scipy import ndimage as ndi


def main():
    scripts, work = sys.argv[1], sys.argv[2]
    out = os.path.join(work, "dataset")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    py = sys.executable
    t0 = time.time()
    gen = subprocess.run([py, os.path.join(scripts, "make_atrophy_dataset.py"), out, "--subjects", "8",
                          "--spacing", "4", "--seed", "3", "--jobs", "2"],
                         capture_output=True, text=True)
    print(gen.stdout + gen.stderr, end="")
    if gen.returncode != 0:
        check(False, f"make_atrophy_dataset.py exited {gen.returncode}")
        return
    check("8 simulated subjects" in gen.stdout, "one-line summary printed")
    print(f"generation: {time.time() - t0:.1f} s")

    # Files and manifest.
    with open(os.path.join(out, "manifest.csv")) as f:
        header = f.readline().strip()
        f.seek(0)
        rows = list(csv.DictReader(f))
    check(header == "path,label,split", f"manifest header is path,label,split ({header!r})")
    check(len(rows) == 8, f"8 manifest rows ({len(rows)})")
    labels = [int(r["label"]) for r in rows]
    check(labels == [0, 1] * 4, f"classes interleaved ({labels})")
    for split in ("train", "val", "test"):
        ls = [int(r["label"]) for r in rows if r["split"] == split]
        check(len(ls) >= 2 and ls.count(0) == ls.count(1), f"split {split} balanced ({ls})")
    readme = open(os.path.join(out, "README.txt")).read().lower()
    check("simulated" in readme and "not clinical" in readme, "README.txt says simulated, not clinical")

    stems = [r["path"][: -len(".nii.gz")] for r in rows]
    imgs, regions, brains = [], [], []
    for s in stems:
        paths = [os.path.join(out, s + ".nii.gz"), os.path.join(out, "masks", s + "_region.nii.gz"),
                 os.path.join(out, "masks", s + "_brain.nii.gz")]
        if not all(os.path.exists(p) for p in paths):
            check(False, f"{s}: scan and both masks exist")
            return
        img, reg, brn = (nib.load(p) for p in paths)
        imgs.append(img)
        regions.append(reg)
        brains.append(brn)

    # Storage: int16 with a scale factor; masks uint8 on the scan's grid.
    ok_dtype = all(i.get_data_dtype() == np.int16 for i in imgs)
    check(ok_dtype, "scans stored as int16")
    slopes = [float(i.dataobj.slope) for i in imgs]
    check(all(0 < s < 0.1 and s != 1 for s in slopes), f"scans carry scl_slope ({slopes[:3]}...)")
    raw_max = [int(np.asarray(i.dataobj.get_unscaled()).max()) for i in imgs]
    check(all(20000 < m <= 32767 for m in raw_max), f"int16 range used ({raw_max[:3]}...)")
    check(all(m.get_data_dtype() == np.uint8 for m in regions + brains), "masks stored as uint8")
    check(all(r.shape == i.shape and np.allclose(r.affine, i.affine) and b.shape == i.shape
              and np.allclose(b.affine, i.affine) for i, r, b in zip(imgs, regions, brains)),
          "masks on each scan's grid and affine")
    codes = {"".join(nib.aff2axcodes(i.affine)) for i in imgs}
    check(len(codes) >= 3, f"orientations vary ({sorted(codes)})")
    forms = {(int(i.header["qform_code"]) > 0, int(i.header["sform_code"]) > 0) for i in imgs}
    check(forms == {(True, True), (True, False), (False, True)},
          f"sform only, qform only and both occur ({sorted(forms)})")

    # Canonical (RAS) views: same grid for all, anatomy consistent with the masks.
    canon = [nib.as_closest_canonical(i) for i in imgs]
    creg = [np.asarray(nib.as_closest_canonical(r).dataobj) for r in regions]
    cbrn = [np.asarray(nib.as_closest_canonical(b).dataobj) > 0 for b in brains]
    check(all(np.allclose(c.affine, canon[0].affine) and c.shape == canon[0].shape for c in canon),
          "canonical grids agree")
    data = [c.get_fdata(dtype=np.float32) for c in canon]
    bad_anatomy = 0
    for s, d, b, r in zip(stems, data, cbrn, creg):
        inside, outside = d[b].mean(), d[~b].mean()
        if not (inside > 4 * outside and (r[~b] == 0).all() and (r == 1).any() and (r == 2).any()):
            bad_anatomy += 1
            check(False, f"{s}: scan bright inside its brain mask ({inside:.3g} vs {outside:.3g}), "
                         "region inside the brain with labels 1 and 2")
    check(bad_anatomy == 0, "every scan is bright inside its brain mask; region masks inside the brain")
    ref = data[0]
    corr = [float(np.corrcoef(ref.ravel(), d.ravel())[0, 1]) for d in data[1:]]
    check(min(corr) > 0.75, f"canonical scans show the same anatomy (correlation with sub 0 "
                            f"{min(corr):.2f}..{max(corr):.2f})")
    dice = []
    for b in cbrn[1:]:
        dice.append(2 * (b & cbrn[0]).sum() / (b.sum() + cbrn[0].sum()))
    check(min(dice) > 0.85, f"canonical brain masks overlap (Dice with sub 0 >= {min(dice):.2f})")
    same_class = [(i, j) for i in range(8) for j in range(i + 1, 8) if labels[i] == labels[j]]
    check(all(not np.array_equal(data[i], data[j]) for i, j in same_class),
          "scans of the same class differ")

    # Atrophy, measured in each scan's own masks: class 1 has fewer tissue-bright voxels
    # (> 0.75 x the brain median) in the hippocampal region (mask value 1) and more CSF-dark
    # voxels (< 0.6 x) in the ventricle region (mask value 2) than class 0, on average.
    def measures(d, b, r):
        med = np.median(d[b])
        return float((d[r == 1] > 0.75 * med).mean()), int((d[r == 2] < 0.6 * med).sum())

    m = np.array([measures(d, b, r) for d, b, r in zip(data, cbrn, creg)])
    m0, m1 = m[np.array(labels) == 0].mean(0), m[np.array(labels) == 1].mean(0)
    check(m1[0] < m0[0] - 0.02, f"class 1 has less tissue in the hippocampal region "
                                f"(tissue share {m1[0]:.3f} vs class 0 {m0[0]:.3f})")
    check(m1[1] > m0[1], f"class 1 has larger ventricles (CSF voxels {m1[1]:.1f} vs class 0 {m0[1]:.1f})")

    # atrophy_lift.py: heatmap = the dilated region mask -> high lift; random -> about 1.
    lift = os.path.join(scripts, "atrophy_lift.py")
    for kind in ("region", "random"):
        hdir = os.path.join(work, "heat_" + kind)
        os.makedirs(hdir)
        rng = np.random.default_rng(7)
        for s, img, reg in zip(stems, imgs, regions):
            if kind == "region":
                r = np.asarray(reg.dataobj) > 0
                h = ndi.binary_dilation(r, ndi.generate_binary_structure(3, 1), iterations=2)
                h = h.astype(np.float32)
            else:
                h = rng.random(img.shape, dtype=np.float32)
            nib.save(nib.Nifti1Image(h, img.affine), os.path.join(hdir, s + "_gradcam.nii.gz"))
        args = [py, lift, out, hdir, "--json"]
        if kind == "random":
            args += ["--split", "all", "--label", "all", "--top", "0.1"]
        res = subprocess.run(args, capture_output=True, text=True)
        if res.returncode != 0:
            check(False, f"atrophy_lift.py ({kind}) exited {res.returncode}: {res.stderr.strip()}")
            continue
        j = json.loads(res.stdout)
        if kind == "region":
            check(len(j["subjects"]) == 1 and j["mean_lift"] > 3,
                  f"lift of a region heatmap > 3 ({j['mean_lift']:.2f} over {len(j['subjects'])} test AD-like scans)")
        else:
            check(0.75 < j["mean_lift"] < 1.25,
                  f"lift of a random heatmap about 1 ({j['mean_lift']:.2f} over {len(j['subjects'])} scans)")
    text = subprocess.run([py, lift, out, os.path.join(work, "heat_region")], capture_output=True, text=True)
    check(text.returncode == 0 and "mean lift" in text.stdout, "atrophy_lift.py text output")

    # A heatmap on another grid is an error that names the file.
    bad = os.path.join(work, "heat_bad")
    os.makedirs(bad)
    for s, img in zip(stems, imgs):
        nib.save(nib.Nifti1Image(np.zeros((5, 5, 5), np.float32), img.affine),
                 os.path.join(bad, s + "_gradcam.nii.gz"))
    res = subprocess.run([py, lift, out, bad], capture_output=True, text=True)
    check(res.returncode == 1 and "_gradcam.nii.gz" in res.stderr and "grid" in res.stderr,
          f"a heatmap on another grid is an error naming it ({res.stderr.strip()[:100]}...)")

    # Reproducible and independent of --jobs.
    again = os.path.join(work, "again")
    res = subprocess.run([py, os.path.join(scripts, "make_atrophy_dataset.py"), again, "--subjects", "2",
                          "--spacing", "4", "--seed", "3", "--jobs", "1", "--split", "1,0,0"],
                         capture_output=True, text=True)
    same = res.returncode == 0 and all(
        np.array_equal(np.asarray(nib.load(os.path.join(again, f"sub-00{i}.nii.gz")).dataobj),
                       np.asarray(imgs[i].dataobj)) for i in range(2))
    check(same, "same seed, other --jobs and --subjects: the same scans")


if __name__ == "__main__":
    t = time.time()
    main()
    print(f"{len(failures)} failure(s) in {time.time() - t:.1f} s")
    sys.exit(1 if failures else 0)
