#!/usr/bin/env bash
# Hedged splits (sluice read --hedge): three workers, the same distributed_epoch read without and
# with hedging in alternating rounds, in two settings:
#   straggler  one worker stopped 400 ms of every 500 (SIGSTOP), `range(6000) | map(sleep_us,
#              5000)` in ten-element splits (600): the read's wall time and the split time p99 the
#              dispatcher measured (status: splits.time_ms), and the copies made;
#   healthy    no straggler, `range(10000000)` counted: the read's wall time and the copies made
#              (the cost of hedging where there is nothing to hedge).
# Prints each round, then the median ratios off/on (above 1: hedging is faster). Every read must
# return its N elements once each.
# Usage: bench/hedge.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_HEDGE_ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
rounds=${SLUICE_BENCH_HEDGE_ROUNDS:-3}
for t in date sort /usr/bin/python3; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
with_scratch

"$bin/sluice-dispatcher" --port 0 --worker-timeout-ms 30000 >"$tmp/d.out" 2>"$tmp/d.log" &
pids+=($!)
d=$(wait_listen "$tmp/d.out" "${pids[0]}")
workers=()
for i in 1 2 3; do
    "$bin/sluice-worker" --dispatcher "$d" --port 0 >"$tmp/w$i.out" 2>"$tmp/w$i.log" &
    pids+=($!)
    workers+=($!)
    wait_listen "$tmp/w$i.out" "$!" >/dev/null
done
sleep 1

# read MODE FLAG N PIPELINE...: prints "SECONDS P99_MS COPIES MEDIAN_MS MAX_MS" of one read.
read_once() {
    local flag=$1 n=$2
    shift 2
    local t0 t1
    t0=$(date +%s.%N)
    "$bin/sluice" read --dispatcher "$d" --mode distributed_epoch "$flag" "$@" >"$tmp/out"
    t1=$(date +%s.%N)
    "$bin/sluice" status --dispatcher "$d" --json >"$tmp/st.json"
    /usr/bin/python3 - "$tmp/out" "$n" "$tmp/st.json" "$t0" "$t1" <<'PY'
import json, sys
out, n, st, t0, t1 = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
lines = open(out).read().split()
if len(lines) == 1 and n > 1:  # --format count
    assert int(lines[0]) == n, f"read {lines[0]} of {n}"
else:
    assert sorted(map(int, lines)) == list(range(n)), "not every element exactly once"
job = max(json.load(open(st))["jobs"], key=lambda j: j["id"])
sp = job["splits"]
tm = sp.get('time_ms', {})
print(f"{t1 - t0:.2f} {tm.get('p99', 0)} {sp.get('hedged', 0)} {tm.get('median', 0)} {tm.get('max', 0)}")
PY
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

: >"$tmp/straggler"
: >"$tmp/healthy"
for r in $(seq 1 "$rounds"); do
    order="--no-hedge --hedge"
    [ $((r % 2)) = 0 ] && order="--hedge --no-hedge"
    for f in $order; do
        echo "healthy $f $(read_once "$f" 10000000 'range(10000000)' --format count)" |
            tee -a "$tmp/healthy"
    done
done
( while :; do kill -STOP "${workers[2]}"; sleep 0.4; kill -CONT "${workers[2]}"; sleep 0.1; done ) &
burster=$!
pids+=($burster)
for r in $(seq 1 "$rounds"); do
    order="--no-hedge --hedge"
    [ $((r % 2)) = 0 ] && order="--hedge --no-hedge"
    for f in $order; do
        echo "straggler $f $(read_once "$f" 6000 'range(6000) | map(sleep_us, 5000)' \
            --split-size 10)" | tee -a "$tmp/straggler"
    done
done
kill "$burster"
wait "$burster" 2>/dev/null || true
kill -CONT "${workers[2]}"

ratio() { # FILE COLUMN: median off / median on
    local off on
    off=$(awk -v c="$2" '$2 == "--no-hedge" {print $c}' "$1" | median)
    on=$(awk -v c="$2" '$2 == "--hedge" {print $c}' "$1" | median)
    awk -v a="$off" -v b="$on" 'BEGIN {printf "%.2f (%s / %s)", (b > 0 ? a / b : 0), a, b}'
}
echo "straggler: read time off/on $(ratio "$tmp/straggler" 3), split p99 off/on $(ratio "$tmp/straggler" 4)"
echo "healthy:   read time off/on $(ratio "$tmp/healthy" 3), copies made with --hedge:" \
    "$(awk '$2 == "--hedge" {print $5}' "$tmp/healthy" | tr '\n' ' ')"
