#!/usr/bin/env bash
# Set-up, build and every test: unit tests, golden-data tests, training runs and the CLI's
# bad-input cases (CTest). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
# Open MPI refuses to start as root unless told; CI and containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A test writes under build/ only: never into a user's runs/ or datasets/, nor anywhere else in
# the source tree. What changed while the suite ran is listed and fails it.
export PYTHONDONTWRITEBYTECODE=1
stamp=build/.suite-started
touch "$stamp"
status=0
ctest --test-dir build --output-on-failure --timeout 600 || status=$?
written=$(find . \( -path './build*' -o -path ./.git \) -prune -o -newer "$stamp" -print)
if [[ -n $written ]]; then
  echo "error: the test suite wrote into the source tree (a test must write under build/ only):" >&2
  head -20 <<<"$written" >&2
  status=1
fi
exit $status
