#!/usr/bin/env bash
# Crashes and preemption under mpirun -np 8 (tp2 pp2 dp2), against an uninterrupted run:
#  1. a rank SIGKILLs itself at step 8: the job ends, scripts/run-resilient.sh restarts it from
#     step 5, and the final checkpoint equals the uninterrupted run's bit for bit;
#  2. SIGTERM to one rank stops every rank after the same step, saves and exits 75; the rerun
#     is stopped again by SIGUSR1 sent to mpirun (which forwards it); the third run finishes,
#     equal bit for bit, and metrics.jsonl holds every step once.
source "$(dirname "$0")/common.sh"

"${mpi8[@]}" "$trainer" "${base[@]}" --set logging.dir="$work/straight" > "$work/straight.log" 2>&1 ||
  fail "the uninterrupted run failed: $(tail -5 "$work/straight.log")"
reference=$work/straight/checkpoints/step_00000020.h5

# 1. Killed rank, resilient restart.
start=$(date +%s)
scripts/run-resilient.sh --delay 0 --retries 2 -- "${mpi8[@]}" "$trainer" "${base[@]}" --set logging.dir="$work/killed" \
  --set fault.kill_rank=5 --set fault.at_step=8 > "$work/killed.log" 2>&1 || fail "the resilient run failed: $(tail -5 "$work/killed.log")"
grep -q "run-resilient: attempt 1 exited with code" "$work/killed.log" || fail "no restart line"
# The killed rank took the job down at once: the first attempt lasted seconds, not a timeout.
first=$(sed -n 's/.*run-resilient: attempt 1 exited with code [0-9]* after \([0-9]*\) s.*/\1/p' "$work/killed.log")
(( first < 30 )) || fail "the attempt with the killed rank took $first s to end"
grep -q "resumed from .*step_00000005.h5 at step 5" "$work/killed.log" || fail "the restart did not resume from step 5"
same_tensors "$reference" "$work/killed/checkpoints/step_00000020.h5"
echo "killed rank: restarted and finished identical in $(( $(date +%s) - start )) s"

# 2. SIGTERM to one rank, then SIGUSR1 to mpirun.
run=$work/signalled
"${mpi8[@]}" "$trainer" "${base[@]}" --set logging.dir="$run" > "$work/term.log" 2>&1 &
launcher=$!
wait_for_step "$run/metrics.jsonl" 7
ranks=($(pgrep -P $launcher))
(( ${#ranks[@]} == 8 )) || fail "expected 8 rank processes under mpirun, found ${#ranks[@]}"
kill -TERM "${ranks[3]}"
wait $launcher; code=$?
(( code == 75 )) || fail "SIGTERM: exit code $code, expected 75; $(tail -5 "$work/term.log")"
grep -q "stopped by a signal (SIGTERM or SIGUSR1) at step" "$work/term.log" || fail "no stop line after SIGTERM"
stopped=$(grep -o "stopped (preempted) at step [0-9]*" "$work/term.log" | grep -o "[0-9]*$")
[[ -f $run/checkpoints/$(printf 'step_%08d.h5' "$stopped") ]] || fail "no checkpoint of step $stopped"

"${mpi8[@]}" "$trainer" "${base[@]}" --set logging.dir="$run" > "$work/usr1.log" 2>&1 &
launcher=$!
wait_for_step "$run/metrics.jsonl" $((stopped + 4))
kill -USR1 $launcher
wait $launcher; code=$?
(( code == 75 )) || fail "SIGUSR1: exit code $code, expected 75; $(tail -5 "$work/usr1.log")"
grep -q "resumed from .* at step $stopped " "$work/usr1.log" || fail "the second run did not resume at step $stopped"

"${mpi8[@]}" "$trainer" "${base[@]}" --set logging.dir="$run" > "$work/final.log" 2>&1 || fail "the final run failed"
same_tensors "$reference" "$run/checkpoints/step_00000020.h5"
steps_once "$run/metrics.jsonl" 20
echo "SIGTERM at step $stopped and SIGUSR1: resumed twice, finished identical"
