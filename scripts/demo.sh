#!/usr/bin/env bash
# Set-up, build, prepare the built-in synthetic corpus (once) and run a demo training job:
# configs/demo.toml (GPT-2), or the config given first (configs/llama-demo.toml for Llama).
# Further arguments go to the trainer (for example --set training.steps=100).
set -euo pipefail
cd "$(dirname "$0")/.."
config=configs/demo.toml
if [[ ${1:-} == *.toml ]]; then
  config=$1
  shift
fi
scripts/setup.sh
scripts/build.sh --target trainer
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
./build/trainer prepare-data --synthetic --out datasets/demo
# 8 ranks (tp 2 x pp 2 x dp 2) share this machine's cores: --oversubscribe allows more ranks
# than cores, --bind-to none lets the trainer divide the cores among them.
mpirun --oversubscribe --bind-to none -np 8 ./build/trainer "$config" "$@"
floor=$(grep -o '"entropy_floor_nats": [0-9.]*' datasets/demo/meta.json | grep -o '[0-9.]*$')
echo "demo: the corpus's entropy floor is ${floor} nats/token, the lowest loss any model can reach;"
echo "      the final val loss above should be within a few hundredths of it (16k validation tokens"
echo "      give it a sampling error of about 0.01)."
