#!/usr/bin/env bash
# plan_cli.sh TRAINER [MPIEXEC [CORPUS]] (from the source tree): `trainer plan` through the binary:
#  1. configs/demo.toml on 8 GPUs prints the header, a table of 10 layouts best first and the
#     Young/Daly interval, and exits 0; --top, --why; a memory that leaves faster layouts out
#     names them and why; a memory too small to fit anything is an error naming --gpu-memory;
#     --write writes the first row as a config that trains as is, and --verify runs it and
#     compares each rank's memory with the prediction;
#  2. --json is a JSON array whose layouts carry the fields the sweep scripts read, consistent
#     with each other (step = the sum of its parts, tokens/s = tokens per step / step);
#  3. bad input exits non-zero with one "error:" line naming the flag (or the key); --help
#     prints the usage and exits 0;
#  4. --calibrate measures this machine's figures (compute, and the link through MPIEXEC) into a
#     constants file that later plans use, saying so; flags override it; a file of another
#     machine, device or CPU kernels is stale and said to be; a corrupt one is an error naming it.
set -uo pipefail
trainer=$1 mpiexec=${2:-mpiexec} corpus=${3:-build/tests/corpus}
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# No calibration of the machine running the tests may change what these plans print.
export FEAST_PLAN_CONSTANTS=$work/none.json

# 1. The table.
"$trainer" plan configs/demo.toml --gpus 8 > "$work/out" 2> "$work/err" || fail "plan exited $?: $(cat "$work/err")"
grep -q '^plan: configs/demo.toml on 8 GPUs (1 node of 8)' "$work/out" || fail "no header: $(head -3 "$work/out")"
grep -q '^assumed: fp32 .* from training.device = "cpu"' "$work/out" || fail "no assumptions line"
grep -q "^figures: no figures measured on this machine ($work/none.json); .trainer plan CONFIG --gpus N --calibrate. measures" \
  "$work/out" || fail "the plan does not say which figures it used: $(grep -A1 '^assumed' "$work/out")"
# The run's own dtype decides: a GPU run in fp32 is planned as fp32 on GPUs, one in auto as bf16.
"$trainer" plan configs/demo.toml --gpus 8 --set training.device=cuda --set training.dtype=fp32 > "$work/gpu32" ||
  fail "plan of a GPU fp32 run exited $?"
grep -q '^assumed: fp32 (float32 throughout on GPUs) from training.device = "cuda", training.dtype = "fp32"' \
  "$work/gpu32" || fail "a GPU fp32 run planned as: $(grep '^assumed' "$work/gpu32")"
"$trainer" plan configs/demo.toml --gpus 8 --set training.device=cuda > "$work/gpu16" || fail "plan of a GPU run exited $?"
grep -q '^assumed: bf16 (bf16 weights' "$work/gpu16" || fail "a GPU auto run planned as: $(grep '^assumed' "$work/gpu16")"
# 698 without sequence parallelism, each of the 408 valid ones with tp > 1 again with it, and
# 200 zero-bubble ones where pp > 1 (no recomputation).
grep -q '^layouts: 1306 considered, 1304 valid, 1304 fit in 80.00 GiB' "$work/out" || fail "wrong layout counts: $(grep '^layouts' "$work/out")"
row_re='^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-3] +[0-9]+ +[0-9]+ +(1f1b|gpipe|zb) +(-|yes) +(-|S|F) +(-|yes) \|'
rows=$(grep -cE "$row_re" "$work/out")
[[ $rows -eq 10 ]] || fail "expected 10 table rows, got $rows: $(cat "$work/out")"
grep -qE '^ +1 .*\| +[0-9]+ +[0-9.]+ +[0-9.]+$' "$work/out" || fail "row 1 lacks tokens/s, E and idle"
grep -q '^reliability: one GPU.s MTTF 50000 h / 8 GPUs = cluster MTTF 260.4 days' "$work/out" || fail "no MTTF line"
grep -q '^Young/Daly interval sqrt(2 C MTTF) = ' "$work/out" || fail "no Young/Daly line"
[[ ! -s $work/err ]] || fail "stderr not empty: $(cat "$work/err")"
echo "ok: the table"

"$trainer" plan configs/demo.toml --gpus=8 --top 3 --why --checkpoint-seconds 30 --mttf-hours 1000 > "$work/out" ||
  fail "plan --top 3 --why exited $?"
