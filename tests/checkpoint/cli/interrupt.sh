#!/usr/bin/env bash
# Ctrl-C on a single-process run: the first SIGINT finishes the step, saves, prints
# "interrupted at step N" once and exits 130; the checkpoint verifies. A second Ctrl-C during
# the step ends the process at once, by SIGINT, with no clean stop.
source "$(dirname "$0")/common.sh"
# Slower steps (~0.5 s), so both signals land inside one step.
one=("$trainer" "${base[@]}" --set parallel.tp=1 --set parallel.pp=1 --set model.n_layer=8 --set training.seq_len=128)

"${one[@]}" --set logging.dir="$work/once" > "$work/once.log" 2>&1 &
pid=$!
wait_for_step "$work/once/metrics.jsonl" 2
kill -INT $pid
wait $pid; code=$?
(( code == 130 )) || fail "one Ctrl-C: exit code $code, expected 130; $(tail -3 "$work/once.log")"
(( $(grep -c "interrupted at step" "$work/once.log") == 1 )) || fail "'interrupted at step' not printed exactly once"
step=$(grep -o "interrupted at step [0-9]*" "$work/once.log" | grep -o "[0-9]*$")
"$trainer" inspect "$work/once/checkpoints/$(printf 'step_%08d.h5' "$step")" --no-config | grep -q "all .* tensors verified" ||
  fail "the checkpoint of step $step does not verify"

"${one[@]}" --set logging.dir="$work/twice" > "$work/twice.log" 2>&1 &
pid=$!
wait_for_step "$work/twice/metrics.jsonl" 2
kill -INT $pid; sleep 0.05; kill -INT $pid
wait $pid; code=$?
(( code == 130 )) || fail "two Ctrl-C: exit code $code, expected 130 (death by SIGINT)"
grep -q "interrupted at step" "$work/twice.log" && fail "two Ctrl-C still stopped cleanly"
ls "$work/twice/checkpoints"/step_*.h5 >/dev/null 2>&1 && fail "two Ctrl-C still saved a checkpoint"
echo "one Ctrl-C: clean stop at step $step; two: ended at once"
