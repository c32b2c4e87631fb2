#!/usr/bin/env bash
# The GPU check, for a machine with one NVIDIA GPU (the device tool's H200) that may lack every
# Debian dependency and the network: scripts/gpu_deps.sh, run beforehand on a Debian machine,
# puts what is missing in .gpu-deps/ (carried along), and scripts/gpu_env.sh unpacks it here.
# Stages, in order (each writes <stage>.log in OUT_DIR; the summary table comes last):
#   probe      what the machine has (GPU, driver, toolkit, CMake, Python, our dependencies)
#   build      the trainer for this GPU's architecture only (sm_90 on an H200), no tests
#   ops        trainer check-backend: every op, forward and backward, CUDA against float64, fp32 and bf16
#              (bf16 attention through cuDNN where built in, then again through feast's own kernels)
#   train      20 steps of a small GPT-2 and a small Llama on the GPU and on the CPU from the same
#              initialisation and data: fp32 losses within 1e-4 relative, bf16 within 2e-2; and a
#              small Llama with LoRA adapters on every product over the frozen model, likewise, and
#              over the model quantized to NF4 (QLoRA); with document masks; and as a mixture of
#              experts (dropless, then with a capacity)
#   multirank  4 ranks sharing the GPU (tp 2 x pp 2, with and without sequence parallelism, and
#              with the zero-bubble schedule in fp32; interleaved 1F1B at pp 2 with 2 chunks per stage
#              in fp32 and bf16; MPI with device buffers staged through host
#              memory) against one rank on the GPU; context parallelism (ring attention) at cp 2
#              and tp 2 x cp 2 with sequence parallelism, GPT-2 and Llama:
#              fp32 within 1e-4, bf16 within 2e-2; 8 ranks (tp 2 x pp 2 x dp 2: ZeRO 1 1F1B and ZeRO 2 GPipe in fp32, ZeRO 1 with bf16
#              gradients in bf16) likewise, each with its gradient reductions' time in flight
#              and the part exposed; 4 ranks at dp 4 with ZeRO 3 (parameter pages as CUDA
#              virtual memory), full recomputation and the optimizer offloaded to pinned host
#              memory, against one rank likewise, with their memory report; expert parallelism (a
#              mixture of experts at ep 2 over dp 2, with tp 2, and over dp 4 with ZeRO 2) against one
#              rank; and trainer bench
#              comm with GPU buffers through NCCL (one rank) and staged MPI (2 ranks)
#   bench      trainer bench --device cuda (GPT-2 124M and 350M, bf16, T 1024) and the PyTorch
#              reference (bench/torch_bench.py) on the same shapes, eager and torch.compile
# Usage: scripts/gpu_check.sh [--only STAGE[,STAGE...]] [--cpu-rehearsal] [OUT_DIR]
#   (default OUT_DIR: build-gpu/check). A rerun with --only skips stages that already passed.
#   --cpu-rehearsal runs every stage with the CPU in the GPU's place (fp32 for bf16, small bench
#   shapes, no PyTorch): it proves the script's plumbing where there is no GPU, and proves nothing
#   about the GPU. Exit status: non-zero if any stage run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
only="" dev=cuda
while [[ ${1:-} == --* ]]; do
  case $1 in
    --only) only=",$2,"; shift 2 ;;
    --cpu-rehearsal) dev=cpu; shift ;;
    *) echo "gpu_check: unknown option $1"; exit 2 ;;
  esac
done
gpu_dtype() { [[ $dev == cuda ]] && echo "$1" || echo fp32; }  # the CPU computes in fp32 only
out=$(mkdir -p "${1:-build-gpu/check}" && cd "${1:-build-gpu/check}" && pwd)
trainer=$root/build-gpu/trainer
# The corpus and the one-rank reference runs: kept in build-gpu/ (which stays while the machine
# is warm) so that a rerun of one stage into a fresh OUT_DIR finds them.
state=$root/build-gpu/state
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
declare -A result seconds
stages=(probe build ops train multirank bench)

