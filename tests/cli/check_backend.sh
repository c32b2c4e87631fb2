#!/usr/bin/env bash
# check_backend.sh MODE TRAINER: `trainer check-backend` through the binary.
#  cpu:    --device cpu (the CPU backend in fp32 against the float64 reference) exits 0, its
#          table has a row for every op of backend/backend.h with values compared, every row is
#          ok, and the errors of the products and the norms are not all 0 (the comparison is real);
#  inject: an output perturbed on the tested side (--inject-error OP) fails that op's row and
#          only that one, and the run exits 1, for a tensor and for a scalar result;
#  cuda:   without a visible GPU --device cuda exits 2 saying it did not run, and prints no pass;
#          with one it runs the real comparison in fp32 and bf16 and must pass (exit 0).
set -uo pipefail
mode=$1 trainer=$2
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Every op with results (backend/backend.h), as the table must list them.
ops="embedding_forward embedding_backward layernorm_forward layernorm_backward rmsnorm_forward rmsnorm_backward
     matmul_forward matmul_backward matmul_backward_input matmul_backward_weight_rows grouped_matmul_forward
     grouped_matmul_backward_input moe_route moe_route_backward moe_gather moe_gather_backward moe_combine
     moe_combine_backward moe_shared_gate moe_shared_gate_backward attention_forward
     attention_backward rope_forward rope_backward gelu_forward gelu_backward swiglu_forward swiglu_backward add
     cross_entropy_row_max cross_entropy_partials cross_entropy_finish sum adamw_step sum_of_squares sums_of_squares
     cast copy zero reserve allocate_host copy_async lora_forward lora_backward dequantize_nf4
     dropout_forward dropout_backward"
# A table row: op, output, shape, dtype, max rel err, NMSE, tolerance, result.
row='^[a-z0-9_]+ [^ ]+ .* (fp32|bf16) +[0-9.]+e[-+][0-9]+ +[0-9.]+e[-+][0-9]+ +[0-9]e-0[0-9]  (ok|FAIL)$'

case $mode in
cpu)
  "$trainer" check-backend --device cpu > "$work/out" 2> "$work/err" || fail "exited $?: $(cat "$work/err")"
  for op in $ops; do
    grep -qE "^$op [^ ]+ .* fp32 +[0-9.]+e[-+][0-9]+ .* ok$" "$work/out" || fail "no row for $op"
  done
  rows=$(grep -cE "$row" "$work/out")
  passed=$(grep -E "$row" "$work/out" | grep -cE ' fp32 +[0-9.]+e[-+][0-9]+ +[0-9.]+e[-+][0-9]+ +1e-04  ok$')
  (( rows > 150 )) || fail "only $rows rows: $(cat "$work/out")"
  [[ $passed -eq $rows ]] ||
    fail "$((rows - passed)) of $rows rows not ok in fp32: $(grep -E "$row" "$work/out" | grep -vE ' ok$')"
  ! grep -q 'FAIL' "$work/out" || fail "a failing row: $(grep FAIL "$work/out")"
  # fp32 against float64 cannot agree to the bit on a product or a norm of many terms.
  for family in matmul layernorm; do
    grep -E "^${family}_[a-z_]+ .* fp32 +[0-9.]+e[-+][0-9]+ " "$work/out" | grep -qvE ' fp32 +0\.000e\+00 ' ||
      fail "every $family error is exactly 0: the comparison is not against float64"
  done
  grep -qE "^check-backend: all $rows comparisons of 49 ops on cpu \(fp32\) within tolerance$" "$work/out" ||
    fail "no summary line for $rows rows: $(tail -1 "$work/out")"
  [[ ! -s $work/err ]] || fail "stderr not empty: $(cat "$work/err")"
  echo "ok: $rows comparisons, every op, every row within tolerance of float64"

  "$trainer" check-backend --device cpu --dtype bf16 > /dev/null 2> "$work/err" && fail "--device cpu --dtype bf16 exited 0"
  grep -q "needs --device cuda" "$work/err" || fail "--dtype bf16 on the CPU: $(cat "$work/err")"
  "$trainer" check-backend --device cpu --dtype fp16 > /dev/null 2> "$work/err" && fail "--dtype fp16 exited 0"
  grep -q "expected fp32, bf16 or both, got 'fp16'" "$work/err" || fail "--dtype fp16: $(cat "$work/err")"
  echo "ok: bad flags"
  ;;
inject)
  for op in layernorm_backward sum; do
    "$trainer" check-backend --device=cpu --inject-error "$op" > "$work/out" 2> "$work/err"
    code=$?
    [[ $code -eq 1 ]] || fail "--inject-error $op exited $code, expected 1: $(cat "$work/err")"
    failed=$(grep -E "$row" "$work/out" | grep -E ' FAIL$')
    [[ $(grep -c . <<< "$failed") -eq 1 && $failed == "$op "* ]] || fail "--inject-error $op: failing rows: '$failed'"
    grep -qE "^check-backend: FAIL: 1 of [0-9]+ comparisons .*: $op [a-z]+ \(fp32\)$" "$work/out" ||
      fail "--inject-error $op: summary $(tail -1 "$work/out")"
    echo "ok: --inject-error $op fails ${failed%% *} alone"
  done
  ;;
cuda)
  if [[ $("$trainer" --version) =~ cuda:\ built,\ ([0-9]+)\ device && ${BASH_REMATCH[1]} -gt 0 ]]; then
    "$trainer" check-backend --device cuda > "$work/out" 2> "$work/err"
    code=$?
    cat "$work/out"
    [[ $code -eq 0 ]] || fail "a GPU is visible and check-backend exited $code: $(cat "$work/err")"
    grep -qE "^check-backend: all [0-9]+ comparisons of 49 ops on cuda:[0-9]+ \(fp32 and bf16\) within tolerance$" \
      "$work/out" || fail "no passing summary"
    echo "ok: the CUDA backend matches the float64 reference in fp32 and bf16"
    exit 0
  fi
  for args in "" "--device cuda --dtype bf16"; do
    # shellcheck disable=SC2086
    "$trainer" check-backend $args > "$work/out" 2> "$work/err"
    code=$?
    [[ $code -eq 2 ]] || fail "'check-backend $args' without a GPU exited $code, expected 2"
    grep -q '^check-backend: did not run: no CUDA device is available (' "$work/err" ||
      fail "'check-backend $args': no 'did not run' message: $(cat "$work/err")"
    ! grep -qE "within tolerance|$row" "$work/out" || fail "'check-backend $args' reported results: $(cat "$work/out")"
  done
  echo "ok: no GPU: exit code 2, did not run"
  ;;
*)
  fail "unknown mode '$mode'"
  ;;
esac
