#!/usr/bin/env bash
# Sets up, builds and runs the main job. Until the training program lands this is
# gridnn-demo on the CPU: a two-layer network trained with gridnn's own ops, saved as
# safetensors. Arguments are passed to the program (try --help, or --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --minimal
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
echo "run.sh: building gridnn-demo (the first build takes a few minutes)" >&2
# Quiet when all is well; on a failure the configure or compiler output is shown.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { cmake --preset default && cmake --build --preset default -j "$(nproc)" --target gridnn-demo; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "run.sh: the build failed (output above)" >&2
  exit 1
fi
build/default/models/gridnn-demo "$@"
