#!/usr/bin/env python3
"""Simulated-atrophy benchmark dataset built from ONE real template brain.

THIS IS SIMULATED ATROPHY, NOT CLINICAL DATA. Every scan is the same brain (the Colin27
average, ``ch2bet.nii.gz`` from Debian's mricron-data) with a synthetic deformation and
synthetic scanner effects; the "AD-like" class is a hand-made caricature of Alzheimer's
atrophy, not a model of the disease. Use it to test a pipeline end to end (loading mixed
NIfTI orientations and scalings, training, explanation heatmaps), never to make claims
about patients.

What the simulation does, per subject (seeded by (--seed, subject index), so the output
does not depend on --jobs):

* Anatomy. The template and the AAL atlas (same 181x217x181, 1 mm grid) are resampled once
  to --spacing mm (Gaussian pre-smoothing + linear sampling; masks as partial-volume
  fractions). The "hippocampal region" is AAL labels 37-42 (Hippocampus, ParaHippocampal,
  Amygdala, left and right; numbering checked against aal.nii.txt). AAL has no ventricles,
  so the lateral ventricles are derived: voxels darker than 45 (CSF; white matter is about
  110) inside the brain eroded by 10 mm and inside a central box (x -30..30, y -45..35,
  z -5..40 mm), split into connected components; the components of at least 20% of the
  largest one's size whose centre is more than 4 mm off the midline are kept (on ch2bet:
  the left and right lateral ventricles, about 8 ml each; the third ventricle and the
  cisterns are dropped).
* Volume changes (every subject): the hippocampal region and the lateral ventricles get a
  healthy-variation volume factor (region 0.92-1.08, ventricles 0.8-1.25), so neither
  volume alone separates the classes. Class 1 ("AD-like") draws a severity s from
  --severity and multiplies them by 1 - s (the region loses a fraction s of its volume)
  and 1 + 2s (the ventricles grow by 2s). A smooth displacement field scales each
  structure about a few local centres (3 per structure and hemisphere, along its long
  axis) by the cube root of its factor, fading out over a few mm outside the structure.
  Tissue that a shrinking region vacates becomes CSF (the template's ventricular
  intensity), like the widened temporal horn and hippocampal fissure of a real atrophic
  brain.
* Every subject: a random affine (rotation up to 4 degrees, scale up to +-4% plus +-2% per
  axis, shift up to 3 mm) and a random smooth displacement field (about 20 mm correlation
  length, up to a few mm), so head size, shape and position vary; then an intensity gamma (0.8-1.25), a smooth multiplicative bias
  field (+-10-20%), a global gain and Rician noise (1-3% of the brain median).
* Storage: int16 .nii.gz with scl_slope = max/32000, in one of the orientations RAS, LAS,
  LPS, PIL (array axes permuted/flipped, affine adjusted: the anatomy in world space is
  unchanged), with the transform in the sform only, the qform only, or both.
* Masks (uint8, in each scan's own grid and affine): masks/sub-XXX_brain.nii.gz (the
  brain) and masks/sub-XXX_region.nii.gz: 1 = hippocampal region, 2 = lateral ventricles
  (nonzero = where the atrophy acts): the template's structures carried by the subject's
  own deformation, each the union of the structure before and after its volume change.
  Written for every subject, class 0 too.

Output: OUT/sub-XXX.nii.gz, OUT/masks/..., OUT/manifest.csv (path,label,split; classes
interleaved, splits class-balanced) and OUT/README.txt.

Usage: make_atrophy_dataset.py OUT [--subjects 48] [--spacing 2.0] [--seed 0]
           [--severity 0.15,0.35] [--split 0.6,0.2,0.2] [--jobs N]
Needs numpy, scipy, nibabel (Debian: python3-scipy python3-nibabel) and mricron-data.
"""
import argparse
import multiprocessing
import os
import sys
import time

import numpy as np

try:
    import nibabel as nib
    from nibabel import orientations as nio
    from scipy import ndimage as ndi
except ImportError as e:  # pragma: no cover - reported to the user
    sys.exit(f"make_atrophy_dataset: {e}; install python3-nibabel and python3-scipy "
             "(scripts/setup.sh)")

