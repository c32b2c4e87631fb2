#!/usr/bin/env bash
# grad_reduce_bf16.sh TRAINER MPIEXEC SOURCE_DIR CORPUS WORK: parallel.grad_reduce_dtype = "bf16"
# trains the demo model at dp 2 (ZeRO 0 and 2: an all-reduce and per-micro-batch reduce-scatters)
# to within 1% of the fp32-traffic run's final loss, and differs from it (the rounding is
# applied).
set -u
trainer=$1 mpiexec=$2 src=$3 corpus=$4 work=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$work" && mkdir -p "$work"
status=0
fail() { echo "FAIL: $*"; status=1; }

final_loss() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["loss"])' "$1/metrics.jsonl"; }

for zero in 0 2; do
  for dtype in fp32 bf16; do
    "$mpiexec" --oversubscribe --bind-to none -np 2 "$trainer" "$src/configs/demo.toml" \
      --set parallel.tp=1 --set parallel.pp=1 --set parallel.zero_stage=$zero --set parallel.grad_reduce_dtype=$dtype \
      --set training.steps=30 --set training.eval_interval=0 --set logging.quiet=true \
      --set data.train="$corpus/train_*.bin" --set data.val="$corpus/val_*.bin" \
      --set logging.dir="$work/z$zero-$dtype" --set checkpoint.resume=never >"$work/z$zero-$dtype.out" 2>&1 ||
      { fail "ZeRO $zero $dtype exited non-zero"; cat "$work/z$zero-$dtype.out"; continue; }
  done
  a=$(final_loss "$work/z$zero-fp32") b=$(final_loss "$work/z$zero-bf16") || { fail "no losses for ZeRO $zero"; continue; }
  python3 - "$a" "$b" "$zero" <<'PY' || fail "ZeRO $zero: bf16 traffic loss"
import sys
a, b, zero = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
rel = abs(b - a) / a
print(f"ZeRO {zero}: final loss fp32 traffic {a:.6f}, bf16 traffic {b:.6f}, relative difference {rel:.2e}")
assert a != b, "identical losses: the bf16 rounding was not applied"
assert rel < 0.01, "more than 1% apart"
PY
done

exit $status
