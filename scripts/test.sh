#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test under CTest, then builds and
# runs the whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer, then runs each
# libFuzzer target for a short smoke time. Exits non-zero if anything fails.
#
#   SLUICE_FUZZ_SECONDS=N   seconds per fuzz target (default 10; 0 skips fuzzing)
#   SLUICE_SKIP_ASAN=1      skip the sanitizer pass (quicker local runs)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

jobs=$(nproc)
echo "== build (RelWithDebInfo)"
scripts/build.sh build -DSLUICE_WERROR=ON
echo "== tests"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 300

if [ "${SLUICE_SKIP_ASAN:-0}" != 1 ]; then
    echo "== build (ASan + UBSan)"
    scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON
    echo "== tests under ASan + UBSan"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 600
fi

fuzz_seconds=${SLUICE_FUZZ_SECONDS:-10}
if [ "$fuzz_seconds" != 0 ]; then
    command -v clang >/dev/null || { echo "fuzz: clang not found (scripts/deps.sh installs it)" >&2; exit 1; }
    echo "== fuzz smoke (${fuzz_seconds}s per target)"
    # Only the fuzz targets: under clang the sanitizer runtime is not linked into shared
    # libraries, so the rest of the tree is built by the passes above.
    CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSLUICE_FUZZ=ON >/dev/null
    targets=$(ls tests/fuzz/fuzz_*.c | xargs -n1 basename | sed 's/\.c$//')
    for t in $targets; do
        cmake --build build-fuzz -j "$jobs" --target "$t" -- --no-print-directory >/dev/null
    done
    for f in build-fuzz/fuzz/fuzz_*; do
        [ -x "$f" ] || continue
        name=$(basename "$f")
        corpus="build-fuzz/corpus/$name"
        mkdir -p "$corpus"
        seeds="tests/fuzz/corpus/$name"
        [ -d "$seeds" ] || seeds=""
        if ! "$f" -max_total_time="$fuzz_seconds" -print_final_stats=0 "$corpus" $seeds \
                >"build-fuzz/$name.log" 2>&1; then
            echo "fuzz: $name failed" >&2
            tail -n 40 "build-fuzz/$name.log" >&2
            exit 1
        fi
        echo "fuzz: $name ok ($(grep -c . "build-fuzz/$name.log") log lines)"
    done
fi
echo "== all tests passed"
