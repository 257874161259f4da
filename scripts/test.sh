#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test under CTest, then builds and
# runs the suite again under AddressSanitizer + UndefinedBehaviorSanitizer (all but the drills,
# the tests labelled drill, which the plain pass runs), then runs each libFuzzer target for a
# short smoke time. Exits non-zero if anything fails; prints how long each step took.
#
#   SLUICE_FUZZ_SECONDS=N   seconds per fuzz target (default 5; 0 skips fuzzing)
#   SLUICE_SKIP_ASAN=1      skip the sanitizer pass (quicker local runs)
#   SLUICE_TEST_JOBS=J      tests (and fuzz targets) run side by side (default: one test more
#                           than the cores, as most tests spend much of their time waiting on
#                           their clusters; one fuzz target per core, as each keeps one busy)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# deps.sh installed the browser: the dashboard's browser test must run, not skip.
export SLUICE_REQUIRE_BROWSER=1

jobs=${SLUICE_TEST_JOBS:-$(($(nproc) + 1))}
fuzz_jobs=${SLUICE_TEST_JOBS:-$(nproc)}
t0=$(date +%s)
steps=""
step_done() {
    local now
    now=$(date +%s)
    steps="$steps$(printf '%-28s %4d s' "$1" $((now - t0)))\n"
    t0=$now
}
echo "== build (RelWithDebInfo)"
scripts/build.sh build -DSLUICE_WERROR=ON
step_done "build"
echo "== tests"
# The longest tests start first (their COST in tests/CMakeLists.txt).
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 300
step_done "tests"

if [ "${SLUICE_SKIP_ASAN:-0}" != 1 ]; then
    echo "== build (ASan + UBSan)"
    scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON
    step_done "build (ASan + UBSan)"
    echo "== tests under ASan + UBSan (the drills and the nosan checks ran in the plain pass)"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 600 -LE 'drill|nosan'
    step_done "tests (ASan + UBSan)"
fi

fuzz_seconds=${SLUICE_FUZZ_SECONDS:-5}
if [ "$fuzz_seconds" != 0 ]; then
    command -v clang >/dev/null || { echo "fuzz: clang not found (scripts/deps.sh installs it)" >&2; exit 1; }
    echo "== fuzz smoke (${fuzz_seconds}s per target)"
    # Only the fuzz targets: under clang the sanitizer runtime is not linked into shared
    # libraries, so the rest of the tree is built by the passes above.
    CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSLUICE_FUZZ=ON >/dev/null
    targets=$(ls tests/fuzz/fuzz_*.c | xargs -n1 basename | sed 's/\.c$//')
    # shellcheck disable=SC2086 # one word per target
    cmake --build build-fuzz -j "$fuzz_jobs" --target $targets -- --no-print-directory >/dev/null
    # Seeds written afresh rather than kept in tests/fuzz/corpus: fuzz_parquet's are the Parquet
    # fixtures of tests/parquet/gen.mjs (both writers, every codec, encoding and page version),
    # written by node (scripts/deps.sh installs it) into a temporary directory per target.
    gen_seeds=$(mktemp -d)
    trap 'rm -rf "$gen_seeds"' EXIT
    node tests/parquet/gen.mjs "$gen_seeds/parquet" >/dev/null
    mkdir -p "$gen_seeds/fuzz_parquet"
    cp "$gen_seeds"/parquet/*.parquet "$gen_seeds/fuzz_parquet/"
    # Each target is one process on one core: $fuzz_jobs of them run side by side.
    run_fuzz() {
        local f=$1 name corpus seeds=() dir
        name=$(basename "$f")
        corpus="build-fuzz/corpus/$name"
        mkdir -p "$corpus"
        for dir in "tests/fuzz/corpus/$name" "$gen_seeds/$name"; do
            if [ -d "$dir" ]; then seeds+=("$dir"); fi
        done
        "$f" -max_total_time="$fuzz_seconds" -print_final_stats=0 "$corpus" "${seeds[@]}" \
            >"build-fuzz/$name.log" 2>&1
    }
    fuzzers=()
    for f in build-fuzz/fuzz/fuzz_*; do
        [ -x "$f" ] && fuzzers+=("$f")
    done
    for ((i = 0; i < ${#fuzzers[@]}; i += fuzz_jobs)); do
        batch=("${fuzzers[@]:i:fuzz_jobs}")
        pids=()
        for f in "${batch[@]}"; do
            run_fuzz "$f" &
            pids+=($!)
        done
        for k in "${!batch[@]}"; do
            name=$(basename "${batch[$k]}")
            if ! wait "${pids[$k]}"; then
                echo "fuzz: $name failed" >&2
                tail -n 40 "build-fuzz/$name.log" >&2
                exit 1
            fi
            echo "fuzz: $name ok ($(grep -c . "build-fuzz/$name.log") log lines)"
        done
    done
    step_done "fuzz smoke"
fi
echo "== all tests passed"
printf '%b' "$steps"
