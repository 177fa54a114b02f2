#!/usr/bin/env bash
# Sets up, builds and runs the test suite.
#
#   scripts/test.sh                    the default preset: CUDA when nvcc is found (gpu
#                                      tests are skipped without a GPU), MPI when found
#   scripts/test.sh --preset cpu-nompi a CPU-only, single-process build
#   scripts/test.sh --preset asan      CPU-only under AddressSanitizer + UBSan
#   scripts/test.sh -- -L unit         extra arguments after -- go to ctest
#
# Presets are in CMakePresets.json; each builds in build/<preset>.
set -euo pipefail
cd "$(dirname "$0")/.."

preset=default
ctest_args=()
while (( $# )); do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "usage: scripts/test.sh [--preset NAME] [-- CTEST_ARGS...]" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh
# nvcc lives outside PATH on many machines.
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
jobs=$(nproc)
# Tests run side by side: idle OpenMP threads must sleep, not spin (spinning made a
# training step 4-5x slower as soon as another process ran; bench/RESULTS.md).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

echo "== configure ($preset)"
cmake --preset "$preset" >/dev/null
echo "== build ($preset)"
t0=$SECONDS
cmake --build --preset "$preset" -j "$jobs"
echo "== build ($preset) in $((SECONDS - t0)) s; test ($preset)"
t0=$SECONDS
# Each test of an MPI label starts its own ranks; ctest runs tests in parallel.
status=0
ctest --preset "$preset" -j "$jobs" --timeout 600 "${ctest_args[@]}" || status=$?
echo "== test ($preset) in $((SECONDS - t0)) s"
exit "$status"
