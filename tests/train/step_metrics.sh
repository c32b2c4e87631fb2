#!/usr/bin/env bash
# step_metrics.sh TRAINER MPIEXEC SOURCE_DIR CORPUS WORK: every run's metrics.jsonl carries the
# step's time split and MFU at every layout (keys present, 0 where they do not apply, the parts
# adding up to the step), summary.json and the end-of-run summary report it, TensorBoard event
# files sit beside them, and logging.quiet prints no per-step lines.
set -u
trainer=$1 mpiexec=$2 src=$3 corpus=$4 work=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$work" && mkdir -p "$work"
status=0
fail() { echo "FAIL: $*"; status=1; }

run() {  # NAME NP TP PP EXTRA...
  local name=$1 np=$2 tp=$3 pp=$4
  shift 4
  "$mpiexec" --oversubscribe --bind-to none -np "$np" "$trainer" "$src/configs/demo.toml" \
    --set parallel.tp="$tp" --set parallel.pp="$pp" --set training.steps=4 --set training.eval_interval=2 \
    --set data.train="$corpus/train_*.bin" --set data.val="$corpus/val_*.bin" \
    --set logging.dir="$work/$name" --set checkpoint.resume=never "$@" >"$work/$name.out" 2>&1 ||
    { fail "$name exited non-zero"; cat "$work/$name.out"; return; }
  python3 - "$work/$name" "$tp" "$pp" "$np" <<'PY' || fail "$name: metrics or summary wrong"
import json, sys, glob
d, tp, pp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
offloaded = d.endswith("offload")
dp = int(sys.argv[4]) // (tp * pp)
parts = ["compute_s", "tp_comm_s", "cp_comm_s", "pp_idle_s", "dp_comm_s", "optimizer_s", "data_s", "other_s"]
lines = [json.loads(l) for l in open(d + "/metrics.jsonl")]
assert len(lines) == 4, len(lines)
for m in lines:
    for k in parts + ["mfu", "ms_per_step", "tokens_per_s"]:
        assert k in m and m[k] >= 0, (k, m)
    total = sum(m[k] for k in parts)
    assert abs(total * 1e3 - m["ms_per_step"]) <= 1e-9 * m["ms_per_step"], (total, m["ms_per_step"])
    assert 0 < m["mfu"] <= 1, m["mfu"]  # of a peak no load undercuts (device_peak.h)
    # What does not apply to the layout is 0: no tensor-parallel all-reduce at tp 1, no bubble at pp 1.
    if tp == 1: assert m["tp_comm_s"] == 0, m
    if pp == 1: assert m["pp_idle_s"] == 0, m
    if tp > 1: assert m["tp_comm_s"] > 0, m
    if pp > 1: assert m["pp_idle_s"] > 0, m
    # The gradient reductions beside the split: what was waited for is part of both them and dp_comm.
    assert 0 <= m["dp_reduce_exposed_s"] <= m["dp_reduce_s"] + 1e-12, m
    assert m["dp_reduce_exposed_s"] <= m["dp_comm_s"] + 1e-12, m
    if dp == 1: assert m["dp_reduce_s"] == 0, m
    else: assert m["dp_reduce_s"] > 0, m
    # The offloaded optimizer's host update and its waits for gradients are parts of optimizer_s.
    assert m["offload_update_s"] + m["offload_wait_s"] <= m["optimizer_s"] + 1e-12, m
    assert (m["offload_update_s"] > 0) == offloaded and (offloaded or m["offload_wait_s"] == 0), m
s = json.load(open(d + "/summary.json"))
assert s["ended"] == "finished" and s["steps"] == 4 and s["measured_steps"] == 3, s
assert s["tp"] == tp and s["pp"] == pp and len(s["memory_bytes_per_rank"]) == s["world_size"], s
assert abs(s["pp_idle_formula"] - (pp - 1) / (s["micro_batches"] + pp - 1)) < 1e-12, s
assert abs(sum(s["time_split"].values()) * 1e3 - s["ms_per_step"]) < 1e-6 * s["ms_per_step"], s
assert 0 < s["efficiency"] <= 1 and s["final_val_loss"] is not None, s
PY
}

