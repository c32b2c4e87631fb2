#!/usr/bin/env bash
# every_verb_answers_help.sh TRAINER MPIEXEC: each verb the usage lists answers --help with
# its usage on stdout and exit status 0 (the usage offers `VERB --help`).
set -u
trainer=$1 mpiexec=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
check() {
  local out code
  out=$("$@" 2>&1); code=$?
  if [[ $code -ne 0 || $out != *usage:* ]]; then
    echo "FAIL: '$*' exited $code without a usage: ${out:0:200}"
    status=1
  else
    echo "ok: $*"
  fi
}
check "$trainer" --help
check "$trainer" configs/demo.toml --help
for verb in print-config prepare-data bench inspect eval generate export tokenize check-data plan check-backend; do check "$trainer" $verb --help; done
check "$trainer" bench --checkpoint --help
check "$trainer" bench --generate --help
check "$trainer" bench comm --help
check "$mpiexec" --oversubscribe -np 1 "$trainer" bench --parallel --help
exit $status
