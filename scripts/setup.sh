#!/usr/bin/env bash
# Installs what gridnn needs to build, test and run on Debian 12, and is quiet when all
# of it is already there. Safe to run again.
#
#   scripts/setup.sh            build + test dependencies, and the Python environment
#                               (.venv) for the PyTorch interoperability tests
#   scripts/setup.sh --minimal  only what building and running needs
#
# The CUDA toolkit (nvcc, cuBLAS, cuDNN, NCCL) is not installed here: it comes with the
# machine (/usr/local/cuda). Without it gridnn builds its CPU backend only.
set -euo pipefail
cd "$(dirname "$0")/.."

minimal=0
[[ "${1:-}" == "--minimal" ]] && minimal=1

packages=(build-essential cmake ninja-build pkg-config ccache
          libopenblas-dev libopenblas0-openmp mpich libmpich-dev libcli11-dev nlohmann-json3-dev
          libnifti2-dev zlib1g-dev libdnnl-dev
          libgtest-dev libgmock-dev libbenchmark-dev)
if (( !minimal )); then
  # clang-format and clang-tidy run scripts/lint.sh; PyTorch (Debian's CPU build) reads the
  # safetensors files gridnn writes; matplotlib draws
  # bench/plot_grid_speedup.py's PNG; clang builds
  # the libFuzzer targets; mricron-data brings real brain volumes
  # (/usr/share/mricron/templates/ch2bet.nii.gz, 181x217x181) that test_data_nifti reads
  # and that serve as sample NIfTI input (the test skips itself without them); nibabel and
  # scipy run scripts/make_atrophy_dataset.py (the simulated-atrophy dataset built from
  # those volumes), scripts/atrophy_lift.py and their test (test/tools/); slurm-wlm and munge
  # run the local two-node Slurm cluster (scripts/slurm_local.sh) of the tests of label slurm.
  packages+=(python3 python3-venv python3-torch python3-numpy python3-matplotlib clang clang-format clang-tidy libclang-rt-14-dev
             libomp-dev mricron-data python3-nibabel python3-scipy slurm-wlm munge)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists only when they are missing or older than a day.
  if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]]; then
    $sudo apt-get update -qq
  fi
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if (( !minimal )); then
  # The `safetensors` Python package (PyPI; not packaged by Debian) in a venv that also
  # sees Debian's torch.
  if ! .venv/bin/python -c "import safetensors.torch, torch" 2>/dev/null; then
    echo "setup: creating .venv with safetensors (uses Debian's torch)"
    rm -rf .venv
    /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install -q --disable-pip-version-check safetensors ||
      echo "setup: warning: could not install safetensors; the PyPI interoperability test will be skipped" >&2
  fi
fi
