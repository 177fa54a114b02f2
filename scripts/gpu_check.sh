#!/usr/bin/env bash
# GPU check (docs/design.md §9): on a machine with an NVIDIA GPU, configure and build gridnn with
# CUDA, run the op harness's backend mode (every op and layer against the CPU backend) and
# perf table, the other `gpu` tests and the `unit` tests, run the benchmark binaries, and
# print a summary table. Meant for a bare box: no MPI, no
# internet, maybe no ninja, cuDNN / NCCL possibly only from a Python environment's pip
# wheels (nvidia-cudnn-cu*, nvidia-nccl-cu*).
#
#   scripts/gpu_check.sh            # from the repository root (or anywhere)
#   OUT=/some/dir scripts/gpu_check.sh   # also keep every log and the summary there
#
# Libraries the GPU machine lacks (OpenBLAS and cblas.h, nlohmann-json, CLI11, GoogleTest,
# Google Benchmark) come as Debian packages copied along with the working tree, in two steps:
#   1. on a Debian 12 machine with apt:   bash scripts/gpu_deps.sh
#      (apt-get downloads the .deb files into .gpu-deps/, git-ignored, about 13 MiB)
#   2. copy the working tree with .gpu-deps/ along to the GPU machine and run there:
#      bash scripts/gpu_check.sh
# When any of those headers or libraries is missing on the machine and .gpu-deps/*.deb
# exist, this script unpacks them (dpkg-deb -x, or Python where dpkg-deb is absent; no root,
# no apt) into $BUILD_DIR/deps and points CMake and LD_LIBRARY_PATH there.
#
# Environment: BUILD_DIR (default build-gpu), CUDA_ARCH (default 90), PYTHON (default
# python3), BUDGET_S (whole-run time budget in seconds, default 450), GPU_DEPS (auto: use
# .gpu-deps only when something is missing; always; never).
# Every step runs under a timeout and the script keeps going after a failure, so the
# summary always prints; the exit status is non-zero when any step failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
BUILD_DIR="${BUILD_DIR:-build-gpu}"
CUDA_ARCH="${CUDA_ARCH:-90}"
PYTHON="${PYTHON:-python3}"
BUDGET_S="${BUDGET_S:-450}"
JOBS="$(nproc 2>/dev/null || echo 4)"
LOG_DIR="${OUT:-$BUILD_DIR/gpu_check_logs}"

# Ninja when there is one, else make. A build folder made with the other generator
# cannot be reused, so it is removed (before any log is written into it).
GENERATOR="Unix Makefiles"
command -v ninja >/dev/null && GENERATOR="Ninja"
if [[ -f "$BUILD_DIR/CMakeCache.txt" ]] &&
   ! grep -q "^CMAKE_GENERATOR:INTERNAL=$GENERATOR\$" "$BUILD_DIR/CMakeCache.txt"; then
  echo "removing $BUILD_DIR (configured with another generator)"
  rm -rf "$BUILD_DIR"
fi
mkdir -p "$LOG_DIR" "$BUILD_DIR"

declare -a SUMMARY=()  # "component|status" rows
FAILED=0
record() { SUMMARY+=("$1|$2"); }
fail() { record "$1" "FAILED: $2"; FAILED=1; }

# Seconds left in the budget, capped at $1: every step's timeout.
time_left() {
  local left=$((BUDGET_S - SECONDS))
  ((left > $1)) && left=$1
  echo "$left"
}
# Runs "$@" with a timeout of $1 seconds (bounded by the budget), logging to $LOG_DIR/$2.log.
# Returns the command's status (124: timed out, 125: no time left to start it).
step() {
  local limit log
  limit="$(time_left "$1")"
  log="$LOG_DIR/$2.log"
  shift 2
  if ((limit < 10)); then
    echo "(no time left in the ${BUDGET_S}s budget for: $*)" | tee "$log"
    return 125
  fi
  echo "+ $* (timeout ${limit}s)" | tee "$log"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}
banner() { printf '\n==== %s ====\n' "$1"; }

# ---- the machine -----------------------------------------------------------------------
banner "machine"
GPU_PRESENT=0
if command -v nvidia-smi >/dev/null; then
  step 30 nvidia-smi nvidia-smi && GPU_PRESENT=1
else
  echo "nvidia-smi not found"
