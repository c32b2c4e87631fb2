# Shared by the checkpoint CLI tests: arguments, the base command and small checks.
# Usage in a test: source common.sh TRAINER MPIEXEC CORPUS WORKDIR
set -uo pipefail
trainer=$1 mpiexec=$2 corpus=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
unset FEAST_ATTEMPT
# The demo model on the test corpus, 20 steps, a checkpoint every 5.
base=(configs/demo.toml --set "data.train=$corpus/train_*.bin" --set "data.val=$corpus/val_*.bin"
      --set training.steps=20 --set training.eval_interval=0 --set checkpoint.interval=5)
mpi8=("$mpiexec" --oversubscribe --bind-to none -np 8)

fail() { echo "FAIL: $*" >&2; exit 1; }
# Lines of a metrics file.
lines() { [[ -f $1 ]] && wc -l < "$1" || echo 0; }
# Waits (up to 60 s) until metrics file $1 has at least $2 lines.
wait_for_step() {
  for _ in $(seq 600); do (( $(lines "$1") >= $2 )) && return 0; sleep 0.1; done
  fail "$1 never reached step $2"
}
# The model and optimizer tensors of two checkpoints are bit for bit equal (h5diff exits 0).
same_tensors() {
  h5diff "$1" "$2" /model /model >/dev/null && h5diff "$1" "$2" /optim /optim >/dev/null ||
    fail "$1 and $2 hold different tensors"
}
# Every step 1..N appears once, in order, in metrics file $1.
steps_once() {
  local got
  got=$(sed 's/.*"step":\([0-9]*\).*/\1/' "$1" | tr '\n' ' ')
  [[ $got == "$(seq -s ' ' 1 "$2") " ]] || fail "$1 has steps '$got', expected 1..$2 once each"
}