wanted() { [[ -z $only || $only == *",$1,"* ]]; }

summary() {  # rewritten after every stage, so a run cut short keeps what it finished
  {
    echo "gpu_check summary ($(date -u +%FT%TZ), logs in $out)"
    printf '%-10s %-24s %8s\n' stage result seconds
    for s in "${stages[@]}"; do printf '%-10s %-24s %8s\n' "$s" "${result[$s]:-skipped}" "${seconds[$s]:--}"; done
  } >"$out/summary.txt"
}

run_stage() {  # run_stage NAME FUNCTION: its output goes to OUT/NAME.log and, in short, here
  local name=$1 start=$SECONDS
  wanted "$name" || { result[$name]="skipped"; return; }
  echo "== $name"
  if [[ $name != probe && $name != build && ! -x $trainer ]]; then
    echo "no $trainer: run the build stage first (--only build,$name)" >"$out/$name.log"
    result[$name]="FAILED (not built)"
  elif "$2" >"$out/$name.log" 2>&1; then
    result[$name]="ok"
  else
    result[$name]="FAILED"
  fi
  seconds[$name]=$((SECONDS - start))
  tail -n 15 "$out/$name.log"
  summary
}

probe() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || echo "nvidia-smi: none"
  nvcc --version | tail -n 2 || echo "nvcc: none"
  cmake --version | head -n 1; ninja --version || echo "ninja: none"
  g++ --version | head -n 1; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())' || true
  grep PRETTY_NAME /etc/os-release || true
  for tool in mpirun mpicxx h5pcc pkg-config dpkg-deb ar; do printf '%-10s %s\n' "$tool" "$(command -v $tool || echo missing)"; done
  for pc in tomlplusplus libpcre2-8 sentencepiece zlib; do
    printf '%-14s %s\n' "$pc" "$(pkg-config --modversion $pc 2>/dev/null || echo missing)"; done
  for h in nlohmann/json.hpp boost/crc.hpp hdf5.h cblas.h gtest/gtest.h; do
    printf '%-18s %s\n' "$h" "$(echo "#include <$h>" | g++ -std=c++20 -E -x c++ - >/dev/null 2>&1 && echo present || echo missing)"
  done
  printf '%-10s %s\n' cudnn "$([[ -f /usr/local/cuda/include/cudnn.h ]] && echo "in the toolkit" ||
    python3 -c 'import nvidia.cudnn as m; print("pip:", list(m.__path__)[0])' 2>/dev/null || echo missing)"
  source scripts/gpu_env.sh
  echo "after scripts/gpu_env.sh (.gpu-deps: $([[ -d .gpu-deps/debs ]] && ls .gpu-deps/debs | wc -l || echo 0) packages):"
  for tool in mpirun mpicxx h5pcc pkg-config; do printf '%-10s %s\n' "$tool" "$(command -v $tool || echo missing)"; done
}

build() {
  source scripts/gpu_env.sh
  local arch
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '.')
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFEAST_CUDA=ON -DBUILD_TESTING=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}" "${FEAST_CMAKE_HINTS[@]}" &&
    cmake --build build-gpu --target trainer -j"$(nproc)" && "$trainer" --version
}

ops() {
  source scripts/gpu_env.sh
  local status=0
  # On the GPU, bf16 attention must go through cuDNN (FEAST_CUDA_ATTENTION=cudnn: a shape it
  # declines is an error, not a quiet fallback); then feast's own kernels get their turn.
  # CUDA_LAUNCH_BLOCKING: a kernel that faults is named by its own row, not by the next op that
  # happens to synchronise (the shapes are small; it costs seconds).
  if [[ $dev == cuda ]]; then
    CUDA_LAUNCH_BLOCKING=1 FEAST_CUDA_ATTENTION=cudnn "$trainer" check-backend --device cuda --dtype both || status=1
    echo "== again with FEAST_CUDA_ATTENTION=own (feast's attention kernels in bf16)"
    CUDA_LAUNCH_BLOCKING=1 FEAST_CUDA_ATTENTION=own "$trainer" check-backend --device cuda --dtype bf16 || status=1
  else
    "$trainer" check-backend --device cpu --dtype fp32 || status=1
  fi
  return $status
}

