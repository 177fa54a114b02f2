#!/bin/sh
# Test safetensors_loads_in_torch: gridnn writes the sample, PyTorch reads it back.
# Usage: run_torch_load_check.sh WRITER PYTHON CHECKER OUTPUT
# Exits 77 (skipped) when PYTHON is missing; check_torch_load.py does the same when it
# cannot import torch or safetensors.
set -eu
writer=$1 python=$2 checker=$3 output=$4
if [ ! -x "$python" ]; then
  echo "skipping: no Python at '$python' (set GRIDNN_PARITY_PYTHON)" >&2
  exit 77
fi
"$writer" "$output"
exec "$python" "$checker" "$output"
