#!/usr/bin/env bash
# The GPU check (docs/design.md §9): one call on a machine with an NVIDIA GPU that builds
# gridnn with CUDA and MPI and runs, in this order and each under a time limit,
#   1. configure (Release, sm_90, MPI, benchmarks) and build the one target gpu-check-targets
#      (the gpu tests, test-ops, the benchmarks with GPU cases, gridnn-train);
#   2. the gpu tests: the op harness's backend mode (test-ops -m backend, one process), then
#      ctest -L gpu -LE mpi;
#   3. the GPU benchmarks: bench_gemm and bench_layers per math mode (fp32, tf32, bf16; the
#      mode is part of each case's name), bench_elementwise's cuda cases, and a training
#      step against PyTorch (bench/compare_train_torch.py --device cuda, fp32 and bf16)
#      when the machine's torch sees the GPU;
#   4. two ranks on the one GPU: a plain MPI program (the carried MPICH works), then
#      ctest -L gpu -L mpi (the tests that need both; -L given twice must match both).
# Nothing that runs on the CPU alone (unit tests, CPU benchmark cases) runs here.
#
#   bash scripts/gpu_check.sh              # on the GPU machine (no MPI, no internet there)
#   bash scripts/gpu_check.sh --dry-run    # anywhere: everything but the GPU stages
#
# The libraries the GPU machine lacks (OpenBLAS's OpenMP build and cblas.h, nlohmann-json,
# CLI11, GoogleTest, Google Benchmark, NIfTI, zlib, MPICH with hydra) travel as Debian 12
# packages in .gpu-deps/ (git-ignored; scripts/gpu_deps.sh fetches them on a Debian machine).
# Both modes unpack them into a clean prefix ($BUILD_DIR/deps: dpkg-deb -x, no root) and
# configure against that prefix alone: /usr's include and library folders are ignored by
# CMake's find commands, so a package missing from .gpu-deps fails here as it would there.
# The CUDA toolkit, cuDNN and NCCL come from the machine (cuDNN and NCCL from the Python
# environment's pip wheels nvidia.cudnn and nvidia.nccl when it has them). oneDNN is not
# carried: GRIDNN_ONEDNN is OFF. The dry run also proves that nothing of /usr's packages was
# compiled or linked in (ninja's header and command lists), that every shared library the
# carried ones need is carried or is glibc's, libgcc's or libstdc++'s, and that the carried
# mpiexec starts two ranks through the carried hydra_pmi_proxy and libmpich.
#
# Output: one line per stage on stdout, then a summary of at most 3 KB (stage | status |
# seconds | detail, counts, the failing tests with the first lines of their output, key
# benchmark numbers), printed last. $OUT gets exactly two files: summary.txt and
# gpu_check_logs.tar.gz (every log; the logs themselves are in $BUILD_DIR/gpu_check_logs).
# Exit status 0 only when configure, build and every GPU test passed (the dry run: when
# every check it makes passed).
#
# Environment: BUILD_DIR (default build-gpu), OUT (default $BUILD_DIR/gpu_check_out),
# BUDGET_S (the whole run's time budget in seconds, default 480, 3600 with --dry-run; every
# stage has a timeout and leaves time for the GPU tests after it), CUDA_ARCH (default 90),
# PYTHON (default python3: the one with torch), TRAIN_FILTER (the compare_train_torch.py
# case, default "w16 64^3 b8").
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$arg' (--dry-run, --help)" >&2; exit 2 ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
abs() { case "$1" in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
BUILD="$(abs "${BUILD_DIR:-build-gpu}")"
OUT="$(abs "${OUT:-$BUILD/gpu_check_out}")"
LOGS="$BUILD/gpu_check_logs"
DEPS="$BUILD/deps"
# The dry run builds on small machines (2 cores: about 10 minutes); the GPU machine has 16.
if ((DRY_RUN)); then
  BUDGET_S="${BUDGET_S:-3600}" BUILD_CAP=3000
else
  BUDGET_S="${BUDGET_S:-480}" BUILD_CAP=360
fi
CUDA_ARCH="${CUDA_ARCH:-90}"
PYTHON="${PYTHON:-python3}"
TRAIN_FILTER="${TRAIN_FILTER:-w16 64^3 b8}"
JOBS="$(nproc 2>/dev/null || echo 4)"
MIN_STAGE_S=15     # a stage is not started with less time than this left
MODE="GPU check"
((DRY_RUN)) && MODE="GPU check --dry-run"

# Threads: every process waits passively (spinning OpenMP threads cost a 4-5x slowdown as
# soon as another process runs; bench/RESULTS.md) and has a thread cap. Tests run 4 side by
# side, each with a quarter of the cores; a single process gets up to 8.
export OMP_WAIT_POLICY=passive
PAR=4
((JOBS < PAR)) && PAR=$JOBS
THREADS=$((JOBS / PAR))
((THREADS < 1)) && THREADS=1
SOLO_THREADS=$JOBS
((SOLO_THREADS > 8)) && SOLO_THREADS=8
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
export PYTHONUNBUFFERED=1
[[ -x /usr/local/cuda/bin/nvcc ]] && ! command -v nvcc >/dev/null && export PATH="/usr/local/cuda/bin:$PATH"

# Ninja when there is one, else make. A build folder made with the other generator cannot be
# reused: it is removed before anything is written into it.
GENERATOR="Unix Makefiles"
command -v ninja >/dev/null && GENERATOR="Ninja"
if [[ -f "$BUILD/CMakeCache.txt" ]] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=$GENERATOR\$" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"
fi
rm -rf "$LOGS"
mkdir -p "$LOGS" "$OUT" || exit 2
rm -f "$OUT/summary.txt" "$OUT/gpu_check_logs.tar.gz"

# ---- bookkeeping -----------------------------------------------------------------------
ROWS=()        # "stage|status|seconds|detail"
FAILS=()       # failure text for the summary, a line each
HEAD=()        # lines about the machine, above the table
HARD=()        # failed stages that decide the exit status
STAGE_T0=0
begin() { STAGE_T0=$SECONDS; }
# done_stage NAME STATUS DETAIL [hard]: a table row and one line on stdout. Statuses: ok,
# FAILED, TIMEOUT, NOT RUN (no time left), skipped, none. With "hard", anything but ok,
# skipped and none fails the run.
progress() { printf '[%4ds] %-20s %-8s %s\n' "$SECONDS" "$1" "$2" "${3:0:110}"; }
done_stage() {
  local secs=$((SECONDS - STAGE_T0)) detail="${3//|//}"
  ROWS+=("$1|$2|$secs|$detail")
  progress "$1" "$2" "$detail"
  if [[ "${4:-}" == hard && "$2" != ok && "$2" != skipped && "$2" != none ]]; then
    HARD+=("$1")
  fi
}
fail_text() { FAILS+=("$1: ${2:0:200}"); }
# Seconds a stage may run: at most CAP, and RESERVE seconds stay for the stages after it.
limit() {
  local left=$((BUDGET_S - SECONDS - $2))
  ((left > $1)) && left=$1
  echo "$left"
}
# run_timed LIMIT LOG CMD...: CMD under timeout, its output appended to LOG. Returns CMD's
# status; 124 or 137 when it timed out, 125 when there was no time to start it.
run_timed() {
  local lim="$1" log="$2"
  shift 2
  if ((lim < MIN_STAGE_S)); then
    echo "not run: ${lim}s left of the ${BUDGET_S}s budget: $*" >>"$log"
    return 125
  fi
  echo "+ $* (timeout ${lim}s)" >>"$log"
  timeout --kill-after=10 "$lim" "$@" >>"$log" 2>&1
}
# The status word for a command's exit status.
status_of() {
  case "$1" in
    0) echo ok ;;
    124 | 137) echo TIMEOUT ;;
    125) echo "NOT RUN" ;;
    *) echo FAILED ;;
  esac
}
# ctest's --stop-time: tests still running 15 s before the stage's limit are stopped, so
# that ctest itself ends and writes its JUnit file (not when that time is past midnight).
stop_time_args() {
  local at=$(($(date +%s) + $1 - 15))
  [[ "$(date -d "@$at" +%F)" == "$(date +%F)" ]] && echo "--stop-time $(date -d "@$at" +%H:%M:%S)"
}