rows=$(grep -cE "$row_re" "$work/out")
[[ $rows -eq 3 ]] || fail "--top 3 printed $rows rows"
grep -q '^  tp8 pp1 dp1: parallel.tp = 8 does not divide model.n_head = 4: .*(tried by trainer plan)' "$work/out" || fail "--why lacks the tp 8 refusal"
grep -q '^  tp1 pp8 dp1: parallel.pp = 8 stages but model.n_layer = 4' "$work/out" || fail "--why lacks the pp 8 refusal"
# sqrt(2 x 30 s x (1000 h / 8) x 3600 s/h) = 5196 s = 1.44 h
grep -q 'C = 30.00 s (--checkpoint-seconds)' "$work/out" || fail "--checkpoint-seconds not used"
grep -q '^Young/Daly interval sqrt(2 C MTTF) = 1.44 h' "$work/out" || fail "wrong interval: $(grep Young "$work/out")"

# Too little memory for the fastest layouts: the first row recomputes, offloads, splits the
# sequence or shards parameters, and the faster ones are named with what they need.
"$trainer" plan configs/demo.toml --gpus 4 --gpu-memory 6MiB --top 3 > "$work/out" || fail "plan --gpu-memory 6MiB exited $?"
saver='^ +1 +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-3] +[0-9]+ +[0-9]+ +[a-z0-9]+ +(yes|- +(S|F)|- +- +yes)|^ +1 +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +3 '
grep -qE "$saver" "$work/out" ||
  fail "the first row at 6 MiB saves no memory: $(grep -E "$row_re" "$work/out" | head -1)"
grep -q '^faster layouts that do not fit ([0-9]*; the fastest 5):' "$work/out" || fail "no faster-layouts list: $(cat "$work/out")"
grep -qE '^  tp[0-9] pp[0-9] dp[0-9] zero[0-3] mbs[0-9]+ m[0-9]+.*: [0-9]+% faster, needs [0-9.]+ MiB > 6.0 MiB per GPU' \
  "$work/out" || fail "a faster layout's reason is missing"

"$trainer" plan configs/demo.toml --gpus 8 --gpu-memory 1MiB --why > "$work/out" 2> "$work/err" &&
  fail "plan --gpu-memory 1MiB exited 0"
grep -q '^error: --gpu-memory 1.00 MiB: no layout of this config fits on 8 GPUs; the smallest, tp.*needs [0-9.]* MiB > 1.0 MiB per GPU' \
  "$work/err" || fail "no 'nothing fits' error: $(cat "$work/err")"
grep -qE '^  tp[0-9] pp[0-9] dp[0-9] zero[0-3] mbs[0-9]+ m[0-9]+: needs [0-9.]+ MiB > 1.0 MiB per GPU' "$work/out" ||
  fail "--why does not say what a dropped layout needs"

# --write: the first row as a config the trainer runs as is; --verify runs it and compares.
"$trainer" plan configs/demo.toml --gpus 4 --gpu-memory 6MiB --write "$work/chosen.toml" > "$work/out" 2> "$work/err" ||
  fail "plan --write exited $?: $(cat "$work/err")"
first=$(grep -E '^ +1 ' "$work/out")
grep -q "^plan: wrote $work/chosen.toml: tp" "$work/err" || fail "no 'wrote' line: $(cat "$work/err")"
python3 - "$work/chosen.toml" "$first" <<'EOF' || fail "the written config is not the first row"
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
f = sys.argv[2].split()
p, t = c["parallel"], c["training"]
assert [p["tp"], p["pp"], p["dp"], p.get("ep", 1), p["zero_stage"], p["micro_batch_size"], p["num_micro_batches"]] == [int(x) for x in f[1:8]], (p, f)
assert {"zb": "zero-bubble"}.get(f[8], f[8]) == p["schedule"], (p["schedule"], f)
assert p["sequence_parallel"] == (f[9] == "yes"), (p["sequence_parallel"], f)
assert {"-": "none", "S": "selective", "F": "full"}[f[10]] == t["recompute"], (t["recompute"], f)
assert p["offload_optimizer"] == (f[11] == "yes"), (p["offload_optimizer"], f)
assert t["batch_size"] == 32, t
EOF
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FEAST_MPIEXEC=$mpiexec \
  "$trainer" plan configs/demo.toml --gpus 4 --gpu-memory 6MiB --top 1 --verify \
  --set data.train="$corpus/train_000.bin" --set data.val=\"\" > "$work/out" 2> "$work/err" ||
  fail "plan --verify exited $?: $(cat "$work/err") $(tail -5 "$work/out")"