small_model() {  # the --set flags of a small model of family $1
  local arch=$1
  echo --set model.arch="$arch" --set model.n_layer=2 --set model.n_head=4 --set model.n_embd=128 \
    --set model.vocab_size=256 --set model.max_seq_len=128 --set training.steps=20 --set training.batch_size=8 \
    --set training.seq_len=64 --set training.eval_interval=0 --set parallel.tp=1 --set parallel.pp=1 \
    --set parallel.dp=1 --set parallel.micro_batch_size=8 --set checkpoint.interval=0 \
    --set data.train="$state/data/train_*.bin" --set data.val="$state/data/val_*.bin" \
    $([[ $arch == llama ]] && echo --set model.n_kv_head=2 --set model.intermediate_size=256)
}

# The --set flags of the small Llama's mixture of experts: 8 experts of width 128, top 2, a
# gated shared expert, the load-balancing and z-losses.
moe_flags() {
  echo --set model.moe.n_experts=8 --set model.moe.top_k=2 --set model.moe.intermediate_size=128 \
    --set model.moe.n_shared_experts=1 --set model.moe.shared_expert_gate=true \
    --set model.moe.aux_loss_coef=0.01 --set model.moe.z_loss_coef=0.001
}

tolerance() { [[ $1 == fp32 ]] && echo 1e-4 || echo 2e-2; }  # tolerance DTYPE: of losses_agree, relative

losses_agree() {  # losses_agree RUN_A RUN_B TOLERANCE: per-step relative difference of the losses
  python3 - "$@" <<'PY'
import json, sys
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
la = [json.loads(l)["loss"] for l in open(a + "/metrics.jsonl") if '"loss"' in l]
lb = [json.loads(l)["loss"] for l in open(b + "/metrics.jsonl") if '"loss"' in l]
assert len(la) == len(lb) and la, f"{len(la)} and {len(lb)} losses"
diffs = [abs(x - y) / abs(x) for x, y in zip(la, lb)]
worst = max(diffs)
print(f"{a} vs {b}: {len(la)} steps, first loss {la[0]:.6f} / {lb[0]:.6f}, last {la[-1]:.6f} / {lb[-1]:.6f}, "
      f"max relative difference {worst:.2e} (tolerance {tol:g}): {'ok' if worst <= tol else 'FAIL'}")
print("  per step: " + " ".join(f"{d:.1e}" for d in diffs))  # drift grows step by step; a bug jumps
sys.exit(0 if worst <= tol else 1)
PY
}

overlap() {  # overlap RUN: the run's gradient reductions against the part of them it waited for
  python3 - "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
r, t = s["dp_reductions"], s["time_split"]
hidden = min(1, max(0, 1 - r["dp_reduce_exposed_s"] / r["dp_reduce_s"])) if r["dp_reduce_s"] > 0 else 0
print(f"{sys.argv[1]}: overlap: gradient reductions {r['dp_reduce_s'] * 1e3:.2f} ms in flight per step, "
      f"{r['dp_reduce_exposed_s'] * 1e3:.2f} ms exposed ({100 * hidden:.0f}% hidden); dp_comm {t['dp_comm_s'] * 1e3:.2f} ms "
      f"of {s['ms_per_step']:.2f} ms per step")
PY
}

gpu_run() {  # gpu_run ARCH DTYPE NAME [LAUNCHER... --] [--set ...]: the small model on the GPU
  local arch=$1 dtype=$2 name=$3 launch=()
  shift 3
  if [[ " $* " == *" -- "* ]]; then
    while [[ $1 != -- ]]; do launch+=("$1"); shift; done
    shift
  fi
  # shellcheck disable=SC2046
  "${launch[@]}" "$trainer" configs/demo.toml $(small_model "$arch") --set logging.interval=1 \
    --set training.device=$dev --set training.dtype="$(gpu_dtype "$dtype")" \
    --set logging.dir="$state/runs/$name" --set checkpoint.resume=never "$@"
}

