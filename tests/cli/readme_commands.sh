#!/usr/bin/env bash
# readme_commands.sh SOURCE_DIR BUILD_DIR WORK: every command of README.md's code blocks, in
# order, as a new user runs them on a fresh clone, shortened by extra flags only (training runs
# a few steps and no evaluation, benchmarks a tiny model and one step). Then the clone must be as
# it was apart from build/, datasets/ and runs/ (git status), every training run in a folder of
# its own, and the demo's folder holding the demo alone.
#
# The clone is the source tree's files (tracked and new, not ignored) committed in WORK/feast,
# with build/ linked to BUILD_DIR (scripts/build.sh finds it built) and what the README asks the
# user to bring: a Hugging Face model in models/gpt2 (the tiny test fixture), texts in corpus/
# and my_texts/. Not run: scripts/test.sh (the suite this test is part of) and tensorboard (a
# viewer from PyPI) when it is not installed.
set -uo pipefail
src=$1 build=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work/feast" || exit 1
clone=$work/feast
git -C "$src" ls-files -z --cached --others --exclude-standard |
  tar -C "$src" --null -T - --ignore-failed-read -cf - 2> /dev/null | tar -C "$clone" -xf - || fail "copying the tree"
cd "$clone" || exit 1
mkdir -p corpus my_texts models
cp -r "$src/tests/fixtures/hf/gpt2-tiny" models/gpt2
for i in 1 2 3; do
  for _ in $(seq 400); do echo "the quick brown fox $i jumps over the lazy dog; feast trains on this text."; done
done > corpus/a.txt
cp corpus/a.txt corpus/b.txt
cp corpus/a.txt my_texts/story.txt
git=(git -c user.name=readme -c user.email=readme@test -c core.hooksPath=/dev/null)
"${git[@]}" init -q && "${git[@]}" add -A -f && "${git[@]}" commit -q -m "the clone as a user has it" || fail "git baseline"
ln -s "$build" build
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
# trainer plan --calibrate's figures go into the work folder, not the user's ~/.cache.
export FEAST_PLAN_CONSTANTS=$work/plan-constants.json

# The code blocks, continuation lines joined, comments dropped.
commands=$(awk '/^```/{inblock=!inblock; next} inblock' README.md | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' |
           sed 's/[[:space:]]*#.*$//' | grep -v '^[[:space:]]*$')
(( $(wc -l <<< "$commands") >= 20 )) || fail "only $(wc -l <<< "$commands") commands found in README.md"

short="--set training.steps=2 --set training.eval_interval=0"
tiny_model="--set training.seq_len=32 --set parallel.micro_batch_size=1"  # the fixture's context is 64
status=0 checkpoint_steps=40 ran=0
while IFS= read -r cmd; do
  extra=""
  case "$cmd" in
    scripts/test.sh*) echo "skipped (the suite this test is part of): $cmd"; continue ;;
    tensorboard*) command -v tensorboard > /dev/null || { echo "skipped (not installed): $cmd"; continue; } ;;
    scripts/demo.sh*) extra=$short ;;
    *"bench parallel"*) extra="--layouts tp2pp2dp2 --steps 1 --warmup 1" ;;
    *"bench checkpoint"*) extra="--layers 1 --embd 64 --heads 2 --vocab 1000 --repeat 1" ;;
    *"bench comm"*) extra="--iters 1 --warmup 0 --max-bytes 64K" ;;
    *"trainer bench"*) extra="--shapes 1x8 --steps 1 --warmup 1 --layers 1" ;;
    *sweep.py*) extra="--set training.steps=2" ;;
    *"--calibrate"*) extra="--seconds 1" ;;
    *"print-config"*|*"prepare-data"*|*"trainer inspect"*|*"trainer export"*|*"trainer plan"*|*report.py*) ;;
    *"trainer eval"*) extra="$tiny_model --set training.eval_batches=1" ;;
    *"trainer generate"*) extra="$tiny_model --max-new-tokens 8" ;;
    *finetune*) extra="$short $tiny_model" ;;
    *"checkpoint.interval"*|*"resumes"*|*"run-resilient"*|*"-np 4"*"parallel.tp=1"*)
      extra="--set training.steps=$checkpoint_steps --set training.eval_interval=0"
      checkpoint_steps=$((checkpoint_steps + 20)) ;;
    *"configs/"*".toml"*) extra=$short ;;
  esac
  echo "+ $cmd $extra"
  ran=$((ran + 1))
  if ! bash -c "$cmd $extra" < /dev/null > "$work/out.log" 2>&1; then
    echo "FAIL: exit status $? from: $cmd $extra"; tail -5 "$work/out.log"; status=1
  fi
  cat "$work/out.log" >> "$work/all.log"
done <<< "$commands"
((status == 0)) || exit 1

# Nothing outside build/, datasets/ and runs/ (which .gitignore lists) was written or changed.
changed=$(git status --porcelain --untracked-files=all | grep -v ' build$')
[[ -z $changed ]] || fail "the README's commands changed the tree: $changed"
# The demo's folder holds the demo alone (the Llama demo has its own); every run its own folder.
(( $(grep -c '=== run started' runs/demo/train.log) == 1 )) ||
  fail "runs/demo holds more than the demo: $(grep '=== run started' runs/demo/train.log)"
for dir in runs/*/; do
  [[ -f $dir/train.log ]] && echo "$dir: $(grep -c '=== run started' "$dir/train.log") run(s), $(cat "$dir/status")"
done
echo "ok: $ran README commands ran in order; the tree is clean apart from build/, datasets/ and runs/"