# ---- the summary, printed last ---------------------------------------------------------
write_summary() {
  local result="RESULT: OK" row name st secs detail f
  if ((${#HARD[@]})); then
    local joined
    joined="$(printf '%s, ' "${HARD[@]}")"
    result="RESULT: FAILED (${joined%, })"
  fi
  ((DRY_RUN)) && result="$result [dry run: no GPU stage ran]"
  {
    echo "gridnn $MODE, $(date -u '+%F %H:%M UTC'), ${SECONDS}s of ${BUDGET_S}s, $JOBS cores, OMP_WAIT_POLICY=passive, $THREADS threads/test ($SOLO_THREADS alone)"
    printf '%s\n' "${HEAD[@]}"
    printf '%-20s | %-7s | %4s | %s\n' stage status s detail
    echo "---------------------+---------+------+------------------------------------------"
    for row in "${ROWS[@]}"; do
      IFS='|' read -r name st secs detail <<<"$row"
      printf '%-20s | %-7s | %4s | %s\n' "$name" "$st" "$secs" "${detail:0:150}"
    done
    if ((${#FAILS[@]})); then
      echo "failures (first lines; the logs have the rest):"
      for f in "${FAILS[@]}"; do echo "  $f"; done
    fi
    echo "logs: gpu_check_logs.tar.gz ($LOGS)"
  } >"$LOGS/summary.body"
  # At most 3 KB with the result line last: whole lines of the body while they fit.
  local room=$((3072 - ${#result} - 1))
  awk -v room="$room" '{ n = length($0) + 1; if (used + n > room) { cut = 1; exit } used += n; print }
                       END { if (cut) print "  [... cut to fit 3 KB]" }' "$LOGS/summary.body" >"$LOGS/summary.txt"
  if (($(wc -c <"$LOGS/summary.txt") + ${#result} + 1 > 3072)); then
    head -c $((3072 - ${#result} - 1 - 24)) "$LOGS/summary.txt" >"$LOGS/summary.cut"
    { cat "$LOGS/summary.cut"; echo; echo "  [... cut to fit 3 KB]"; } >"$LOGS/summary.txt"
  fi
  echo "$result" >>"$LOGS/summary.txt"
  rm -f "$LOGS/summary.body" "$LOGS/summary.cut"
}
# The torch probe's answer (it ran in the background), once, as a line above the table.
torch_cuda=""
torch_info() {
  [[ -n "$torch_cuda" ]] && return
  wait "$TORCH_PID" 2>/dev/null
  local version cuda_version
  read -r _ version torch_cuda cuda_version _ < <(grep '^torch ' "$LOGS/torch.log" || echo "x none nocuda - -")
  if [[ "$version" == none ]]; then
    HEAD+=("torch: not importable by $PYTHON ($(tail -1 "$LOGS/torch.log" | cut -c1-100))")
  else
    HEAD+=("torch: $version (CUDA $cuda_version, $([[ $torch_cuda == cuda ]] && echo sees the GPU || echo sees no GPU))")
  fi
}
finish() {
  [[ -n "${TORCH_PID:-}" ]] && torch_info
  write_summary
  cp "$LOGS/summary.txt" "$OUT/summary.txt"
  tar -czf "$OUT/gpu_check_logs.tar.gz" -C "$BUILD" gpu_check_logs 2>/dev/null ||
    echo "gpu_check.sh: could not write $OUT/gpu_check_logs.tar.gz" >&2
  echo
  cat "$LOGS/summary.txt"
  ((${#HARD[@]} == 0))
  exit $?
}

echo "gridnn $MODE: budget ${BUDGET_S}s, logs in $LOGS, summary and log tarball to $OUT"

# ---- the machine -----------------------------------------------------------------------
begin
NVSMI="$(command -v nvidia-smi || true)"
[[ -z "$NVSMI" && -x /usr/local/nvidia/bin/nvidia-smi ]] && NVSMI=/usr/local/nvidia/bin/nvidia-smi
GPU_SEEN=0
if [[ -n "$NVSMI" ]]; then
  gpu="$(timeout 30 "$NVSMI" --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>>"$LOGS/machine.log" | head -1)"
  timeout 30 "$NVSMI" >>"$LOGS/machine.log" 2>&1
  if [[ -n "$gpu" ]]; then
    GPU_SEEN=1
    HEAD+=("gpu: $gpu")
  else
    HEAD+=("gpu: nvidia-smi lists no GPU (machine.log)")
  fi
else
  HEAD+=("gpu: no nvidia-smi (no NVIDIA driver here)")
fi
{ uname -a; cat /etc/os-release 2>/dev/null; nvcc --version 2>&1; cmake --version; } >>"$LOGS/machine.log" 2>&1
NVCC_V="$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
HEAD+=("toolchain: nvcc ${NVCC_V:-not found}, $(cmake --version 2>/dev/null | head -1 || echo 'no cmake'), $GENERATOR, $(${CXX:-c++} --version 2>/dev/null | head -1)")
if ((!DRY_RUN && !GPU_SEEN)) && [[ ! -e /dev/nvidia0 ]]; then
  why="no nvidia-smi"
  [[ -n "$NVSMI" ]] && why="nvidia-smi lists no GPU"
  done_stage machine FAILED "$why and no /dev/nvidia0: not a GPU machine (--dry-run runs the checks that need none)" hard
  for s in deps configure build "op backend" "gpu tests" benchmarks "mpi gpu tests"; do
    begin; done_stage "$s" skipped "no GPU"
  done
  finish
fi
if ((DRY_RUN)); then
  done_stage machine ok "${gpu:-no GPU}: a dry run needs none"
else
  done_stage machine ok "${gpu:-nvidia-smi lists no GPU, but /dev/nvidia0 is there: going on}"
fi

# torch (in the background while the build runs) and the pip wheels of cuDNN and NCCL.
timeout 120 "$PYTHON" - >"$LOGS/torch.log" 2>&1 <<'PY' &
import torch
ok = torch.cuda.is_available()
print("torch", torch.__version__, "cuda" if ok else "nocuda", torch.version.cuda or "-",
      torch.cuda.get_device_name(0) if ok else "-")
PY
TORCH_PID=$!
# nvidia.* is a namespace package: __file__ may be None, __path__[0] holds include/ and lib/.
pip_root() {
  "$PYTHON" - "$1" <<'PY' 2>/dev/null
import importlib, os, sys
m = importlib.import_module(sys.argv[1])
f = getattr(m, "__file__", None)
print(os.path.dirname(f) if f else list(m.__path__)[0])
PY
}
CMAKE_CUDA_LIBS=()
PIP_LIB_PATH=""
wheels=""
for lib in cudnn nccl; do
  dir="$(pip_root "nvidia.$lib" || true)"
  if [[ -n "$dir" && -d "$dir/lib" ]]; then
    CMAKE_CUDA_LIBS+=("-D${lib^^}_ROOT=$dir")
    PIP_LIB_PATH="$dir/lib${PIP_LIB_PATH:+:$PIP_LIB_PATH}"
    wheels+="${wheels:+; }$lib: pip wheel ($dir)"
  else
    wheels+="${wheels:+; }$lib: no pip wheel nvidia.$lib (the toolkit's, if any)"
  fi
done
HEAD+=("$wheels")

# ---- the carried packages --------------------------------------------------------------
# dpkg-deb -x DEB DIR without dpkg: a .deb is an ar archive holding data.tar.{xz,gz}.
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
        kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as t:
            t.extractall(dest, **kw)
        break
    pos += 60 + size + (size & 1)
else:
    sys.exit("no data.tar in " + deb)
PY
}
USR="$DEPS/usr"
LIBARCH="$USR/lib/x86_64-linux-gnu"
BLAS_DIR="$LIBARCH/openblas-openmp"
RTLIB="$DEPS/rtlib"
# Shared libraries every Linux machine with a C++ compiler has: never carried. libgomp is
# the compiler's OpenMP runtime, which the build needs (find_package(OpenMP REQUIRED)).
BASE_LIBS=" libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 libutil.so.1 ld-linux-x86-64.so.2 libgcc_s.so.1 libstdc++.so.6 libgomp.so.1 "
needed_of() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
# The sonames this machine's loader finds without help.
SYSTEM_SONAMES=" $( { ldconfig -p 2>/dev/null | awk 'NR > 1 { print $1 }'
  ls /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 2>/dev/null; } | sort -u | tr '\n' ' ') "

unpack_deps() {
  local debs=() deb link target n=0 f so missing=() carried=() from_system=() queue=() seen=" "
  for deb in "$ROOT"/.gpu-deps/*.deb; do [[ -f "$deb" ]] && debs+=("$deb"); done
  if ((${#debs[@]} == 0)); then
    done_stage deps FAILED "no .gpu-deps/*.deb: run 'bash scripts/gpu_deps.sh' on a Debian 12 machine, copy .gpu-deps/ along" hard
    return 1
  fi
  rm -rf "$DEPS"
  mkdir -p "$DEPS" "$RTLIB"
  for deb in "${debs[@]}"; do
    echo "unpacking ${deb##*/}" >>"$LOGS/deps.log"
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$DEPS" >>"$LOGS/deps.log" 2>&1
    else
      extract_deb_python "$deb" "$DEPS" >>"$LOGS/deps.log" 2>&1
    fi || { done_stage deps FAILED "could not unpack ${deb##*/} (deps.log)" hard; return 1; }
  done
  # Links to absolute paths (zlib1g-dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13)
  # would reach the machine's own files: point them inside the prefix.
  while IFS= read -r link; do
    target="$(readlink "$link")"
    if [[ -e "$DEPS$target" || -L "$DEPS$target" ]]; then
      ln -sfnr "$DEPS$target" "$link" && echo "relinked ${link#"$DEPS"/} -> $DEPS$target" >>"$LOGS/deps.log"
    fi
  done < <(find "$DEPS" -type l -lname '/*')
  # Links to libraries not carried (libniftiio-dev's libniftiio.so: only its header
  # nifti2_io.h is used) are removed, so that no search half-finds them; no other link may
  # leave the prefix.
  while IFS= read -r link; do
    rm -f "$link" && echo "removed ${link#"$DEPS"/} -> $(readlink "$link" 2>/dev/null)(not carried)" >>"$LOGS/deps.log"
  done < <(find "$USR/lib" "$DEPS/lib" -type l -xtype l 2>/dev/null)
  local outside
  outside="$(find "$USR/bin" "$USR/include" "$USR/lib" "$DEPS/lib" "$USR/share/cmake" -type l \( -lname '/*' -o -xtype l \) \
    2>/dev/null | sed "s|^$DEPS/||" | head -5 | tr '\n' ' ')"
  if [[ -n "$outside" ]]; then
    done_stage deps FAILED "links that leave the prefix or dangle: $outside" hard
    return 1
  fi
  # rtlib/: links to the carried shared libraries the loader must find by name (what the
  # carried libraries need: libgfortran, libhwloc, UCX, ...). On the GPU machine only those
  # it lacks, so that its own newer copies (libgomp, libz, ...) are not shadowed; in the dry
  # run all of them, as on a bare machine. gridnn's programs find the libraries they link
  # (libopenblas, libmpich, ...) through their RUNPATH.
  # Debian names each library's soname link libX.so.N (libbenchmark.so.1debian).
  for f in "$LIBARCH"/*.so.* "$DEPS"/lib/x86_64-linux-gnu/*.so.*; do
    so="${f##*/}"
    [[ -e "$f" && "$so" =~ ^lib.*\.so\.[0-9][^.]*$ ]] || continue
    if ((DRY_RUN)) || [[ "$SYSTEM_SONAMES" != *" $so "* ]]; then
      ln -sfn "$f" "$RTLIB/$so"
      ((n++))
    fi
  done
  # Every library that the carried programs and libraries need, followed through their
  # needs: carried, a base library, or (on the GPU machine) the machine's own.
  local roots=("$USR/bin/mpiexec.hydra" "$USR/bin/hydra_pmi_proxy" "$LIBARCH/libmpich.so.12" "$BLAS_DIR/libopenblas.so.0"
    "$LIBARCH/libbenchmark.so.1debian" "$LIBARCH/libnifti2.so.2" "$LIBARCH/libznz.so.3")
  local closure=checked
  if command -v readelf >/dev/null; then
    queue=("${roots[@]}")
  else
    closure="not checked (no readelf)"
  fi
  while ((${#queue[@]})); do
    f="${queue[0]}"
    queue=("${queue[@]:1}")
    if [[ ! -e "$f" ]]; then
      missing+=("${f#"$DEPS"/}")
      continue
    fi
    for so in $(needed_of "$f"); do
      [[ "$BASE_LIBS" == *" $so "* || "$seen" == *" $so "* ]] && continue
      seen+="$so "
      local path="" d
      for d in "$LIBARCH" "$DEPS/lib/x86_64-linux-gnu" "$BLAS_DIR"; do
        [[ -e "$d/$so" ]] && { path="$d/$so"; break; }
      done
      # Carried and in rtlib/ (the dry run: every carried one), else the machine's own.
      if [[ -n "$path" ]] && { ((DRY_RUN)) || [[ -e "$RTLIB/$so" ]]; }; then
        carried+=("$so")
        queue+=("$path")
      elif ((!DRY_RUN)) && [[ "$SYSTEM_SONAMES" == *" $so "* ]]; then
        from_system+=("$so")
      else
        missing+=("$so (needed by ${f##*/})")
      fi
    done
  done
  {
    echo "carried and needed: ${carried[*]}"
    echo "the machine's own: ${from_system[*]:-none}"
    echo "missing: ${missing[*]:-none}"
    echo "rtlib: $(find "$RTLIB" -mindepth 1 -printf '%f ')"
  } >>"$LOGS/deps.log"
  local mib
  mib="$(du -cb "${debs[@]}" | tail -1 | awk '{ printf "%.1f", $1 / 1048576 }')"
  if ((${#missing[@]})); then
    done_stage deps FAILED "${#debs[@]} packages; missing libraries: ${missing[*]}" hard
    return 1
  fi
  local own=""
  ((${#from_system[@]})) && own=", ${#from_system[@]} the machine's own"
  if [[ "$closure" == checked ]]; then
    closure="the libraries they need: ${#carried[@]} carried$own, none missing"
  fi
  done_stage deps ok "${#debs[@]} packages, $mib MiB; $closure; $n in rtlib/"
}

begin
DEPS_OK=0
unpack_deps && DEPS_OK=1
export LD_LIBRARY_PATH="$RTLIB${PIP_LIB_PATH:+:$PIP_LIB_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# pkg-config sees the prefix's .pc files only.
export PKG_CONFIG_LIBDIR="$LIBARCH/pkgconfig:$USR/share/pkgconfig" PKG_CONFIG_PATH=""
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$LOGS/deps.log"

# ---- configure -------------------------------------------------------------------------
# What the compiler itself brings (OpenMP's libgomp, libpthread) is asked of the compiler:
# CMake's own search for them would look in /usr's library folders, which are ignored below.
CXX_BIN="$(command -v "${CXX:-g++}" || command -v c++)"
compiler_lib() {
  local p
  p="$("$CXX_BIN" -print-file-name="$1" 2>/dev/null)"
  [[ "$p" == */* && -e "$p" ]] && realpath -s "$p"
}
IGNORE_DIRS=(/usr/include /usr/include/x86_64-linux-gnu /usr/include/nifti /usr/include/x86_64-linux-gnu/mpich
  /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
  /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/x86_64-linux-gnu/openblas-pthread
  /lib/x86_64-linux-gnu /usr/lib /lib /usr/lib64 /lib64 /usr/local/include /usr/local/lib /usr/local/lib64)
IGNORE_PREFIXES="/usr;/;/usr/local"
# A CUDA toolkit installed under /usr itself (nvcc in /usr/bin) keeps /usr's general
# folders searchable; the package folders above that are not general stay ignored.
CUDA_HOME_DIR="$(dirname "$(dirname "$(realpath "$(command -v nvcc)" 2>/dev/null)")")"
if [[ "$CUDA_HOME_DIR" == /usr ]]; then
  IGNORE_DIRS=(/usr/include/nifti /usr/include/x86_64-linux-gnu/mpich /usr/include/x86_64-linux-gnu/openblas-openmp
    /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/lib/x86_64-linux-gnu/openblas-openmp
    /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/local/include /usr/local/lib /usr/local/lib64)
  IGNORE_PREFIXES="/usr/local"
  HEAD+=("note: the CUDA toolkit is in /usr: /usr/include and /usr/lib stay searchable")
fi
configure_args() {
  local gomp pthread rt ignore
  ignore="$(IFS=';'; echo "${IGNORE_DIRS[*]}")"
  CONF=(-S "$ROOT" -B "$BUILD" -G "$GENERATOR" -DCMAKE_BUILD_TYPE=Release
    -DGRIDNN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DGRIDNN_MPI=ON -DGRIDNN_BENCH=ON
    -DGRIDNN_TESTS=ON -DGRIDNN_WERROR=OFF -DGRIDNN_ONEDNN=OFF -DGRIDNN_FUZZ=OFF -DGRIDNN_SANITIZE=OFF
    -DCMAKE_CXX_COMPILER="$CXX_BIN" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)"
    "-DCMAKE_IGNORE_PREFIX_PATH=$IGNORE_PREFIXES" "-DCMAKE_IGNORE_PATH=$ignore"
    -DCMAKE_PREFIX_PATH="$USR"
    -DBLAS_LIBRARIES="$BLAS_DIR/libopenblas.so.0" -DCBLAS_INCLUDE_DIR="$USR/include/x86_64-linux-gnu/openblas-openmp"
    -Dnlohmann_json_DIR="$USR/share/cmake/nlohmann_json" -DCLI11_DIR="$USR/share/cmake/CLI11"
    -DGTest_DIR="$LIBARCH/cmake/GTest" -Dbenchmark_DIR="$LIBARCH/cmake/benchmark"
    -DNIFTI_ROOT="$USR" -DZLIB_ROOT="$USR"
    # MPI without the wrappers (an unpacked mpicxx names /usr's paths): library, header
    # folder and mpiexec given, the C++ bindings left out.
    -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_SKIP_GUESSING=ON -DMPI_ASSUME_NO_BUILTIN_MPI=ON
    -DMPI_CXX_SKIP_MPICXX=ON -DMPI_CXX_LIB_NAMES=mpich -DMPI_mpich_LIBRARY="$LIBARCH/libmpich.so.12"
    -DMPI_CXX_HEADER_DIR="$USR/include/x86_64-linux-gnu/mpich" -DMPIEXEC_EXECUTABLE="$USR/bin/mpiexec.hydra"
    "${CMAKE_CUDA_LIBS[@]}")
  # CMake 4 refuses package configs that ask for policies older than 3.5.
  [[ "$(cmake --version | sed -n 's/^cmake version \([0-9]*\).*/\1/p')" -ge 4 ]] 2>/dev/null &&
    CONF+=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)
  [[ "$GENERATOR" == Ninja ]] && CONF+=(-DCMAKE_MAKE_PROGRAM="$(command -v ninja)")
  gomp="$(compiler_lib libgomp.so)" && CONF+=(-DOpenMP_gomp_LIBRARY="$gomp")
  pthread="$(compiler_lib libpthread.so || compiler_lib libpthread.a)" && CONF+=(-DOpenMP_pthread_LIBRARY="$pthread")
  rt="$(compiler_lib librt.so || compiler_lib librt.a)" && CONF+=(-DCUDAToolkit_rt_LIBRARY="$rt")
}
# Each dependency as CMakeCache.txt has it, and where it must be.
check_cache() {
  local var val wrong=()
  for var in CBLAS_INCLUDE_DIR BLAS_LIBRARIES nlohmann_json_DIR CLI11_DIR GTest_DIR benchmark_DIR \
             Nifti2_INCLUDE_DIR Nifti2_LIBRARY Nifti2_ZNZ_LIBRARY ZLIB_INCLUDE_DIR ZLIB_LIBRARY_RELEASE \
             MPI_mpich_LIBRARY MPI_CXX_HEADER_DIR MPIEXEC_EXECUTABLE; do
    val="$(sed -n "s/^$var:[A-Z]*=//p" "$BUILD/CMakeCache.txt" | head -1)"
    [[ -z "$val" && "$var" == ZLIB_LIBRARY_RELEASE ]] && val="$(sed -n 's/^ZLIB_LIBRARY:[A-Z]*=//p' "$BUILD/CMakeCache.txt")"
    [[ "$val" == "$DEPS"/* ]] || wrong+=("$var=${val:-unset}")
  done
  for var in DNNL_INCLUDE_DIR DNNL_LIBRARY MPI_CXX_COMPILER; do
    val="$(sed -n "s/^$var:[A-Z]*=//p" "$BUILD/CMakeCache.txt" | head -1)"
    [[ -z "$val" || "$val" == *NOTFOUND* ]] || wrong+=("$var=$val")
  done
  echo "${wrong[*]:-}"
}

begin
CONF_OK=0
GPU_TARGETS=""
if ((DEPS_OK)); then
  configure_args
  # A cache from another configuration would keep its old finds: configure afresh.
  rm -f "$BUILD/CMakeCache.txt"
  run_timed "$(limit 150 300)" "$LOGS/configure.log" cmake "${CONF[@]}"
  rc=$?
  if ((rc == 0)); then
    bad="$(check_cache)"
    summary_line="$(sed -n 's/^-- gridnn: //p' "$LOGS/configure.log" | tail -1)"
    # "cuDNN 9.x (pip), NCCL 2.x (/usr/local/cuda/lib), MPI 4.0 (carried), "
    found="$(sed -n 's/^-- Found \(CUDNN\|NCCL\|MPI_CXX\): \(.*\) (found \(suitable \)\{0,1\}version "\([^"]*\)".*/\1 \4 (\2)/p' \
      "$LOGS/configure.log" | sed "s/^CUDNN/cuDNN/; s/^MPI_CXX/MPI/; s|($DEPS/.*)|(carried)|; s|(.*site-packages/.*)|(pip)|;
      s|/lib[^/ ]*\.so[^ )]*)|)|" | tr '\n' ',' | sed 's/,/, /g')"
    targets_line="$(sed -n 's/^-- gpu-check-targets: //p' "$LOGS/configure.log" | tail -1)"
    GPU_TARGETS="${targets_line#*executables:}"
    if [[ -n "$bad" ]]; then
      done_stage configure FAILED "found outside the carried prefix: $bad" hard
    elif [[ "$summary_line" != *"CUDA=ON"* || "$summary_line" != *"MPI=ON"* ]]; then
      done_stage configure FAILED "not CUDA and MPI: $summary_line" hard
    else
      CONF_OK=1
      done_stage configure ok "${summary_line##*build type=}, sm_$CUDA_ARCH; ${found}the rest from the carried prefix; ${targets_line%%:*}"
      [[ "$summary_line" == *"cuDNN=OFF"* ]] && fail_text configure "cuDNN not found: no GPU convolutions (pip wheel nvidia.cudnn or the toolkit's)"
    fi
  else
    done_stage configure "$(status_of $rc)" "cmake status $rc (configure.log)" hard
    grep -m4 -E 'CMake Error|Could NOT|error' "$LOGS/configure.log" >"$LOGS/configure.errors"
    while IFS= read -r l; do fail_text configure "$l"; done <"$LOGS/configure.errors"
  fi
else
  done_stage configure skipped "no carried packages" hard
fi

# ---- build -----------------------------------------------------------------------------
begin
if ((CONF_OK)); then
  keep_going=(-k 0)
  [[ "$GENERATOR" != Ninja ]] && keep_going=(-k)
  # Keep going past a broken target, so that the tests that built still run.
  run_timed "$(limit "$BUILD_CAP" 120)" "$LOGS/build.log" cmake --build "$BUILD" --target gpu-check-targets -j "$JOBS" -- "${keep_going[@]}"
  rc=$?
  if ((rc == 0)); then
    done_stage build ok "gpu-check-targets, $JOBS jobs"
  else
    done_stage build "$(status_of $rc)" "status $rc; continuing with what built (build.log)" hard
    grep -E '(error|Error)[: ]|undefined reference|^FAILED: ' "$LOGS/build.log" | head -6 | cut -c1-300 >"$LOGS/build.errors"
    while IFS= read -r l; do fail_text build "$l"; done <"$LOGS/build.errors"
  fi
else
  done_stage build skipped "not configured" hard
fi
BUILT=0
[[ -x "$BUILD/tools/gridnn-train" || -x "$BUILD/test/ops/test-ops" ]] && BUILT=1

# ---- what was built: its libraries, and (dry run) nothing of /usr's packages ------------
if ((BUILT)); then
  begin
  problems=()
  # gridnn-train loads the carried OpenMP build of OpenBLAS, and nothing is missing.
  ldd "$BUILD/tools/gridnn-train" >"$LOGS/ldd.log" 2>&1
  blas="$(awk '/libopenblas/ { print $3 }' "$LOGS/ldd.log")"
  [[ "$blas" == "$BLAS_DIR"/* ]] || problems+=("gridnn-train's libopenblas: ${blas:-none}")
  notfound="$(grep 'not found' "$LOGS/ldd.log" | awk '{ print $1 }' | tr '\n' ' ')"
  [[ -z "$notfound" ]] || problems+=("not found: $notfound")
  if ((DRY_RUN)) && [[ "$GENERATOR" == Ninja ]]; then
    # Headers each object really included (ninja's deps log), and the link commands.
    pkgs='nlohmann|CLI|gtest|gmock|benchmark|nifti|zlib\.h|zconf\.h|cblas\.h|openblas|mpi\.h|mpich|x86_64-linux-gnu/(mpich|openblas)|oneapi|dnnl'
    (cd "$BUILD" && ninja -t deps) >"$LOGS/ninja_deps.log" 2>&1
    used="$(grep -E "^[[:space:]]+/usr/(local/)?include/($pkgs)" "$LOGS/ninja_deps.log" | sort -u | head -5 | tr -s ' \n' ' ')"
    [[ -z "$used" ]] || problems+=("headers from /usr: $used")
    # The prefix's own paths end in .../usr/lib/x86_64-linux-gnu too: named DEPS first.
    (cd "$BUILD" && ninja -t commands gpu-check-targets) 2>&1 | sed "s|$DEPS|DEPS|g" >"$LOGS/ninja_commands.log"
    # (The compiler's own libgomp and libpthread are expected.)
    libs="$(grep -oE "(^| )((/usr)?/lib/x86_64-linux-gnu/(openblas[^/]*/)?lib(openblas|blas|gtest|gmock|benchmark|nifti|znz|z|mpich|mpi|dnnl|hwloc|ucp)[^ ]*|-l(openblas|gtest|benchmark|nifti2|znz|z|mpich|dnnl))( |$)" \
      "$LOGS/ninja_commands.log" | sort -u | head -5 | tr -s ' \n' ' ')"
    [[ -z "$libs" ]] || problems+=("libraries from /usr: $libs")
    hdrs="$(grep -c '' "$LOGS/ninja_deps.log")"
  fi
  if ((${#problems[@]})); then
    done_stage "libraries" FAILED "${problems[*]}" hard
  elif ((DRY_RUN)); then
    done_stage "libraries" ok "OpenBLAS's OpenMP build, all found; no header or library of /usr's packages in ${hdrs:-?} dependency lines or the link commands"
  else
    done_stage "libraries" ok "OpenBLAS's OpenMP build (carried), nothing missing"
  fi
fi

# ---- the tests ctest would select ------------------------------------------------------
# select_tests NAME LABEL-ARGS...: the tests a ctest selection picks (json-v1), checked:
# each has the labels asked for, and no gpu test executable is missing from the build (its
# tests would be a label-less <target>_NOT_BUILT entry, which no label selects). Prints
# "count|problems".
select_tests() {
  local want="$1"
  shift
  (cd "$BUILD" && ctest -N --show-only=json-v1 "$@") >"$LOGS/select_$want.json" 2>>"$LOGS/select.log"
  (cd "$BUILD" && ctest -N --show-only=json-v1) >"$LOGS/select_all.json" 2>>"$LOGS/select.log"
  "$PYTHON" - "$LOGS/select_$want.json" "$LOGS/select_all.json" "$want" "$GPU_TARGETS" <<'PY'
import json, sys
sel, every, want, targets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
def tests(path):
    try:
        return json.load(open(path)).get("tests", [])
    except Exception as e:
        print(f"0|ctest -N failed: {e}")
        sys.exit(0)
def labels(t):
    return {v for p in t.get("properties", []) if p["name"] == "LABELS" for v in p["value"]}
chosen = tests(sel)
problems = []
for t in chosen:
    l = labels(t)
    ok = "gpu" in l and (("mpi" in l) == (want == "gpu_mpi"))
    if not ok:
        problems.append(f"{t['name']} has labels {sorted(l)}")
names = {t["name"] for t in tests(every)}
unbuilt = [x for x in targets if x + "_NOT_BUILT" in names]
if unbuilt:
    problems.append("not built: " + " ".join(unbuilt))
print(f"{len(chosen)}|{'; '.join(problems)[:300]}")
PY
}
if ((BUILT)); then
  IFS='|' read -r N_GPU SEL_GPU_PROBLEM <<<"$(select_tests gpu -L '^gpu$' -LE '^mpi$' -E '^Ops/OpBackend\.')"
  IFS='|' read -r N_MPI SEL_MPI_PROBLEM <<<"$(select_tests gpu_mpi -L '^gpu$' -L '^mpi$')"
  if ((DRY_RUN)); then
    begin
    if [[ -n "$SEL_GPU_PROBLEM$SEL_MPI_PROBLEM" ]]; then
      done_stage "ctest selection" FAILED "${SEL_GPU_PROBLEM}${SEL_MPI_PROBLEM:+; $SEL_MPI_PROBLEM}" hard
    else
      done_stage "ctest selection" ok "-L gpu -LE mpi: $N_GPU tests, -L gpu -L mpi: $N_MPI; $(wc -w <<<"$GPU_TARGETS") gpu test executables, all built; no other label selected"
    fi
  fi
fi

# ---- JUnit results of a ctest run -> "passed failed skipped" and failure lines ----------
# junit_counts XML LABEL: prints "passed failed skipped" and appends to $LOGS/LABEL.fails
# one line per failed test: its name and the first lines of its failure.
junit_counts() {
  "$PYTHON" - "$1" "$LOGS/$2.fails" <<'PY'
import re, sys, xml.etree.ElementTree as ET
path, fails = sys.argv[1], sys.argv[2]
try:
    root = ET.parse(path).getroot()
except Exception:
    print("0 0 0")
    sys.exit(0)
p = f = s = 0
out = []
for tc in root.iter("testcase"):
    st = tc.get("status", "")
    if st == "run":
        p += 1
    elif st in ("notrun", "disabled"):
        s += 1
    else:
        f += 1
        text = (tc.findtext("system-out") or "").splitlines()
        first = next((i for i, l in enumerate(text) if re.search(r"Failure|[Ee]rror|threw|terminate|Abort|signal|Timeout", l)), None)
        lines = text[first:first + 3] if first is not None else text[-3:]
        msg = " / ".join(l.strip() for l in lines if l.strip())
        out.append(f"{tc.get('name')}: {msg[:220]}")
print(p, f, s)
with open(fails, "a") as fh:
    fh.write("".join(l + "\n" for l in out))
PY
}
# run_ctest STAGE LOGNAME CAP RESERVE PARALLEL SELECTION...: ctest with a JUnit file; the row.
run_ctest() {
  local stage="$1" name="$2" cap="$3" reserve="$4" par="$5" lim rc counts passed failed skipped st detail
  shift 5
  lim="$(limit "$cap" "$reserve")"
  # shellcheck disable=SC2046  # stop_time_args prints two words or none
  run_timed "$lim" "$LOGS/$name.log" ctest --test-dir "$BUILD" "$@" --output-on-failure --no-tests=error \
    -j "$par" --output-junit "$LOGS/$name.xml" $(stop_time_args "$lim")
  rc=$?
  counts="$(junit_counts "$LOGS/$name.xml" "$name")"
  read -r passed failed skipped <<<"$counts"
  detail="$passed passed, $failed failed, $skipped skipped"
  st="$(status_of $rc)"
  if ((rc == 0 && failed == 0 && passed + skipped > 0)); then
    st=ok
    if ((passed == 0)); then
      st=FAILED
      detail="$detail: every test skipped although nvidia-smi sees a GPU"
    fi
  elif [[ "$st" == ok ]]; then
    st=FAILED
  fi
  ((rc == 124 || rc == 137)) && detail="$detail; stopped at ${lim}s"
  done_stage "$stage" "$st" "$detail (ctest $*)" hard
  if [[ -s "$LOGS/$name.fails" ]]; then
    while IFS= read -r l; do fail_text "$stage" "$l"; done < <(head -8 "$LOGS/$name.fails")
  fi
}

# ---- 2. the gpu tests ------------------------------------------------------------------
if ((!DRY_RUN)); then
  begin
  OPS="$BUILD/test/ops/test-ops"
  if [[ -x "$OPS" ]]; then
    # Line-buffered, so that a crash leaves the last case it finished in the log.
    run_timed "$(limit 150 150)" "$LOGS/op_backend.log" env OMP_NUM_THREADS="$SOLO_THREADS" \
      OPENBLAS_NUM_THREADS="$SOLO_THREADS" stdbuf -oL -eL "$OPS" -m backend
    rc=$?
    line="$(sed -n 's/^backend mode: //p' "$LOGS/op_backend.log" | tail -1)"
    if ((rc == 0)) && [[ -n "$line" ]]; then
      done_stage "op backend" ok "$line (test-ops -m backend)" hard
    else
      last="$(grep -E '^  .* (OK|FAIL)' "$LOGS/op_backend.log" | tail -1 | awk '{ print $1 }')"
      st="$(status_of $rc)"
      case $rc in
        124 | 137 | 125) why="$st" ;;
        0) why="no result line (no CUDA device?)" st=FAILED ;;
        1) why="cases failed" ;;
        *) why="exit status $rc (crashed? last case finished: ${last:-none})" ;;
      esac
      done_stage "op backend" "$st" "${line:-$why} (test-ops -m backend)" hard
      grep -E '^  .* FAIL' "$LOGS/op_backend.log" | head -8 | sed 's/^ *//; s/  */ /g' >"$LOGS/op_backend.fails"
      grep -m2 -E 'no CUDA device|test-ops:' "$LOGS/op_backend.log" >>"$LOGS/op_backend.fails"
      while IFS= read -r l; do fail_text "op backend" "$l"; done <"$LOGS/op_backend.fails"
    fi
  else
    done_stage "op backend" FAILED "test-ops not built" hard
  fi

  if ((BUILT)); then
    [[ -n "$SEL_GPU_PROBLEM" ]] && fail_text "gpu tests" "selection: $SEL_GPU_PROBLEM"
    begin
    run_ctest "gpu tests" gpu_tests 180 75 "$PAR" -L '^gpu$' -LE '^mpi$' -E '^Ops/OpBackend\.'
    [[ "$SEL_GPU_PROBLEM" == *"not built"* ]] && HARD+=("gpu tests not built")
  else
    begin; done_stage "gpu tests" skipped "nothing built" hard
  fi
fi

# ---- 3. the GPU benchmarks -------------------------------------------------------------
# Google Benchmark 1.7 (Debian 12, carried) takes --benchmark_min_time in plain seconds;
# 1.8 and later want a unit.
MIN_TIME=0.05
bench_version="$(sed -n 's/.*PACKAGE_VERSION "\([0-9.]*\)".*/\1/p' "$LIBARCH/cmake/benchmark/benchmarkConfigVersion.cmake" 2>/dev/null)"
[[ "$bench_version" =~ ^1\.[0-7]\. ]] || MIN_TIME=0.05s
# bench_numbers JSON KIND: "N ok, E errors, a key number" from a benchmark's JSON output;
# the failed cases' names and messages go to $LOGS/bench.fails.
bench_numbers() {
  "$PYTHON" - "$1" "$2" "$LOGS/bench.fails" <<'PY'
import json, sys
path, kind, fails = sys.argv[1:4]
try:
    runs = [b for b in json.load(open(path))["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
except Exception as e:
    log = open(path[:-len(".json")] + ".log", errors="replace").read()
    if "Failed to match any benchmarks" in log:
        print("0 ok: no case matches (no GPU cases registered: no device?)")
    else:
        print(f"no results ({type(e).__name__}: crashed or stopped?)")
    sys.exit(0)
errs = [b for b in runs if b.get("error_occurred")]
ok = [b for b in runs if not b.get("error_occurred")]
key = ""
if kind == "gemm" and ok:  # the largest product
    b = max(ok, key=lambda b: int(b["name"].split("/")[3]))
    key = f", n={b['name'].split('/')[3]} {b.get('GFLOP', 0) / 1000:.1f} TFLOP/s"
elif kind == "layers":  # the stem convolution at 128^3, batch 8
    for b in ok:
        if b["name"].startswith("conv3d_fwd/stem/128/"):
            t, unit = b["real_time"], b.get("time_unit", "")
            if unit == "us" and t >= 1000:
                t, unit = t / 1000, "ms"
            key = f", stem fwd 128^3 {t:.3g} {unit}"
print(f"{len(ok)} ok, {len(errs)} errors{key}")
with open(fails, "a") as fh:
    for b in errs[:3]:
        fh.write(f"{b['name']}: {b.get('error_message', '')[:150]}\n")
PY
}
# run_bench BINARY LABEL FILTER KIND: one run of a benchmark binary on the cases FILTER
# selects, a line on stdout; adds "LABEL: numbers" to BENCH_DETAIL and fails BENCH_ST.
run_bench() {
  local bin="$BUILD/bench/$1" label="$2" filter="$3" kind="$4" slug lim rc nums st
  slug="$1${label:+_$label}"
  if [[ ! -x "$bin" ]]; then
    BENCH_ST=FAILED BENCH_DETAIL="$1 not built"
    return
  fi
  lim="$(limit 60 80)"
  : >"$LOGS/bench.fails"
  run_timed "$lim" "$LOGS/$slug.log" env OMP_NUM_THREADS="$SOLO_THREADS" OPENBLAS_NUM_THREADS="$SOLO_THREADS" \
    "$bin" --benchmark_filter="$filter" --benchmark_min_time="$MIN_TIME" \
    --benchmark_out="$LOGS/$slug.json" --benchmark_out_format=json
  rc=$?
  nums="$(bench_numbers "$LOGS/$slug.json" "$kind")"
  st="$(status_of $rc)"
  [[ "$st" == ok && ( "$nums" != *", 0 errors"* || "$nums" == "0 ok"* ) ]] && st=FAILED
  [[ -n "$label" ]] && progress "$1 $label" "$st" "$nums"
  [[ "$st" == ok ]] || BENCH_ST="$st"
  BENCH_DETAIL+="${BENCH_DETAIL:+; }${label:+$label: }$nums"
  while IFS= read -r l; do fail_text "$1 $label" "$l"; done <"$LOGS/bench.fails"
}
if ((!DRY_RUN)); then
  # bench_gemm and bench_layers once per math mode (the mode is in each case's name: fp32,
  # tf32 and bf16 products; convolutions "/cuda", "/cuda_tf32", "/cuda_bf16"), so that a
  # mode that crashes leaves the others' numbers.
  begin
  BENCH_ST=ok BENCH_DETAIL=""
  for mode in fp32 tf32 bf16; do
    run_bench bench_gemm "$mode" "^gemm/cuda/$mode/" gemm
  done
  done_stage bench_gemm "$BENCH_ST" "$BENCH_DETAIL"
  begin
  BENCH_ST=ok BENCH_DETAIL=""
  declare -A suffix=([fp32]="" [tf32]="_tf32" [bf16]="_bf16")
  for mode in fp32 tf32 bf16; do
    run_bench bench_layers "$mode" "/cuda${suffix[$mode]}(/|$)" layers
  done
  done_stage bench_layers "$BENCH_ST" "$BENCH_DETAIL"
  begin
  BENCH_ST=ok BENCH_DETAIL=""
  run_bench bench_elementwise "" "/cuda(/|$)" elementwise
  done_stage bench_elementwise "$BENCH_ST" "$BENCH_DETAIL"

  # A training step, gridnn-train against PyTorch, when the machine's torch sees the GPU.
  torch_info
  for precision in fp32 bf16; do
    begin
    stage="compare_train $precision"
    if [[ "$torch_cuda" != cuda ]]; then
      done_stage "$stage" skipped "torch sees no GPU (or no torch)"
      continue
    fi
    if [[ ! -x "$BUILD/tools/gridnn-train" ]]; then
      done_stage "$stage" FAILED "gridnn-train not built"
      continue
    fi
    lim="$(limit 90 80)"
    run_timed "$lim" "$LOGS/compare_train_$precision.log" "$PYTHON" bench/compare_train_torch.py --device cuda \
      --precision "$precision" --gridnn "$BUILD/tools/gridnn-train" --filter "$TRAIN_FILTER" \
      --warmup 2 --steps 6 --threads "$SOLO_THREADS" --timeout $((lim / 2)) --gridnn-data fixed
    rc=$?
    row="$(grep -m1 '^| resattnet3d' "$LOGS/compare_train_$precision.log" | tr -s ' ')"
    if ((rc == 0)) && [[ -n "$row" ]]; then
      IFS='|' read -r _ cname g t r _ <<<"$row"
      done_stage "$stage" ok "$(echo "$cname" | xargs): gridnn $(echo "$g" | xargs) s/step, torch $(echo "$t" | xargs), torch/gridnn $(echo "$r" | xargs)"
    else
      done_stage "$stage" "$(status_of $rc)" "status $rc (compare_train_$precision.log)"
      grep -m2 -E 'compare_train_torch:|Error|error' "$LOGS/compare_train_$precision.log" >"$LOGS/compare.fails"
      while IFS= read -r l; do fail_text "$stage" "$l"; done <"$LOGS/compare.fails"
    fi
  done
fi

# ---- 4. two ranks on the GPU -----------------------------------------------------------
# The carried hydra starts its proxies itself (fork: no ssh); on a machine whose host name
# does not resolve, it is told to use the loopback interface.
export HYDRA_LAUNCHER=fork
getent hosts "$(uname -n)" >/dev/null 2>&1 || export HYDRA_IFACE=lo
if ((DEPS_OK)); then
  begin
  # A plain MPI program, compiled against the carried MPICH, under the carried mpiexec:
  # two ranks, an allreduce, and each rank reports the proxy that started it and the
  # libmpich it loaded.
  probe="$BUILD/mpi_probe"
  cat >"$probe.cpp" <<'CPP'
#include <dlfcn.h>
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, one = 1, sum = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char link[64], parent[PATH_MAX] = {0};
  std::snprintf(link, sizeof link, "/proc/%d/exe", static_cast<int>(getppid()));
  if (readlink(link, parent, sizeof parent - 1) < 0) parent[0] = '\0';
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&MPI_Init), &info);
  std::printf("rank %d of %d: sum %d, proxy %s, libmpich %s\n", rank, size, sum, parent,
              info.dli_fname ? info.dli_fname : "?");
  MPI_Finalize();
  return 0;
}
CPP
  if ! "$CXX_BIN" -O1 -DMPICH_SKIP_MPICXX -I"$USR/include/x86_64-linux-gnu/mpich" "$probe.cpp" -o "$probe" \
       "$LIBARCH/libmpich.so.12" -Wl,-rpath,"$LIBARCH" -ldl >"$LOGS/mpi_probe.log" 2>&1; then
    done_stage "mpi plumbing" FAILED "the probe did not compile against the carried mpi.h (mpi_probe.log)" hard
  else
    run_timed 60 "$LOGS/mpi_probe.log" "$USR/bin/mpiexec.hydra" -n 2 "$probe"
    rc=$?
    ranks="$(grep -c "^rank [01] of 2: sum 2, proxy $USR/bin/hydra_pmi_proxy, libmpich $DEPS/" "$LOGS/mpi_probe.log")"
    if ((rc == 0 && ranks == 2)); then
      done_stage "mpi plumbing" ok "mpiexec -n 2: 2 ranks, allreduce right, started by the carried hydra_pmi_proxy, carried libmpich" hard
    else
      st="$(status_of $rc)"
      [[ "$st" == ok ]] && st=FAILED
      done_stage "mpi plumbing" "$st" "mpiexec -n 2: status $rc, $ranks of 2 ranks as expected (mpi_probe.log)" hard
      grep -v '^+ ' "$LOGS/mpi_probe.log" | head -3 >"$LOGS/mpi_probe.fails"
      while IFS= read -r l; do fail_text "mpi plumbing" "$l"; done <"$LOGS/mpi_probe.fails"
    fi
  fi
fi
if ((!DRY_RUN)); then
  begin
  if ((!BUILT)); then
    done_stage "mpi gpu tests" skipped "nothing built" hard
  elif [[ "${N_MPI:-0}" == 0 ]]; then
    done_stage "mpi gpu tests" none "no test has both labels gpu and mpi"
  else
    [[ -n "$SEL_MPI_PROBLEM" ]] && fail_text "mpi gpu tests" "selection: $SEL_MPI_PROBLEM"
    # Two ranks share the GPU and the cores: a quarter of them per rank, two tests at a time.
    run_ctest "mpi gpu tests" mpi_gpu_tests 240 5 2 -L '^gpu$' -L '^mpi$'
  fi
fi

finish