corpus() { [[ -f $state/data/meta.json ]] || "$trainer" prepare-data --synthetic --out "$state/data" --tokens 400000 --force; }

# cpu_then_gpu ARCH NAME [--set ...]: the small model with those flags for 20 steps on the CPU
# (runs/NAME-cpu) and on the GPU in fp32 and bf16 (runs/NAME-cuda-DTYPE), the losses compared.
# Returns 2 when a run fails, 1 when the losses disagree.
cpu_then_gpu() {
  local arch=$1 name=$2 dtype ok=0
  shift 2
  # shellcheck disable=SC2046
  "$trainer" configs/demo.toml $(small_model "$arch") --set logging.interval=1 "$@" \
    --set logging.dir="$state/runs/$name-cpu" --set checkpoint.resume=never || return 2
  for dtype in fp32 bf16; do
    gpu_run "$arch" $dtype "$name-cuda-$dtype" "$@" || return 2
    losses_agree "$state/runs/$name-cpu" "$state/runs/$name-cuda-$dtype" "$(tolerance $dtype)" || ok=1
  done
  return $ok
}

# moe_ep_run DTYPE REFERENCE NAME NP [--set ...]: the MoE model (moe_flags) on NP GPU ranks as
# runs/llama-moe-cuda-DTYPE-NAME, its losses against runs/llama-moe-cuda-DTYPE-REFERENCE's at bf16's
# tolerance (multirank says why). Returns 2 when the run fails, 1 when the losses disagree.
moe_ep_run() {
  local dtype=$1 reference=$2 name=$3 np=$4 moe
  shift 4
  read -r -a moe <<<"$(moe_flags)"
  gpu_run llama "$dtype" "llama-moe-cuda-$dtype-$name" mpirun --oversubscribe --bind-to none -np "$np" -- \
    "${moe[@]}" "$@" || return 2
  losses_agree "$state/runs/llama-moe-cuda-$dtype-$reference" "$state/runs/llama-moe-cuda-$dtype-$name" \
    "$(tolerance bf16)" || return 1
}

train() {
  source scripts/gpu_env.sh
  corpus || return 1
  local ok=0 arch
  # A failed run ends the stage; losses that disagree mark it failed and it goes on.
  for arch in gpt2 llama; do
    cpu_then_gpu $arch $arch || { [[ $? == 2 ]] && return 1; ok=1; }
  done
  # LoRA on every Llama product over the frozen model: the adapters' cuBLAS products, the frozen
  # layers' input-gradient-only backward; then with dropout (the counter-based mask kernel, drawn
  # again in the backward); then QLoRA, the same over a base quantized to NF4 with
  # double-quantized scales, dequantized by the NF4 kernel before each product, forward and backward.
  local lora=(--set lora.rank=8 --set lora.alpha=16 --set 'lora.targets=["q","k","v","o","gate","up","down"]')
  cpu_then_gpu llama llama-lora "${lora[@]}" || { [[ $? == 2 ]] && return 1; ok=1; }
  cpu_then_gpu llama llama-lora-dropout "${lora[@]}" --set lora.dropout=0.1 || { [[ $? == 2 ]] && return 1; ok=1; }
  cpu_then_gpu llama llama-qlora "${lora[@]}" --set lora.base_dtype=nf4 --set lora.double_quant=true ||
    { [[ $? == 2 ]] && return 1; ok=1; }
  # Document masks, both families: the corpus's spaces end documents, so the attention kernels
  # (our own; cuDNN declines masks) skip earlier documents' keys, rotary and learned positions
  # restart at each, and GPT-2's position table gets its gradient by document position.
  for arch in gpt2 llama; do
    cpu_then_gpu $arch $arch-docs --set data.document_mask=true --set data.eos_id=32 ||
      { [[ $? == 2 ]] && return 1; ok=1; }
  done
  # Mixtures of experts: the router kernel (softmax, top-k, column sums), the gather and
  # weighted combine of each expert's rows around its cuBLAS products, Qwen2-MoE's gated shared
  # expert, the load-balancing and z-losses' gradients; then with a capacity that drops choices.
  local moe
  read -r -a moe <<<"$(moe_flags)"
  cpu_then_gpu llama llama-moe "${moe[@]}" || { [[ $? == 2 ]] && return 1; ok=1; }
  cpu_then_gpu llama llama-moe-capacity "${moe[@]}" --set model.moe.capacity_factor=1.0 ||
    { [[ $? == 2 ]] && return 1; ok=1; }
  return $ok
}