TEMPLATE_DIR = "/usr/share/mricron/templates"
REGION_LABELS = {37: "Hippocampus_L", 38: "Hippocampus_R", 39: "ParaHippocampal_L",
                 40: "ParaHippocampal_R", 41: "Amygdala_L", 42: "Amygdala_R"}
ORIENTATIONS = ("RAS", "LAS", "LPS", "PIL")
FORMS = ("both", "sform", "qform")  # which transform(s) the header carries
CSF_THRESHOLD = 45.0  # ch2bet intensity (uint8 scale): CSF < 45 < grey matter
VENTRICLE_BOX_MM = ((-30, 30), (-45, 35), (-5, 40))  # world x, y, z around the centre
CENTRES_PER_STRUCTURE = 3
# Volume factors of healthy variation, drawn for every subject (class 1 multiplies them by
# 1 - s and 1 + 2s): uniform, and log-uniform for the ventricles.
NORMAL_REGION_VOLUME = (0.92, 1.08)
NORMAL_VENTRICLE_VOLUME = (0.8, 1.25)


# ----------------------------------------------------------------------------- template


def check_atlas_labels(txt_path):
    """Checks that AAL's numbering puts the hippocampal region at 37-42."""
    names = {}
    with open(txt_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].isdigit():
                names[int(parts[0])] = parts[1]
    for value, name in REGION_LABELS.items():
        if names.get(value) != name:
            sys.exit(f"make_atrophy_dataset: {txt_path}: label {value} is "
                     f"{names.get(value)!r}, expected {name!r}")


def load_template(template_dir):
    t_img = nib.load(os.path.join(template_dir, "ch2bet.nii.gz"))
    a_img = nib.load(os.path.join(template_dir, "aal.nii.gz"))
    check_atlas_labels(os.path.join(template_dir, "aal.nii.txt"))
    t = np.asarray(t_img.dataobj, dtype=np.float32)
    labels = np.asarray(a_img.dataobj)
    if labels.shape != t.shape or not np.allclose(a_img.affine, t_img.affine, atol=1e-4):
        # Nearest-neighbour resampling of the atlas into the template's grid.
        vox = np.linalg.inv(a_img.affine) @ t_img.affine
        labels = ndi.affine_transform(labels, vox[:3, :3], vox[:3, 3], output_shape=t.shape,
                                      order=0, mode="constant", cval=0)
    return t, labels.astype(np.int32), t_img.affine


def derive_ventricles(t, affine):
    """Lateral ventricles of the 1 mm template (see the module docstring)."""
    brain = ndi.binary_fill_holes(t > 0)
    inner = ndi.binary_erosion(brain, iterations=10)
    world = voxel_world_grid(t.shape, affine)
    box = np.ones(t.shape, bool)
    for axis, (lo, hi) in enumerate(VENTRICLE_BOX_MM):
        box &= (world[axis] >= lo) & (world[axis] <= hi)
    lab, n = ndi.label((t < CSF_THRESHOLD) & inner & box)
    if n == 0:
        sys.exit("make_atrophy_dataset: no dark (CSF) voxels near the centre of the template")
    sizes = ndi.sum(np.ones(t.shape), lab, np.arange(1, n + 1))
    keep = []
    for i in np.argsort(sizes)[::-1]:
        if sizes[i] < 0.2 * sizes.max():
            break
        centre_x = world[0][lab == i + 1].mean()
        if abs(centre_x) > 4.0:
            keep.append(i + 1)
    if not keep:
        sys.exit("make_atrophy_dataset: found no lateral ventricles in the template")
    return np.isin(lab, keep)


def voxel_world_grid(shape, affine):
    ijk = np.indices(shape, dtype=np.float32)
    return [affine[r, 0] * ijk[0] + affine[r, 1] * ijk[1] + affine[r, 2] * ijk[2] + affine[r, 3]
            for r in range(3)]


