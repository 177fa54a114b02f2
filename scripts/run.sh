#!/usr/bin/env bash
# Sets up, builds and runs the main job: gridnn-train trains a ResAttNet3D-18 (width 8)
# on synthetic brain-like 32^3 volumes on the CPU, to about 99% validation accuracy in
# under a minute on 2 cores (bench/RESULTS.md). Checkpoints and a JSON-lines metrics file
# go to runs/main/. Extra arguments are passed on (they override the ones below; try
# --help, --device cuda, --epochs 20, or --resume to continue from the last checkpoint).
# With --grid PrxPc it runs under mpiexec with Pr*Pc processes:
#   bash scripts/run.sh --grid 2x2
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --minimal
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
# Idle OpenMP threads sleep instead of spinning: on a machine shared with anything else,
# spinning made training steps 4-5x slower (DESIGN notes in bench/RESULTS.md).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
echo "run.sh: building gridnn-train (the first build takes a few minutes)" >&2
# Quiet when all is well; on a failure the configure or compiler output is shown.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { cmake --preset default && cmake --build --preset default -j "$(nproc)" --target gridnn-train; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "run.sh: the build failed (output above)" >&2
  exit 1
fi
mkdir -p runs/main
# --grid PrxPc: as many processes as the grid has, one OpenMP thread each (2 cores here).
launch=()
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  if [[ "${args[i]}" == --grid && $((i + 1)) -lt ${#args[@]} && "${args[i + 1]}" =~ ^([0-9]+)x([0-9]+)$ ]]; then
    launch=(mpiexec -n $((BASH_REMATCH[1] * BASH_REMATCH[2])))
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  fi
done
"${launch[@]}" build/default/models/gridnn-train --model resattnet3d --depth 18 --width 8 --input 32x32x32 \
  --batch 8 --epochs 10 --optimizer sgd --momentum 0.9 --lr 0.05 --schedule cosine \
  --checkpoint-dir runs/main --metrics runs/main/metrics.jsonl "$@"
