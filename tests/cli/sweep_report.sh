#!/usr/bin/env bash
# sweep_report.sh TRAINER MPIEXEC SOURCE_DIR CORPUS WORK: scripts/sweep.py and scripts/report.py
# end to end on tiny runs (seconds each):
#  1. a systems sweep (2 layouts through mpirun, 3 steps) writes results.csv with a row per run
#     and the identifying and summary columns; run again it runs nothing and keeps the rows;
#     every sweep's progress lines come in order: run 1 starts, run 1 ends, run 2 starts, ...;
#  2. a scaling-law sweep (3 model sizes x 3 budgets, no launcher) gets steps with 6 N D close
#     to each budget;
#  3. a point that fails is recorded with its error, the sweep goes on and exits 1;
#  4. report.py draws every picture the data allows: each a valid PNG, over a few KB, with many
#     colours (not blank), all embedded in report.html; a picture without data is a note; each
#     laid out readably (tests/scripts/report_figures_test.py on these runs: no texts overlap,
#     legends inside the picture, two tick labels on every log axis; one number format in the tables);
#  5. a malformed sweep file exits 2 naming the key; --check refuses a point whose layout does
#     not fit its rank count.
set -uo pipefail
trainer=$(realpath "$1") mpiexec=$2 src=$(realpath "$3") corpus=$(realpath "$4") work=$5
py=/usr/bin/python3
fail() { echo "FAIL: $*"; exit 1; }
# A sweep runs one point at a time: each run's start line, then its end line, before any line
# about the next run.
in_order() {
  $py - "$1" <<'EOF' || fail "progress lines out of order in $1: $(cat "$1")"
import re, sys
seen, total = [], 0
for line in open(sys.argv[1]):
    m = re.match(r"\[(\d+)/(\d+)\] \S+: (running|finished in|FAILED)", line)
    if m:
        seen.append((int(m[1]), "start" if m[3] == "running" else "end"))
        total = int(m[2])
assert total and seen == [(i, e) for i in range(1, total + 1) for e in ("start", "end")], seen
EOF
}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The planner's figures of this machine: none yet, so the systems sweep measures them first.
export FEAST_PLAN_CONSTANTS=$work/plan-constants.json FEAST_MPIEXEC=$mpiexec

# Every run: the demo model on the test corpus, a fixed MFU peak (no start-up GEMM measurement).
common="
\"data.train\" = \"$corpus/train_*.bin\"
\"data.val\" = \"$corpus/val_*.bin\"
\"checkpoint.resume\" = \"never\"
\"logging.quiet\" = true
\"logging.peak_tflops\" = 0.1
"
# The head of a sweep file whose runs need no launcher (one rank each, or --check).
one_rank_head="[sweep]
base = \"$src/configs/demo.toml\"
trainer = \"$trainer\"
mpirun = []"
cat > systems.toml <<EOF
[sweep]
kind = "systems"
base = "$src/configs/demo.toml"
trainer = "$trainer"
mpirun = ["$mpiexec", "--oversubscribe", "--bind-to", "none"]
env = { OMP_NUM_THREADS = "1" }
plan = true
[set]
$common
"training.steps" = 3
"training.eval_interval" = 0
"training.batch_size" = 8
"parallel.micro_batch_size" = 2
[grid]
layout = ["tp1pp1dp1", "tp1pp2dp1"]
EOF
cat > scaling.toml <<EOF
[sweep]
kind = "scaling-law"
base = "$src/configs/demo.toml"
trainer = "$trainer"
mpirun = []
[set]
$common
"parallel.tp" = 1
"parallel.pp" = 1
"training.batch_size" = 4
"parallel.micro_batch_size" = 4
"training.seq_len" = 64
"model.max_seq_len" = 64
"training.lr" = 3e-3
"training.eval_interval" = 1000000
"training.eval_batches" = 4
[scaling]
budgets = [2e8, 4e8, 8e8]
warmup_fraction = 0.1
[[scaling.models]]
name = "L1-C8"
"model.n_layer" = 1
"model.n_embd" = 8
"model.n_head" = 2
[[scaling.models]]
name = "L1-C16"
"model.n_layer" = 1
"model.n_embd" = 16
"model.n_head" = 2
[[scaling.models]]
name = "L2-C24"
"model.n_layer" = 2
"model.n_embd" = 24
"model.n_head" = 2
EOF
cat > bad.toml <<EOF
$one_rank_head
[set]
$common
"training.steps" = 2
"training.eval_interval" = 0
"parallel.pp" = 1
[grid]
"parallel.tp" = [1, 3]
EOF

