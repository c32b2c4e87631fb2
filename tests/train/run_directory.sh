#!/usr/bin/env bash
# run_directory.sh TRAINER SOURCE_DIR CORPUS WORK: what a run leaves in its directory, and that
# runs do not overwrite each other:
#  1. with logging.dir unset, a run gets runs/<config name>-<UTC time> of its own, printed at
#     start, holding config.toml (inferred values marked), command.txt, train.log, metrics.jsonl
#     and status "finished at step 2"; a second run gets another directory;
#     an unfinished run is continued by the same command; extending a finished one (training.steps
#     raised) warns that the learning-rate schedule changes at the resumed step;
#  2. a fresh run into a directory with an earlier run's metrics.jsonl moves it aside and says so;
#  3. a run into a directory another run is using is refused, and the first run is unharmed; a
#     run of another model or data into one an earlier run left is refused and the directory
#     left as it was (with logging.dir unset it gets a new directory instead);
#  4. a failing run's status says "failed: ...";
#  5. an unusable checkpoint.dir stops a run before its first step, naming it; a run given the
#     checkpoint.dir of a live run is refused, and the live run's checkpoints are unharmed; the
#     job itself, run again, resumes there;
#  6. a resolved config.toml that cannot be written (a full disk: /dev/full) fails the run.
set -uo pipefail
trainer=$1 src=$2 corpus=$3 work=$4
rm -rf "$work" && mkdir -p "$work/datasets" && cd "$work" || exit 1
ln -s "$src/configs" configs
ln -s "$corpus" datasets/demo
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
run=("$trainer" configs/demo.toml --set parallel.tp=1 --set parallel.pp=1 --set training.eval_interval=0)

"${run[@]}" --set training.steps=2 --set 'logging.dir=""' > one.log 2>&1 || fail "run 1: $(tail -3 one.log)"
dir=$(sed -n 's/^run directory: \(runs\/demo-[0-9]\{8\}-[0-9]\{6\}\(-[0-9]*\)\?\) .*/\1/p' one.log)
[[ -n $dir && -d $dir ]] || fail "no 'run directory: runs/demo-<date>-<time>' line: $(grep -m1 'run directory' one.log)"
for f in config.toml command.txt train.log metrics.jsonl status; do [[ -f $dir/$f ]] || fail "$dir has no $f"; done
[[ $(cat "$dir/status") == "finished at step 2" ]] || fail "status: $(cat "$dir/status")"
grep -q 'training.steps=2' "$dir/command.txt" || fail "command.txt: $(cat "$dir/command.txt")"
grep -q '^step      2/2' "$dir/train.log" || fail "train.log lacks the progress lines"
grep -q '^threads = 1 .*\[inferred: OMP_NUM_THREADS = 1\]' "$dir/config.toml" || fail "config.toml lacks inferred values"
grep -q '^# this run: world size 1 = tp 1 x pp 1 x dp 1' "$dir/config.toml" || fail "config.toml lacks the world size"
"${run[@]}" --set training.steps=2 --set 'logging.dir=""' > two.log 2>&1 || fail "run 2"
dir2=$(sed -n 's/^run directory: \([^ ]*\) .*/\1/p' two.log)
[[ -n $dir2 && $dir2 != "$dir" ]] || fail "the second run reused $dir"
echo "ok: runs get directories of their own ($dir, $dir2)"

# A run of the same config that stopped early with a checkpoint is continued by the same command.
cont=("${run[@]}" --set training.steps=4 --set checkpoint.interval=2 --set 'logging.dir=""')
"${cont[@]}" --set training.exit_at_step=2 > stop.log 2>&1 || fail "stopping run: $(tail -3 stop.log)"
dir3=$(sed -n 's/^run directory: \([^ ]*\) .*/\1/p' stop.log)
"${cont[@]}" > cont.log 2>&1 || fail "continuing run: $(tail -3 cont.log)"
grep -q "^run directory: $dir3 (logging.dir unset: continuing the unfinished run" cont.log || fail "not continued: $(grep 'run directory' cont.log)"
grep -q "resumed from $dir3/checkpoints/step_00000002.h5 at step 2" cont.log || fail "not resumed at step 2"
[[ $(cat "$dir3/status") == "finished at step 4" ]] || fail "status after continuing: $(cat "$dir3/status")"
grep -q "learning-rate schedule is not" cont.log && fail "the same schedule was reported as changed"
echo "ok: an unfinished run is continued in its directory ($dir3)"

