#!/usr/bin/env bash
# A step whose loss or gradient norm is not finite (lr = 1e30 blows the model up after one
# step): under mpirun -np 2 one message names the step and the first rank that saw it, every
# rank exits non-zero, and no checkpoint is written from that state. With
# training.skip_nonfinite = 2 two such steps are skipped (and said so) before the run fails.
source "$(dirname "$0")/common.sh"
blow_up=("$mpiexec" --oversubscribe --bind-to none -np 2 "$trainer" "${base[@]}" --set parallel.tp=1 --set parallel.pp=1
         --set training.lr=1e30 --set training.min_lr=0 --set training.warmup_steps=0 --set checkpoint.interval=1)
"${blow_up[@]}" --set logging.dir="$work/fail" > "$work/fail.log" 2>&1 && fail "a non-finite run exited 0"
(( $(grep -c "step 2: loss .*not finite (first seen on rank [01])" "$work/fail.log") == 1 )) ||
  fail "expected one message naming step 2 and a rank: $(grep -i error "$work/fail.log")"
[[ $(ls "$work/fail/checkpoints") == $'latest\nstep_00000001.h5' ]] || fail "checkpoints: $(ls "$work/fail/checkpoints")"

"${blow_up[@]}" --set logging.dir="$work/skip" --set training.skip_nonfinite=2 > "$work/skip.log" 2>&1 &&
  fail "a run with more non-finite steps than allowed exited 0"
grep -q "step 2: .*update skipped (1 of 2 allowed by training.skip_nonfinite)" "$work/skip.log" || fail "step 2 not skipped"
grep -q "step 3: .*update skipped (2 of 2 allowed" "$work/skip.log" || fail "step 3 not skipped"
grep -q "step 4: loss .*not finite .*no checkpoint is written" "$work/skip.log" || fail "step 4 did not fail the run"
# A skipped step changes nothing: its checkpoint holds step 1's weights and optimizer state.
same_tensors "$work/skip/checkpoints/step_00000001.h5" "$work/skip/checkpoints/step_00000003.h5"
echo "non-finite steps: failed once with the rank named; skipped within the allowance"
