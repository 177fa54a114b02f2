#!/usr/bin/env bash
# Fetches the Debian packages that scripts/gpu_check.sh needs on the GPU machine, whose
# image has the CUDA toolkit, CMake, ninja and Python (cuDNN and NCCL as pip wheels) but no
# OpenBLAS, cblas.h, nlohmann-json, CLI11, GoogleTest or Google Benchmark, and no internet.
# Run it on a Debian 12 machine where apt works; the .deb files land in .gpu-deps/ at the
# repository root (git-ignored) and go to the GPU machine with the working tree:
#
#   bash scripts/gpu_deps.sh          # on the Debian machine: download into .gpu-deps/
#   bash scripts/gpu_check.sh         # on the GPU machine, .gpu-deps/ copied along
#
# gpu_check.sh unpacks them (dpkg-deb -x, no root, no apt) into a prefix inside its build
# folder when the machine lacks the headers or libraries. Copies of a working tree to a GPU
# machine are often limited in size (64 MiB where gridnn's checks run), so this script
# prints the total and fails above 48 MiB.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.gpu-deps"
LIMIT_MIB=48

# Package -> what it brings (files checked with `dpkg -L` on Debian 12):
#   libopenblas-pthread-dev  cblas.h, openblas_config.h (include/x86_64-linux-gnu/openblas-pthread),
#                            libopenblas.so link (lib/x86_64-linux-gnu/openblas-pthread)
#   libopenblas0-pthread     libopenblas.so.0 -> libopenblasp-r0.3.21.so (same folder)
#   libgfortran5, libquadmath0   what libopenblas.so.0 needs at run time
#   nlohmann-json3-dev       nlohmann/json.hpp, share/cmake/nlohmann_json
#   libcli11-dev             CLI/CLI.hpp, share/cmake/CLI11
#   libgtest-dev             gtest headers, libgtest.a, libgtest_main.a, cmake/GTest
#   libnifti2-dev, libniftiio-dev, libnifti2-2, libznz-dev, libznz3
#                            nifti1.h, nifti2.h, nifti2_io.h, znzlib.h (include/nifti),
#                            libnifti2.so and libznz.so (NIfTI volumes)
#   zlib1g-dev               zlib.h and the libz.so link (libznz reads .nii.gz)
#   libbenchmark-dev         benchmark headers, libbenchmark.so link, cmake/benchmark
#   libbenchmark1debian      libbenchmark.so.1.7.1
# Not needed: libopenblas-dev (only documentation and dependencies), libgmock-dev
# (GTestConfig includes GMockTargets.cmake OPTIONAL; nothing here uses gmock).
PACKAGES=(
  libopenblas-pthread-dev
  libopenblas0-pthread
  libgfortran5
  libquadmath0
  nlohmann-json3-dev
  libcli11-dev
  libnifti2-dev
  libniftiio-dev
  libnifti2-2
  libznz-dev
  libznz3
  zlib1g-dev
  libgtest-dev
  libbenchmark-dev
  libbenchmark1debian
)

command -v apt-get >/dev/null || { echo "gpu_deps.sh: needs apt-get (run it on the Debian machine)"; exit 2; }
rm -rf "$DEST"
mkdir -p "$DEST"
cd "$DEST"
# apt-get download needs no root; it fetches the candidate version of each package. As
# root, keep apt from handing the download to its unprivileged _apt user (who cannot write
# here).
APT_OPTS=()
((EUID == 0)) && APT_OPTS=(-o APT::Sandbox::User=root)
if ! apt-get "${APT_OPTS[@]}" download "${PACKAGES[@]}"; then
  echo "gpu_deps.sh: apt-get download failed; try 'apt-get update' first" >&2
  exit 1
fi

echo
echo "packages in $DEST:"
for deb in ./*.deb; do
  awk -v b="$(stat -c %s "$deb")" -v n="${deb#./}" 'BEGIN { printf "  %8.1f KiB  %s\n", b / 1024, n }'
done
total=$(du -cb ./*.deb | tail -1 | cut -f1)
awk -v b="$total" 'BEGIN { printf "total: %.1f MiB (copy limit 64 MiB, with the working tree)\n", b / 1048576 }'
if ((total > LIMIT_MIB * 1048576)); then
  echo "gpu_deps.sh: more than ${LIMIT_MIB} MiB: too close to the 64 MiB copy limit" >&2
  exit 1
fi
echo "next: copy the working tree with .gpu-deps/ to the GPU machine and run there: bash scripts/gpu_check.sh"