for r in 0 1 2 3; do
  grep -qE "^  rank +$r stage +[0-3] \|.*\| +[0-9.]+ / +[0-9.]+ \([+-][0-9.]+%\)" "$work/out" || fail "no verify row for rank $r: $(cat "$work/out")"
done
grep -qE '^verify: step time predicted [0-9.]+ ms, measured [0-9.]+ ms' "$work/out" || fail "no step-time comparison"
worst=$(sed -n 's/^verify: memory per rank within \([0-9.]*\)% of the prediction/\1/p' "$work/out")
python3 -c "import sys; sys.exit(0 if float('$worst') <= 5 else 1)" || fail "verify: memory $worst% off the prediction"
echo "ok: --top, --why, --checkpoint-seconds, faster layouts that do not fit, nothing fits, --write, --verify"

# 2. JSON for the scripts.
"$trainer" plan configs/demo.toml --gpus 16 --gpus-per-node 4 --dtype bf16 --json > "$work/plan.json" ||
  fail "plan --json exited $?"
python3 - "$work/plan.json" <<'EOF' || fail "the JSON is not what the scripts read"
import json, sys
layouts = json.load(open(sys.argv[1]))
assert isinstance(layouts, list) and layouts, "not a non-empty array"
fits = [l for l in layouts if l["fits"]]
assert fits, "nothing fits"
for l in layouts:
    for k in ("tp", "pp", "dp", "zero_stage", "micro_batch_size", "num_micro_batches", "fits", "valid", "dtype"):
        assert k in l, k
    assert l["fits"] or l["why"], l
    if not l["valid"]:
        continue
    assert l["tp"] * l["pp"] * l["dp"] == 16, l
    assert l["dp"] * l["micro_batch_size"] * l["num_micro_batches"] == 32, l
    m, t = l["memory_bytes"], l["time"]
    assert abs(m["total"] - sum(m[k] for k in ("parameters", "gradients", "optimizer", "activations", "workspace",
                                               "communication", "buffers"))) < 1, m
    assert abs(t["step_s"] - sum(t[k] for k in ("compute_s", "tp_comm_s", "pp_idle_s", "dp_comm_s", "ep_comm_s", "offload_s"))) < 1e-12 * t["step_s"] + 1e-15, t
    assert l["ep"] == 1 and t["ep_comm_s"] == 0, l  # a dense model
    assert l["recompute"] in ("none", "selective", "full") and (t["offload_s"] > 0) == l["offload_optimizer"], l
    assert abs(l["tokens_per_s"] * t["step_s"] - 32 * 64) < 1e-6, l
    assert 0 < l["efficiency"] <= 1 and abs(l["efficiency"] - t["compute_s"] / t["step_s"]) < 1e-9, l
    p_, m_ = l["pp"], l["num_micro_batches"]
    if l["schedule"] == "zero-bubble":  # its formula holds for m >= p; below, the ideal timeline's share
        assert m_ < p_ or abs(l["pp_idle_fraction"] - (p_ - 1) / (3 * m_ + p_ - 1)) < 1e-12, l
    else:
        assert abs(l["pp_idle_fraction"] - (p_ - 1) / (m_ + p_ - 1)) < 1e-12, l
    assert len(l["memory_bytes_per_stage"]) == l["pp"], l
    assert l["dtype"] == "bf16"
    # 16 GPUs in nodes of 4 (tp-dp-pp): a dp group of 16 / tp ranks spans nodes once it exceeds one node
    if l["tp"] * l["dp"] > 4 and l["dp"] > 1:
        assert l["inter_node"]["dp"], l
assert [l["tokens_per_s"] for l in fits] == sorted((l["tokens_per_s"] for l in fits), reverse=True), "not best first"
# Sequence parallelism, tried where tp > 1: fewer activation bytes per micro-batch than the same
# layout without it, one more all-gather per column-parallel layer in tp_comm, no other change.
key = lambda l: (l["tp"], l["pp"], l["dp"], l["zero_stage"], l["micro_batch_size"], l["recompute"], l["offload_optimizer"],
                 l["schedule"])
plain = {key(l): l for l in layouts if l["valid"] and not l["sequence_parallel"]}
twins = 0
for l in layouts:
    if not l["valid"] or not l["sequence_parallel"]:
        continue
    assert l["tp"] > 1, l
    p = plain[key(l)]
    assert l["memory_bytes"]["activations_per_micro_batch"] < p["memory_bytes"]["activations_per_micro_batch"], (l, p)
    assert l["time"]["tp_comm_s"] > p["time"]["tp_comm_s"] and l["time"]["compute_s"] == p["time"]["compute_s"], (l, p)
    twins += 1
