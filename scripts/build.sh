#!/usr/bin/env bash
# Configures and builds feast into build/ (Release, warnings as errors). Extra arguments go to
# `cmake --build` (for example `--target trainer`). Reuses an existing build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFEAST_WERROR=ON
fi
cmake --build build -j"$jobs" "$@"
