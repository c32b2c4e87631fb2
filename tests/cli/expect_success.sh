#!/usr/bin/env bash
# expect_success.sh REGEX COMMAND...: passes when COMMAND exits 0 and its output (stdout and
# stderr) matches the extended regular expression REGEX.
set -u
regex=$1
shift
out=$("$@" 2>&1)
code=$?
printf '%s\n' "$out"
if [[ $code -ne 0 ]]; then
  echo "expect_success: exit status $code, expected 0"
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect_success: output does not match: $regex"
  exit 1
fi
echo "expect_success: exit status 0 and the expected output"