assert twins > 0, "no layout with sequence parallelism"
# Zero-bubble, tried where pp > 1, without recomputation: less pipeline idle than the same 1F1B
# layout, more activation memory.
one_f_one_b = {key(l)[:-1]: l for l in layouts if l["valid"] and l["schedule"] == "1f1b"}
zb = 0
for l in layouts:
    if not l["valid"] or l["schedule"] != "zero-bubble":
        continue
    assert l["pp"] > 1 and l["recompute"] == "none", l
    base = one_f_one_b[key(l)[:-1] ]
    assert l["time"]["pp_idle_s"] < base["time"]["pp_idle_s"], (l, base)
    assert l["memory_bytes"]["activations"] > base["memory_bytes"]["activations"], (l, base)
    zb += 1
assert zb > 0, "no zero-bubble layout"
print(f"ok: {len(layouts)} layouts, {len(fits)} fit, {twins} with sequence parallelism, {zb} zero-bubble")
EOF
echo "ok: --json"

# 2b. A mixture of experts: the active parameters named, every expert-parallel degree tried and
# its all-to-all timed.
"$trainer" plan configs/moe-demo.toml --gpus 8 > "$work/moe" || fail "plan of the MoE demo exited $?"
grep -q '^model: llama, .*parameters (.* active: top 2 of 8 experts)' "$work/moe" || fail "no active parameters: $(head -3 "$work/moe")"
"$trainer" plan configs/moe-demo.toml --gpus 8 --json > "$work/moe.json" || fail "plan --json of the MoE demo exited $?"
python3 - "$work/moe.json" <<'EOF' || fail "the MoE plan's layouts are not what they should be"
import json, sys
layouts = [l for l in json.load(open(sys.argv[1])) if l["valid"]]
eps = {(l["dp"], l["ep"]) for l in layouts}
assert eps == {(8, 1), (8, 2), (8, 4), (8, 8), (4, 1), (4, 2), (4, 4), (2, 1), (2, 2), (1, 1)}, sorted(eps)
for l in layouts:
    assert (l["time"]["ep_comm_s"] > 0) == (l["ep"] > 1), l
EOF
echo "ok: an MoE model's plan"

# 3. Bad input: one error line naming the flag.
expect_error() {  # REGEX ARGS...
  local regex=$1
  shift
  "$trainer" plan "$@" > "$work/out" 2> "$work/err" && fail "'plan $*' exited 0"
  grep -qE -- "$regex" "$work/err" || fail "'plan $*': stderr does not match '$regex': $(cat "$work/err")"
  [[ $(head -1 "$work/err") == error:* ]] || fail "'plan $*': no error: line: $(cat "$work/err")"
}
expect_error "unknown option '--gpu-memroy'; did you mean '--gpu-memory'?" configs/demo.toml --gpus 8 --gpu-memroy 80GiB
expect_error "--gpus N is required" configs/demo.toml
expect_error "--gpus: expected a whole number >= 1, got 'eight'" configs/demo.toml --gpus eight
expect_error "--intra-node-bw: expected a bandwidth such as 450GB/s or 400Gb/s, got 'fast'" configs/demo.toml --gpus 8 --intra-node-bw fast
expect_error "--latency: expected a time such as 5us, 1.5ms or 2s, got '5'" configs/demo.toml --gpus 8 --latency 5
expect_error "--gpu-memory: expected a size such as 5GB, 500MB or 2GiB, got '80 potatoes'" configs/demo.toml --gpus 8 --gpu-memory "80 potatoes"
expect_error "--dtype: expected fp32 or bf16, got 'fp8'" configs/demo.toml --gpus 8 --dtype fp8
expect_error "--top needs a value" configs/demo.toml --gpus 8 --top
expect_error "name a config file" --gpus 8
expect_error "unknown key 'model.n_layers'" configs/demo.toml --gpus 8 --set model.n_layers=2
"$trainer" plan --help > "$work/out" || fail "--help exited $?"
[[ $(head -1 "$work/out") == usage:* ]] || fail "--help does not start with usage:"
echo "ok: bad input and --help"

# 4. --calibrate, then plans with this machine's figures.
c=$work/constants.json
FEAST_MPIEXEC=$mpiexec OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  "$trainer" plan configs/demo.toml --gpus 2 --calibrate --seconds 2 --constants "$c" > "$work/cal" 2>&1 ||
  fail "plan --calibrate exited $?: $(cat "$work/cal")"