fi
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if command -v nvcc >/dev/null; then
  step 30 nvcc nvcc --version
  CUDA_HOME_GUESS="$(dirname "$(dirname "$(command -v nvcc)")")"
  export LD_LIBRARY_PATH="$CUDA_HOME_GUESS/lib64:$CUDA_HOME_GUESS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "nvcc not found (not on PATH, not in /usr/local/cuda/bin)"
fi
step 10 cmake cmake --version
echo "cores: $JOBS"

# ---- cuDNN and NCCL from pip wheels, if the system has none ---------------------------
# nvidia.* is a namespace package: __file__ may be None, __path__[0] is the folder that
# holds include/ and lib/ (where the wheels may ship only libcudnn.so.9 / libnccl.so.2).
pip_root() {
  "$PYTHON" - "$1" <<'PY' 2>/dev/null
import importlib, os, sys
m = importlib.import_module(sys.argv[1])
f = getattr(m, "__file__", None)
print(os.path.dirname(f) if f else list(m.__path__)[0])
PY
}
CMAKE_EXTRA=()
for lib in cudnn nccl; do
  dir="$(pip_root "nvidia.$lib" || true)"
  if [[ -n "$dir" && -d "$dir/lib" ]]; then
    echo "$lib from pip: $dir"
    upper="$(echo "$lib" | tr '[:lower:]' '[:upper:]')"
    CMAKE_EXTRA+=("-D${upper}_ROOT=$dir")
    export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    echo "$lib: no pip wheel found; relying on the toolkit / system install"
  fi
done

