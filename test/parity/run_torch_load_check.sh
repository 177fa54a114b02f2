#!/bin/sh
# Test safetensors_loads_in_torch: gridnn writes the sample, PyTorch reads it back.
# Usage: run_torch_load_check.sh WRITER PYTHON CHECKER OUTPUT
# Exits 77 (skipped) when PYTHON is missing; check_torch_load.py does the same when it
# cannot import torch or safetensors. With GRIDNN_REQUIRE_PARITY=1 (set by CI) a missing
# environment is a failure (exit 1) instead, so CI cannot pass without checking interop.
set -eu
writer=$1 python=$2 checker=$3 output=$4

# Skips (77), or fails (1) when the environment is required.
missing_environment() {
  if [ "${GRIDNN_REQUIRE_PARITY:-0}" = 1 ]; then
    echo "error: GRIDNN_REQUIRE_PARITY=1 but the PyTorch interop check cannot run ($1);" \
         "run scripts/setup.sh to install torch and create .venv with safetensors" >&2
    exit 1
  fi
  echo "skipping: $1; run scripts/setup.sh to enable this test" >&2
  exit 77
}

if [ ! -x "$python" ]; then
  missing_environment "no Python at '$python' (set GRIDNN_PARITY_PYTHON)"
fi
"$writer" "$output"
status=0
"$python" "$checker" "$output" || status=$?
if [ "$status" -eq 77 ]; then
  missing_environment "$python cannot import torch and safetensors"
fi
exit "$status"
