#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and fuzzes the safetensors
# reader for SECONDS (default 60), starting from the committed seeds.
#
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"

bash scripts/setup.sh
cmake -S . -B build/fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DGRIDNN_FUZZ=ON -DGRIDNN_CUDA=OFF -DGRIDNN_MPI=OFF -DGRIDNN_BENCH=OFF >/dev/null
cmake --build build/fuzz --target fuzz_safetensors
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
# New inputs go to the scratch folder (first); the committed seeds stay untouched.
# -timeout: an input that takes 10 s is a hang; crash reproducers go to build/fuzz/.
build/fuzz/test/fuzz/fuzz_safetensors -max_total_time="$seconds" -timeout=10 \
  -artifact_prefix=build/fuzz/ -print_final_stats=1 \
  "$corpus" test/fuzz/corpus_safetensors 2>&1 | tail -n 25