def structure_centres(mask, affine):
    """A few centres along each hemisphere's part of the structure (world mm)."""
    pts = np.argwhere(mask).astype(np.float64)
    pts = pts @ affine[:3, :3].T + affine[:3, 3]
    centres = []
    for side in (pts[:, 0] < 0, pts[:, 0] >= 0):
        p = pts[side]
        if len(p) < CENTRES_PER_STRUCTURE:
            continue
        mean = p.mean(0)
        axis = np.linalg.svd(p - mean, full_matrices=False)[2][0]
        proj = (p - mean) @ axis
        edges = np.quantile(proj, np.linspace(0, 1, CENTRES_PER_STRUCTURE + 1))
        for k in range(CENTRES_PER_STRUCTURE):
            sel = (proj >= edges[k]) & (proj <= edges[k + 1])
            centres.append(p[sel].mean(0))
    return np.array(centres)


def downsample(volume, affine, spacing, order=1):
    """Resamples a 1 mm-ish volume onto a grid of `spacing` mm spanning the same field of
    view (same first voxel centre); Gaussian pre-smoothing for order 1."""
    vox = np.sqrt((affine[:3, :3] ** 2).sum(0))
    step = spacing / vox
    shape = tuple(int(np.floor((n - 1) / s)) + 1 for n, s in zip(volume.shape, step))
    if order > 0:
        sigma = [0.42 * np.sqrt(max(s * s - 1.0, 0.0)) for s in step]
        volume = ndi.gaussian_filter(volume.astype(np.float32), sigma)
    new_affine = affine.copy()
    new_affine[:3, :3] = affine[:3, :3] * step
    out = ndi.affine_transform(volume, np.diag(step), output_shape=shape, order=order,
                               mode="constant", cval=0.0)
    return out, new_affine


class Template:
    """Everything the subjects share, computed once before the worker processes fork."""

    def __init__(self, template_dir, spacing):
        t, labels, affine = load_template(template_dir)
        vent = derive_ventricles(t, affine)
        region = np.isin(labels, list(REGION_LABELS))
        brain = ndi.binary_fill_holes(t > 0)
        self.csf = float(np.median(t[vent]))
        self.region_centres = structure_centres(region, affine)
        self.vent_centres = structure_centres(vent, affine)
        self.t, self.affine = downsample(t, affine, spacing)
        self.region, _ = downsample(region.astype(np.float32), affine, spacing)
        self.vent, _ = downsample(vent.astype(np.float32), affine, spacing)
        self.brain, _ = downsample(brain.astype(np.float32), affine, spacing)
        self.shape = self.t.shape
        self.spacing = spacing
        inside = self.brain > 0.5
        self.ref = float(np.percentile(self.t[inside], 99.0))
        # Envelopes: 1 inside a structure, Gaussian fall-off with the distance outside.
        sampling = np.sqrt((self.affine[:3, :3] ** 2).sum(0))
        self.region_env = envelope(self.region > 0.5, sampling, 4.0)
        self.vent_env = envelope(self.vent > 0.5, sampling, 5.0)
        self.world = np.stack(voxel_world_grid(self.shape, self.affine))  # (3, X, Y, Z)
        self.world_to_vox = np.linalg.inv(self.affine)
        self.centre = np.array([self.world[a][inside].mean() for a in range(3)])


def envelope(mask, sampling, sigma_mm):
    d = ndi.distance_transform_edt(~mask, sampling=sampling)
    return np.exp(-(d * d) / (2 * sigma_mm ** 2)).astype(np.float32)


# ----------------------------------------------------------------------------- subjects

TEMPLATE = None  # set in the parent before the pool forks