run tp2pp2dp2 8 2 2
run pp2 2 1 2 --set logging.quiet=true
run dp2 2 1 1 --set logging.tensorboard=false
run one 1 1 1 --set logging.interval=2
run offload 2 1 1 --set parallel.offload_optimizer=true --set parallel.zero_stage=2
run cp2 4 2 1 --set parallel.cp=2

# A sparse parameter server reports its bytes next to the dense exchange's, in summary.json and
# in the printed summary.
"$mpiexec" --oversubscribe --bind-to none -np 2 "$trainer" "$src/configs/llama-demo.toml" --set parallel.tp=1 \
  --set parallel.pp=1 --set parallel.zero_stage=0 --set parallel.dp_sync=parameter-server \
  --set parallel.ps_sparse_embedding=true --set model.vocab_size=2048 --set training.steps=3 \
  --set training.eval_interval=0 --set data.train="$corpus/train_*.bin" --set data.val="$corpus/val_*.bin" \
  --set logging.dir="$work/server" \
  --set checkpoint.resume=never >"$work/server.out" 2>&1 || { fail "server run exited non-zero"; cat "$work/server.out"; }
python3 - "$work/server/summary.json" <<'PY' || fail "server: bytes missing from summary.json or not fewer than dense"
import json, sys
t = json.load(open(sys.argv[1]))["parameter_server_bytes_per_step"]
assert 0 < t["push"] < t["dense_push"] and 0 < t["pull"] < t["dense_pull"], t
PY
grep -q "^parameter server: each rank pushed .* the dense exchange moves" "$work/server.out" || fail "no server bytes line"

grep -q "pipeline idle: measured .* formula (p-1)/(m+p-1)" "$work/tp2pp2dp2.out" || fail "no pipeline idle line"
grep -q "scaling efficiency E = " "$work/tp2pp2dp2.out" || fail "no efficiency line"
grep -q "^data-parallel gradient reductions: .* ms in flight per step, .* exposed (waited for), .*% hidden" \
  "$work/dp2.out" || fail "no gradient reductions line at dp 2"
grep -q "gradient reductions" "$work/pp2.out" && fail "gradient reductions line at dp 1"
grep -q "^optimizer offload: the host updated for .* ms per step and waited .* ms for gradients" "$work/offload.out" ||
  fail "no optimizer offload line"
grep -q "optimizer offload" "$work/dp2.out" && fail "optimizer offload line without offload"
# Context parallelism: the ring's waits are a part of the step, its bytes and time a line.
grep -q "^time per step .* | tp-comm .* | cp-comm .*% | pp-idle" "$work/cp2.out" || fail "no cp-comm part at cp 2"
grep -q "^context-parallel ring: .* MiB sent per rank per step; attention on the ring .* ms per step" \
  "$work/cp2.out" || fail "no context-parallel ring line at cp 2"
grep -q "cp-comm\|context-parallel ring" "$work/tp2pp2dp2.out" && fail "context-parallel lines without cp"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["cp"] == 2 and s["time_split"]["cp_comm_s"] >= 0, s' \
  "$work/cp2/summary.json" || fail "cp2: summary.json lacks cp"
grep -q "^time per step (mean of 3 steps" "$work/pp2.out" || fail "quiet run has no summary"
[[ $(grep -c "^step " "$work/pp2.out") -eq 2 ]] || fail "logging.quiet printed step lines other than the 2 evaluations"
[[ ! -e "$work/dp2/tensorboard" ]] || fail "logging.tensorboard = false wrote event files"
for name in tp2pp2dp2 pp2 one; do
  n=$(ls "$work/$name/tensorboard"/events.out.tfevents.* 2>/dev/null | wc -l)
  [[ $n -eq 1 ]] || fail "$name: $n TensorBoard event files, expected 1"
done
[[ $(grep -c "^step " "$work/one.out") -eq 3 ]] || fail "logging.interval = 2 should print steps 1, 2 and 4"
if grep -q $'\033' "$work"/*.out; then fail "terminal escapes in output that is not a terminal"; fi
[[ $status -eq 0 ]] && echo "step metrics: all layouts pass"
exit $status
