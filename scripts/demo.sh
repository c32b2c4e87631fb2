#!/usr/bin/env bash
# Set-up, build, prepare the built-in synthetic corpus (once) and run the default training job,
# configs/demo.toml. Extra arguments go to the trainer (for example --set training.steps=100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target trainer
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
./build/trainer prepare-data --synthetic --out datasets/demo
# One rank for now; --bind-to none lets its OpenMP threads use every core.
mpirun --bind-to none -np 1 ./build/trainer configs/demo.toml "$@"
