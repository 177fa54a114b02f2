#!/usr/bin/env bash
# The GPU check (docs/design.md §9): one call on a machine with an NVIDIA GPU. Builds gridnn
# with CUDA, cuDNN, NCCL and MPI against the carried packages (scripts/gpu_deps.sh --unpack,
# cmake/GpuCheck.cmake), then runs, each stage under a time limit that leaves time for the
# test stages after it: test-ops -m backend; ctest -L gpu -LE mpi; two ranks with the carried
# MPICH; ctest -L gpu -L mpi (two ranks on the one GPU); then, in what is left (not with
# --quick), the benchmarks per math mode and a training step against PyTorch.
#
#   bash scripts/gpu_check.sh [--quick]   on the GPU machine (no MPI, no internet there)
#   bash scripts/gpu_check.sh --dry-run   anywhere: the same flow without a GPU (the host code
#                                         compiled at -O0: no test runs, so nothing is lost)
#   bash scripts/gpu_check.sh --dry-run --build-only
#                                         its packages, configure and build alone, so that a
#                                         later --dry-run finds the targets built (CI builds
#                                         them while other stages run); no summary
#
# .gpu-deps/ (scripts/gpu_deps.sh) is git-ignored: copy it to the GPU machine explicitly,
# beside the tracked files, and give the call a wall-clock limit of the budget + 60 s or more.
# scripts/gpu_check.py judges what the stages left and prints the summary (at most 3 KB),
# last; $OUT gets exactly summary.txt and gpu_check_logs.tar.gz. Exit status 0 only when
# every build and test stage passed (the dry run: every check it makes).
# Environment: BUILD_DIR (build-gpu), OUT ($BUILD_DIR/gpu_check_out), BUDGET_S (330; 3600
# with --dry-run), CUDA_ARCH (90), PYTHON (python3, the one with torch), TRAIN_FILTER
# (the compare_train_torch.py case, "w16 64^3 b8").
set -uo pipefail
DRY_RUN=0 QUICK=0 BUILD_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    --quick) QUICK=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$arg' (--dry-run, --quick, --build-only, --help)" >&2; exit 2 ;;
  esac
