#!/usr/bin/env bash
# The check to run on a machine with an NVIDIA GPU (the device tool's H200): build with the CUDA
# backend for the GPU that is there, list the devices the trainer sees, run the whole test
# suite, and time the CPU benchmark there. The CUDA kernels themselves come with the CUDA issue;
# until then this proves the CUDA build links and runs on a real device.
# Usage: scripts/gpu_check.sh [OUT_DIR]   (writes gpu_check.log there, default build-gpu/)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-gpu}
mkdir -p "$out"
log="$out/gpu_check.log"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || echo "nvidia-smi: not available"
  scripts/setup.sh
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DFEAST_WERROR=ON -DFEAST_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
  cmake --build build-gpu -j"$(nproc)"
  ./build-gpu/trainer --version
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  ctest --test-dir build-gpu --output-on-failure -j4 --timeout 600
  ./build-gpu/trainer bench --steps 5
} 2>&1 | tee "$log"
