#!/usr/bin/env bash
# Deterministic reads benchmark: one dispatcher and two workers on this machine; the same datasets
# read in distributed_epoch without and with --deterministic, in alternating rounds of the same
# run, so both see the same machine. Prints, for small elements (int64 from range) and for 1 MiB
# elements (map(bytes, 1048576), compression off), elements/s of each and deterministic /
# non-deterministic (the median of the per-round ratios; target >= 0.8).
# Usage: bench/determ.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_DET_SMALL (elements, default 20000000), SLUICE_BENCH_DET_BIG
# (elements, default 2000), SLUICE_BENCH_DET_BIG_SPLIT (elements per split of the big dataset,
# default 4: 4 MiB splits, so the reorder bound holds several per worker thread),
# SLUICE_BENCH_DET_ROUNDS (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
for t in awk sort; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
n_small=${SLUICE_BENCH_DET_SMALL:-20000000}
n_big=${SLUICE_BENCH_DET_BIG:-2000}
big_split=${SLUICE_BENCH_DET_BIG_SPLIT:-4}
rounds=${SLUICE_BENCH_DET_ROUNDS:-5}

with_scratch

"$bin/sluice-dispatcher" --port 0 >"$tmp/d.out" 2>"$tmp/d.log" &
pids+=($!)
disp=$(wait_listen "$tmp/d.out" $!)
for w in 1 2; do
    "$bin/sluice-worker" --dispatcher "$disp" --port 0 >"$tmp/w$w.out" 2>"$tmp/w$w.log" &
    pids+=($!)
    wait_listen "$tmp/w$w.out" $! >/dev/null
done

small_id=$("$bin/sluice" register --dispatcher "$disp" "range($n_small)")
big_id=$("$bin/sluice" register --dispatcher "$disp" "range($n_big) | map(bytes, 1048576)" \
         --compression none --split-size "$big_split")

now_ns() { date +%s%N; }
# read_once ID N [FLAGS...]: reads the dataset once in distributed_epoch; prints the nanoseconds.
read_once() {
    local id=$1 n=$2
    shift 2
    local t0 t1 got
    t0=$(now_ns)
    got=$("$bin/sluice" read --dispatcher "$disp" --dataset-id "$id" --mode distributed_epoch \
          --format count "$@" 2>"$tmp/read.err")
    t1=$(now_ns)
    [ "$got" = "$n" ] || { echo "read $got of $n elements:" >&2; cat "$tmp/read.err" >&2; exit 1; }
    echo $((t1 - t0))
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# bench NAME ID N: warm-up reads, then rounds alternating which read goes first.
bench() {
    local name=$1 id=$2 n=$3 r a b
    read_once "$id" "$n" >/dev/null
    read_once "$id" "$n" --deterministic >/dev/null
    : >"$tmp/$name"
    for r in $(seq 1 "$rounds"); do
        if [ $((r % 2)) -eq 1 ]; then
            a=$(read_once "$id" "$n")
            b=$(read_once "$id" "$n" --deterministic)
        else
            b=$(read_once "$id" "$n" --deterministic)
            a=$(read_once "$id" "$n")
        fi
        echo "$a $b" >>"$tmp/$name"
        echo "$a $b" | awk -v r="$r" -v n="$n" -v what="$name" '{
            printf "%s round %d: non-deterministic %.0f elements/s, deterministic %.0f elements/s, ratio %.2f\n",
                   what, r, n / ($1 / 1e9), n / ($2 / 1e9), $1 / $2 }'
    done
}
bench small "$small_id" "$n_small"
bench big "$big_id" "$n_big"

summary() {
    local name=$1 n=$2 label=$3
    local a b q
    a=$(awk '{ print $1 }' "$tmp/$name" | median)
    b=$(awk '{ print $2 }' "$tmp/$name" | median)
    q=$(awk '{ print $1 / $2 }' "$tmp/$name" | median)
    awk -v n="$n" -v a="$a" -v b="$b" -v q="$q" -v label="$label" 'BEGIN {
        printf "%s: non-deterministic %.0f elements/s, deterministic %.0f elements/s, ratio %.2f (target >= 0.80)\n",
               label, n / (a / 1e9), n / (b / 1e9), q }'
}
echo "2 workers, $rounds rounds, medians ($(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)):"
summary small "$n_small" "int64 from range($n_small)"
summary big "$n_big" "1 MiB elements, $n_big of them, split size $big_split"