def smooth_field(rng, shape, spacing, corr_mm, components):
    """Smooth random fields with unit maximum magnitude: white noise on a coarse grid,
    Gaussian-smoothed, linearly upsampled."""
    coarse_step = max(1, int(round(8.0 / spacing)))
    coarse = tuple(n // coarse_step + 2 for n in shape)
    sigma = corr_mm / (coarse_step * spacing)
    out = []
    idx = np.indices(shape, dtype=np.float32) / coarse_step
    for _ in range(components):
        f = ndi.gaussian_filter(rng.standard_normal(coarse), sigma, mode="wrap")
        f /= np.abs(f).max() + 1e-12
        out.append(ndi.map_coordinates(f.astype(np.float32), idx, order=1, mode="nearest"))
    return out


def random_affine(rng, centre):
    """World -> world: rotation about the brain centre, scaling, shift."""
    ang = np.deg2rad(rng.uniform(-4, 4, 3))
    cx, cy, cz = np.cos(ang)
    sx, sy, sz = np.sin(ang)
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    scale = rng.uniform(0.96, 1.04) * rng.uniform(0.98, 1.02, 3)
    m = rz @ ry @ rx @ np.diag(scale)
    shift = rng.uniform(-3, 3, 3)
    return m, centre - m @ centre + shift


def sample(volume, world_pts, tpl, order=1):
    """Samples a template-grid volume at world points (3, ...)."""
    w2v = tpl.world_to_vox
    vox = np.einsum("ij,j...->i...", w2v[:3, :3], world_pts) + w2v[:3, 3].reshape(
        (3,) + (1,) * (world_pts.ndim - 1))
    return ndi.map_coordinates(volume, vox, order=order, mode="constant", cval=0.0)


def scaling_field(pts, centres, env, factor):
    """Backward displacement that scales the structure about its local centres by the
    linear `factor` (< 1 shrinks, > 1 enlarges), weighted by the envelope `env`."""
    # Partition of unity over the centres (Gaussian, 8 mm).
    d2 = np.stack([((pts - c.reshape(3, 1, 1, 1)) ** 2).sum(0) for c in centres])
    w = np.exp(-(d2 - d2.min(0)) / (2 * 8.0 ** 2))
    w /= w.sum(0)
    a = 1.0 / factor - 1.0
    u = np.zeros_like(pts)
    for k, c in enumerate(centres):
        u += w[k] * (pts - c.reshape(3, 1, 1, 1))
    return (a * env) * u


def make_subject(args):
    index, label, out_dir, seed, severity_range = args
    tpl = TEMPLATE
    rng = np.random.default_rng([seed, index])
    spacing = tpl.spacing

    # Subject space -> template space: random affine plus a smooth displacement.
    m, t = random_affine(rng, tpl.centre)
    pts = np.einsum("ij,j...->i...", m, tpl.world) + t.reshape(3, 1, 1, 1)
    amp = rng.uniform(1.5, 3.0)  # mm, peak magnitude per component
    pts += amp * np.stack(smooth_field(rng, tpl.shape, spacing, 20.0, 3))
    pts = pts.astype(np.float32)

    region_pre = sample(tpl.region, pts, tpl)
    vent_pre = sample(tpl.vent, pts, tpl)
    # Normal anatomical variation (every subject), times the atrophy (class 1): volume
    # factors of the hippocampal region and of the lateral ventricles.
    region_factor = rng.uniform(*NORMAL_REGION_VOLUME)
    vent_factor = np.exp(rng.uniform(*np.log(NORMAL_VENTRICLE_VOLUME)))
    severity = 0.0
    if label == 1:
        severity = rng.uniform(*severity_range)
        region_factor *= 1 - severity
        vent_factor *= 1 + 2 * severity
    # The volume changes act in template space: q = p + u(p).
    env_r = sample(tpl.region_env, pts, tpl)
    env_v = sample(tpl.vent_env, pts, tpl)
    u = scaling_field(pts, tpl.region_centres, env_r, region_factor ** (1 / 3))
    u += scaling_field(pts, tpl.vent_centres, env_v, vent_factor ** (1 / 3))
    q = pts + u.astype(np.float32)
    region_post = sample(tpl.region, q, tpl)
    vent_post = sample(tpl.vent, q, tpl)
    image = sample(tpl.t, q, tpl)
    # What the shrinking region vacates becomes CSF.
    vacated = np.clip(region_pre - region_post, 0.0, 1.0)
    image = image * (1 - vacated) + tpl.csf * vacated
    brain = sample(tpl.brain, q, tpl) > 0.5

    region_mask = np.zeros(tpl.shape, np.uint8)
    region_mask[(vent_pre > 0.5) | (vent_post > 0.5)] = 2
    region_mask[(region_pre > 0.5) | (region_post > 0.5)] = 1
    region_mask[~brain] = 0

    # Scanner effects.
    image = np.clip(image / tpl.ref, 0.0, None)
    image = image ** rng.uniform(0.8, 1.25)
    bias_amp = rng.uniform(0.10, 0.20)
    image *= np.exp(bias_amp * smooth_field(rng, tpl.shape, spacing, 40.0, 1)[0])
    image *= rng.uniform(0.8, 1.2)
    sigma = rng.uniform(0.01, 0.03) * float(np.median(image[brain]))
    n1 = rng.standard_normal(tpl.shape, dtype=np.float32) * sigma
    n2 = rng.standard_normal(tpl.shape, dtype=np.float32) * sigma
    image = np.sqrt((image + n1) ** 2 + n2 ** 2).astype(np.float32)

    # Orientation and header transform(s).
    pair = index // 2
    orient = ORIENTATIONS[(pair + label) % len(ORIENTATIONS)]
    form = FORMS[pair % len(FORMS)]
    ornt = nio.ornt_transform(nio.axcodes2ornt("RAS"), nio.axcodes2ornt(orient))
    affine = tpl.affine @ nio.inv_ornt_aff(ornt, tpl.shape)
    image = nio.apply_orientation(image, ornt)
    region_mask = nio.apply_orientation(region_mask, ornt)
    brain_mask = nio.apply_orientation(brain.astype(np.uint8), ornt)

    slope = float(image.max()) / 32000.0
    stored = np.round(image / slope).astype(np.int16)
    name = f"sub-{index:03d}"
    save(stored, affine, form, os.path.join(out_dir, name + ".nii.gz"), slope=slope)
    save(np.ascontiguousarray(region_mask, np.uint8), affine, form,
         os.path.join(out_dir, "masks", name + "_region.nii.gz"))
    save(np.ascontiguousarray(brain_mask, np.uint8), affine, form,
         os.path.join(out_dir, "masks", name + "_brain.nii.gz"))
    return dict(index=index, name=name, label=label, severity=severity, orient=orient,
                form=form, region_factor=region_factor, vent_factor=vent_factor)


def save(array, affine, form, path, slope=None):
    img = nib.Nifti1Image(np.ascontiguousarray(array), None)
    hdr = img.header
    hdr.set_data_dtype(array.dtype)
    hdr.set_xyzt_units("mm", "sec")
    if form in ("both", "sform"):
        img.set_sform(affine, code="scanner")
    else:
        img.set_sform(affine, code="unknown")
    if form in ("both", "qform"):
        img.set_qform(affine, code="scanner")
    else:
        img.set_qform(affine, code="unknown")
    if slope is not None:
        hdr.set_slope_inter(slope, 0.0)
    else:
        hdr.set_slope_inter(1.0, 0.0)
    nib.save(img, path)


# ----------------------------------------------------------------------------- main


def splits_for_pairs(pairs, fractions):
    """Split of each pair of subjects (one per class): contiguous blocks of pairs, every
    split with a positive fraction gets at least one pair."""
    names = ("train", "val", "test")
    fractions = np.asarray(fractions, float) / sum(fractions)
    counts = [int(round(f * pairs)) if f > 0 else 0 for f in fractions]
    for k in (1, 2):
        if fractions[k] > 0 and counts[k] == 0:
            counts[k] = 1
    counts[0] = pairs - counts[1] - counts[2]
    if counts[0] < (1 if fractions[0] > 0 else 0):
        raise SystemExit(f"make_atrophy_dataset: {2 * pairs} subjects are too few for the "
                         f"split {','.join(str(f) for f in fractions)}")
    out = []
    for name, n in zip(names, counts):
        out += [name] * n
    return out


def parse_floats(text, n, what):
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        vals = []
    if len(vals) != n:
        raise SystemExit(f"make_atrophy_dataset: {what} needs {n} comma-separated numbers, "
                         f"got {text!r}")
    return vals


README = """\
Simulated atrophy on one template brain: NOT CLINICAL DATA.

Every scan here is the same brain (Colin27, ch2bet.nii.gz from Debian's mricron-data)
with synthetic deformations, scanner effects and noise, made by gridnn's
scripts/make_atrophy_dataset.py. Label 1 ("AD-like") has a hand-made caricature of
atrophy: the hippocampus/parahippocampal/amygdala region (AAL 37-42) shrunk by a volume
fraction s in [{sev_lo}, {sev_hi}] (vacated tissue becomes CSF) and the lateral ventricles
enlarged by 2s, on top of a healthy variation of both volumes that label 0 ("control")
has too. It is a benchmark for software, not a model of
Alzheimer's disease; results on it say nothing about patients.

Settings: {subjects} subjects, {spacing} mm, seed {seed}.
Files: sub-XXX.nii.gz (int16 with scl_slope; orientations RAS/LAS/LPS/PIL; sform, qform
or both), masks/sub-XXX_brain.nii.gz (brain), masks/sub-XXX_region.nii.gz (1 =
hippocampal region, 2 = lateral ventricles: where atrophy acts; every subject),
manifest.csv (path,label,split), subjects.csv (severity, volume factors, orientation,
header transform).
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="output folder (created)")
    p.add_argument("--subjects", type=int, default=48, help="number of scans (even; default 48)")
    p.add_argument("--spacing", type=float, default=2.0, help="voxel size in mm (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--severity", default="0.15,0.35",
                   help="range of the class-1 volume loss of the hippocampal region (default 0.15,0.35)")
    p.add_argument("--split", default="0.6,0.2,0.2", help="train,val,test fractions")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--template-dir", default=TEMPLATE_DIR, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    sev = parse_floats(a.severity, 2, "--severity")
    fractions = parse_floats(a.split, 3, "--split")
    if a.subjects < 2 or a.subjects % 2:
        p.error("--subjects must be even and at least 2")
    if not (0 <= sev[0] <= sev[1] < 1):
        p.error("--severity: need 0 <= low <= high < 1")
    if a.spacing < 1 or a.spacing > 8:
        p.error("--spacing must be in [1, 8] mm")
    if min(fractions) < 0 or sum(fractions) <= 0:
        p.error("--split: fractions must be >= 0 with a positive sum")
    if not os.path.exists(os.path.join(a.template_dir, "ch2bet.nii.gz")):
        sys.exit(f"make_atrophy_dataset: {a.template_dir}/ch2bet.nii.gz not found; install "
                 "mricron-data (scripts/setup.sh)")
    splits = splits_for_pairs(a.subjects // 2, fractions)

    start = time.time()
    global TEMPLATE
    TEMPLATE = Template(a.template_dir, a.spacing)
    os.makedirs(os.path.join(a.out, "masks"), exist_ok=True)
    jobs = [(i, i % 2, a.out, a.seed, tuple(sev)) for i in range(a.subjects)]
    n_jobs = max(1, min(a.jobs, a.subjects))
    if n_jobs > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(n_jobs) as pool:
            rows = pool.map(make_subject, jobs, chunksize=1)
    else:
        rows = [make_subject(j) for j in jobs]

    with open(os.path.join(a.out, "manifest.csv"), "w") as f:
        f.write("path,label,split\n")
        for r in rows:
            f.write(f"{r['name']}.nii.gz,{r['label']},{splits[r['index'] // 2]}\n")
    with open(os.path.join(a.out, "subjects.csv"), "w") as f:
        f.write("path,label,split,severity,region_volume_factor,ventricle_volume_factor,"
                "orientation,transform\n")
        for r in rows:
            f.write(f"{r['name']}.nii.gz,{r['label']},{splits[r['index'] // 2]},"
                    f"{r['severity']:.4f},{r['region_factor']:.4f},{r['vent_factor']:.4f},"
                    f"{r['orient']},{r['form']}\n")
    with open(os.path.join(a.out, "README.txt"), "w") as f:
        f.write(README.format(sev_lo=sev[0], sev_hi=sev[1], subjects=a.subjects,
                              spacing=a.spacing, seed=a.seed))
    counts = {s: splits.count(s) * 2 for s in ("train", "val", "test")}
    print(f"make_atrophy_dataset: {a.subjects} simulated subjects ({a.subjects // 2} control, "
          f"{a.subjects // 2} AD-like) {'x'.join(map(str, TEMPLATE.shape))} at {a.spacing:g} mm "
          f"into {a.out} (train {counts['train']}, val {counts['val']}, test {counts['test']}) "
          f"in {time.time() - start:.1f} s on {n_jobs} process{'es' if n_jobs > 1 else ''}")


if __name__ == "__main__":
    main()
