#!/usr/bin/env bash
# Fetches the Debian 12 packages that scripts/gpu_check.sh needs on the GPU machine, whose
# image has the CUDA toolkit, a C++ compiler, CMake, ninja and Python (cuDNN and NCCL as pip
# wheels) but no OpenBLAS, cblas.h, nlohmann-json, CLI11, GoogleTest, Google Benchmark,
# NIfTI or MPI, and no internet. Run it on a Debian 12 machine where apt works; the .deb
# files land in .gpu-deps/ at the repository root (git-ignored) and go to the GPU machine
# with the working tree:
#
#   bash scripts/gpu_deps.sh          # on the Debian machine: download into .gpu-deps/
#   bash scripts/gpu_check.sh         # on the GPU machine, .gpu-deps/ copied along
#
# gpu_check.sh unpacks them (dpkg-deb -x, no root, no apt) into a prefix inside its build
# folder and builds against that prefix only (its --dry-run proves it here). Copies of a
# working tree to a GPU machine are often limited in size (64 MiB where gridnn's checks
# run), so this script prints the total and fails above 48 MiB.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.gpu-deps"
LIMIT_MIB=48

# Package -> what it brings (files checked with `dpkg -L`, dependencies with `apt-cache
# depends` and `readelf -d` on Debian 12; gpu_check.sh --dry-run checks that every shared
# library these need is carried or is glibc's, libgcc's or libstdc++'s):
#   libopenblas-openmp-dev   cblas.h, openblas_config.h (include/x86_64-linux-gnu/openblas-openmp),
#                            libopenblas.so link (lib/x86_64-linux-gnu/openblas-openmp)
#   libopenblas0-openmp      libopenblas.so.0 -> libopenblasp-r0.3.21.so (same folder): the
#                            OpenMP build, which runs on gridnn's OpenMP threads (the pthread
#                            build's threads fight OpenMP's; bench/RESULTS.md)
#   libgfortran5, libquadmath0   what libopenblas.so.0 and libmpich.so.12 need at run time
#   nlohmann-json3-dev       nlohmann/json.hpp, share/cmake/nlohmann_json
#   libcli11-dev             CLI/CLI.hpp, share/cmake/CLI11
#   libgtest-dev             gtest headers, libgtest.a, libgtest_main.a, cmake/GTest
#   libnifti2-dev, libniftiio-dev, libnifti2-2, libznz-dev, libznz3
#                            nifti1.h, nifti2.h, nifti2_io.h, znzlib.h (include/nifti),
#                            libnifti2.so and libznz.so (NIfTI volumes)
#   zlib1g-dev, zlib1g       zlib.h, the libz.so link and libz.so.1 it points to (libznz
#                            reads .nii.gz)
#   libbenchmark-dev         benchmark headers, libbenchmark.so link, cmake/benchmark
#   libbenchmark1debian      libbenchmark.so.1.7.1
#   libmpich-dev             mpi.h (include/x86_64-linux-gnu/mpich), the libmpich.so link
#   libmpich12               libmpich.so.12 (MPICH 4.0, ch4 over UCX)
#   mpich                    mpiexec.hydra and hydra_pmi_proxy (bin/; hydra starts the proxy
#                            from its own folder)
#   libhwloc15, libudev1     libhwloc.so.15 (libmpich, mpiexec.hydra, hydra_pmi_proxy) and
#                            what it needs
#   libucx0, libnuma1        libucp/libucs/libuct/libucm.so.0 (libmpich) and libnuma.so.1;
#                            UCX's InfiniBand plugins (ucx/libuct_ib*) need libibverbs, which is
#                            not carried: UCX skips plugins that do not load
#   libslurm38               libslurm.so.38 (mpiexec.hydra and hydra_pmi_proxy link it)
# Not carried: libgomp1 (libopenblas0-openmp's OpenMP runtime): the machine's compiler brings
# its own, which gridnn's OpenMP code needs anyway, and a carried older copy beside the
# libraries gridnn links would take its place. libopenblas-dev (only documentation and
# dependencies), libgmock-dev
# (GTestConfig includes GMockTargets.cmake OPTIONAL; nothing here uses gmock), hwloc (the
# lstopo tools), libhwloc-dev and libucx-dev (libmpich-dev's dependencies for static
# linking), libibverbs1 and librdmacm1 (UCX's InfiniBand plugins only).
PACKAGES=(
  libopenblas-openmp-dev
  libopenblas0-openmp
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
  zlib1g
  libgtest-dev
  libbenchmark-dev
  libbenchmark1debian
  libmpich-dev
  libmpich12
  mpich
  libhwloc15
  libudev1
  libucx0
  libnuma1
  libslurm38
)

command -v apt-get >/dev/null || { echo "gpu_deps.sh: needs apt-get (run it on the Debian machine)"; exit 2; }
# apt-get download needs no root; it fetches the candidate version of each package. As
# root, keep apt from handing the download to its unprivileged _apt user (who cannot write
# here).
APT_OPTS=()
((EUID == 0)) && APT_OPTS=(-o APT::Sandbox::User=root)
# Refreshes the package lists (as scripts/setup.sh does): needs root or sudo.
apt_update() {
  local sudo=""
  if ((EUID != 0)); then
    command -v sudo >/dev/null || { echo "gpu_deps.sh: apt-get update needs root or sudo" >&2; return 1; }
    sudo="sudo"
  fi
  echo "gpu_deps.sh: apt-get update"
  $sudo apt-get update -qq
}
if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' 2>/dev/null | head -1)" ]]; then
  apt_update
fi
# Into a fresh folder beside .gpu-deps/, which replaces it only when every package came.
rm -rf "$DEST.partial"
mkdir -p "$DEST.partial"
cd "$DEST.partial"
if ! apt-get "${APT_OPTS[@]}" -q download "${PACKAGES[@]}"; then
  # Lists older than the mirror name versions it no longer has: refresh once and retry.
  if ! apt_update || ! apt-get "${APT_OPTS[@]}" -q download "${PACKAGES[@]}"; then
    echo "gpu_deps.sh: apt-get download failed" >&2
    exit 1
  fi
fi
# Plain file names (letters, digits, '.', '_', '-'): apt's names carry '%3a', '+' and '~',
# which some ways of copying a working tree refuse. The name plays no part in unpacking.
for deb in ./*.deb; do
  plain="$(printf '%s' "${deb#./}" | sed 's/%3a/-/g; s/[^A-Za-z0-9._-]/-/g')"
  [[ "$plain" == "${deb#./}" ]] || mv "$deb" "$plain"
done
cd "$ROOT"
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"
cd "$DEST"

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
