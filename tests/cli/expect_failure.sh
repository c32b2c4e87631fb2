#!/usr/bin/env bash
# expect_failure.sh [--once] REGEX COMMAND...: passes when COMMAND exits non-zero and its output
# (stdout and stderr) matches the extended regular expression REGEX; with --once, on exactly one
# line (a multi-rank job must report a shared error once, not once per rank).
set -u
once=0
if [[ $1 == --once ]]; then
  once=1
  shift
fi
regex=$1
shift
out=$("$@" 2>&1)
code=$?
printf '%s\n' "$out"
if [[ $code -eq 0 ]]; then
  echo "expect_failure: exit status 0, expected non-zero"
  exit 1
fi
matches=$(grep -Ec -- "$regex" <<<"$out")
if [[ $matches -eq 0 ]]; then
  echo "expect_failure: output does not match: $regex"
  exit 1
fi
if [[ $once -eq 1 && $matches -ne 1 ]]; then
  echo "expect_failure: the message appears $matches times, expected once"
  exit 1
fi
echo "expect_failure: exit status $code and the expected message"
