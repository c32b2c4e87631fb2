#!/usr/bin/env bash
# Installs every build and test dependency from Debian 12's packages. Idempotent: when all
# packages are present it changes nothing and needs no network.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev      # MPI: the launcher and the communication backend
  libhdf5-openmpi-dev             # parallel HDF5 for checkpoints
  hdf5-tools                      # h5dump and h5diff: the tests read checkpoints with them
  zlib1g-dev                      # CRC-32 checksums of checkpoint datasets
  libtomlplusplus-dev             # the config file
  nlohmann-json3-dev              # metrics, metadata, safetensors headers, tokenizer.json
  libpcre2-dev                    # the pre-tokenizer regex of byte-level BPE tokenizers
  libsentencepiece-dev            # SentencePiece tokenizers (Llama-2 style tokenizer.model)
  libopenblas-openmp-dev          # dgemm and sgemv for the CPU backend, sharing OpenMP's threads
  libdnnl-dev                     # oneDNN's sgemm: the CPU backend's float32 products (the fastest here)
  libgtest-dev                    # unit tests
  libboost-dev                    # CRC-32C (Boost.CRC) framing TensorBoard records
  python3-matplotlib python3-numpy  # scripts/report.py: pictures of runs and sweeps
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
echo "setup: installing ${missing[*]}"
"${sudo[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
