#!/usr/bin/env bash
# Sets up, builds and runs the main job. Until the training program lands this is
# gridnn-demo on the CPU: a two-layer network trained with gridnn's own ops, saved as
# safetensors. Arguments are passed to the program (try --help, or --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --minimal
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target gridnn-demo >/dev/null
exec build/default/models/gridnn-demo "$@"
