#!/usr/bin/env python3
"""gridnn-predict --explain on scans that nibabel wrote in several orientations and header
forms: each heatmap, read back with nibabel, has its scan's shape, sform, qform and both codes
(bit for bit), float32 without scaling, values in [0, 1]; and a scan stored in other voxel
orders gets the same heatmap in world space (the network sees the same canonical volume).

  check_predict_heatmaps.py GRIDNN_TRAIN GRIDNN_PREDICT WORK_DIR

Exit 77 (skipped) without nibabel, unless GRIDNN_REQUIRE_PARITY=1.
"""
import csv
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    import nibabel as nib
    from nibabel.orientations import apply_orientation, axcodes2ornt, inv_ornt_aff, ornt_transform
except ImportError as e:
    if os.environ.get("GRIDNN_REQUIRE_PARITY") == "1":
        print(f"error: GRIDNN_REQUIRE_PARITY=1 but {e}", file=sys.stderr)
        sys.exit(1)
    print(f"skipping: {e}", file=sys.stderr)
    sys.exit(77)


def rotation_z(degrees):
    t = np.radians(degrees)
    r = np.eye(4)
    r[:2, :2] = [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]
    return r


def stored_as(data, ras_affine, axcodes):
    """The RAS volume stored in the voxel order `axcodes`, with the affine that keeps every
    voxel's world position."""
    ornt = ornt_transform(axcodes2ornt("RAS"), axcodes2ornt(axcodes))
    stored = apply_orientation(data, ornt)
    return stored, ras_affine @ inv_ornt_aff(ornt, data.shape)


def main():
    train_exe, predict_exe, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rng = np.random.default_rng(5)
    base = np.zeros((20, 24, 18), np.float32)  # i, j, k in RAS
    base[4:15, 5:20, 3:14] = 50
    base[6:9, 8:12, 5:9] = 120  # an off-centre block: no symmetry hides a wrong flip
    base += rng.normal(0, 3, base.shape).astype(np.float32)
    ras = np.diag([2.0, 2.0, 2.5, 1.0]) @ np.eye(4)
    ras[:3, 3] = [-20, -24, -20]
    # (name, voxel order, affine rotation, which header fields): sform only, qform only, both,
    # and both with a different qform (the sform wins).
    layouts = [("ras_both", "RAS", 0, "both"), ("lps_sform", "LPS", 5, "sform"),
               ("pil_qform", "PIL", 0, "qform"), ("las_differ", "LAS", -4, "differ")]
    rows = []
    for n, (name, axcodes, degrees, form) in enumerate(layouts):
        for label in (0, 1):
            data = base + (30 if label else 0) * (base > 100)
            stored, affine = stored_as(data, rotation_z(degrees) @ ras, axcodes)
            img = nib.Nifti1Image(stored.astype(np.float32), None)
            img.set_sform(None if form == "qform" else affine, code=0 if form == "qform" else 1)
            shifted = affine.copy()
            shifted[:3, 3] += 3  # a qform 3 mm off: the sform wins
            img.set_qform({"sform": None, "differ": shifted}.get(form, affine), code=0 if form == "sform" else 1)
            path = os.path.join(work, f"{name}_{label}.nii.gz")
            nib.save(img, path)
            rows.append((os.path.basename(path), label, "val" if n == 3 else "train"))
    with open(os.path.join(work, "scans.csv"), "w") as f:
        f.write("path,label,split\n")
        for r in rows:
            f.write(f"{r[0]},{r[1]},{r[2]}\n")

    ckpt, heat = os.path.join(work, "ckpt"), os.path.join(work, "heat")
    subprocess.run([train_exe, "--data", os.path.join(work, "scans.csv"), "--input", "16x16x16", "--fit", "resample",
                    "--width", "2", "--batch", "2", "--steps", "2", "--checkpoint-dir", ckpt, "--no-progress"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([predict_exe, "--checkpoint", ckpt, "--data", os.path.join(work, "scans.csv"), "--out",
                    os.path.join(work, "pred.csv"), "--explain", heat, "--explain-layer", "stem"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(work, "pred.csv")) as f:
        predictions = list(csv.DictReader(f))
    assert len(predictions) == len(rows), predictions
    assert all(p["error"] == "" for p in predictions), predictions

    world_maps = {}
    for name, label, _ in rows:
        scan = nib.load(os.path.join(work, name))
        stem = name[: -len(".nii.gz")]
        h = nib.load(os.path.join(heat, stem + "_gradcam.nii.gz"))
        what = f"{stem}: "
        assert h.shape == scan.shape, what + f"shape {h.shape} != {scan.shape}"
        assert h.get_data_dtype() == np.float32, what + str(h.get_data_dtype())
        for field in ("sform_code", "qform_code", "quatern_b", "quatern_c", "quatern_d", "qoffset_x", "qoffset_y",
                      "qoffset_z", "srow_x", "srow_y", "srow_z", "pixdim"):
            assert np.array_equal(h.header[field], scan.header[field]), what + field
        assert np.array_equal(h.affine, scan.affine), what + "affine"
        slope, inter = h.header.get_slope_inter()
        assert slope in (None, 1.0) and inter in (None, 0.0), what + f"scaling {slope}, {inter}"
        values = np.asarray(h.dataobj)
        assert np.isfinite(values).all() and values.min() >= 0 and values.max() <= 1, what + "values"
        assert values.max() > 0.5, what + "the normalised map (peak 1 on the network grid) is missing"
        # Back in RAS voxel order, scans of one label carry the same map whatever their layout
        # (rotations aside, which keep the voxel grid): compare layouts without rotation.
        if name.startswith(("ras_", "pil_")):
            canonical = nib.as_closest_canonical(h)
            world_maps.setdefault(label, []).append((stem, np.asarray(canonical.dataobj)))
    for label, maps in world_maps.items():
        (a_name, a), (b_name, b) = maps
        assert a.shape == b.shape and np.allclose(a, b, atol=1e-5), f"{a_name} and {b_name} differ in world space"
    print(f"ok: {len(rows)} heatmaps carry their scans' geometry; layouts agree in world space")
    return 0


if __name__ == "__main__":
    sys.exit(main())
