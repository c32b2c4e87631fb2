#!/usr/bin/env bash
# A rank that hangs (fault.stall_rank) is named by the watchdog of the ranks waiting for it,
# within parallel.timeout_s plus its short survey, and the whole job exits non-zero.
source "$(dirname "$0")/common.sh"
start=$(date +%s)
"$mpiexec" --oversubscribe --bind-to none -np 4 "$trainer" "${base[@]}" --set parallel.dp=1 \
  --set logging.dir="$work/stall" --set fault.stall_rank=2 --set fault.at_step=3 --set parallel.timeout_s=3 \
  > "$work/stall.log" 2>&1
code=$?
elapsed=$(( $(date +%s) - start ))
(( code != 0 )) || fail "the job exited 0 with a stalled rank"
(( elapsed < 40 )) || fail "the job took ${elapsed} s to end"
grep -q "did not complete within 3 s" "$work/stall.log" || fail "no watchdog message: $(tail -5 "$work/stall.log")"
grep -q "late: world rank(s) 2 " "$work/stall.log" || fail "the watchdog did not name rank 2: $(grep 'did not complete' "$work/stall.log" | head -2)"
echo "stalled rank named; job ended with code $code after ${elapsed} s"
