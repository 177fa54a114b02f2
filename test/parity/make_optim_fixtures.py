#!/usr/bin/env python3
"""Writes test/parity/fixtures/optim.safetensors: three steps of torch.optim.SGD, Adam and
AdamW (PyTorch 1.13, float32 on the CPU, the default single-tensor path) on a few random
parameters with given per-step gradients and learning rates, for test/models/optim/
test_optim.cpp to repeat with gridnn's optimizers (relative error <= 1e-6 per tensor).

Tensor names:
  "param.<p>"                  the parameters before the first step
  "grad.<k>.<p>"               the gradient of step k (0, 1, 2)
  "<case>.step<k>.<p>"         the parameters after step k
with <p> one of PARAMS. LRS holds the learning rate of each step (set on the param group
before the step, as a schedule does). CASES holds each case's options; the C++ test
repeats them, and the metadata entry "<case>" records them as JSON.

Run with Debian's python3-torch (no other package needed: the file is written by the
small writer below):
    /usr/bin/python3 test/parity/make_optim_fixtures.py
"""
import json
import os
import struct
import sys

import torch

PARAMS = {"conv.weight": [4, 3, 2], "conv.bias": [4], "fc.weight": [3, 5]}
LRS = [0.1, 0.05, 0.02]
STEPS = len(LRS)

# name -> (torch optimizer class name, keyword arguments other than lr)
CASES = {
    "sgd_plain": ("SGD", {}),
    "sgd_nesterov_wd": ("SGD", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    "sgd_dampening": ("SGD", {"momentum": 0.8, "dampening": 0.3}),
    "adam_wd": ("Adam", {"weight_decay": 0.05}),
    "adamw_default": ("AdamW", {}),
    "adamw_wd": ("AdamW", {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
}


def run_case(kind, kwargs, initial, grads):
    params = {n: t.clone().requires_grad_() for n, t in initial.items()}
    opt = getattr(torch.optim, kind)(list(params.values()), lr=LRS[0], **kwargs)
    after = []
    for k in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = LRS[k]
        for n, p in params.items():
            p.grad = grads[k][n].clone()
        opt.step()
        after.append({n: p.detach().clone() for n, p in params.items()})
    return after


def write_safetensors(path, tensors, metadata):
    """The safetensors layout (F32 only): u64 header length, JSON header, raw data."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts on an 8-byte boundary
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def main():
    generator = torch.Generator().manual_seed(2027)

    def uniform(shape, scale):
        return (torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1).mul(scale).float()

    initial = {n: uniform(shape, 1.0) for n, shape in PARAMS.items()}
    grads = [{n: uniform(shape, 0.5 * (k + 1)) for n, shape in PARAMS.items()} for k in range(STEPS)]

    tensors = {f"param.{n}": t for n, t in initial.items()}
    for k in range(STEPS):
        tensors.update({f"grad.{k}.{n}": t for n, t in grads[k].items()})
    metadata = {"producer": "test/parity/make_optim_fixtures.py", "torch": torch.__version__,
                "lrs": json.dumps(LRS)}
    for case, (kind, kwargs) in CASES.items():
        for k, values in enumerate(run_case(kind, kwargs, initial, grads)):
            tensors.update({f"{case}.step{k}.{n}": t for n, t in values.items()})
        metadata[case] = json.dumps({"kind": kind, **kwargs})

    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "optim.safetensors")
    write_safetensors(out, tensors, metadata)
    print(f"wrote {out}: {len(tensors)} tensors, {os.path.getsize(out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
