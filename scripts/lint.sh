#!/usr/bin/env bash
# Formatting and lint (docs/design.md §10), as CI runs them:
#
#   bash scripts/lint.sh                 both checks below
#   bash scripts/lint.sh --format        clang-format --dry-run -Werror (.clang-format) on every
#                                        tracked C++ and CUDA file
#   bash scripts/lint.sh --tidy [BUILD]  clang-tidy (.clang-tidy) on the library and program
#                                        sources (not the tests), with BUILD's compile commands
#                                        (default build/default; configured if missing: the
#                                        check needs no build) filtered into BUILD/tidy/
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

# tidy_db BUILD: BUILD/tidy/compile_commands.json, the entries of BUILD's compile commands for
# the library and program sources that the host compiler builds (the .cu files are nvcc's; the
# tests and benchmarks are not checked), without the precompiled header (GRIDNN_PCH): each
# source is checked with exactly the headers it includes, and clang never meets GCC's .gch.
# Prints the sources, the most expensive (largest) first.
tidy_db() {
  mkdir -p "$1/tidy"
  python3 - "$1" "$PWD" <<'PY'
import json, os, re, subprocess, sys
build, root = sys.argv[1], sys.argv[2]
tracked = set(subprocess.run(["git", "ls-files", "--", *(f"{d}/*.cpp" for d in
                              ("core", "kernels", "parallel", "plan", "models", "tools"))],
                             capture_output=True, text=True, check=True).stdout.split())
pch = re.compile(r" -Winvalid-pch| (?:-Xclang )?-include(?:-pch)? (?:-Xclang )?\S*cmake_pch\.hxx(?:\.pch)?")
entries = []
for e in json.load(open(os.path.join(build, "compile_commands.json"))):
    rel = os.path.relpath(e["file"], root)
    if rel in tracked:
        e["command"] = pch.sub("", e["command"])
        entries.append(e)
entries.sort(key=lambda e: -os.path.getsize(e["file"]))
json.dump(entries, open(os.path.join(build, "tidy", "compile_commands.json"), "w"), indent=2)
print("\n".join(os.path.relpath(e["file"], root) for e in entries))
PY
}

tidy_check() {
  [[ -f "$build/compile_commands.json" ]] || cmake --preset "$(basename "$build")" >/dev/null
  local files failed=0
  mapfile -t files < <(tidy_db "$build")
  echo "== clang-tidy $(clang-tidy --version | grep -o '[0-9][0-9.]*' | head -1): ${#files[@]} files ($build/tidy)"
  printf '%s\n' "${files[@]}" | xargs -P "$jobs" -n 1 clang-tidy -p "$build/tidy" --quiet 2>/dev/null || failed=1
  return $failed
}

case "$mode" in
  --format) format_check ;;
  --tidy) tidy_check ;;
  --fix) sources | xargs -P "$jobs" -n 16 clang-format -i ;;
  all) format_check && tidy_check ;;
  *) echo "usage: scripts/lint.sh [--format | --tidy [BUILD] | --fix]" >&2; exit 2 ;;
esac
