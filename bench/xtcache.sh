#!/usr/bin/env bash
# Cross-trainer cache benchmark: what two trainers reading at full speed cost the workers. One
# dispatcher and one worker on this machine, a CPU-heavy endless pipeline (each element burns
# SLUICE_BENCH_XTC_US µs of its thread's CPU time in map(cpu_us, ...) of bench/plugin_cpu.c,
# then becomes 16 KiB so the task's buffer holds few elements), and three cases in alternating
# rounds of the same run:
#   one     one trainer reads N elements (the baseline: one pipeline's CPU);
#   cache   two trainers of one job with --cross-trainer-cache each read N elements at once;
#   nocache two trainers in two separate jobs (no cache) each read N elements at once.
# Each case gets a new job. The worker's CPU time (utime + stime from /proc/PID/stat) is taken
# before the reads and after them once it stops growing (the task's producer runs ahead until its
# buffer is full, the same in every case). Prints the CPU seconds of each case per round, and the
# medians of cache / one and nocache / one (about 1 and 2 when the cache shares the work).
# Usage: bench/xtcache.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_XTC_N (elements per trainer, default 5000), SLUICE_BENCH_XTC_US (µs of
# CPU per element, default 200), SLUICE_BENCH_XTC_ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
plugin=$(cd "${1:-build}" && pwd)/bench/plugin_cpu.so
[ -f "$plugin" ] || { echo "needs $plugin (cmake --build ${1:-build})"; exit 1; }
for t in awk sort getconf; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
n=${SLUICE_BENCH_XTC_N:-5000}
us=${SLUICE_BENCH_XTC_US:-200}
rounds=${SLUICE_BENCH_XTC_ROUNDS:-3}
tck=$(getconf CLK_TCK)

with_scratch

"$bin/sluice-dispatcher" --port 0 >"$tmp/d.out" 2>"$tmp/d.log" &
pids+=($!)
disp=$(wait_listen "$tmp/d.out" $!)
"$bin/sluice-worker" --dispatcher "$disp" --port 0 --plugin "$plugin" >"$tmp/w.out" 2>"$tmp/w.log" &
worker=$!
pids+=($worker)
wait_listen "$tmp/w.out" $worker >/dev/null

id=$("$bin/sluice" register --dispatcher "$disp" --compression none --plugin "$plugin" \
     "range(1000000) | map(cpu_us, $us) | map(bytes, 16384) | repeat()")

# The worker's CPU time in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$worker/stat"; }
# Waits until the worker's CPU time stops growing (two samples 300 ms apart within a tick), then
# prints it.
cpu_settled() {
    local a b
    a=$(cpu_ticks)
    while :; do
        sleep 0.3
        b=$(cpu_ticks)
        [ $((b - a)) -le 1 ] && break
        a=$b
    done
    echo "$b"
}

# read_one JOB [FLAGS...]: one trainer reads n elements; fails loudly on a short read.
read_one() {
    local job=$1
    shift
    local got
    got=$("$bin/sluice" read --dispatcher "$disp" --dataset-id "$id" --job-name "$job" \
          --limit "$n" --format count --quiet --plugin "$plugin" "$@" 2>>"$tmp/read.err")
    [ "$got" = "$n" ] || { echo "read $got of $n elements:" >&2; cat "$tmp/read.err" >&2; exit 1; }
}

job=0
# run_case NAME: prints the worker's CPU seconds for one case.
run_case() {
    local before after p1 p2
    job=$((job + 1))
    before=$(cpu_settled)
    case $1 in
    one)
        read_one "one$job" --cross-trainer-cache --trainer-id a ;;
    cache)
        read_one "cache$job" --cross-trainer-cache --trainer-id a & p1=$!
        read_one "cache$job" --cross-trainer-cache --trainer-id b & p2=$!
        wait $p1
        wait $p2 ;;
    nocache)
        read_one "nocache${job}a" & p1=$!
        read_one "nocache${job}b" & p2=$!
        wait $p1
        wait $p2 ;;
    esac
    after=$(cpu_settled)
    awk -v t=$((after - before)) -v hz="$tck" 'BEGIN { printf "%.2f\n", t / hz }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "worker CPU per case: $n elements per trainer, $us us of CPU per element"
: >"$tmp/ratios"
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then order="one cache nocache"; else order="nocache cache one"; fi
    declare -A s=()
    for c in $order; do s[$c]=$(run_case "$c"); done
    echo "${s[one]} ${s[cache]} ${s[nocache]}" | awk -v r="$r" '{
        printf "round %d: one trainer %.2f s, two with the cache %.2f s (%.2f), two without %.2f s (%.2f)\n",
               r, $1, $2, $2 / $1, $3, $3 / $1 }'
    echo "${s[one]} ${s[cache]} ${s[nocache]}" | awk '{ print $2 / $1, $3 / $1 }' >>"$tmp/ratios"
    unset s
done
c=$(awk '{ print $1 }' "$tmp/ratios" | median)
nc=$(awk '{ print $2 }' "$tmp/ratios" | median)
printf "median worker CPU against one trainer: two with the cache %.2f, two without %.2f\n" "$c" "$nc"
