#!/usr/bin/env bash
# Where a GPU training step's time goes, for the device machine after scripts/gpu_check.sh's build
# stage (it builds first if build-gpu/trainer is missing). Writes into OUT_DIR:
#   kernels.log     Nsight Compute's per-kernel summary of a warm-up and a timed training step of
#                   GPT-2 124M's width at 8x1024 with 2 of its 12 layers (first: it says the most
#                   about where to work next): each kernel's count and duration (the clocks left
#                   alone, one metric). ncu replays each kernel, about 0.1 s apiece on the H200
#                   (2026-12-04): the 12-layer model's 1000-odd kernels outran 120 s, 2 layers fit.
#   bench_more.log  GPT-2 124M with feast's own attention kernels in place of cuDNN's (their cost
#                   at T = 1024), and a Llama of the same size: feast, then PyTorch eager and compiled
# Each part is bounded by `timeout`, so one that hangs costs its own minutes and not the rest.
# Usage: scripts/gpu_profile.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:?usage: scripts/gpu_profile.sh OUT_DIR}" && cd "$1" && pwd)
trainer=$PWD/build-gpu/trainer
[[ -x $trainer ]] || scripts/gpu_check.sh --only build "$out/check" || exit 1
source scripts/gpu_env.sh
quiet() { grep -v "pmix\|dlopen error\|Perhaps a missing"; }  # the carried Open MPI's harmless PMIx noise
gpt2=(--device cuda --dtype bf16 --shapes 8x1024 --vocab 50304)
llama=(--arch llama --shapes 8x1024 --device cuda --dtype bf16)
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
if [[ -n $ncu ]]; then
  timeout 150 "$ncu" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    "$trainer" bench "${gpt2[@]}" --layers 2 --warmup 1 --steps 1 2>&1 | quiet >"$out/kernels.log"
else
  echo "no ncu on this machine" >"$out/kernels.log"
fi
{
  echo "== GPT-2 124M, feast's own attention kernels (FEAST_CUDA_ATTENTION=own)"
  FEAST_CUDA_ATTENTION=own timeout 100 "$trainer" bench "${gpt2[@]}" --warmup 3 --steps 10
  echo "== Llama (12 layers, 768 channels, 4 key/value heads, SwiGLU 2048, vocab 32000): feast"
  timeout 100 "$trainer" bench "${llama[@]}" --warmup 3 --steps 10
  for compile in "" --compile; do
    echo "== the same Llama, PyTorch ${compile:-eager}"
    timeout 150 python3 bench/torch_bench.py "${llama[@]}" $compile --warmup 3 --steps 10
  done
} 2>&1 | quiet >"$out/bench_more.log"
tail -n 40 "$out/bench_more.log"
grep -c "" "$out/kernels.log"
