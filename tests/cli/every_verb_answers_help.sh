#!/usr/bin/env bash
# every_verb_answers_help.sh TRAINER MPIEXEC: the verbs `trainer --help` lists (and bench's
# benchmarks) each answer --help with their own usage (a line `usage: ... trainer VERB`) on stdout
# and exit status 0; each refuses a misspelt option naming the nearest valid one, with its usage.
set -u
trainer=$1 mpiexec=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
fail() { echo "FAIL: $*"; status=1; }

# usage_of WORDS...: `trainer WORDS --help` must exit 0 and print a usage naming `trainer WORDS`.
usage_of() {
  local out code
  out=$("$trainer" "$@" --help 2>&1); code=$?
  if [[ $code -ne 0 ]]; then fail "'trainer $* --help' exited $code: ${out:0:200}"; return; fi
  # "trainer bench [step]" names the default benchmark in brackets.
  local pattern="trainer (\\[)?$1"
  if ! grep -qE "^usage: .*$pattern" <<<"$out"; then fail "'trainer $* --help' gives no usage of its own: ${out:0:200}"; return; fi
  echo "ok: trainer $* --help"
}

overview=$("$trainer" --help) || fail "trainer --help exited $?"
[[ $overview == usage:* ]] || fail "trainer --help: no usage: ${overview:0:200}"
verbs=$(sed -n '/^verbs:/,/^[^ ]/p' <<<"$overview" | grep -E '^  [a-z]' | awk '{print $1}')
[[ $(wc -w <<<"$verbs") -ge 12 ]] || fail "trainer --help lists only: $verbs"
for verb in $verbs; do
  if [[ $verb == bench ]]; then
    out=$("$trainer" bench --help) || fail "'trainer bench --help' exited $?"
    modes=$(sed -n '/^NAME is one of:/,/^[^ ]/p' <<<"$out" | grep -E '^  [a-z]' | awk '{print $1}')
    [[ $(wc -w <<<"$modes") -eq 5 ]] || fail "trainer bench --help lists: $modes"
    for mode in $modes; do
      if [[ $mode == step ]]; then usage_of bench step; else usage_of bench "$mode"; fi
    done
  else
    usage_of "$verb"
  fi
done
# Under mpirun too, and for the training verb given a config.
out=$("$mpiexec" --oversubscribe -np 1 "$trainer" bench parallel --help 2>&1) && [[ $out == *"usage: mpirun -np N trainer bench parallel"* ]] ||
  fail "bench parallel --help under mpirun: ${out:0:200}"
out=$("$trainer" configs/demo.toml --help 2>&1) && [[ $out == *"usage: [mpirun -np N] trainer [train] CONFIG.toml"* ]] ||
  fail "trainer CONFIG.toml --help: ${out:0:200}"

# A misspelt option: exit non-zero, the nearest valid option named, the verb's own usage after.
typo() {  # EXPECTED-NEAREST ARGS...
  local nearest=$1
  shift
  local out code
  out=$("$trainer" "$@" 2>&1); code=$?
  if [[ $code -eq 0 ]]; then fail "'trainer $*' exited 0"; return; fi
  grep -q "did you mean '$nearest'?" <<<"$out" || { fail "'trainer $*' names no '$nearest': ${out:0:300}"; return; }
  grep -q "^usage: " <<<"$out" || { fail "'trainer $*' prints no usage: ${out:0:300}"; return; }
  echo "ok: trainer $* -> $nearest"
}
typo --set configs/demo.toml --sat training.steps=3
typo --world print-config configs/demo.toml --wrold 8
typo --synthetic prepare-data --out /tmp/feast-typo --synthtic
typo --vocab-size check-data x --vocab-sise 5
typo --decode tokenize --tokenizer byte --decod
typo --no-config inspect x --no-confg
typo --temperature generate configs/demo.toml --prompt hi --temprature 0.5
typo --max-shard-size export x --out y --max-shard-sise 1GB
typo --gpu-memory plan configs/demo.toml --gpus 8 --gpu-memroy 80GiB
typo --verbose check-backend --verbos
typo --shapes bench --shape 4x64
typo --max-bytes bench comm --max-byte 4K
typo --layouts bench parallel --layout tp1pp1dp1
typo --repeat bench checkpoint --repat 2
typo --new-tokens bench generate --new-token 3
typo --set eval configs/demo.toml --sett training.steps=1
# The benchmarks are chosen by name; the old flags say so.
out=$("$trainer" bench --parallel 2>&1) && fail "bench --parallel exited 0"
grep -q "the benchmarks are chosen by name: trainer bench parallel" <<<"$out" || fail "bench --parallel: ${out:0:300}"
# --set without '=' is named as such, with the fix.
out=$("$trainer" configs/demo.toml --set training.steps 10 2>&1) && fail "--set training.steps 10 exited 0"
grep -q "write --set training.steps=10" <<<"$out" || fail "--set without '=': ${out:0:300}"
exit $status
