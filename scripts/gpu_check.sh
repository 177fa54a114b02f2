#!/usr/bin/env bash
# The GPU check (docs/design.md §9): one call on a machine with an NVIDIA GPU. Builds gridnn
# with CUDA, cuDNN, NCCL and MPI against the carried packages (scripts/gpu_deps.sh --unpack,
# cmake/GpuCheck.cmake), then runs, each stage under a time limit that leaves time for the
# test stages after it:
#   op backend        test-ops -m backend (every op of the harness against the CPU)
#   gpu tests         ctest -L gpu -LE mpi
#   mpi plumbing      two ranks with the carried MPICH
#   mpi gpu tests     ctest -L gpu -L mpi (two ranks on the one GPU)
#   memory            a training step with --memory-report: the CUDA caching allocator's peak
#                     at most the predicted one; then GRIDNN_MEMORY_PREFLIGHT=off and a
#                     --memory-limit below the need: the run must fail, naming the layer
#   memcheck train    compute-sanitizer --tool memcheck on one small training step
#   memcheck ops      ... on test-ops -m backend, the optimizer and batch norm families
#   memcheck conv3d   ... on the convolution family (its CPU-side variants left out)
# then, in what is left (not with --quick): a --profile run (its per-layer table in the logs),
# a training step against PyTorch at w16 64^3 b8 and 128^3 b2 in fp32 and bf16, the
# benchmarks per math mode, and last the step against torch.compile (never judged).
#
#   bash scripts/gpu_check.sh [--quick]   on the GPU machine (no MPI, no internet there)
#   bash scripts/gpu_check.sh --dry-run   anywhere: the same flow without a GPU (the host code
#                                         compiled at -O0: no GPU test runs, and the stand-in
#                                         runs are small or capped at 30 s)
#   bash scripts/gpu_check.sh --dry-run --build-only
#                                         its packages, configure and build alone, so that a
#                                         later --dry-run finds the targets built (CI builds
#                                         them while other stages run); no summary
#
# .gpu-deps/ (scripts/gpu_deps.sh) is git-ignored: copy it to the GPU machine explicitly,
# beside the tracked files, and give the call a wall-clock limit of the budget + 60 s or more.
# scripts/gpu_check.py judges what the stages left and prints the summary (at most 3 KB),
# last; $OUT gets exactly summary.txt and gpu_check_logs.tar.gz. Exit status 0 only when
# every build and test stage passed (the dry run: every check it makes); memcheck reporting
# an error fails it, a sanitizer that cannot run on the machine is "skipped" with the reason.
# The dry run runs the memory, memcheck and profile commands on the device stand-in
# (GRIDNN_DEVICE_STANDIN=1), without the sanitizer, and lists the PyTorch comparison's cases.
# Environment: BUILD_DIR (build-gpu), OUT ($BUILD_DIR/gpu_check_out), BUDGET_S (330; 3600
# with --dry-run), CUDA_ARCH (90), PYTHON (python3, the one with torch), TRAIN_FILTER
# (compare_train_torch.py's cases, "w16 64^3 b8,w16 128^3 b2"), COMPILE_FILTER (those
# against torch.compile, "w16 64^3 b8").
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
JOBS="$(nproc 2>/dev/null || echo 4)" MIN_STAGE_S=10 CHECKS_S=55
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
# compute-sanitizer: next to nvcc (the toolkit's bin/), in /usr/local/cuda/bin, or on PATH.
SANITIZER=""
for s in ${NVCC:+"$(dirname "$NVCC")/compute-sanitizer" "$(dirname "$(realpath "$NVCC")")/compute-sanitizer"} \
  /usr/local/cuda/bin/compute-sanitizer "$(command -v compute-sanitizer)"; do
  [[ -n "$s" && -x "$s" ]] && SANITIZER="$s" && break
done
echo "compute-sanitizer: ${SANITIZER:+$SANITIZER $(timeout 20 "$SANITIZER" --version 2>&1 | grep -o 'Version [0-9.]*' | head -1)}${SANITIZER:-none next to nvcc, in /usr/local/cuda/bin or on PATH}" >>"$LOGS/head.txt"

if ((!DRY_RUN)) && [[ -z "$GPU" && ! -e /dev/nvidia0 ]]; then
  stage machine plain 15 0 sh -c 'echo "no nvidia-smi GPU and no /dev/nvidia0: not a GPU machine (--dry-run runs the checks that need none)"; exit 1'
  finish
