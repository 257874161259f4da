#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test under CTest, then builds and
# runs the suite again under AddressSanitizer + UndefinedBehaviorSanitizer (all but the drills,
# the tests labelled drill, which the plain pass runs), then runs each libFuzzer target for a
# short smoke time. Exits non-zero if anything fails; prints how long each step took.
#
#   SLUICE_FUZZ_SECONDS=N   seconds per fuzz target (default 5; 0 skips fuzzing)
#   SLUICE_SKIP_ASAN=1      skip the sanitizer pass (quicker local runs)
#   SLUICE_TEST_JOBS=J      tests (and fuzz targets) run side by side (default: two tests more
#                           than the cores in the plain pass and one more under the sanitizers,
#                           as most tests spend much of their time waiting on their clusters;
#                           one fuzz target per core, as each keeps one busy)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# deps.sh installed the browser: the dashboard's browser test must run, not skip.
export SLUICE_REQUIRE_BROWSER=1

jobs=${SLUICE_TEST_JOBS:-$(($(nproc) + 2))}
asan_jobs=${SLUICE_TEST_JOBS:-$(($(nproc) + 1))}
fuzz_jobs=${SLUICE_TEST_JOBS:-$(nproc)}
t0=$(date +%s)
steps=""
step_done() {
    local now
    now=$(date +%s)
    steps="$steps$(printf '%-28s %4d s' "$1" $((now - t0)))\n"
    t0=$now
}
# A pass's build runs at the lowest priority (nice 19) while the pass before it runs its tests:
# most tests spend much of their time waiting on their clusters, and the build takes the cores
# they leave idle, not time from them. Its output goes to build.log in its directory, shown if it
# fails.
background=()
gen_seeds=""
# shellcheck disable=SC2317 # called from the EXIT trap
on_exit() {
    local p
    for p in "${background[@]}"; do
        kill -- "-$p" 2>/dev/null || true
    done
    if [ -n "$gen_seeds" ]; then rm -rf "$gen_seeds"; fi
}
trap on_exit EXIT
start_background() { # LOG COMMAND...: sets bg_pid
    local log=$1
    shift
    mkdir -p "$(dirname "$log")"
    set -m
    nice -n 19 "$@" >"$log" 2>&1 &
    bg_pid=$!
    set +m
    background+=("$bg_pid")
}
wait_background() { # PID LOG WHAT
    if ! wait "$1"; then
        echo "$3 failed:" >&2
        tail -n 60 "$2" >&2
        exit 1
    fi
}

echo "== build (RelWithDebInfo)"
scripts/build.sh build -DSLUICE_WERROR=ON
step_done "build"
if [ "${SLUICE_SKIP_ASAN:-0}" != 1 ]; then
    start_background build-asan/build.log \
        scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON
    asan_build=$bg_pid
fi
echo "== tests"
# The longest tests start first (their COST in tests/CMakeLists.txt).
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 300
step_done "tests"

if [ "${SLUICE_SKIP_ASAN:-0}" != 1 ]; then
    echo "== build (ASan + UBSan; begun during the tests)"
    wait_background "$asan_build" build-asan/build.log "the ASan build"
    step_done "build (ASan + UBSan)"
    echo "== tests under ASan + UBSan (the drills and the nosan checks ran in the plain pass)"
fi

fuzz_seconds=${SLUICE_FUZZ_SECONDS:-5}
if [ "$fuzz_seconds" != 0 ]; then
    command -v clang >/dev/null || { echo "fuzz: clang not found (scripts/deps.sh installs it)" >&2; exit 1; }
    # Seeds written afresh rather than kept in tests/fuzz/corpus: fuzz_parquet's are the Parquet
    # fixtures of tests/parquet/gen.mjs (both writers, every codec, encoding and page version),
    # written by node (scripts/deps.sh installs it) into a temporary directory per target.
    gen_seeds=$(mktemp -d)
    export gen_seeds fuzz_jobs
    # Only the fuzz targets: under clang the sanitizer runtime is not linked into shared
    # libraries, so the rest of the tree is built by the passes above.
    # shellcheck disable=SC2016 # expanded by the inner shell
    start_background build-fuzz/build.log bash -euo pipefail -c '
        CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSLUICE_FUZZ=ON >/dev/null
        targets=$(ls tests/fuzz/fuzz_*.c | xargs -n1 basename | sed "s/\.c\$//")
        cmake --build build-fuzz -j "$fuzz_jobs" --target $targets -- --no-print-directory >/dev/null
        node tests/parquet/gen.mjs "$gen_seeds/parquet" >/dev/null
        mkdir -p "$gen_seeds/fuzz_parquet"
        cp "$gen_seeds"/parquet/*.parquet "$gen_seeds/fuzz_parquet/"'
    fuzz_build=$bg_pid
fi

if [ "${SLUICE_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build-asan --output-on-failure -j "$asan_jobs" --timeout 600 -LE 'drill|nosan'
    step_done "tests (ASan + UBSan)"
fi

if [ "$fuzz_seconds" != 0 ]; then
    echo "== build (fuzz targets; begun during the tests)"
    wait_background "$fuzz_build" build-fuzz/build.log "the fuzz targets' build"
    step_done "build (fuzz targets)"
    echo "== fuzz smoke (${fuzz_seconds}s per target)"
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