# Extending a finished run (training.steps raised) resumes it and says the schedule changed.
ext=("${run[@]}" --set checkpoint.interval=2 --set logging.dir=extended --set checkpoint.dir=extended/ckpt)
"${ext[@]}" --set training.steps=2 > ext1.log 2>&1 || fail "run to extend: $(tail -3 ext1.log)"
"${ext[@]}" --set training.steps=4 > ext2.log 2>&1 || fail "extending run: $(tail -3 ext2.log)"
grep -q "resumed from extended/ckpt/step_00000002.h5 at step 2" ext2.log || fail "the extension did not resume"
grep -q "warning: the learning-rate schedule is not the one the checkpoint's run followed (training.steps 2 in the checkpoint's run, 4 here)" ext2.log ||
  fail "no schedule-change warning: $(grep -m2 checkpoint: ext2.log)"
echo "ok: extending a finished run says its schedule changed"

"${run[@]}" --set training.steps=2 --set logging.dir=shared --set checkpoint.resume=never > a.log 2>&1 || fail "shared 1"
"${run[@]}" --set training.steps=3 --set logging.dir=shared --set checkpoint.resume=never > b.log 2>&1 || fail "shared 2"
grep -q "held an earlier run's metrics.jsonl: kept as shared/metrics\.[0-9-]*\.jsonl" b.log || fail "no move-aside line"
kept=$(ls shared/metrics.*.jsonl)
(( $(wc -l < "$kept") == 2 && $(wc -l < shared/metrics.jsonl) == 3 )) || fail "metrics files: $(wc -l shared/metrics*)"
(( $(grep -c '=== run started' shared/train.log) == 2 )) || fail "train.log was not appended to"
echo "ok: an earlier run's metrics.jsonl is kept ($kept)"

"${run[@]}" --set training.steps=400 --set logging.dir=busy > long.log 2>&1 &
pid=$!
for _ in $(seq 300); do [[ -f busy/metrics.jsonl ]] && break; sleep 0.1; done
"${run[@]}" --set training.steps=2 --set logging.dir=busy > refused.log 2>&1 && fail "a second run into busy/ was not refused"
grep -q "logging.dir busy is in use by another run" refused.log || fail "refusal message: $(grep error refused.log)"
kill -INT $pid; wait $pid
grep -q "interrupted at step" busy/train.log || fail "the first run was harmed: $(tail -3 long.log)"
[[ $(cat busy/status) == stopped\ at\ step\ *\ \(interrupted\) ]] || fail "status after Ctrl-C: $(cat busy/status)"
echo "ok: a directory in use is refused; the running job is unharmed"

"${run[@]}" --set training.steps=4 --set logging.dir=failing --set training.lr=1e30 --set training.min_lr=0 \
  --set training.warmup_steps=0 > failing.log 2>&1 && fail "a non-finite run exited 0"
grep -q '^failed: step 2: loss .*not finite' failing/status || fail "status of a failed run: $(cat failing/status)"
echo "ok: a failed run's status says so"

# Another model or other data into a directory an earlier run left is refused, untouched; with
# logging.dir unset, an unfinished run of another model is not continued but a new one begun.
"${run[@]}" --set training.steps=2 --set logging.dir=taken > taken.log 2>&1 || fail "run into taken/"
"${run[@]}" --set training.steps=2 --set logging.dir=taken --set model.n_layer=2 > other_model.log 2>&1 &&
  fail "a run of another model into taken/ was not refused"
grep -q "logging.dir taken holds an earlier run of another model or data (its config.toml: model.n_layer = 4 there, 2 here)" \
  other_model.log || fail "another model's refusal: $(grep -m1 error other_model.log)"
