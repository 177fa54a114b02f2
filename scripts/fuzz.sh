#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and fuzzes the safetensors reader
# and the NIfTI data path (volumes and CSV manifests) for SECONDS in all (default 60, split
# evenly between the targets), each starting from its committed seeds.
#
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
targets=(safetensors nifti)
share=$(( seconds / ${#targets[@]} ))
(( share > 0 )) || share=1

bash scripts/setup.sh
cmake -S . -B build/fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DGRIDNN_FUZZ=ON -DGRIDNN_CUDA=OFF -DGRIDNN_MPI=OFF -DGRIDNN_BENCH=OFF >/dev/null
cmake --build build/fuzz --target "${targets[@]/#/fuzz_}"
for target in "${targets[@]}"; do
  corpus=$(mktemp -d)
  # New inputs go to the scratch folder (first); the committed seeds stay untouched.
  # -timeout: an input that takes 10 s is a hang; crash reproducers go to build/fuzz/.
  echo "== fuzz_${target}: ${share} s"
  status=0
  build/fuzz/test/fuzz/fuzz_"${target}" -max_total_time="$share" -timeout=10 \
    -artifact_prefix=build/fuzz/ -print_final_stats=1 \
    "$corpus" test/fuzz/corpus_"${target}" > build/fuzz/fuzz_"${target}".log 2>&1 || status=$?
  tail -n 25 build/fuzz/fuzz_"${target}".log
  rm -rf "$corpus"
  (( status == 0 )) || { echo "fuzz_${target} failed (exit $status)" >&2; exit "$status"; }
done
