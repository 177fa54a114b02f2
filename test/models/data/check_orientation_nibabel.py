#!/usr/bin/env python3
"""gridnn's canonical orientation against nibabel 5.0's as_closest_canonical.

usage: check_orientation_nibabel.py DUMP_CANONICAL

Writes one non-symmetric 5x6x7 volume with nibabel in several orientations (RAS, LAS, LPS,
SRA, PIL, 5 and 40 degrees oblique, qform only, sform only, sform != qform, qfac = -1, both
codes 0, NIfTI-2, gzipped), runs dump_canonical on each and checks:
  - the canonical tensor [D, H, W] transposed to (x, y, z) equals nibabel's
    as_closest_canonical data bitwise (both codes 0: the stored order, gridnn's documented rule);
  - the scan's affine equals nibabel's img.affine bitwise (sform, qform and base affine);
    the canonical affine equals nibabel's: bitwise for the float32 NIfTI-1 sforms and qforms
    without rotation, else to 1e-12 relative (numpy's A @ T goes through BLAS);
  - the heatmap written by write_nifti_like (the canonical tensor mapped back to the stored
    grid) reads back in nibabel with the scan's shape, float32, no scaling, the scan's coded
    sform and qform (np.array_equal) and pixdim, and the scan's data bitwise.
Exit 77 (skipped) when nibabel or numpy cannot be imported, unless GRIDNN_REQUIRE_PARITY=1.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import nibabel as nib
except ImportError as e:  # pragma: no cover
    if os.environ.get("GRIDNN_REQUIRE_PARITY") == "1":
        print(f"error: GRIDNN_REQUIRE_PARITY=1 but nibabel/numpy cannot be imported: {e}")
        sys.exit(1)
    print(f"skipped: nibabel/numpy cannot be imported ({e})")
    sys.exit(77)


def rot_z(deg):
    t = np.deg2rad(deg)
    r = np.eye(4)
    r[:2, :2] = [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]
    return r


def rot_x(deg):
    t = np.deg2rad(deg)
    r = np.eye(4)
    r[1:3, 1:3] = [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]
    return r


def layout_affine(base, perm, flips, shape_c):
    """The affine of the canonical volume stored with voxel axis j along world axis perm[j]."""
    a = np.eye(4)
    a[:3, 3] = base[:3, 3]
    for j in range(3):
        o, f = perm[j], flips[j]
        a[:3, j] = f * base[:3, o]
        if f < 0:
            a[:3, 3] += (shape_c[o] - 1) * base[:3, o]
    return a


def stored_data(canon, perm, flips):
    """The canonical array (x, y, z) stored with voxel axis j along world axis perm[j]."""
    arr = np.transpose(canon, perm)  # stored axis j = canonical axis perm[j]
    for j in range(3):
        if flips[j] < 0:
            arr = np.flip(arr, axis=j)
    return np.ascontiguousarray(arr)


def main():
    exe = sys.argv[1]
    rng = np.random.default_rng(7)
    shape_c = (5, 6, 7)
    canon = rng.standard_normal(shape_c).astype(np.float32)
    base = np.diag([1.5, 2.0, 2.5, 1.0])
    base[:3, 3] = [-3.0, 4.0, 5.0]
    layouts = {
        "RAS": ((0, 1, 2), (1, 1, 1)),
        "LAS": ((0, 1, 2), (-1, 1, 1)),
        "LPS": ((0, 1, 2), (-1, -1, 1)),
        "SRA": ((2, 0, 1), (1, 1, 1)),
        "PIL": ((1, 2, 0), (-1, -1, -1)),
    }
    # name, layout, world rotation, sform code, qform code ('other': a qform that disagrees),
    # extension, image class
    cases = [
        ("ras_sform", "RAS", None, 2, 0, ".nii", nib.Nifti1Image),
        ("las_sform", "LAS", None, 2, 0, ".nii", nib.Nifti1Image),
        ("lps_sform", "LPS", None, 1, 0, ".nii", nib.Nifti1Image),
        ("sra_sform", "SRA", None, 4, 0, ".nii.gz", nib.Nifti1Image),
        ("pil_sform", "PIL", None, 2, 0, ".nii", nib.Nifti1Image),
        ("lps_qform", "LPS", None, 0, 1, ".nii", nib.Nifti1Image),
        ("las_qform_qfac", "LAS", None, 0, 1, ".nii", nib.Nifti1Image),
        ("pil_qform", "PIL", None, 0, 2, ".nii", nib.Nifti1Image),
        ("sra_both", "SRA", None, 4, 1, ".nii", nib.Nifti1Image),
        ("lps_sform_ne_qform", "LPS", None, 2, "other", ".nii", nib.Nifti1Image),
        ("lps_oblique5", "LPS", rot_z(5) @ rot_x(3), 1, 1, ".nii", nib.Nifti1Image),
        ("lps_oblique5_qform", "LPS", rot_z(5), 0, 1, ".nii", nib.Nifti1Image),
        ("ras_oblique40", "RAS", rot_z(40), 2, 0, ".nii", nib.Nifti1Image),
        ("pil_nifti2", "PIL", rot_x(5), 2, 1, ".nii", nib.Nifti2Image),
        ("lps_nocodes", "LPS", None, 0, 0, ".nii", nib.Nifti1Image),
    ]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, lay, rot, scode, qcode, ext, cls in cases:
            perm, flips = layouts[lay]
            aff_c = base if rot is None else rot @ base
            aff = layout_affine(aff_c, perm, flips, shape_c)
            data = stored_data(canon, perm, flips)
            img = cls(data, None)
            hdr = img.header
            if scode:
                hdr.set_sform(aff, code=scode)
            else:
                hdr.set_sform(None, code=0)
            if qcode == "other":
                other = layout_affine(base, *layouts["PIL"], shape_c)
                hdr.set_qform(other, code=1)
            elif qcode:
                hdr.set_qform(aff, code=qcode)
            else:
                hdr.set_qform(None, code=0)
            if name == "lps_nocodes":
                hdr.set_zooms((1.5, 2.0, 2.5))
            path = os.path.join(tmp, name + ext)
            nib.save(img, path)
            out = os.path.join(tmp, name)
            r = subprocess.run([exe, path, out], capture_output=True, text=True)
            if r.returncode != 0:
                failures.append(f"{name}: dump_canonical failed: {r.stderr.strip()}")
                continue
            loaded = nib.load(path)
            mine = np.load(out + ".npy").transpose(2, 1, 0)  # [D, H, W] = (z, y, x) -> (x, y, z)
            lines = open(out + ".affine.txt").read().split("\n")
            net_aff = np.array([[float(v) for v in lines[i].split()] for i in range(4)])
            scan_aff = np.array([[float(v) for v in lines[i].split()] for i in range(4, 8)])
            source = lines[8].strip()
            stored = np.asanyarray(loaded.dataobj)
            if name == "lps_nocodes":
                want, want_aff = stored, loaded.affine
                if source != "none":
                    failures.append(f"{name}: source {source}, want none")
            else:
                can = nib.as_closest_canonical(loaded)
                want, want_aff = np.asanyarray(can.dataobj), can.affine
            if mine.shape != want.shape or not np.array_equal(mine, want):
                failures.append(f"{name}: canonical data differs (shape {mine.shape} vs {want.shape})")
            # The scan's affine is bitwise nibabel's (sform, qform via long double quat2mat, base);
            # the canonical one A @ T is numpy's BLAS product, equal to 1e-12 (bitwise for
            # float32-valued NIfTI-1 sforms).
            for label, got, ref in (("canonical", net_aff, want_aff), ("scan", scan_aff, loaded.affine)):
                exact_aff = label == "scan" or (cls is nib.Nifti1Image and rot is None)
                if exact_aff:
                    ok = np.array_equal(got, ref)
                else:
                    ok = np.allclose(got, ref, rtol=0, atol=1e-12 * max(1.0, np.abs(ref).max()))
                if not ok:
                    failures.append(f"{name}: {label} affine differs (max {np.abs(got - ref).max():.3g}):\n{got}\n{ref}")
                elif not exact_aff and not np.array_equal(got, ref):
                    print(f"note: {name}: {label} affine within {np.abs(got - ref).max():.3g} of nibabel's (not bitwise)")
            heat = nib.load(out + ".heat.nii.gz")
            h = heat.header
            checks = [
                ("class", type(heat) is type(loaded)),
                ("shape", heat.shape == loaded.shape),
                ("dtype", heat.get_data_dtype() == np.float32),
                ("scaling", heat.dataobj.slope == 1.0 and heat.dataobj.inter == 0.0),
                ("pixdim", np.array_equal(h["pixdim"][:4], loaded.header["pixdim"][:4])),
                ("data", np.array_equal(np.asanyarray(heat.dataobj), stored)),
            ]
            for coded in ("sform", "qform"):
                ga, gc = getattr(h, "get_" + coded)(coded=True)
                wa, wc = getattr(loaded.header, "get_" + coded)(coded=True)
                checks.append((coded + " code", int(gc) == int(wc)))
                checks.append((coded, (ga is None and wa is None) or (ga is not None and wa is not None and np.array_equal(ga, wa))))
            checks.append(("affine", np.array_equal(heat.affine, loaded.affine)))
            bad = [c for c, ok in checks if not ok]
            if bad:
                failures.append(f"{name}: heatmap differs in {', '.join(bad)}")
            print(f"{name}: {'FAIL' if bad or any(f.startswith(name + ':') for f in failures) else 'ok'} (source {source})")
    if failures:
        print("\n".join(failures))
        return 1
    print(f"all {len(cases)} cases match nibabel {nib.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