multirank() {
  source scripts/gpu_env.sh
  corpus || return 1
  local ok=0 dtype
  for dtype in fp32 bf16; do
    # The one-rank reference, unless the train stage left it.
    [[ -f $state/runs/gpt2-cuda-$dtype/summary.json ]] || gpu_run gpt2 $dtype "gpt2-cuda-$dtype" || return 1
    gpu_run gpt2 $dtype "gpt2-cuda-$dtype-tp2pp2" mpirun --oversubscribe --bind-to none -np 4 -- \
      --set parallel.tp=2 --set parallel.pp=2 --set parallel.micro_batch_size=4 || return 1
    losses_agree "$state/runs/gpt2-cuda-$dtype" "$state/runs/gpt2-cuda-$dtype-tp2pp2" \
      "$(tolerance $dtype)" || ok=1
    # Sequence parallelism: the same layout with the norms' rows split, reduce-scatters and
    # all-gathers of device buffers in place of the all-reduces.
    gpu_run gpt2 $dtype "gpt2-cuda-$dtype-tp2pp2-sp" mpirun --oversubscribe --bind-to none -np 4 -- \
      --set parallel.tp=2 --set parallel.pp=2 --set parallel.micro_batch_size=4 --set parallel.sequence_parallel=true ||
      return 1
    losses_agree "$state/runs/gpt2-cuda-$dtype" "$state/runs/gpt2-cuda-$dtype-tp2pp2-sp" \
      "$(tolerance $dtype)" || ok=1
  done
  # The zero-bubble schedule: split backwards, weight passes while paired transfers are in flight.
  gpu_run gpt2 fp32 "gpt2-cuda-fp32-tp2pp2-zero-bubble" mpirun --oversubscribe --bind-to none -np 4 -- \
    --set parallel.tp=2 --set parallel.pp=2 --set parallel.micro_batch_size=4 --set parallel.schedule=zero-bubble ||
    return 1
  losses_agree "$state/runs/gpt2-cuda-fp32" "$state/runs/gpt2-cuda-fp32-tp2pp2-zero-bubble" 1e-4 || ok=1
  # Interleaved 1F1B: 4 layers over pp 2 in 2 chunks per stage (layers 0 and 2, 1 and 3), the
  # pipeline group on staged MPI, against one rank of the same 4-layer model.
  for dtype in fp32 bf16; do
    gpu_run gpt2 $dtype "gpt2-cuda-$dtype-L4" --set model.n_layer=4 --set parallel.micro_batch_size=4 || return 1
    gpu_run gpt2 $dtype "gpt2-cuda-$dtype-L4-pp2-interleaved" mpirun --oversubscribe --bind-to none -np 2 -- \
      --set model.n_layer=4 --set parallel.pp=2 --set parallel.micro_batch_size=4 \
      --set parallel.schedule=interleaved-1f1b --set parallel.virtual_stages=2 || return 1
    losses_agree "$state/runs/gpt2-cuda-$dtype-L4" "$state/runs/gpt2-cuda-$dtype-L4-pp2-interleaved" \
      "$(tolerance $dtype)" || ok=1
  done
  # Context parallelism: the ring's block kernels (ring_attention.cu) and key/value blocks passed
  # between ranks, GPT-2 (learned positions) and Llama (rotary, grouped-query), at cp 2 alone and
  # with tp 2 and sequence parallelism; the ring's bytes and waits from the summary.
  local arch
  for arch in gpt2 llama; do
    for dtype in fp32 bf16; do
      [[ -f $state/runs/$arch-cuda-$dtype/summary.json ]] || gpu_run $arch $dtype "$arch-cuda-$dtype" || return 1
      gpu_run $arch $dtype "$arch-cuda-$dtype-cp2" mpirun --oversubscribe --bind-to none -np 2 -- \
        --set parallel.cp=2 || return 1
      losses_agree "$state/runs/$arch-cuda-$dtype" "$state/runs/$arch-cuda-$dtype-cp2" "$(tolerance $dtype)" || ok=1
      gpu_run $arch $dtype "$arch-cuda-$dtype-tp2cp2-sp" mpirun --oversubscribe --bind-to none -np 4 -- \
        --set parallel.tp=2 --set parallel.cp=2 --set parallel.sequence_parallel=true || return 1
      losses_agree "$state/runs/$arch-cuda-$dtype" "$state/runs/$arch-cuda-$dtype-tp2cp2-sp" "$(tolerance $dtype)" || ok=1
      grep -h "^context-parallel ring" "$state/runs/$arch-cuda-$dtype-tp2cp2-sp/train.log" || ok=1
    done
  done
  # The equivalence grid's key layouts at 8 ranks (tp 2 x pp 2 x dp 2): ZeRO 1 with 1F1B and
  # ZeRO 2 with GPipe in fp32, and ZeRO 1 with bf16 compute and bf16 gradient traffic.
  local zero schedule grads name
  for dtype in fp32 bf16; do
    for layout in "1 1f1b fp32" "2 gpipe fp32" "1 1f1b bf16"; do
      read -r zero schedule grads <<<"$layout"
      [[ $dtype == bf16 && $grads == fp32 ]] && continue
      [[ $dtype == fp32 && $grads == bf16 ]] && continue
      name="gpt2-cuda-$dtype-tp2pp2dp2-zero$zero-$schedule-grads$grads"
      gpu_run gpt2 $dtype "$name" mpirun --oversubscribe --bind-to none -np 8 -- --set parallel.tp=2 \
        --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero_stage="$zero" --set parallel.schedule="$schedule" \
        --set parallel.grad_reduce_dtype="$grads" --set parallel.micro_batch_size=2 || return 1
      losses_agree "$state/runs/gpt2-cuda-$dtype" "$state/runs/$name" "$(tolerance $dtype)" || ok=1
      overlap "$state/runs/$name" || ok=1
    done
  done
  # What fits a model (docs/memory.md): ZeRO 3, whose blocks' parameter pages are mapped and
  # unmapped as they are gathered and released, full recomputation and the offloaded optimizer.
  for dtype in fp32 bf16; do
    name="gpt2-cuda-$dtype-dp4-zero3-recompute-offload"
    gpu_run gpt2 $dtype "$name" mpirun --oversubscribe --bind-to none -np 4 -- --set parallel.dp=4 \
      --set parallel.zero_stage=3 --set training.recompute=full --set parallel.offload_optimizer=true \
      --set parallel.micro_batch_size=2 || return 1
    losses_agree "$state/runs/gpt2-cuda-$dtype" "$state/runs/$name" "$(tolerance $dtype)" || ok=1
    grep -hE "ZeRO 3|high-water|offloaded|^ +0 \|" "$state/runs/$name/train.log" || true
  done
  # Expert parallelism: each MoE block's tokens sent to their experts' ranks and back by
  # all-to-all with variable counts of device rows, at ep 2 over dp 2 and with tp 2, against one
  # rank with the same micro-batches (the load-balancing loss is a micro-batch's). The experts'
  # rows arrive in another order than on one rank, so their sums round differently; over 20 steps
  # that can flip a token's top-k choice where two experts nearly tie, a step in the loss of about
  # 1e-3 that no tolerance for rounding allows: these compare at bf16's tolerance (a wrong
  # exchange is off by far more), and tests/parallel/equivalence_test.cpp holds the tight one.
  local moe
  read -r -a moe <<<"$(moe_flags)"
  for dtype in fp32 bf16; do
    gpu_run llama $dtype "llama-moe-cuda-$dtype-mbs4" "${moe[@]}" --set parallel.micro_batch_size=4 || return 1
    moe_ep_run $dtype mbs4 dp2ep2 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.micro_batch_size=4 ||
      { [[ $? == 2 ]] && return 1; ok=1; }
    moe_ep_run $dtype mbs4 tp2dp2ep2 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.ep=2 \
      --set parallel.micro_batch_size=4 || { [[ $? == 2 ]] && return 1; ok=1; }
    grep -h "^time per step" "$state/runs/llama-moe-cuda-$dtype-tp2dp2ep2/train.log" || ok=1
    # ep 2 over dp 4: two ranks hold each half of the experts, so the experts' gradients are
    # reduce-scattered over those two and ZeRO 2 shards over them (the dense ones all-reduced).
    gpu_run llama $dtype "llama-moe-cuda-$dtype-mbs2" "${moe[@]}" --set parallel.micro_batch_size=2 || return 1
    moe_ep_run $dtype mbs2 dp4ep2-zero2 4 --set parallel.dp=4 --set parallel.ep=2 --set parallel.zero_stage=2 \
      --set parallel.micro_batch_size=2 || { [[ $? == 2 ]] && return 1; ok=1; }
  done
  # Every collective on GPU buffers, each result checked: NCCL at one rank (the machine has one
  # GPU, and NCCL refuses two ranks on it), staged MPI at two.
  local comm=(bench comm --max-bytes 4M --iters 3 --ops allreduce,reduce_scatter,allgather,broadcast,alltoall,sendrecv)
  if [[ $dev == cuda ]]; then
    "$trainer" "${comm[@]}" --device cuda --backend nccl || ok=1
    # The per-call cost of non-blocking communicators (docs/cluster.md): the same, blocking.
    echo "== again with NCCL_COMM_BLOCKING=1 (blocking NCCL calls)"
    NCCL_COMM_BLOCKING=1 "$trainer" "${comm[@]}" --device cuda --backend nccl || ok=1
  fi
  mpirun --oversubscribe --bind-to none -np 2 "$trainer" "${comm[@]}" --device $dev || ok=1
  return $ok
}