fi
stage machine plain 15 0 echo "${GPU:-no GPU: a dry run needs none}"
((DRY_RUN)) && stage "copy size" plain 30 0 "${HELPER[@]}" size "$ROOT"
stage deps plain 90 $((240 + CHECKS_S)) bash scripts/gpu_deps.sh --unpack "$DEPS" "$( ((DRY_RUN)) && echo --dry-run)" || finish
export PKG_CONFIG_LIBDIR="$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS/usr/share/pkgconfig" PKG_CONFIG_PATH=""
rm -f "$BUILD/CMakeCache.txt"  # another configuration's finds would stay
GENERATOR=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
GRIDNN_DEPS="$DEPS" GRIDNN_NVCC="$NVCC" GRIDNN_CUDA_ARCH="${CUDA_ARCH:-90}" GRIDNN_GPU_CHECK_DRY_RUN=$DRY_RUN \
  stage configure configure 120 $((220 + CHECKS_S)) cmake -C cmake/GpuCheck.cmake -S "$ROOT" -B "$BUILD" -G "$GENERATOR" || finish
KEEP_GOING=(-k 0) && [[ "$GENERATOR" != Ninja ]] && KEEP_GOING=(-k)
stage build build $( ((DRY_RUN)) && echo 3000 || echo 240) $((130 + CHECKS_S)) \
  cmake --build "$BUILD" --target gpu-check-targets -j "$JOBS" -- "${KEEP_GOING[@]}"
((BUILD_ONLY)) && exit 0  # the --dry-run after it judges the build
TRAIN="$BUILD/tools/gridnn-train" OPS="$BUILD/test/ops/test-ops"
JOB=(--device cuda --no-progress)  # a gridnn-train job on the GPU, its size and steps added
[[ -x "$TRAIN" ]] || finish
stage libraries plain 60 $((120 + CHECKS_S)) "${HELPER[@]}" libs "$BUILD" "$DEPS" "$LOGS" "$( ((DRY_RUN)) && echo --dry-run)"
stage selection plain 60 $((120 + CHECKS_S)) "${HELPER[@]}" select "$BUILD" "$LOGS"

# The tests, then the benchmarks in what is left. CHECKS_S: the least time the checks after
# the ctest stages need (memory 20 s, memcheck train 15 s, memcheck ops and conv3d 10 s each),
# added to every earlier reserve.
stage "op backend" ops 60 $((100 + CHECKS_S)) env OMP_NUM_THREADS="$SOLO" OPENBLAS_NUM_THREADS="$SOLO" \
  stdbuf -oL -eL "$OPS" -m backend
ctest_stage "gpu tests" 150 $((40 + CHECKS_S)) "$PAR" -L '^gpu$' -LE '^mpi$' -E '^ops_backend$'
stage "mpi plumbing" plain 20 $((25 + CHECKS_S)) "${HELPER[@]}" probe "$DEPS" "$BUILD"
ctest_stage "mpi gpu tests" 150 $CHECKS_S 2 -L '^gpu$' -L '^mpi$'

# The memory model against the allocator, then compute-sanitizer's memcheck on small cases
# (it slows kernels 10-100x). Without a GPU (--dry-run) each command runs alone on the
# device stand-in (GRIDNN_DEVICE_STANDIN=1: cuda:0 on host memory), without the sanitizer.
ON_DEVICE=(env OMP_NUM_THREADS="$SOLO" OPENBLAS_NUM_THREADS="$SOLO")
((DRY_RUN)) && ON_DEVICE+=(GRIDNN_DEVICE_STANDIN=1)
stage memory plain 40 35 "${ON_DEVICE[@]}" "${HELPER[@]}" memory "$TRAIN" "$LOGS"
# memcheck NAME CAP RESERVE CMD...: CMD under memcheck, with the CUDA allocator exact (no
# cache or rounding: core/cuda_allocator.cpp), so that memcheck sees every tensor's end; the
# log's first line names the sanitizer (gpu_check.py judges the log). The dry run caps each
# at 30 s (host code at -O0).
memcheck() {
  local name="$1" cap="$2" reserve="$3" log="$LOGS/${1// /_}.log"
  shift 3
  if ((DRY_RUN)); then
    echo "sanitizer: ${SANITIZER:-not found here}" >"$log"
    stage "$name" memcheck $((cap < 30 ? cap : 30)) "$reserve" "${ON_DEVICE[@]}" "$@"
  elif [[ -n "$SANITIZER" ]]; then
    echo "sanitizer: $SANITIZER" >"$log"
    stage "$name" memcheck "$cap" "$reserve" "${ON_DEVICE[@]}" GRIDNN_CUDA_ALLOCATOR=exact "$SANITIZER" --tool memcheck \
      --report-api-errors no --print-limit 20 "$@"
  else
    skip "$name" "sanitizer unavailable: no compute-sanitizer next to nvcc, in /usr/local/cuda/bin or on PATH"
  fi
}
# One training step (cuDNN, the layers' kernels, the optimizer, validation), then the op
# harness's optimizer and batch norm families (-o: one run for both), then convolution
# without its CPU-side variants (vol2col, one plane per slab: the same CUDA work).
memcheck "memcheck train" 60 20 "$TRAIN" "${JOB[@]}" --width 4 --input 16x16x16 --batch 2 --train-samples 2 \
  --val-samples 2 --steps 1 --eval-every 2 --momentum 0.9
