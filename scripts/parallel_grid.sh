#!/usr/bin/env bash
# The same-math-at-any-layout grid alone: every tp in {1,2,4}, pp in {1,2,4}, dp in {1,2} with
# tp*pp*dp <= 8, ZeRO 0/1/2, 1F1B and GPipe, two micro-batch splits, each trained 10 steps and
# compared with the single-rank run (losses 1e-5 relative, weights 1e-4). Prints one line per run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh --target parallel_equivalence_tests
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for np in 1 2 4 8; do
  mpirun --oversubscribe --bind-to none -np "$np" build/tests/parallel/parallel_equivalence_tests \
    --gtest_filter='SameMathAtAnyLayout.*' | grep -E '^equivalence|PASSED|FAILED'
done
