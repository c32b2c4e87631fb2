#!/usr/bin/env bash
# cuda_unavailable.sh LAUNCH... -- TRAINER ARGS...: a run with training.device = "cuda" where no
# GPU is visible (CI) must exit non-zero on every rank with one "no CUDA device is available"
# message naming the key. Where a GPU is visible it must instead get past device selection, so
# this test asserts something on every machine.
set -u
launch=()
while [[ $1 != -- ]]; do launch+=("$1"); shift; done
shift
trainer=$1
here=$(dirname "$0")
if "$trainer" --version | grep -Eq 'cuda: not built|cuda: built, 0 device'; then
  exec bash "$here/expect_failure.sh" --once 'training.device = "cuda": no CUDA device is available' "${launch[@]}" "$@"
fi
out=$("${launch[@]}" "$@" 2>&1)
printf '%s\n' "$out"
if grep -q 'no CUDA device is available' <<<"$out"; then
  echo "cuda_unavailable: a GPU is visible, yet the run says none is"
  exit 1
fi
echo "cuda_unavailable: a GPU is visible and the run got past device selection"
