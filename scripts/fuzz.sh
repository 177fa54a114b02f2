#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and fuzzes the safetensors reader
# and the NIfTI data path (volumes and CSV manifests) for SECONDS in all (default 60, split
# evenly between the targets, which run side by side, one core each), each starting from its
# committed seeds.
#
#   scripts/fuzz.sh [SECONDS]
#   scripts/fuzz.sh --build      only build the targets (CI builds them while other stages run)
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
[[ "${1:-}" == --build ]] && build_only=1 && shift
seconds="${1:-60}"
targets=(safetensors nifti)
share=$(( seconds / ${#targets[@]} ))
(( share > 0 )) || share=1

bash scripts/setup.sh
cmake -S . -B build/fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DGRIDNN_FUZZ=ON -DGRIDNN_CUDA=OFF -DGRIDNN_MPI=OFF -DGRIDNN_BENCH=OFF >/dev/null
cmake --build build/fuzz --target "${targets[@]/#/fuzz_}"
(( build_only )) && exit 0
# New inputs go to a scratch folder (first); the committed seeds stay untouched.
# -timeout: an input that takes 10 s is a hang; crash reproducers go to build/fuzz/.
corpora=()
pids=()
for target in "${targets[@]}"; do
  corpus=$(mktemp -d)
  corpora+=("$corpus")
  echo "== fuzz_${target}: ${share} s"
  build/fuzz/test/fuzz/fuzz_"${target}" -max_total_time="$share" -timeout=10 \
    -artifact_prefix=build/fuzz/ -print_final_stats=1 \
    "$corpus" test/fuzz/corpus_"${target}" > build/fuzz/fuzz_"${target}".log 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!targets[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  echo "== fuzz_${targets[$i]}"
  tail -n 25 build/fuzz/fuzz_"${targets[$i]}".log
  (( status == 0 )) || { echo "fuzz_${targets[$i]} failed (exit $status)" >&2; failed=$status; }
done
rm -rf "${corpora[@]}"
exit "$failed"
