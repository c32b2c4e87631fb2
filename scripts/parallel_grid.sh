#!/usr/bin/env bash
# The same-math-at-any-layout grid in full (CI runs a subset): both families (GPT-2, and Llama
# with grouped-query attention and an untied head), every tp in {1,2,4}, pp in {1,2,4}, dp in
# {1,2,3,4} with tp*pp*dp in {1,2,3,4,6,8}, every distinct ZeRO stage and schedule (1F1B, GPipe,
# zero-bubble), two micro-batch splits, with and without sequence parallelism where tp > 1, plus
# padded vocabularies, uneven stage splits, every axis order and context parallelism (cp 2 and 4
# with tp, sp, pp, dp, ZeRO, recomputation and zero-bubble); each
# run trained 10 steps and compared with the single-rank run. Prints one line per run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh --target parallel_equivalence_tests
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 FEAST_EQUIVALENCE=full
for np in 1 2 3 4 6 8; do
  mpirun --oversubscribe --bind-to none -x FEAST_EQUIVALENCE -np "$np" build/tests/parallel/parallel_equivalence_tests \
    | grep -E '^equivalence|PASSED|FAILED'
done
