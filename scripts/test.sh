#!/usr/bin/env bash
# Set-up, build and every test: unit tests, golden-data tests, training runs and the CLI's
# bad-input cases (CTest). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
# Open MPI refuses to start as root unless told; CI and containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure --timeout 600
