#!/usr/bin/env bash
# expect_failure.sh REGEX COMMAND...: passes when COMMAND exits non-zero and its output (stdout
# and stderr) matches the extended regular expression REGEX.
set -u
regex=$1
shift
out=$("$@" 2>&1)
code=$?
printf '%s\n' "$out"
if [[ $code -eq 0 ]]; then
  echo "expect_failure: exit status 0, expected non-zero"
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect_failure: output does not match: $regex"
  exit 1
fi
echo "expect_failure: exit status $code and the expected message"