"${run[@]}" --set training.steps=2 --set logging.dir=taken --set data.val=taken.log > other_data.log 2>&1 &&
  fail "a run on other data into taken/ was not refused"
grep -q 'data.val = "[^"]*/val_\*.bin" there, "[^"]*/taken.log" here' other_data.log ||
  fail "other data's refusal: $(grep -m1 error other_data.log)"
[[ $(cat taken/status) == "finished at step 2" ]] || fail "the earlier run's status was touched: $(cat taken/status)"
(( $(grep -c '=== run started' taken/train.log) == 1 )) || fail "the refused runs wrote into taken/train.log"
"${cont[@]}" --set training.exit_at_step=2 > stop2.log 2>&1 || fail "stopping run 2: $(tail -3 stop2.log)"
stopped=$(sed -n 's/^run directory: \([^ ]*\) .*/\1/p' stop2.log)
"${cont[@]}" --set model.n_layer=2 > fresh.log 2>&1 || fail "run of another model: $(tail -3 fresh.log)"
grep -q "^run directory: $stopped " fresh.log && fail "another model continued the unfinished run in $stopped"
grep -q "^run directory: runs/demo-.* (logging.dir unset: a new directory for this run)" fresh.log ||
  fail "no new directory: $(grep 'run directory' fresh.log)"
echo "ok: another model or data is refused an earlier run's directory, or given a new one"

touch notadir
"${run[@]}" --set training.steps=4 --set logging.dir=ckfile --set checkpoint.interval=2 --set checkpoint.dir=notadir \
  > ckfile.log 2>&1 && fail "a run with a file as checkpoint.dir succeeded"
grep -q 'checkpoint.dir = "notadir" exists and is not a directory; set checkpoint.dir to a directory' ckfile.log ||
  fail "checkpoint.dir message: $(grep error ckfile.log)"
grep -q '^step ' ckfile.log && fail "the run trained before finding checkpoint.dir unusable"
grep -q '^failed: .*checkpoint.dir = "notadir"' ckfile/status || fail "status: $(cat ckfile/status)"
echo "ok: an unusable checkpoint.dir stops the run before step 1"

live=("${run[@]}" --set training.steps=100000 --set logging.dir=ck_live --set checkpoint.dir=ck_shared
      --set checkpoint.interval=1)
"${live[@]}" > live.log 2>&1 &
pid=$!
for _ in $(seq 300); do [[ -f ck_shared/latest ]] && break; sleep 0.1; done
[[ -f ck_shared/latest ]] || fail "the live run saved nothing: $(tail -3 live.log)"
"${run[@]}" --set training.steps=2 --set logging.dir=ck_other --set checkpoint.dir=ck_shared \
  --set checkpoint.resume=never > other.log 2>&1 && fail "a second run into a live run's checkpoint.dir was not refused"
grep -q 'checkpoint.dir = "ck_shared" is in use by another run' other.log || fail "refusal message: $(grep error other.log)"
kill -INT $pid; wait $pid
ls ck_shared/*.superseded > /dev/null 2>&1 && fail "the live run's checkpoints were set aside: $(ls ck_shared)"
grep -q "interrupted at step" live.log || fail "the live run was harmed: $(tail -3 live.log)"
last=$(sed 's/^step_0*\([0-9]*\)\.h5$/\1/' ck_shared/latest)
"${live[@]}" --set training.steps=$((last + 1)) > again.log 2>&1 || fail "the job, run again: $(tail -3 again.log)"
grep -q "resumed from ck_shared/step_0*$last.h5 at step $last" again.log || fail "not resumed: $(grep checkpoint again.log)"
echo "ok: a live run's checkpoint.dir is refused to another run; the job itself resumes there"

mkdir -p full && ln -s /dev/full full/config.toml
"${run[@]}" --set training.steps=2 --set logging.dir=full > full.log 2>&1 && fail "a run whose config.toml cannot be written passed"
grep -q 'full/config.toml: cannot write the resolved config (No space left on device)' full.log ||
  fail "full disk message: $(grep -m1 error full.log)"
echo "ok: a resolved config that cannot be written fails the run"
