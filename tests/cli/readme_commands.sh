#!/usr/bin/env bash
# readme_commands.sh SOURCE_DIR BUILD_DIR CORPUS WORK: runs the commands of README.md's "Running your own
# job" section as written, shortened, on this (2-core) machine, in WORK (with configs/, scripts/
# and build/ linked in, datasets/demo as the demo prepares it (CORPUS), and a small corpus/ of
# text). Shortened means extra flags only: training
# runs get fewer steps and no evaluation, benchmarks a tiny model and one step. scripts/build.sh
# (the tests run on a build) and scripts/demo.sh (the demo test runs it) are not run again.
set -uo pipefail
src=$1 build=$2 demo_data=$3 work=$4
rm -rf "$work" && mkdir -p "$work/corpus" "$work/datasets"
ln -s "$demo_data" "$work/datasets/demo"
ln -s "$src/configs" "$work/configs"
ln -s "$src/scripts" "$work/scripts"
ln -s "$build" "$work/build"
for i in 1 2 3; do
  for _ in $(seq 400); do echo "the quick brown fox $i jumps over the lazy dog; feast trains on this text."; done
done > "$work/corpus/a.txt"
cp "$work/corpus/a.txt" "$work/corpus/b.txt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

# The section's code blocks, continuation lines joined, comments dropped.
commands=$(awk '/^## Running your own job/{on=1; next} /^## /{on=0} on' "$src/README.md" |
           awk '/^```/{inblock=!inblock; next} inblock' | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' |
           sed 's/[[:space:]]*#.*$//' | grep -v '^[[:space:]]*$')
[[ -n $commands ]] || { echo "FAIL: no commands found in README.md's section"; exit 1; }

cd "$work"
status=0 checkpoint_steps=40
while IFS= read -r cmd; do
  extra=""
  case "$cmd" in
    scripts/build.sh*|scripts/demo.sh*) echo "skipped (run by other tests): $cmd"; continue ;;
    *"bench parallel"*) extra="--layouts tp2pp2dp2 --steps 1 --warmup 1" ;;
    *"bench checkpoint"*) extra="--layers 1 --embd 64 --heads 2 --vocab 1000 --repeat 1" ;;
    *"trainer bench"*) extra="--shapes 1x8 --steps 1 --warmup 1 --layers 1" ;;
    *"print-config"*|*"prepare-data"*|*"trainer inspect"*) ;;
    *"checkpoint.interval"*|*"resumes"*|*"run-resilient"*|*"-np 4"*"parallel.tp=1"*)
      extra="--set training.steps=$checkpoint_steps --set training.eval_interval=0"
      checkpoint_steps=$((checkpoint_steps + 20)) ;;
    *"configs/"*".toml"*) extra="--set training.steps=2 --set training.eval_interval=0" ;;
  esac
  echo "+ $cmd $extra"
  if ! bash -c "$cmd $extra" < /dev/null > out.log 2>&1; then
    echo "FAIL: exit status $? from: $cmd $extra"; tail -5 out.log; status=1
  fi
done <<< "$commands"
exit $status
