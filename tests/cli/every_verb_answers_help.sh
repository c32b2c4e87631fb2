#!/usr/bin/env bash
# every_verb_answers_help.sh TRAINER MPIEXEC: the binary's help and option errors as a user meets
# them (each verb's own help and misspelt options are checked for the whole verb table in-process
# by tests/cli/verbs_test.cpp): `trainer --help` lists every verb and each answers --help with
# its own usage, exit 0, on stdout; also under mpirun and after a config file; a misspelt option
# names the nearest one and exits non-zero; the old bench flags and `--set key value` say what to
# write instead.
set -u
trainer=$1 mpiexec=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
fail() { echo "FAIL: $*"; status=1; }

overview=$("$trainer" --help) || fail "trainer --help exited $?"
[[ $overview == usage:* ]] || fail "trainer --help: no usage: ${overview:0:200}"
verbs=$(sed -n '/^verbs:/,/^[^ ]/p' <<<"$overview" | grep -E '^  [a-z]' | awk '{print $1}')
[[ $(wc -w <<<"$verbs") -ge 12 ]] || fail "trainer --help lists only: $verbs"
for verb in $verbs; do
  out=$("$trainer" "$verb" --help 2>/dev/null) || { fail "'trainer $verb --help' exited $?"; continue; }
  grep -qE "^usage: .*trainer (\[)?$verb" <<<"$out" || fail "'trainer $verb --help' gives no usage of its own: ${out:0:200}"
done
echo "ok: trainer --help lists $(wc -w <<<"$verbs") verbs, each answering --help with its own usage"

out=$("$mpiexec" --oversubscribe -np 1 "$trainer" bench parallel --help 2>&1) &&
  [[ $out == *"usage: mpirun -np N trainer bench parallel"* ]] || fail "bench parallel --help under mpirun: ${out:0:200}"
out=$("$trainer" configs/demo.toml --help 2>&1) && [[ $out == *"usage: [mpirun -np N] trainer [train] CONFIG.toml"* ]] ||
  fail "trainer CONFIG.toml --help: ${out:0:200}"
echo "ok: under mpirun, and after a config file"

typo() {  # NEAREST ARGS...: the binary refuses, naming NEAREST, with a usage
  local nearest=$1 out
  shift
  out=$("$trainer" "$@" 2>&1) && { fail "'trainer $*' exited 0"; return; }
  grep -q "did you mean '$nearest'?" <<<"$out" && grep -q "^usage: " <<<"$out" ||
    { fail "'trainer $*' names no '$nearest' with a usage: ${out:0:300}"; return; }
  echo "ok: trainer $* -> $nearest"
}
typo --temperature generate configs/demo.toml --prompt hi --temprature 0.5
typo --max-bytes bench comm --max-byte 4K
typo --set configs/demo.toml --sat training.steps=3
# The benchmarks are chosen by name; the old flags say so.
out=$("$trainer" bench --parallel 2>&1) && fail "bench --parallel exited 0"
grep -q "the benchmarks are chosen by name: trainer bench parallel" <<<"$out" || fail "bench --parallel: ${out:0:300}"
# --set without '=' is named as such, with the fix.
out=$("$trainer" configs/demo.toml --set training.steps 10 2>&1) && fail "--set training.steps 10 exited 0"
grep -q "write --set training.steps=10" <<<"$out" || fail "--set without '=': ${out:0:300}"
exit $status