# 1. The systems sweep, then its resumption.
$py "$src/scripts/sweep.py" systems.toml --out sys > sys1.log 2>&1 || fail "systems sweep: $(tail -5 sys1.log)"
$py - sys/results.csv <<'EOF' || fail "systems results.csv"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["run"] for r in rows] == ["tp1pp1dp1", "tp1pp2dp1"], [r["run"] for r in rows]
for col in ("status", "np", "layout", "world_size", "tp", "pp", "dp", "tokens_per_s", "ms_per_step", "efficiency",
            "compute_s", "pp_idle_s", "pp_idle_fraction", "pp_idle_formula", "memory_total_max", "parameters",
            "final_loss", "seconds"):
    assert col in rows[0], f"no column {col}: {list(rows[0])}"
assert all(r["status"] == "finished" for r in rows), [(r["run"], r["error"]) for r in rows]
assert [r["np"] for r in rows] == ["1", "2"] and rows[1]["pp"] == "2", rows
assert float(rows[1]["pp_idle_formula"]) == 0.2, rows[1]["pp_idle_formula"]  # (2-1)/(4+2-1)
assert all(float(r["tokens_per_s"]) > 0 and float(r["steps"]) == 3 for r in rows)
# `trainer plan` for each run's layout (plan = true): predicted columns beside the measured ones,
# with this machine's figures (measured by the sweep before its runs).
for r in rows:
    assert r.get("plan_tokens_per_s") and r.get("plan_time_step_s") and not r.get("plan_error"), r
    assert r["plan_figures"].startswith("this machine's figures from "), r["plan_figures"]
# The same math at both layouts.
assert abs(float(rows[0]["final_loss"]) - float(rows[1]["final_loss"])) < 1e-4, rows
EOF
grep -q '^\[2/2\] tp1pp2dp1: finished in' sys1.log || fail "no progress line: $(cat sys1.log)"
grep -q "^sweep: the planner has no figures of this machine (no figures measured on this machine" sys1.log &&
  grep -q "^  wrote $work/plan-constants.json" sys1.log || fail "the sweep did not calibrate the planner: $(cat sys1.log)"
in_order sys1.log
cp sys/results.csv results.first.csv
stamp=$(stat -c %Y sys/runs/tp1pp2dp1/metrics.jsonl)
$py "$src/scripts/sweep.py" systems.toml --out sys > sys2.log 2>&1 || fail "resumed sweep: $(tail -5 sys2.log)"
grep -q "2 of 2 finished (0 run now, 2 before)" sys2.log || fail "the second sweep ran again: $(cat sys2.log)"
[[ $(grep -c "finished before, skipped" sys2.log) == 2 ]] || fail "skipped lines: $(cat sys2.log)"
grep -q "planner has no figures" sys2.log && fail "the second sweep calibrated again: $(cat sys2.log)"
[[ $(stat -c %Y sys/runs/tp1pp2dp1/metrics.jsonl) == "$stamp" ]] || fail "a finished run was touched"
cmp -s results.first.csv sys/results.csv || fail "results.csv changed on resume"
echo "ok: systems sweep, resumed without running anything"

# 2. The scaling-law sweep: steps from C = 6 N D.
$py "$src/scripts/sweep.py" scaling.toml --out law > law.log 2>&1 || fail "scaling sweep: $(tail -5 law.log)"
$py - law/results.csv <<'EOF' || fail "scaling results.csv"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 9 and all(r["status"] == "finished" for r in rows), [(r["run"], r["status"], r["error"]) for r in rows]
for r in rows:
    n, budget, c = float(r["parameters"]), float(r["budget"]), float(r["compute_6ND"])
    assert n == float(r["parameters_expected"]), (r["run"], n, r["parameters_expected"])
    assert abs(c - budget) / budget < 0.1, (r["run"], c, budget)  # steps rounded
    assert r["final_val_loss"] not in ("", None), r["run"]
EOF
in_order law.log
echo "ok: scaling-law sweep"

