#!/usr/bin/env bash
# Sets up, builds and runs the main job: gridnn-train trains a ResAttNet3D-18 (width 8)
# on synthetic brain-like 32^3 volumes on the CPU, to about 99% validation accuracy in
# under a minute on 2 cores (bench/RESULTS.md). Checkpoints and a JSON-lines metrics file
# go to runs/main/. Extra arguments are passed on (they override the ones below; try
# --help, --device cuda, --epochs 20, or --resume to continue from the last checkpoint).
# With --grid PrxPc (and --stages Ps) it runs under mpiexec with Ps*Pr*Pc processes:
#   bash scripts/run.sh --grid 2x2
#   bash scripts/run.sh --stages 2 --micro-batches 2 --placement auto
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --minimal
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
# Idle OpenMP threads spin for 10000 rounds (libgomp's GOMP_SPINCOUNT), then sleep. Sleeping
# at once (OMP_WAIT_POLICY=passive) took most of two threads' speedup, a wake-up for each of a
# step's many parallel regions; spinning without a bound made steps 3-5x slower while another
# process ran (bench/results/cpu-speed.md). Set OMP_WAIT_POLICY=passive on a busy machine.
if [[ -z "${OMP_WAIT_POLICY:-}" ]]; then export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-10000}; fi
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
# --grid PrxPc (or PsxPrxPc) and --stages Ps: as many processes as the grid has, one OpenMP
# thread each (2 cores here).
launch=()
args=("$@")
grid=1 stages=1
for ((i = 0; i + 1 < ${#args[@]}; ++i)); do
  next="${args[i + 1]}"
  if [[ "${args[i]}" == --grid && "$next" =~ ^([0-9]+)x([0-9]+)x([0-9]+)$ ]]; then
    grid=$((BASH_REMATCH[1] * BASH_REMATCH[2] * BASH_REMATCH[3]))
  elif [[ "${args[i]}" == --grid && "$next" =~ ^([0-9]+)x([0-9]+)$ ]]; then
    grid=$((BASH_REMATCH[1] * BASH_REMATCH[2]))
  elif [[ "${args[i]}" == --stages && "$next" =~ ^[0-9]+$ ]]; then
    stages=$next
  fi
done
# A PsxPrxPc grid counts its stages already; --stages multiplies a PrxPc one.
procs=$grid
[[ ! " ${args[*]} " =~ \ --grid\ [0-9]+x[0-9]+x[0-9]+\  ]] && procs=$((grid * stages))
if ((procs > 1)); then
  launch=(mpiexec -n "$procs")
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi
"${launch[@]}" build/default/tools/gridnn-train --model resattnet3d --depth 18 --width 8 --input 32x32x32 \
  --batch 8 --epochs 10 --optimizer sgd --momentum 0.9 --lr 0.05 --schedule cosine \
  --checkpoint-dir runs/main --metrics runs/main/metrics.jsonl "$@"
