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
# The floor: the chain's entropy rate is the lowest expected loss over endless text; a val_loss
# is measured on a finite split, so it is compared with what the chain itself scores there.
meta_value() { grep -o "\"$1\": [0-9.e-]*" datasets/demo/meta.json | grep -o '[0-9.e-]*$'; }
floor=$(meta_value entropy_floor_nats)
val_floor=$(meta_value val_floor_nats || true)
if [[ -n $val_floor ]]; then
  spread=$(meta_value val_floor_stddev_nats)
  awk -v f="$floor" -v v="$val_floor" -v s="$spread" 'BEGIN {
    printf "demo: the chain that wrote the corpus scores its validation split at %.4f nats/token (its entropy\n", v
    printf "      rate, the lowest expected loss over endless text, is %.4f). The final val_loss above reads\n", f
    printf "      16k of those tokens, on which the chain'"'"'s own score scatters by about +-%.4f (one standard\n", s / sqrt(16384)
    printf "      error): a well-trained model ends within a few hundredths of %.4f, possibly a little below.\n", v
  }'
else  # a corpus prepared by an older version
  echo "demo: the corpus's entropy floor is ${floor} nats/token, the lowest expected loss over endless text;"
  echo "      the final val loss above, on 16k validation tokens, should be within a few hundredths of it."
fi