memcheck "memcheck ops" 45 10 "$OPS" -m backend -o '^(sgd_update|adam_update|batchnorm_|BatchNorm3d)'
memcheck "memcheck conv3d" 60 0 "$OPS" -m backend -f conv3d -o '^(?!.*(vol2col|one plane per slab))'
if ((QUICK)); then
  skip benchmarks "--quick: the tests only"
  finish
fi

# The benchmarks: a profile of a few steps, the training step against PyTorch (fp32, bf16),
# the GEMM, layer and element-wise benchmarks, torch.compile.
if ((DRY_RUN)); then
  stage profile profile 120 0 "${ON_DEVICE[@]}" "$TRAIN" "${JOB[@]}" --width 4 --input 32x32x32 --batch 2 \
    --train-samples 2 --val-samples 2 --steps 3 --eval-every 4 --profile
else
  stage profile profile 40 0 "${ON_DEVICE[@]}" "$TRAIN" "${JOB[@]}" --width 16 --input 64x64x64 --batch 8 \
    --train-samples 8 --val-samples 8 --steps 6 --eval-every 7 --profile
fi
COMPARE=("$PYTHON" bench/compare_train_torch.py --device cuda --gridnn "$TRAIN" --warmup 2 --steps 6
  --threads "$SOLO" --timeout 40 --gridnn-data fixed)
TRAIN_FILTER="${TRAIN_FILTER:-w16 64^3 b8,w16 128^3 b2}"
if ((DRY_RUN)); then
  stage compare_train cases 30 0 "${COMPARE[@]}" --filter "$TRAIN_FILTER" --list-cases
  skip benchmarks "dry run: no GPU (compare_train fp32, bf16, bench_gemm, bench_layers, bench_elementwise, compare compile)"
  finish
fi
torch_on_gpu() { grep -q "sees the GPU" "$LOGS/torch.log" 2>/dev/null; }
if torch_on_gpu; then
  for precision in fp32 bf16; do
    stage "compare_train $precision" compare 90 0 "${COMPARE[@]}" --precision "$precision" --filter "$TRAIN_FILTER"
  done
else
  skip "compare_train" "torch sees no GPU (or no torch)"
fi
declare -A SUFFIX=([fp32]="" [tf32]="_tf32" [bf16]="_bf16")
bench() {  # bench NAME BINARY FILTER: one benchmark run of the cases FILTER selects
  stage "$1" bench 45 0 env OMP_NUM_THREADS="$SOLO" OPENBLAS_NUM_THREADS="$SOLO" "$BUILD/bench/$2" \
    --benchmark_filter="$3" --benchmark_min_time=0.05 --benchmark_out="$LOGS/${1// /_}.json" --benchmark_out_format=json
}
for mode in fp32 tf32 bf16; do bench "bench_gemm $mode" bench_gemm "^gemm/cuda/$mode/"; done
for mode in fp32 tf32 bf16; do bench "bench_layers $mode" bench_layers "/cuda${SUFFIX[$mode]}(/|$)"; done
bench bench_elementwise bench_elementwise "/cuda(/|$)"
# torch.compile last: its compilation alone may take a minute; a failure is reported, not judged.
if torch_on_gpu; then
  stage "compare compile" compare 150 0 "${COMPARE[@]}" --precision fp32 --filter "${COMPILE_FILTER:-w16 64^3 b8}" \
    --torch-compile --compile-timeout 110
fi
finish
