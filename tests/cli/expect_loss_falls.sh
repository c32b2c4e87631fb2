#!/usr/bin/env bash
# expect_loss_falls.sh RUN_DIR MAX_FINAL_LOSS COMMAND...: runs a training COMMAND that writes
# RUN_DIR/metrics.jsonl and passes when it exits 0, its last step's loss is at least 1.0 below
# its first step's, and below MAX_FINAL_LOSS.
set -u
dir=$1
max_final=$2
shift 2
rm -rf "$dir"
"$@" || { echo "expect_loss_falls: the run failed"; exit 1; }
metrics="$dir/metrics.jsonl"
[[ -s $metrics ]] || { echo "expect_loss_falls: no $metrics"; exit 1; }
first=$(head -1 "$metrics" | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2)
last=$(tail -1 "$metrics" | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2)
echo "expect_loss_falls: loss $first at the first step, $last at the last (must be < $max_final)"
awk -v f="$first" -v l="$last" -v m="$max_final" 'BEGIN { exit !(l < f - 1.0 && l < m) }' ||
  { echo "expect_loss_falls: the loss did not fall enough"; exit 1; }