# 3. A failing point is recorded and the sweep goes on.
$py "$src/scripts/sweep.py" bad.toml --out bad > bad.log 2>&1
code=$?
[[ $code == 1 ]] || fail "a sweep with a failed run exited $code: $(cat bad.log)"
grep -q "tp3: FAILED" bad.log || fail "no FAILED line: $(cat bad.log)"
in_order bad.log
$py - bad/results.csv <<'EOF' || fail "failed run's row"
import csv, sys
rows = {r["run"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert rows["tp1"]["status"] == "finished", rows["tp1"]
assert rows["tp3"]["status"] == "failed" and "parallel.tp" in rows["tp3"]["error"], rows["tp3"]
EOF
echo "ok: a failed run is recorded with its error"

# 4. The report, with `trainer bench comm`'s output as JSON and as printed.
"$mpiexec" --oversubscribe --bind-to none -np 2 "$trainer" bench comm --min-bytes 1K --max-bytes 16K --iters 3 \
  --ops allreduce,algorithms --json comm.json > comm.txt 2>&1 || fail "bench comm: $(tail -5 comm.txt)"
$py "$src/scripts/report.py" sys law sys/runs/tp1pp1dp1 comm.txt --comm comm.json --out report > report.log 2>&1 \
  || fail "report.py: $(tail -5 report.log)"
grep -q "skipped" report.log && fail "report.py skipped a picture: $(grep skipped report.log)"
$py - report <<'EOF' || fail "pictures"
import base64, re, sys
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.image
import numpy as np
out = Path(sys.argv[1])
want = ["systems_loss_curves", "systems_throughput_efficiency", "systems_time_split", "systems_pipeline_idle",
        "systems_memory", "systems_measured_vs_planned",
        "scaling_loss_curves", "scaling_loss_vs_compute", "scaling_isoflop", "loss_curves",
        "comm_alpha_beta", "comm_allreduce_algorithms", "comm_txt_alpha_beta", "comm_txt_allreduce_algorithms"]
page = (out / "report.html").read_text()
for name in want:
    path = out / f"{name}.png"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    assert len(data) > 5000, f"{path}: only {len(data)} bytes"
    pixels = matplotlib.image.imread(path)
    colours = len(np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert colours > 50, f"{path}: only {colours} colours"
    assert base64.b64encode(data).decode() in page, f"{path} is not embedded in report.html"
assert page.count("data:image/png;base64,") == len(list(out.glob("*.png"))), "pictures and embeddings differ"
assert "tp1pp2dp1" in page and "L2-C24_C8e08" in page, "the run tables are missing"
summary = (out / "summary.md").read_text()
assert re.search(r"L\(C\) = [0-9.e+-]+ \* C\^-[0-9.]+ \+ [0-9.]+", summary), "no fitted law in summary.md"
EOF
# The printed tables and the JSON give the same measurements and the same link fit.
$py - "$src/scripts" <<'EOF' || fail "bench comm's text and JSON read differently"
import sys
sys.path.insert(0, sys.argv[1])
import report
text, fit_text = report.parse_comm("comm.txt")
data, fit_json = report.parse_comm("comm.json")
key = lambda r: (r["op"], r["algorithm"], r["bytes"])
assert sorted(map(key, text)) == sorted(map(key, data)) and len(text) >= 3 * 5, (len(text), len(data))
assert {r["algorithm"] for r in text} == {"", "library", "ring", "parameter server"}, {r["algorithm"] for r in text}
times = {key(r): r["time_s"] for r in data}
for r in text:  # printed to 0.1 us
    assert abs(r["time_s"] - times[key(r)]) <= 0.06e-6 + 1e-3 * times[key(r)], (r, times[key(r)])
assert abs(fit_text["beta_s_per_byte"] / fit_json["beta_s_per_byte"] - 1) < 2e-3, (fit_text, fit_json)
EOF
$py "$src/tests/scripts/report_figures_test.py" sys law sys/runs/tp1pp1dp1 comm.txt comm.json > figures.log 2>&1 \
  || fail "the pictures' layout: $(grep -v '^test_' figures.log | tail -40)"
echo "ok: report.html embeds $(ls report/*.png | wc -l) pictures, laid out readably"

for case in 'np = "two"|sweep.np' 'np = 0|sweep.np' 'timeout_s = "ten"|sweep.timeout_s' \
            'env = ["x"]|sweep.env' 'plan = "yes"|sweep.plan' 'plan_args = "--gpu-tflops 1"|sweep.plan_args'; do
  printf '%s\n%s\n' "$one_rank_head" "${case%%|*}" > malformed.toml
  $py "$src/scripts/sweep.py" malformed.toml --check > malformed.log 2>&1
  code=$?
  [[ $code == 2 ]] && grep -qF "${case##*|}" malformed.log || fail "sweep file with ${case%%|*}: exit $code: $(cat malformed.log)"
done
cat > conflict.toml <<EOF
$one_rank_head
[set]
$common
[[runs]]
layout = "tp2pp1dp1"
np = 4
EOF
$py "$src/scripts/sweep.py" conflict.toml --check > conflict.log 2>&1 && fail "--check passed a layout for 2 ranks at np 4"
grep -q "config refused: .*the world has 4 ranks" conflict.log || fail "--check's refusal: $(cat conflict.log)"
echo "ok: malformed sweep files and layouts that do not fit np are refused"
