#!/usr/bin/env bash
# bench_comm.sh TRAINER MPIEXEC: `trainer bench comm` at 2 ranks on small messages prints each
# collective's table with every check 'ok', the fitted link model and the all-reduce table of
# the library, the ring and the parameter server with predictions; --json holds the same rows;
# --help answers; bad flags are named. (A wrong result is caught: bench_comm_test.cpp.)
set -uo pipefail
trainer=$1 mpiexec=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
json=$(mktemp --suffix=.json)
trap 'rm -f "$json"' EXIT

out=$("$mpiexec" --oversubscribe --bind-to none -np 2 "$trainer" bench comm --min-bytes 1K --max-bytes 16K --factor 4 \
      --iters 3 --warmup 1 --json "$json" 2>&1) || fail "bench comm failed: ${out: -800}"
for op in allreduce reduce_scatter allgather broadcast alltoall sendrecv; do
  grep -q "^$op: busbw = algbw x " <<<"$out" || fail "no table for $op: ${out:0:800}"
done
# bytes, elements, time, algbw, busbw, check: six operations at 1K, 4K and 16K.
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +ok$' <<<"$out")
(( rows == 18 )) || fail "expected 18 checked rows, found $rows: ${out:0:1500}"
grep -q WRONG <<<"$out" && fail "a row is WRONG"
echo "ok: six collectives at three sizes, every result checked"

# (At these sizes the bandwidth term may be lost in noise: 1/beta is then 'inf'.)
grep -qE '^fit \(least squares on relative error\): alpha = [0-9.]+ us, 1/beta = ([0-9.]+|inf) GB/s' <<<"$out" ||
  fail "no alpha-beta fit line: $(grep -A3 'link model' <<<"$out")"
grep -q "ring: reduce-scatter then all-gather over send/recv, T = 2(N-1) alpha + 2(N-1)/N P beta" <<<"$out" ||
  fail "the ring's formula is not stated"
grep -q "parameter server: to rank 0, summed, sent back, T = 2(N-1) (alpha + P beta)" <<<"$out" ||
  fail "the parameter server's formula is not stated"
for way in library ring "parameter server"; do
  # bytes, algorithm, time, predicted, measured/predicted, busbw, check
  n=$(grep -cE "^ +[0-9]+ +$way +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +ok$" <<<"$out")
  (( n == 3 )) || fail "expected 3 '$way' rows with a prediction, found $n: $(grep -A12 'three ways' <<<"$out")"
done
echo "ok: the link fit and the library / ring / parameter server table with predictions"

[[ $(grep -c '"check": "ok"' "$json") == 27 ]] || fail "--json: expected 27 rows checked ok: $(head -c 600 "$json")"
grep -q '"alpha_s"' "$json" || fail "--json has no fit"
echo "ok: --json holds every row and the fit"

out=$("$trainer" bench comm --help 2>&1) || fail "--help exited non-zero"
[[ $out == usage:* ]] || fail "--help: ${out:0:200}"
out=$("$trainer" bench comm --ops allreduce,gather 2>&1) && fail "--ops gather was accepted"
grep -q "^error: --ops: 'gather' is not one of allreduce, reduce_scatter" <<<"$out" || fail "bad --ops: ${out:0:300}"
out=$("$trainer" bench comm --min-bytes 1M --max-bytes 64K 2>&1) && fail "--min-bytes > --max-bytes was accepted"
grep -q "^error: bench comm: --min-bytes 1048576 is more than --max-bytes 65536" <<<"$out" || fail "min > max: ${out:0:300}"
echo "ok: --help, and bad flags named"
