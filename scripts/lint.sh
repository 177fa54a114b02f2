#!/usr/bin/env bash
# Formatting and lint (docs/design.md §10), as CI runs them:
#
#   bash scripts/lint.sh                 both checks below
#   bash scripts/lint.sh --format        clang-format --dry-run -Werror (.clang-format) on every
#                                        tracked C++ and CUDA file
#   bash scripts/lint.sh --tidy [BUILD]  clang-tidy (.clang-tidy) on the library and program
#                                        sources (not the tests), with BUILD's compile commands
#                                        (default build/default; configured if missing)
#   bash scripts/lint.sh --fix           reformat every tracked C++ and CUDA file in place
#
# Exit status 1 when a check finds something; each finding names the file and line.
# `ln -s ../../scripts/pre-commit .git/hooks/pre-commit` checks the format of each commit.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-all}"
build="${2:-build/default}"
jobs="$(nproc)"

sources() { git ls-files -- '*.cpp' '*.h' '*.cu' '*.cuh' ':!:test/fuzz/corpus_*'; }

format_check() {
  echo "== clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1): $(sources | wc -l) files"
  sources | xargs -P "$jobs" -n 16 clang-format --dry-run -Werror || return 1
}

tidy_check() {
  [[ -f "$build/compile_commands.json" ]] || cmake --preset "$(basename "$build")" >/dev/null
  # The library and program sources that the host compiler builds (the .cu files are nvcc's).
  mapfile -t files < <(git ls-files -- 'core/*.cpp' 'kernels/*.cpp' 'parallel/*.cpp' 'plan/*.cpp' 'models/*.cpp' \
    'tools/*.cpp' | while read -r f; do grep -q "\"file\": \"$PWD/$f\"" "$build/compile_commands.json" && echo "$f"; done)
  echo "== clang-tidy $(clang-tidy --version | grep -o '[0-9][0-9.]*' | head -1): ${#files[@]} files ($build)"
  local failed=0
  printf '%s\n' "${files[@]}" | xargs -P "$jobs" -n 4 clang-tidy -p "$build" --quiet 2>/dev/null || failed=1
  return $failed
}

case "$mode" in
  --format) format_check ;;
  --tidy) tidy_check ;;
  --fix) sources | xargs -P "$jobs" -n 16 clang-format -i ;;
  all) format_check && tidy_check ;;
  *) echo "usage: scripts/lint.sh [--format | --tidy [BUILD] | --fix]" >&2; exit 2 ;;
esac
