#!/usr/bin/env bash
# Configures and builds sluice into a build directory (default: build/). Extra arguments go to
# cmake's configure step, e.g. scripts/build.sh build-asan -DSLUICE_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)" -- --no-print-directory >/dev/null
