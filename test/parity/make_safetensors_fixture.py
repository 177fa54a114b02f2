#!/usr/bin/env python3
"""Writes test/parity/fixtures/torch_written.safetensors with PyTorch and the reference
safetensors writer, for test_safetensors to read (PyTorch -> gridnn interop).

SAMPLE holds the tensors' formulas; test/parity/safetensors_sample.h repeats them in C++
and check_torch_load.py imports them from here. Every value is exact in its dtype.

Run with a Python that has torch and safetensors (the repository's .venv):
    .venv/bin/python test/parity/make_safetensors_fixture.py
"""
import os
import sys

import torch

# name -> (dtype, shape, values as a function of the flat index tensor i (int64))
SAMPLE = {
    "f32.matrix": (torch.float32, [2, 3], lambda i: i.double() * 0.5 - 1.0),
    "f16.vector": (torch.float16, [7], lambda i: (i - 3).double() * 0.25),
    "bf16.cube": (torch.bfloat16, [2, 2, 3], lambda i: (i - 6).double() * 0.125),
    "i32.vector": (torch.int32, [5], lambda i: (i - 2) * 1000003),
    "i64.vector": (torch.int64, [4], lambda i: (i - 1) * (1 << 40) + i),
    "scalar": (torch.float32, [], lambda i: torch.full_like(i, 3.25, dtype=torch.float64)),
    "five_d": (torch.float32, [1, 2, 1, 3, 2], lambda i: i.double() * 0.25 + 100.0),
    "empty": (torch.float32, [0, 3], lambda i: i.double()),
}

METADATA = {"format": "pt", "producer": "gridnn safetensors sample"}


def expected_tensor(name):
    dtype, shape, formula = SAMPLE[name]
    count = 1
    for d in shape:
        count *= d
    index = torch.arange(count, dtype=torch.int64)
    return formula(index).to(dtype).reshape(shape)


def expected_tensors():
    return {name: expected_tensor(name) for name in SAMPLE}


def main():
    from safetensors.torch import save_file

    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                       "torch_written.safetensors")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    save_file(expected_tensors(), out, metadata=METADATA)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