grep -q '^compute: [0-9]* steps of 8 x 64 tokens' "$work/cal" || fail "no compute line: $(cat "$work/cal")"
grep -q '^link: two ranks through MPI, ' "$work/cal" || fail "the link was not measured: $(cat "$work/cal")"
grep -q "^wrote $c" "$work/cal" || fail "no 'wrote' line: $(cat "$work/cal")"
tflops=$(python3 - "$c" <<'EOF'
import json, socket, sys
c = json.load(open(sys.argv[1]))
assert c["format"] == "feast plan constants 1" and c["device"] == "cpu", c
assert c["machine"]["host"] == socket.gethostname() and c["machine"]["cores"] >= 1, c
assert 0 < c["tflops_per_rank"] < 100, c
assert c["link"]["bandwidth_bytes_per_s"] > 1e6 and 0 <= c["link"]["latency_s"] < 1e-2, c
assert c["ranks_per_node"] == 2 and c["threads_per_rank"] >= 1, c
assert "OpenBLAS " in c["cpu_kernels"], c
print("%.4g" % c["tflops_per_rank"])
EOF
) || fail "the constants file: $(cat "$c")"
"$trainer" plan configs/demo.toml --gpus 2 --constants "$c" > "$work/out" 2>&1 || fail "plan with figures exited $?"
grep -q "^figures: this machine's figures from $c (trainer plan --calibrate, .*): $tflops TFLOP/s per rank, links " \
  "$work/out" || fail "the plan does not use the calibration: $(grep -A1 '^assumed' "$work/out")"
grep -q "; $tflops TFLOP/s achieved per GPU" "$work/out" || fail "not planned at $tflops: $(grep '^assumed' "$work/out")"
FEAST_PLAN_CONSTANTS=$c "$trainer" plan configs/demo.toml --gpus 1 --json > "$work/one.json" 2> "$work/one.err" ||
  fail "plan --json with figures exited $?"
grep -q "^plan: figures: this machine's figures" "$work/one.err" || fail "--json: no figures line on stderr"
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$work/one.json" || fail "--json with figures: not JSON"
"$trainer" plan configs/demo.toml --gpus 2 --constants "$c" --gpu-tflops 7 > "$work/out" || fail "plan --gpu-tflops exited $?"
grep -q "^figures: --gpu-tflops from the command line; the rest: this machine's" "$work/out" &&
  grep -q "; 7 TFLOP/s achieved" "$work/out" || fail "--gpu-tflops does not override: $(grep -A1 '^assumed' "$work/out")"
"$trainer" plan configs/demo.toml --gpus 2 --constants "$c" --set training.device=cuda > "$work/out" || fail "cuda plan exited $?"
grep -q "holds this machine's cpu figures, and this run trains on cuda" "$work/out" && grep -q "; 400 TFLOP/s achieved" "$work/out" ||
  fail "a GPU run planned with the CPU's figures: $(grep -A1 '^assumed' "$work/out")"
python3 - "$c" "$work/other.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["machine"]["host"] = "elsewhere"
json.dump(c, open(sys.argv[2], "w"))
EOF
"$trainer" plan configs/demo.toml --gpus 2 --constants "$work/other.json" > "$work/out" || fail "stale plan exited $?"
grep -q "was measured on another machine (host elsewhere, .*): stale; .trainer plan CONFIG --gpus N --calibrate" "$work/out" ||
  fail "a stale file not said: $(grep -A1 '^assumed' "$work/out")"
python3 - "$c" "$work/kernels.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["cpu_kernels"] = "OpenBLAS Prescott"
json.dump(c, open(sys.argv[2], "w"))
EOF
"$trainer" plan configs/demo.toml --gpus 2 --constants "$work/kernels.json" > "$work/out" || fail "stale plan exited $?"
grep -q "was measured with other CPU kernels (OpenBLAS Prescott; this run's: .*OpenBLAS .*): stale; " "$work/out" ||
  fail "figures of other kernels not said to be stale: $(grep -A1 '^assumed' "$work/out")"
echo '{"format": "feast plan constants 1", "machine": 3}' > "$work/bad.json"
expect_error "bad.json: .*; run .trainer plan CONFIG --gpus N --calibrate. to measure this machine again" \
  configs/demo.toml --gpus 2 --constants "$work/bad.json"
echo "ok: --calibrate ($tflops TFLOP/s per rank), its figures used, overridden, stale (host, kernels), corrupt"