# ---- OpenBLAS, JSON, CLI11, GoogleTest, Benchmark: the system's or carried .debs ---------
GPU_DEPS="${GPU_DEPS:-auto}"
DEBS_DIR="$ROOT/.gpu-deps"
case "$BUILD_DIR" in /*) BUILD_ABS="$BUILD_DIR" ;; *) BUILD_ABS="$ROOT/$BUILD_DIR" ;; esac
DEPS_PREFIX="$BUILD_ABS/deps"

# True when some file matches one of the glob patterns in "$@".
any_file() {
  local pattern f
  for pattern in "$@"; do
    for f in $pattern; do [[ -e "$f" ]] && return 0; done
  done
  return 1
}
# The first of "$@" that exists (the arguments are expanded globs), or nothing.
first_file() {
  local f
  for f in "$@"; do [[ -e "$f" ]] && { echo "$f"; return 0; }; done
  return 1
}
# What the configure step would not find on this machine (system locations only).
missing_deps() {
  local d missing=()
  any_file /usr/include/cblas.h /usr/include/openblas/cblas.h /usr/include/*/openblas*/cblas.h \
    /usr/local/include/cblas.h /usr/local/include/openblas/cblas.h || missing+=("cblas.h")
  any_file "/usr/lib/x86_64-linux-gnu/libopenblas.so" "/usr/lib/x86_64-linux-gnu/openblas*/libopenblas.so" \
    /usr/lib64/libopenblas.so /usr/local/lib/libopenblas.so || missing+=("libopenblas.so")
  for d in nlohmann/json.hpp CLI/CLI.hpp nifti/nifti2_io.h zlib.h gtest/gtest.h benchmark/benchmark.h; do
    any_file /usr/include/$d /usr/local/include/$d || missing+=("$d")
  done
  echo "${missing[*]:-}"
}
# dpkg-deb -x DEB DIR without dpkg: a .deb is an ar archive holding data.tar.{xz,zst,gz}.
extract_deb_python() {
  "$PYTHON" - "$1" "$2" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive: " + deb
pos = 8
while pos + 60 <= len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            sys.exit("data.tar.zst needs dpkg-deb or zstd: " + deb)
        # filter="tar" (Python >= 3.12, and 3.8.17+): no paths outside dest, no warning.
        kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as t:
            t.extractall(dest, **kw)
        break
    pos += 60 + size + (size & 1)
else:
    sys.exit("no data.tar in " + deb)
PY
}
unpack_debs() {
  local deb stamp="$DEPS_PREFIX/.unpacked" list
  list="$(printf '%s\n' "${DEBS[@]##*/}")"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$list" ]]; then
    echo "carried packages already unpacked in $DEPS_PREFIX"
    return 0
  fi
  rm -rf "$DEPS_PREFIX"
  mkdir -p "$DEPS_PREFIX"
  for deb in "${DEBS[@]}"; do
    echo "  unpacking $(basename "$deb")"
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$DEPS_PREFIX" || return 1
    else
      extract_deb_python "$deb" "$DEPS_PREFIX" || return 1
    fi
  done
  echo "$list" >"$stamp"
}
# Points CMake at the unpacked prefix. Debian reaches OpenBLAS through alternatives
# symlinks (/usr/lib/x86_64-linux-gnu/libopenblas.so -> /etc/alternatives/...), which
# unpacking does not create, so the library and cblas.h are named explicitly; the package
# configs are named by <pkg>_DIR so that nothing of the system's is picked up instead.
use_carried_deps() {
  local usr="$DEPS_PREFIX/usr" libarch="$DEPS_PREFIX/usr/lib/x86_64-linux-gnu" blas cblas
  blas="$(first_file "$libarch"/openblas*/libopenblas.so)"
  cblas="$(first_file "$usr"/include/x86_64-linux-gnu/openblas*/cblas.h \
    "$usr"/include/openblas/cblas.h "$usr"/include/cblas.h)"
  if [[ -z "$blas" || -z "$cblas" ]]; then
    echo "carried packages lack libopenblas.so or cblas.h (blas='$blas' cblas='$cblas')"
    return 1
  fi
  blas="$(readlink -f "$blas")"
  CMAKE_EXTRA+=("-DCMAKE_PREFIX_PATH=$usr"
    "-DBLA_VENDOR=OpenBLAS" "-DBLAS_LIBRARIES=$blas" "-DCMAKE_LIBRARY_PATH=$(dirname "$blas")"
    "-DCBLAS_INCLUDE_DIR=$(dirname "$cblas")"
    "-Dnlohmann_json_DIR=$usr/share/cmake/nlohmann_json" "-DCLI11_DIR=$usr/share/cmake/CLI11"
    "-DGTest_DIR=$libarch/cmake/GTest" "-Dbenchmark_DIR=$libarch/cmake/benchmark"
    "-DNIFTI_ROOT=$usr" "-DZLIB_ROOT=$usr"
    # CMake 4 refuses package configs that ask for policies older than 3.5.
    "-DCMAKE_POLICY_VERSION_MINIMUM=3.5")
  # The tests and benchmarks load libopenblas.so.0, and through it libgfortran.so.5 and
  # libquadmath.so.0 (not found by RUNPATH), and libbenchmark.so.1.7.1. The linker also
  # follows LD_LIBRARY_PATH to resolve libopenblas's own dependencies at link time.
  LD_LIBRARY_PATH="$(dirname "$blas"):$libarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
}

MISSING="$(missing_deps)"
DEBS=()
for deb in "$DEBS_DIR"/*.deb; do [[ -f "$deb" ]] && DEBS+=("$deb"); done
HAVE_DEBS=0
((${#DEBS[@]})) && HAVE_DEBS=1
if [[ "$GPU_DEPS" == always || ( "$GPU_DEPS" == auto && -n "$MISSING" ) ]]; then
  [[ -n "$MISSING" ]] && echo "missing on this machine: $MISSING"
  if ((HAVE_DEBS)); then
    echo "unpacking the carried packages of $DEBS_DIR into $DEPS_PREFIX"
    if unpack_debs && use_carried_deps; then
      record "dependencies" "carried .gpu-deps (${#DEBS[@]} packages)${MISSING:+ for: $MISSING}"
    else
      fail "dependencies" "unpacking .gpu-deps failed (configure will likely fail)"
    fi
  else
    fail "dependencies" "missing: ${MISSING:-?}; no .gpu-deps/*.deb to unpack (run 'bash scripts/gpu_deps.sh' on a Debian machine, then copy .gpu-deps along)"
  fi
else
  record "dependencies" "system${MISSING:+ (missing: $MISSING; GPU_DEPS=never)}"
fi
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

# ---- configure -------------------------------------------------------------------------
banner "configure"
configure() {  # $1: ON/OFF for the benchmarks
  step 180 configure cmake -S . -B "$BUILD_DIR" -G "$GENERATOR" -DCMAKE_BUILD_TYPE=Release \
    -DGRIDNN_MPI=OFF -DGRIDNN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
    -DGRIDNN_BENCH="$1" -DGRIDNN_WERROR=OFF "${CMAKE_EXTRA[@]}"
}
BENCH_NOTE=""
if configure ON; then
  record "configure" "ok ($GENERATOR, sm_$CUDA_ARCH, benchmarks on)"
elif configure OFF; then
  BENCH_NOTE="not built: configuring with -DGRIDNN_BENCH=ON failed (Google Benchmark missing?)"
  record "configure" "ok ($GENERATOR, sm_$CUDA_ARCH) with -DGRIDNN_BENCH=OFF: see configure.log"
else
  fail "configure" "see $LOG_DIR/configure.log"
fi

# ---- build -----------------------------------------------------------------------------
banner "build"
if [[ -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  KEEP_GOING=(-k 0)
  [[ "$GENERATOR" == "Unix Makefiles" ]] && KEEP_GOING=(-k)
  # Keep going past a broken target so the tests that did build still run.
  if step 360 build cmake --build "$BUILD_DIR" -j "$JOBS" -- "${KEEP_GOING[@]}"; then
    record "build" "ok"
  else
    fail "build" "see $LOG_DIR/build.log (continuing with what built)"
  fi
else
  record "build" "skipped (not configured)"
fi

# ---- tests -----------------------------------------------------------------------------
# run_tests NAME LABEL TIMEOUT PARALLEL: ctest on one label; records passed/failed/skipped.
# Extra arguments go to ctest (-E REGEX).
run_tests() {
  local name="$1" label="$2" limit="$3" par="$4" slug rc total failed skipped passed
  shift 4
  slug="${name// /_}"
  local log="$LOG_DIR/$slug.log"
  step "$limit" "$slug" ctest --test-dir "$BUILD_DIR" -L "$label" --output-on-failure \
    --no-tests=error -j "$par" "$@"
  rc=$?
  total="$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)"
  failed="$(grep -oE '[0-9]+ tests failed out of' "$log" | grep -oE '^[0-9]+' | tail -1)"
  skipped="$(grep -cE '^[[:space:]]*[0-9]+ - .*\(Skipped\)' "$log")"
  total="${total:-0}" failed="${failed:-0}"
  passed=$((total - failed - skipped))
  local counts="passed $passed, failed $failed, skipped $skipped"
  if ((rc == 124 || rc == 137)); then
    fail "$name" "timed out ($counts so far)"
  elif ((rc == 125)); then
    fail "$name" "not run (time budget spent)"
  elif ((rc != 0 || failed > 0 || total == 0)); then
    fail "$name" "$counts (ctest status $rc)"
  elif [[ "$label" == gpu && $GPU_PRESENT == 1 && $passed == 0 ]]; then
    fail "$name" "$counts: every gpu test skipped although nvidia-smi sees a GPU"
  else
    record "$name" "ok: $counts"
  fi
}

# The op harness's backend mode (every op and layer on the GPU against the CPU) runs in one
# process, not as ~500 ctest processes that each create a CUDA context; ctest runs the
# other gpu tests. Its perf mode prints the GPU's timing table.
OPS="$BUILD_DIR/test/ops/test-ops"
if [[ -x "$OPS" ]]; then
  banner "op harness: backend mode (cuda:0 against the CPU)"
  step 180 op_backend "$OPS" -m backend
  rc=$?
  line="$(grep -E '^backend mode:|no CUDA device' "$LOG_DIR/op_backend.log" | tail -1)"
  if ((rc == 0)) && grep -q '^backend mode:' "$LOG_DIR/op_backend.log"; then
    record "op backend" "ok: ${line#backend mode: }"
  else
    fail "op backend" "${line:-exit status $rc}; failing cases: grep FAIL $LOG_DIR/op_backend.log"
  fi
  banner "op harness: perf mode"
  if step 90 op_perf "$OPS" -m perf -b cuda --seconds 0.02; then
    record "op perf" "ok (table in $LOG_DIR/op_perf.log)"
  else
    fail "op perf" "see $LOG_DIR/op_perf.log"
  fi
else
  record "op harness" "not built"
fi

if [[ -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  banner "gpu tests"
  run_tests "gpu tests" gpu 240 4 -E '^Ops/OpBackend\.'
  banner "unit tests"
  run_tests "unit tests" unit 150 "$JOBS"
else
  record "gpu tests" "skipped (not configured)"
  record "unit tests" "skipped (not configured)"
fi

# ---- benchmarks ------------------------------------------------------------------------
banner "benchmarks"
shopt -s nullglob
BENCHES=()
for b in "$BUILD_DIR"/bench/bench_*; do
  [[ -f "$b" && -x "$b" ]] && BENCHES+=("$b")
done
if [[ -n "$BENCH_NOTE" ]]; then
  record "benchmarks" "$BENCH_NOTE"
elif ((${#BENCHES[@]} == 0)); then
  record "benchmarks" "none built"
else
  for b in "${BENCHES[@]}"; do
    name="$(basename "$b")"
    # The layer benchmark's CPU cases are timed on the development machines; here only
    # the GPU's.
    filter=()
    [[ "$name" == bench_layers ]] && filter=(--benchmark_filter=cuda)
    # Google Benchmark >= 1.8 wants a unit ("0.2s"); older versions want a plain number.
    step 90 "$name" "$b" --benchmark_min_time=0.2s --benchmark_format=console "${filter[@]}"
    rc=$?
    if ((rc != 0 && rc != 124 && rc != 125)); then
      step 90 "$name" "$b" --benchmark_min_time=0.2 --benchmark_format=console "${filter[@]}"
      rc=$?
    fi
    case $rc in
      0) record "$name" "ok" ;;
      124 | 137) fail "$name" "timed out" ;;
      125) fail "$name" "not run (time budget spent)" ;;
      *) fail "$name" "exit status $rc, see $LOG_DIR/$name.log" ;;
    esac
  done
fi

# ---- the same layers in PyTorch, when the machine's torch sees the GPU ------------------
if [[ -x "$BUILD_DIR/bench/bench_layers" ]] &&
   "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  banner "gridnn vs PyTorch (bench/compare_torch.py --device cuda --quick)"
  if step 120 compare_torch "$PYTHON" bench/compare_torch.py --device cuda --quick "$BUILD_DIR/bench/bench_layers"; then
    record "compare_torch" "ok (table in $LOG_DIR/compare_torch.log)"
  else
    fail "compare_torch" "see $LOG_DIR/compare_torch.log"
  fi
else
  record "compare_torch" "skipped (no bench_layers, or torch sees no GPU)"
fi

# ---- a training step: gridnn-train vs the same model in PyTorch -----------------------
if [[ -x "$BUILD_DIR/tools/gridnn-train" ]] &&
   "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  banner "training step vs PyTorch (bench/compare_train_torch.py --device cuda --quick)"
  if step 120 compare_train "$PYTHON" bench/compare_train_torch.py --device cuda --quick \
       --gridnn "$BUILD_DIR/tools/gridnn-train"; then
    record "compare_train" "ok (table in $LOG_DIR/compare_train.log)"
  else
    fail "compare_train" "see $LOG_DIR/compare_train.log"
  fi
else
  record "compare_train" "skipped (no gridnn-train, or torch sees no GPU)"
fi

# ---- summary ---------------------------------------------------------------------------
banner "summary (${SECONDS}s)"
{
  printf '%-20s | %s\n' "component" "status"
  printf '%-20s-+-%s\n' "--------------------" "----------------------------------------"
  for row in "${SUMMARY[@]}"; do
    printf '%-20s | %s\n' "${row%%|*}" "${row#*|}"
  done
  # The tests ctest listed as failed, by label.
  grep -E ' FAIL' "$LOG_DIR/op_backend.log" 2>/dev/null | head -20 | sed 's/^[[:space:]]*/  op backend failed: /'
  for slug in gpu_tests unit_tests; do
    [[ -f "$LOG_DIR/$slug.log" ]] || continue
    sed -n '/The following tests FAILED:/,$p' "$LOG_DIR/$slug.log" | grep -E '^[[:space:]]+[0-9]+ - ' |
      head -20 | sed "s/^[[:space:]]*/  ${slug%_tests} failed: /"
  done
  echo "logs: $LOG_DIR"
  ((FAILED)) && echo "RESULT: FAILED" || echo "RESULT: OK"
} | tee "$LOG_DIR/summary.txt"
exit "$FAILED"
