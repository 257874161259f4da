#!/usr/bin/env bash
# Snapshot benchmark: what reading a saved snapshot costs against producing the same elements
# again. One fault-tolerant dispatcher and two workers on this machine, a CPU-heavy pipeline (each
# element burns SLUICE_BENCH_SNAP_US µs of its thread's CPU time in map(cpu_us, ...) of
# bench/plugin_cpu.c, then becomes 4 KiB), saved once with `sluice snapshot save`; then, in
# alternating rounds of the same run:
#   pipeline  a distributed_epoch read of the dataset: the workers run the pipeline again;
#   snapshot  a distributed_epoch read of snapshot("DIR"): the workers read the chunks.
# Every read must return exactly N elements. Prints the wall time of the save and of each read,
# and the median of snapshot / pipeline (well below 1 when the preprocessing dominates).
# Usage: bench/snapshot.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_SNAP_N (elements, default 20000), SLUICE_BENCH_SNAP_US (µs of CPU per
# element, default 200), SLUICE_BENCH_SNAP_ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
plugin=$(cd "${1:-build}" && pwd)/bench/plugin_cpu.so
[ -f "$plugin" ] || { echo "needs $plugin (cmake --build ${1:-build})"; exit 1; }
for t in awk sort date; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
n=${SLUICE_BENCH_SNAP_N:-20000}
us=${SLUICE_BENCH_SNAP_US:-200}
rounds=${SLUICE_BENCH_SNAP_ROUNDS:-3}

with_scratch

"$bin/sluice-dispatcher" --port 0 --work-dir "$tmp/wd" --fault-tolerant >"$tmp/d.out" \
    2>"$tmp/d.log" &
pids+=($!)
disp=$(wait_listen "$tmp/d.out" $!)
for w in 1 2; do
    "$bin/sluice-worker" --dispatcher "$disp" --port 0 --plugin "$plugin" >"$tmp/w$w.out" \
        2>"$tmp/w$w.log" &
    pids+=($!)
    wait_listen "$tmp/w$w.out" $! >/dev/null
done

id=$("$bin/sluice" register --dispatcher "$disp" --compression none --plugin "$plugin" \
     "range($n) | map(cpu_us, $us) | map(bytes, 4096)")

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# timed_read PIPELINE_ARGS...: prints the seconds a distributed_epoch read of N elements took;
# fails loudly on a short read.
timed_read() {
    local t0 got
    t0=$(now_ms)
    got=$("$bin/sluice" read --dispatcher "$disp" "$@" --mode distributed_epoch --format count \
          --quiet --plugin "$plugin" 2>>"$tmp/read.err")
    [ "$got" = "$n" ] || { echo "read $got of $n elements:" >&2; cat "$tmp/read.err" >&2; exit 1; }
    awk -v ms=$(($(now_ms) - t0)) 'BEGIN { printf "%.2f\n", ms / 1000 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "$n elements, $us us of CPU each, 2 workers"
t0=$(now_ms)
"$bin/sluice" snapshot save --dispatcher "$disp" --dataset-id "$id" --path "$tmp/snap" \
    >"$tmp/save.out"
save_s=$(awk -v ms=$(($(now_ms) - t0)) 'BEGIN { printf "%.2f\n", ms / 1000 }')
echo "save: $save_s s ($(cat "$tmp/save.out"), $(du -sh "$tmp/snap" | awk '{ print $1 }'))"

: >"$tmp/ratios"
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then
        p=$(timed_read --dataset-id "$id")
        s=$(timed_read "snapshot(\"$tmp/snap\")")
    else
        s=$(timed_read "snapshot(\"$tmp/snap\")")
        p=$(timed_read --dataset-id "$id")
    fi
    echo "$p $s" | awk -v r="$r" '{
        printf "round %d: pipeline %.2f s, snapshot %.2f s (%.3f)\n", r, $1, $2, $2 / $1 }'
    echo "$p $s" | awk '{ print $2 / $1 }' >>"$tmp/ratios"
done
printf "median read time of the snapshot against the pipeline: %.3f\n" "$(median <"$tmp/ratios")"
