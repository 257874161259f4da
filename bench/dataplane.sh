#!/usr/bin/env bash
# Data-plane benchmark: one dispatcher, one worker and one client on this machine, beside raw
# loopback TCP (iperf3) measured in the same run. Prints
#   - 1 MiB elements, compression off: MiB/s and the fraction of the raw TCP rate;
#   - 8-byte int64 elements from range(): elements per second.
# Usage: bench/dataplane.sh [BUILD_DIR]   (default build/; builds nothing itself)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
for t in iperf3 awk; do command -v $t >/dev/null || { echo "needs $t (scripts/deps.sh)"; exit 1; }; done

with_scratch

now_ns() { date +%s%N; }

"$bin/sluice-dispatcher" --port 0 >"$tmp/d.out" 2>"$tmp/d.err" &
pids+=($!)
disp=$(wait_listen "$tmp/d.out")
"$bin/sluice-worker" --dispatcher "$disp" --port 0 >"$tmp/w.out" 2>"$tmp/w.err" &
pids+=($!)
wait_listen "$tmp/w.out" >/dev/null

# Raw loopback TCP, one stream, 3 seconds.
iport=$((20000 + RANDOM % 20000))
iperf3 -s -p "$iport" -1 >/dev/null 2>&1 &
pids+=($!)
sleep 0.3
raw_bps=$(iperf3 -c 127.0.0.1 -p "$iport" -t 3 -f m 2>/dev/null | awk '/receiver/ {print $(NF-2)}')
raw_mib=$(awk -v m="$raw_bps" 'BEGIN { printf "%.0f", m * 1e6 / 8 / 1048576 }')

# 1 MiB elements, compression off.
n_big=${SLUICE_BENCH_BIG:-3000}
id=$("$bin/sluice" register --dispatcher "$disp" "range($n_big) | map(bytes, 1048576)" \
     --compression none)
t0=$(now_ns)
got=$("$bin/sluice" read --dispatcher "$disp" --dataset-id "$id" --format count)
t1=$(now_ns)
[ "$got" = "$n_big" ] || { echo "read $got of $n_big big elements" >&2; exit 1; }
big_mib=$(awk -v n="$n_big" -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f", n / (ns / 1e9) }')

# 8-byte elements.
n_small=${SLUICE_BENCH_SMALL:-20000000}
t0=$(now_ns)
got=$("$bin/sluice" read --dispatcher "$disp" "range($n_small)" --format count)
t1=$(now_ns)
[ "$got" = "$n_small" ] || { echo "read $got of $n_small small elements" >&2; exit 1; }
small_eps=$(awk -v n="$n_small" -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f", n / (ns / 1e9) }')

# The same small elements in distributed_epoch, where every element carries its split and
# position and the client keeps the ledger that drops duplicates: the cost of acknowledged splits.
t0=$(now_ns)
got=$("$bin/sluice" read --dispatcher "$disp" "range($n_small)" --mode distributed_epoch \
      --format count)
t1=$(now_ns)
[ "$got" = "$n_small" ] || { echo "read $got of $n_small distributed elements" >&2; exit 1; }
dist_eps=$(awk -v n="$n_small" -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f", n / (ns / 1e9) }')

echo "raw loopback TCP (iperf3):      ${raw_mib} MiB/s"
echo "1 MiB elements, no compression: ${big_mib} MiB/s  ratio $(awk -v a="$big_mib" -v b="$raw_mib" 'BEGIN { printf "%.2f", a / b }') of raw (target >= 0.75)"
echo "8-byte elements from range:     ${small_eps} elements/s (target >= 2000000)"
echo "8-byte elements, distributed:   ${dist_eps} elements/s  ratio $(awk -v a="$dist_eps" -v b="$small_eps" 'BEGIN { printf "%.2f", a / b }') of parallel_epochs"
