#!/usr/bin/env bash
# The Debian 12 packages the GPU check (scripts/gpu_check.sh, docs/design.md §9) carries to
# the GPU machine, whose image has the CUDA toolkit, a C++ compiler, CMake, ninja and Python
# (cuDNN and NCCL as pip wheels) but no OpenBLAS, cblas.h, nlohmann-json, CLI11, GoogleTest,
# Google Benchmark, NIfTI or MPI, and no internet.
#
#   bash scripts/gpu_deps.sh                   on a Debian 12 machine where apt works: download
#                                              them into .gpu-deps/ (git-ignored)
#   bash scripts/gpu_deps.sh --unpack PREFIX [--dry-run]
#                                              anywhere (gpu_check.sh calls it): unpack them
#                                              into PREFIX and check that every shared library
#                                              they need is found
#
# .gpu-deps/ is git-ignored, so it must be copied to the GPU machine explicitly, beside the
# tracked files (README, "GPU check"). Copies of a working tree to a GPU machine are often
# limited in size (64 MiB where gridnn's checks run), so the download prints the total and
# fails above 48 MiB.
#
# Unpacking needs no root and no dpkg (dpkg-deb -x, or Python reading the .deb's ar and tar
# archives). Links to absolute paths are pointed inside PREFIX; links to libraries not
# carried are removed, and no link may leave PREFIX. PREFIX/rtlib gets links to the carried
# shared libraries the loader must find by name (what the carried libraries need: libgfortran,
# libhwloc, UCX, ...): on the GPU machine only those it lacks, so that its own newer copies
# (libgomp, libz, ...) are not shadowed; with --dry-run all of them, as on a bare machine.
# gridnn's programs find the libraries they link (libopenblas, libmpich, ...) through their
# RUNPATH. scripts/gpu_check.py closure then follows what the carried programs and libraries
# need. The last line printed is the result.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.gpu-deps"
LIMIT_MIB=48
PYTHON="${PYTHON:-python3}"

# dpkg-deb -x DEB DIR without dpkg: a .deb is an ar archive holding data.tar.{xz,gz}.
extract_deb() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
    return
  fi
  "$PYTHON" - "$1" "$2" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive: " + deb
pos = 8
while pos + 60 <= len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            sys.exit("data.tar.zst needs dpkg-deb or zstd: " + deb)
        kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        with tarfile.open(fileobj=io.BytesIO(data[pos + 60:pos + 60 + size]), mode="r:*") as t:
            t.extractall(dest, **kw)
        break
    pos += 60 + size + (size & 1)
else:
    sys.exit("no data.tar in " + deb)
PY
}

# --unpack PREFIX [--dry-run]: see the header. Exit status 1 when something is wrong.
unpack() {
  local prefix="$1" dry_run="$2" debs=() deb link target so f n=0 system outside
  for deb in "$DEST"/*.deb; do [[ -f "$deb" ]] && debs+=("$deb"); done
  if ((${#debs[@]} == 0)); then
    echo "no .gpu-deps/*.deb: run 'bash scripts/gpu_deps.sh' on a Debian 12 machine, then copy .gpu-deps/ (git-ignored) to the GPU machine beside the tracked files"
    return 1
  fi
  rm -rf "$prefix"
  mkdir -p "$prefix/rtlib"
  for deb in "${debs[@]}"; do
    echo "unpacking ${deb##*/}" >&2
    extract_deb "$deb" "$prefix" >&2 || { echo "could not unpack ${deb##*/}"; return 1; }
  done
  # Links to absolute paths (zlib1g-dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13)
  # would reach the machine's own files: pointed inside the prefix.
  while IFS= read -r link; do
    target="$(readlink "$link")"
    if [[ -e "$prefix$target" || -L "$prefix$target" ]]; then ln -sfnr "$prefix$target" "$link"; fi
  done < <(find "$prefix" -type l -lname '/*')
  # Links to libraries not carried (libniftiio-dev's libniftiio.so: only its header
  # nifti2_io.h is used) are removed, so that no search half-finds them.
  find "$prefix/usr/lib" "$prefix/lib" -type l -xtype l -print -delete 2>/dev/null | sed 's/^/removed (not carried): /' >&2
  outside="$(find "$prefix/usr/bin" "$prefix/usr/include" "$prefix/usr/lib" "$prefix/lib" "$prefix/usr/share/cmake" \
    -type l \( -lname '/*' -o -xtype l \) 2>/dev/null | sed "s|^$prefix/||" | head -5 | tr '\n' ' ')"
  if [[ -n "$outside" ]]; then
    echo "links that leave the prefix or dangle: $outside"
    return 1
  fi
  # The soname links (Debian names them libX.so.N, libbenchmark.so.1debian) into rtlib/.
  system=" $( { ldconfig -p 2>/dev/null | awk 'NR > 1 { print $1 }'
    ls /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 2>/dev/null; } | sort -u | tr '\n' ' ') "
  for f in "$prefix"/usr/lib/x86_64-linux-gnu/*.so.* "$prefix"/lib/x86_64-linux-gnu/*.so.*; do
    so="${f##*/}"
    [[ -e "$f" && "$so" =~ ^lib.*\.so\.[0-9][^.]*$ ]] || continue
    if [[ -n "$dry_run" || "$system" != *" $so "* ]]; then
      ln -sfn "$f" "$prefix/rtlib/$so"
      n=$((n + 1))
    fi
  done
  local mib closure
  mib="$(du -cb "${debs[@]}" | tail -1 | awk '{ printf "%.1f", $1 / 1048576 }')"
  closure="$("$PYTHON" "$ROOT/scripts/gpu_check.py" closure "$prefix" $dry_run)" || { echo "${#debs[@]} packages; $closure"; return 1; }
  echo "${#debs[@]} packages, $mib MiB; $closure; $n in rtlib/"
}
if [[ "${1:-}" == --unpack ]]; then
  [[ -n "${2:-}" ]] || { echo "usage: gpu_deps.sh --unpack PREFIX [--dry-run]" >&2; exit 2; }
  unpack "$2" "${3:-}"
  exit
fi

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
echo "next: copy the working tree and .gpu-deps/ (git-ignored: name it explicitly) to the GPU machine and run there: bash scripts/gpu_check.sh"