done
((BUILD_ONLY && !DRY_RUN)) && { echo "gpu_check.sh: --build-only goes with --dry-run" >&2; exit 2; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
abs() { case "$1" in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
BUILD="$(abs "${BUILD_DIR:-build-gpu}")" && OUT="$(abs "${OUT:-$BUILD/gpu_check_out}")"
LOGS="$BUILD/gpu_check_logs" DEPS="$BUILD/deps" PYTHON="${PYTHON:-python3}"
GPU_BUDGET_S=330  # a GPU run's default: twice this and two machine starts fit in 15 minutes
BUDGET_S="${BUDGET_S:-$( ((DRY_RUN)) && echo 3600 || echo $GPU_BUDGET_S)}"
JOBS="$(nproc 2>/dev/null || echo 4)" MIN_STAGE_S=10
HELPER=("$PYTHON" "$ROOT/scripts/gpu_check.py")
# Every process waits passively (spinning OpenMP threads cost a 4-5x slowdown as soon as
# another runs; bench/RESULTS.md) with a thread cap: tests 4 side by side, a process alone 8.
PAR=$((JOBS < 4 ? JOBS : 4)) && THREADS=$((JOBS / PAR)) && SOLO=$((JOBS < 8 ? JOBS : 8))
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS PYTHONUNBUFFERED=1
export GRIDNN_LOG_CUDNN=1 HYDRA_LAUNCHER=fork CXX="${CXX:-$(command -v g++ || command -v c++)}"
getent hosts "$(uname -n)" >/dev/null 2>&1 || export HYDRA_IFACE=lo
for d in /usr/local/cuda/bin /usr/local/nvidia/bin; do [[ -d "$d" ]] && export PATH="$PATH:$d"; done
rm -rf "$LOGS" && mkdir -p "$LOGS" "$OUT" && rm -f "$OUT/summary.txt" "$OUT/gpu_check_logs.tar.gz" || exit 2

# stage NAME KIND CAP RESERVE CMD...: CMD for at most CAP seconds, leaving RESERVE seconds of
# the budget to the stages after it; output in LOGS/NAME.log, a record in LOGS/stages.tsv
# (gpu_check.py judges it by KIND). Returns CMD's status (125: no time left to start it).
stage() {
  local name="$1" kind="$2" cap="$3" reserve="$4" t0=$SECONDS rc lim log="$LOGS/${1// /_}.log"
  shift 4
  lim=$((BUDGET_S - SECONDS - reserve)) && ((lim > cap)) && lim=$cap
  if ((lim < MIN_STAGE_S)); then
    rc=125 && echo "not run: ${lim}s of the budget left for it" >>"$log"
  else
    echo "+ $* (limit ${lim}s)" >>"$log" && timeout --kill-after=10 "$lim" "$@" >>"$log" 2>&1
    rc=$?
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$kind" "$rc" $((SECONDS - t0)) "$lim" \
    "$(grep -v '^+ ' "$log" | tail -1 | tr '\t' ' ')" >>"$LOGS/stages.tsv"
  printf '[%4ds] %-18s exit %s\n' "$SECONDS" "$name" "$rc"
  return $rc
}
skip() { printf '%s\tskip\t0\t0\t0\t%s\n' "$1" "$2" >>"$LOGS/stages.tsv"; }
# ctest_stage NAME CAP RESERVE PARALLEL SELECTION...: tests still running 15 s before the
# limit are stopped, so that ctest ends and writes its JUnit file.
ctest_stage() {
  local name="$1" cap="$2" reserve="$3" par="$4" lim stop=()
  shift 4
  lim=$((BUDGET_S - SECONDS - reserve)) && ((lim > cap)) && lim=$cap
  local at=$(($(date +%s) + lim - 15))
  [[ "$(date -d "@$at" +%F)" == "$(date +%F)" ]] && stop=(--stop-time "$(date -d "@$at" +%H:%M:%S)")
  stage "$name" ctest "$cap" "$reserve" ctest --test-dir "$BUILD" "$@" --output-on-failure --no-tests=error \
    -j "$par" --output-junit "$LOGS/${name// /_}.xml" --test-output-size-passed 262144 \
    --test-output-size-failed 262144 "${stop[@]}"
}
finish() {
  wait "$TORCH_PID" 2>/dev/null
  grep -h '^torch ' "$LOGS/torch.log" >>"$LOGS/head.txt" || echo "torch: not importable by $PYTHON" >>"$LOGS/head.txt"
  "${HELPER[@]}" summary "$LOGS" --budget="$BUDGET_S" --elapsed="$SECONDS" \
    "$( ((DRY_RUN)) && echo --dry-run)" "$( ((QUICK)) && echo --quick)" >"$OUT/summary.txt"
  local rc=$?
  tar -czf "$OUT/gpu_check_logs.tar.gz" -C "$BUILD" gpu_check_logs || echo "gpu_check.sh: no log tarball" >&2
  echo && cat "$OUT/summary.txt"
  exit $rc
}
echo "gridnn GPU check$( ((DRY_RUN)) && echo ' --dry-run'): budget ${BUDGET_S}s, logs in $LOGS, results to $OUT"

# The machine, torch (in the background), and cuDNN, NCCL and NVRTC from pip wheels.
GPU="$(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
NVCC="$(command -v nvcc)"
echo "budget ${BUDGET_S}s (a GPU run's default: ${GPU_BUDGET_S}s); gpu: ${GPU:-none}; $JOBS cores, $THREADS threads per test ($SOLO alone); nvcc $("$NVCC" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'), $(cmake --version | head -1)" >"$LOGS/head.txt"
((BUILD_ONLY)) || timeout 120 "$PYTHON" -c 'import torch; ok = torch.cuda.is_available(); print("torch", torch.__version__, "CUDA", torch.version.cuda, "sees the GPU" if ok else "sees no GPU")' >"$LOGS/torch.log" 2>&1 &
TORCH_PID=$!
if ((DRY_RUN)); then  # the wheels' layout (include/, versioned libraries only), from the toolkit's files
  cuda_home="$(dirname "$(dirname "$(realpath "$NVCC")")")" site="$BUILD/pip_layout"
  for lib in cudnn nccl; do
    mkdir -p "$site/nvidia/$lib/include" "$site/nvidia/$lib/lib"
    ln -sf "$cuda_home/include/$lib"* "$site/nvidia/$lib/include/"
    ln -sf "$cuda_home"/lib64/lib"$lib"*.so.[0-9] "$site/nvidia/$lib/lib/"
  done
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
wheel() { "$PYTHON" -c "import importlib, sys; print(list(importlib.import_module(sys.argv[1]).__path__)[0])" "$1" 2>/dev/null; }
CUDNN_ROOT="$(wheel nvidia.cudnn)" NCCL_ROOT="$(wheel nvidia.nccl)" CU13="$(wheel nvidia.cu13)"
export CUDNN_ROOT NCCL_ROOT
echo "pip wheels: cudnn ${CUDNN_ROOT:-none}, nccl ${NCCL_ROOT:-none}, cu13 (nvrtc) ${CU13:-none}" >>"$LOGS/head.txt"
# The carried libraries, the wheels' (cuDNN's runtime-compiled engines dlopen libnvrtc), the toolkit's.
LIBPATH="$DEPS/rtlib"
for d in "$CUDNN_ROOT/lib" "$NCCL_ROOT/lib" "$CU13/lib" "$(dirname "$(dirname "$NVCC")")/lib64"; do
  [[ -d "$d" && "$d" != /lib && "$d" != /lib64 ]] && LIBPATH+=":$d"
done
export LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if ((!DRY_RUN)) && [[ -z "$GPU" && ! -e /dev/nvidia0 ]]; then
  stage machine plain 15 0 sh -c 'echo "no nvidia-smi GPU and no /dev/nvidia0: not a GPU machine (--dry-run runs the checks that need none)"; exit 1'
  finish
fi
stage machine plain 15 0 echo "${GPU:-no GPU: a dry run needs none}"
((DRY_RUN)) && stage "copy size" plain 30 0 "${HELPER[@]}" size "$ROOT"
stage deps plain 90 240 bash scripts/gpu_deps.sh --unpack "$DEPS" "$( ((DRY_RUN)) && echo --dry-run)" || finish
export PKG_CONFIG_LIBDIR="$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS/usr/share/pkgconfig" PKG_CONFIG_PATH=""
rm -f "$BUILD/CMakeCache.txt"  # another configuration's finds would stay
GENERATOR=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
GRIDNN_DEPS="$DEPS" GRIDNN_NVCC="$NVCC" GRIDNN_CUDA_ARCH="${CUDA_ARCH:-90}" GRIDNN_GPU_CHECK_DRY_RUN=$DRY_RUN \
  stage configure configure 120 220 cmake -C cmake/GpuCheck.cmake -S "$ROOT" -B "$BUILD" -G "$GENERATOR" || finish
KEEP_GOING=(-k 0) && [[ "$GENERATOR" != Ninja ]] && KEEP_GOING=(-k)
stage build build $( ((DRY_RUN)) && echo 3000 || echo 240) 130 \
  cmake --build "$BUILD" --target gpu-check-targets -j "$JOBS" -- "${KEEP_GOING[@]}"
((BUILD_ONLY)) && exit 0  # the --dry-run after it judges the build
[[ -x "$BUILD/tools/gridnn-train" ]] || finish
stage libraries plain 60 120 "${HELPER[@]}" libs "$BUILD" "$DEPS" "$LOGS" "$( ((DRY_RUN)) && echo --dry-run)"
stage selection plain 60 120 "${HELPER[@]}" select "$BUILD" "$LOGS"

# The tests, then the benchmarks in what is left.
stage "op backend" ops 60 100 env OMP_NUM_THREADS="$SOLO" OPENBLAS_NUM_THREADS="$SOLO" \
  stdbuf -oL -eL "$BUILD/test/ops/test-ops" -m backend
ctest_stage "gpu tests" 150 40 "$PAR" -L '^gpu$' -LE '^mpi$' -E '^ops_backend$'
stage "mpi plumbing" plain 20 25 "${HELPER[@]}" probe "$DEPS" "$BUILD"
ctest_stage "mpi gpu tests" 150 0 2 -L '^gpu$' -L '^mpi$'
if ((DRY_RUN || QUICK)); then
  for s in bench_gemm bench_layers bench_elementwise "compare_train fp32" "compare_train bf16"; do
    skip "$s" "$( ((DRY_RUN)) && echo "dry run: no GPU" || echo "--quick")"
  done
  finish
fi
declare -A SUFFIX=([fp32]="" [tf32]="_tf32" [bf16]="_bf16")
bench() {  # bench NAME BINARY FILTER: one benchmark run of the cases FILTER selects
  stage "$1" bench 45 0 env OMP_NUM_THREADS="$SOLO" OPENBLAS_NUM_THREADS="$SOLO" "$BUILD/bench/$2" \
    --benchmark_filter="$3" --benchmark_min_time=0.05 --benchmark_out="$LOGS/${1// /_}.json" --benchmark_out_format=json
}
for mode in fp32 tf32 bf16; do bench "bench_gemm $mode" bench_gemm "^gemm/cuda/$mode/"; done
for mode in fp32 tf32 bf16; do bench "bench_layers $mode" bench_layers "/cuda${SUFFIX[$mode]}(/|$)"; done
bench bench_elementwise bench_elementwise "/cuda(/|$)"
if grep -q "sees the GPU" "$LOGS/torch.log" 2>/dev/null; then
  for precision in fp32 bf16; do
    stage "compare_train $precision" compare 90 0 "$PYTHON" bench/compare_train_torch.py --device cuda \
      --precision "$precision" --gridnn "$BUILD/tools/gridnn-train" --filter "${TRAIN_FILTER:-w16 64^3 b8}" \
      --warmup 2 --steps 6 --threads "$SOLO" --timeout 40 --gridnn-data fixed
  done
else
  skip "compare_train" "torch sees no GPU (or no torch)"
fi
finish
