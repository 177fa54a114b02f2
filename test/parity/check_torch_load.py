#!/usr/bin/env python3
"""Checks that a safetensors file written by gridnn (write_safetensors_sample) loads in
PyTorch through the reference reader, with the names, dtypes, shapes, values and metadata
of the sample in make_safetensors_fixture.py (gridnn -> PyTorch interop).

Usage: check_torch_load.py FILE
Exit codes: 0 all match, 1 a mismatch (each one printed), 2 bad usage,
77 torch or safetensors cannot be imported (the test is skipped).
"""
import os
import sys

SKIP = 77


def import_or_skip():
    try:
        import torch  # noqa: F401
        from safetensors import safe_open
        from safetensors.torch import load_file
    except ImportError as e:
        print(f"skipping: cannot import torch and safetensors with {sys.executable} ({e}); "
              f"create the venv: /usr/bin/python3 -m venv --system-site-packages .venv && "
              f".venv/bin/pip install safetensors", file=sys.stderr)
        sys.exit(SKIP)
    return load_file, safe_open


def compare(actual, expected):
    """Returns a list of problems, empty when the dicts match exactly."""
    problems = []
    if set(actual) != set(expected):
        problems.append(f"names: got {sorted(actual)}, expected {sorted(expected)}")
    for name in sorted(set(actual) & set(expected)):
        a, e = actual[name], expected[name]
        if a.dtype != e.dtype:
            problems.append(f"{name}: dtype {a.dtype}, expected {e.dtype}")
        elif list(a.shape) != list(e.shape):
            problems.append(f"{name}: shape {list(a.shape)}, expected {list(e.shape)}")
        elif not bool((a == e).all()):
            problems.append(f"{name}: values {a.flatten().tolist()}, expected {e.flatten().tolist()}")
    return problems


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    load_file, safe_open = import_or_skip()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_safetensors_fixture import METADATA, expected_tensors

    path = argv[1]
    problems = compare(load_file(path), expected_tensors())
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    if metadata != METADATA:
        problems.append(f"metadata: got {metadata}, expected {METADATA}")
    for p in problems:
        print(f"{path}: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"{path}: {len(expected_tensors())} tensors and the metadata match in PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
