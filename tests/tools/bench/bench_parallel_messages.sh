#!/usr/bin/env bash
# bench_parallel_messages.sh TRAINER MPIEXEC: `bench parallel` says which default layouts it
# skips and why; --micro-batches gives a row per count with the pipeline formula; an error about
# a value its user gave names the flag, before anything is measured; and it leaves no temporary
# data behind when it fails.
set -uo pipefail
trainer=$1 mpiexec=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(dirname "$(mktemp -u)")
fail() { echo "FAIL: $*"; exit 1; }
mpi=("$mpiexec" --oversubscribe --bind-to none -np 2 "$trainer" bench parallel --steps 1 --warmup 1)

out=$("${mpi[@]}" --layers 1 --heads 1 --embd 32 2>&1) || fail "the bench failed: ${out: -400}"
grep -q "bench: skipping tp2pp1dp1 (tp 2 does not divide 1 heads)" <<<"$out" || fail "no skip line for tp2: ${out:0:600}"
grep -q "bench: skipping tp1pp2dp1 (pp 2 > 1 layers)" <<<"$out" || fail "no skip line for pp2"
# 18 fields: the layout's 3, 14 figures, and dp-hidden (a percentage at dp 2).
grep -qE "^tp1 pp1 dp2( +[^ ]+){14} +[0-9.]+%$" <<<"$out" || fail "the layout that fits did not run, or has no dp-hidden figure"
echo "ok: skipped layouts are named with the reason"

# --micro-batches: one row per count, the formula (p-1)/(m+p-1) beside the measured bubble, and E.
out=$("${mpi[@]}" --layers 2 --heads 1 --embd 32 --layouts tp1pp2dp1 --micro-batches 1,4 2>&1) ||
  fail "--micro-batches failed: ${out: -400}"
# At dp 1 there are no data-parallel reductions to hide: the last column says so.
grep -qE '^tp1 pp2 dp1 +1 +2 .* [0-9.]+% +50\.0% +[0-9.]+% +-$' <<<"$out" || fail "no m = 1 row with formula 50%: $(grep -A4 '^layout' <<<"$out")"
grep -qE '^tp1 pp2 dp1 +4 +2 .* [0-9.]+% +20\.0% +[0-9.]+% +-$' <<<"$out" || fail "no m = 4 row with formula 20%"
grep -q "formula = (p-1)/(m+p-1)" <<<"$out" || fail "the formula is not stated"
echo "ok: --micro-batches runs each count with the bubble formula and E"

# --schedule zero-bubble states its own formula; --sequence-parallel applies where tp > 1.
out=$("${mpi[@]}" --layers 2 --heads 2 --embd 32 --layouts tp1pp2dp1,tp2pp1dp1 --micro-batches 2 --schedule zero-bubble \
  --sequence-parallel 2>&1) || fail "zero-bubble with sequence parallelism failed: ${out: -400}"
grep -q "formula = (p-1)/(3m+p-1) (zero-bubble)" <<<"$out" || fail "zero-bubble's formula is not stated"
grep -q "zero-bubble, sequence parallelism where tp > 1;" <<<"$out" || fail "the header does not say what ran"
grep -qE '^tp1 pp2 dp1 +2 +2 .* [0-9.]+% +14\.3% +[0-9.]+% +-$' <<<"$out" || fail "no zero-bubble row with formula 14.3%"
grep -qE '^tp2 pp1 dp1 +2 +2 ' <<<"$out" || fail "the tp 2 layout did not run with sequence parallelism"
echo "ok: zero-bubble and sequence parallelism run in the bench, with zero-bubble's formula"

before=$(ls -d "$tmp"/feast_bench_* 2>/dev/null | sort)
out=$("${mpi[@]}" --batch 3 2>&1) && fail "--batch 3 was accepted"
grep -q "bench --batch 3: training.batch_size = 3 is not divisible" <<<"$out" || fail "message: $(grep -m1 error <<<"$out")"
# Found before anything is measured: no communication table, no layout header.
grep -qiE "^layout|allreduce" <<<"$out" && fail "the error came after the benchmark started: ${out:0:400}"
after=$(ls -d "$tmp"/feast_bench_* 2>/dev/null | sort)
[[ $before == "$after" ]] || fail "temporary data left behind: $(comm -13 <(echo "$before") <(echo "$after"))"
echo "ok: the error names --batch; no temporary data is left"

before=$(ls -d "$tmp"/feast_bench_* 2>/dev/null | sort)
"$trainer" bench parallel --steps 500 > interrupted.log 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "^layout" interrupted.log && break; sleep 0.1; done
sleep 0.5
kill -INT $pid; wait $pid; code=$?
(( code == 130 )) || fail "Ctrl-C: exit code $code, expected 130"
after=$(ls -d "$tmp"/feast_bench_* 2>/dev/null | sort)
[[ $before == "$after" ]] || fail "temporary data left behind after Ctrl-C"
rm -f interrupted.log
echo "ok: Ctrl-C stops the bench and removes its data"