bench() {
  source scripts/gpu_env.sh
  local status=0
  if [[ $dev == cpu ]]; then  # the plumbing only: a small model, no PyTorch
    "$trainer" bench --device cpu --shapes 2x64 --warmup 1 --steps 2 --layers 2 --vocab 512
    return
  fi
  "$trainer" bench --device cuda --dtype bf16 --shapes 8x1024,16x1024 --warmup 3 --steps 10 --vocab 50304 || status=1
  "$trainer" bench --device cuda --dtype bf16 --shapes 8x1024 --warmup 3 --steps 10 --layers 24 --heads 16 \
    --embd 1024 --vocab 50304 || status=1
  for compile in "" --compile; do
    python3 bench/torch_bench.py --device cuda --dtype bf16 $compile --shapes 8x1024,16x1024 --vocab 50304 || status=1
    python3 bench/torch_bench.py --device cuda --dtype bf16 $compile --shapes 8x1024 --layers 24 --heads 16 \
      --embd 1024 --vocab 50304 || status=1
  done
  return $status
}

run_stage probe probe
run_stage build build
if [[ ${result[build]} == FAILED ]]; then
  for s in ops train multirank bench; do result[$s]="not run (build failed)"; done
else
  if [[ $dev == cuda ]] && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no GPU visible (nvidia-smi -L failed): the GPU stages do not run, and nothing is passed"
    for s in ops train multirank bench; do wanted $s && result[$s]="not run (no GPU)"; done
  else
    run_stage ops ops
    run_stage train train
    run_stage multirank multirank
    run_stage bench bench
  fi
fi

summary
cat "$out/summary.txt"
for s in "${stages[@]}"; do [[ ${result[$s]:-skipped} == ok || ${result[$s]:-skipped} == skipped ]] || exit 1; done
