#!/usr/bin/env bash
# Runs the integration tests N times while a CPU hog keeps every core busy, and prints per test
# how many runs failed. A test that passes on an idle machine and fails on a loaded one has a
# race or a wait too short for a busy CI machine; this finds it before CI does.
#
#   scripts/stress-tests.sh [N] [--asan] [-R REGEX] [-L LABEL]
#
#   N          runs (default 5)
#   --asan     the AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/), as the
#              second pass of scripts/test.sh runs it; default the plain build (build/)
#   -R REGEX   only the tests whose CTest name matches (e.g. -R coordinated)
#   -L LABEL   the tests with this CTest label (default: integration without the drills;
#              -L drill for the drills alone)
#
#   STRESS_JOBS=J      tests run side by side (default as scripts/test.sh: two more than the
#                      cores, one more with --asan)
#   STRESS_HOG=K       CPU hog processes (default: one per core; 0: no hog)
#   STRESS_LOGS=DIR    where the logs of failed runs go (default stress-logs/ in the build dir)
#
# The build directory is built first when it lacks a test tree (scripts/build.sh). Each run's
# full CTest log is kept only when a test failed in it: DIR/run-K.log, and one file per failed
# test (DIR/run-K-TEST.log) with that test's output. Exits 1 when any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5
asan=0
regex=""
label=""
while [ $# -gt 0 ]; do
    case "$1" in
    --asan) asan=1 ;;
    -R) regex=${2:?-R needs a regular expression}; shift ;;
    -L) label=${2:?-L needs a label}; shift ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *)
        if [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ]; then
            runs=$1
        else
            echo "stress-tests: unknown argument '$1' (see --help)" >&2
            exit 2
        fi
        ;;
    esac
    shift
done
command -v stress-ng >/dev/null ||
    { echo "stress-tests: stress-ng not found (scripts/deps.sh installs it)" >&2; exit 2; }

if [ "$asan" = 1 ]; then
    dir=build-asan
    [ -f "$dir/CTestTestfile.cmake" ] ||
        scripts/build.sh "$dir" -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    timeout=600
else
    dir=build
    [ -f "$dir/CTestTestfile.cmake" ] || scripts/build.sh "$dir"
    timeout=300
fi
# As scripts/test.sh: two tests more than the cores in the plain pass, one more under ASan.
jobs=${STRESS_JOBS:-$(($(nproc) + 2 - asan))}
logs=${STRESS_LOGS:-$dir/stress-logs}
mkdir -p "$logs"

if [ -n "$label" ]; then
    select=(-L "$label")
else
    select=(-L integration -LE drill)
fi
[ -n "$regex" ] && select+=(-R "$regex")
# The tests selected, in CTest's order: "  Test  #12: integration.test_auth".
mapfile -t tests < <(ctest --test-dir "$dir" -N "${select[@]}" | sed -n 's/^ *Test *#[0-9]*: //p')
[ ${#tests[@]} -gt 0 ] || { echo "stress-tests: no test matches" >&2; exit 2; }

hog_pid=""
stop_hog() {
    if [ -n "$hog_pid" ]; then
        kill "$hog_pid" 2>/dev/null || true
        wait "$hog_pid" 2>/dev/null || true
        hog_pid=""
    fi
}
trap stop_hog EXIT
hogs=${STRESS_HOG:-$(nproc)}
if [ "$hogs" -gt 0 ]; then
    stress-ng --cpu "$hogs" --timeout 0 --quiet &
    hog_pid=$!
fi

declare -A failed
for t in "${tests[@]}"; do failed[$t]=0; done
bad_runs=0
echo "stress: ${#tests[@]} test(s), $runs run(s), $dir, -j $jobs, $hogs CPU hog(s); logs of failed runs in $logs"
for k in $(seq 1 "$runs"); do
    start=$(date +%s)
    log="$logs/run-$k.log"
    rm -f "$log" "$logs/run-$k-"*.log
    rc=0
    # A run that ends without writing the list (ctest killed) must not count an earlier one's.
    rm -f "$dir/Testing/Temporary/LastTestsFailed.log"
    ctest --test-dir "$dir" "${select[@]}" -j "$jobs" --timeout "$timeout" >/dev/null 2>&1 || rc=$?
    names=()
    if [ "$rc" != 0 ] && [ -f "$dir/Testing/Temporary/LastTestsFailed.log" ]; then
        # Lines "12:integration.test_auth".
        mapfile -t names < <(sed 's/^[0-9]*://' "$dir/Testing/Temporary/LastTestsFailed.log")
    fi
    if [ "$rc" != 0 ] && [ ${#names[@]} -eq 0 ]; then
        echo "stress: run $k: ctest failed (rc $rc) without naming a test; see $log" >&2
        names=("(ctest)")
        failed["(ctest)"]=$((${failed["(ctest)"]:-0}))
    fi
    # CTest's log of the run holds every test's command, output and result.
    [ "$rc" = 0 ] || cp "$dir/Testing/Temporary/LastTest.log" "$log" 2>/dev/null || true
    for n in "${names[@]}"; do
        failed[$n]=$((${failed[$n]:-0} + 1))
        # The test's own part of the log: from "K/M Testing: NAME" to "\"NAME\" end time".
        awk -v t="$n" '$0 ~ /^[0-9]+\/[0-9]+ Testing: / && $NF == t {p = 1}
                       p {print}
                       p && index($0, "\"" t "\" end time") == 1 {p = 0}' \
            "$log" >"$logs/run-$k-$n.log" 2>/dev/null || true
    done
    if [ ${#names[@]} -gt 0 ]; then
        bad_runs=$((bad_runs + 1))
        echo "stress: run $k/$runs: ${#names[@]} failed (${names[*]}) in $(($(date +%s) - start)) s"
    else
        rm -f "$log"
        echo "stress: run $k/$runs: all passed in $(($(date +%s) - start)) s"
    fi
done
stop_hog

printf '\n%-44s %6s %6s\n' "test" "runs" "failed"
for t in "${tests[@]}" "(ctest)"; do
    [ -n "${failed[$t]+x}" ] || continue
    printf '%-44s %6d %6d\n' "$t" "$runs" "${failed[$t]}"
done
if [ "$bad_runs" -gt 0 ]; then
    echo "stress: $bad_runs of $runs run(s) had failures; logs in $logs"
    exit 1
fi
echo "stress: no failures in $runs run(s)"
