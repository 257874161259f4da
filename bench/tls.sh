#!/usr/bin/env bash
# TLS benchmark: 1 MiB elements (compression off) read through a dispatcher and one worker with
# TLS on every connection (mutual TLS, certificates made by tests/integration/make_certs.sh),
# against the same cluster in plain TCP, in the same run. The two clusters run side by side and
# are read in alternating rounds, so both see the same machine; the ratio is the median of the
# per-round ratios. Prints elements/s and MB/s for each and TLS / plain.
# Usage: bench/tls.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_TLS_ELEMENTS (per round, default 2000), SLUICE_BENCH_TLS_ROUNDS
# (default 5), SLUICE_BENCH_TLS_SIZE (bytes per element, default 1048576).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
for t in openssl awk sort; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
n=${SLUICE_BENCH_TLS_ELEMENTS:-2000}
rounds=${SLUICE_BENCH_TLS_ROUNDS:-5}
size=${SLUICE_BENCH_TLS_SIZE:-1048576}

tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

tests/integration/make_certs.sh "$tmp/certs" >/dev/null
tls=(--tls-cert "$tmp/certs/node.pem" --tls-key "$tmp/certs/node.key" --tls-ca "$tmp/certs/ca.pem")

# start NAME [FLAGS...]: a dispatcher and a worker; sets disp to the dispatcher's address.
start() {
    local name=$1
    shift
    "$bin/sluice-dispatcher" --port 0 "$@" >"$tmp/$name-d.out" 2>"$tmp/$name-d.log" &
    pids+=($!)
    disp=$(wait_listen "$tmp/$name-d.out" $!)
    "$bin/sluice-worker" --dispatcher "$disp" --port 0 "$@" >"$tmp/$name-w.out" \
        2>"$tmp/$name-w.log" &
    pids+=($!)
    wait_listen "$tmp/$name-w.out" $! >/dev/null
}
start plain
plain_disp=$disp
start tls "${tls[@]}"
tls_disp=$disp

pipeline="range($n) | map(bytes, $size)"
plain_id=$("$bin/sluice" register --dispatcher "$plain_disp" "$pipeline" --compression none)
tls_id=$("$bin/sluice" register --dispatcher "$tls_disp" "${tls[@]}" "$pipeline" \
         --compression none)

now_ns() { date +%s%N; }
# read_ns DISP ID [FLAGS...]: reads the dataset once; prints the nanoseconds it took.
read_ns() {
    local disp=$1 id=$2
    shift 2
    local t0 t1 got
    t0=$(now_ns)
    got=$("$bin/sluice" read --dispatcher "$disp" --dataset-id "$id" --format count "$@")
    t1=$(now_ns)
    [ "$got" = "$n" ] || { echo "read $got of $n elements from $disp" >&2; exit 1; }
    echo $((t1 - t0))
}

# One warm-up read each, then the rounds, alternating which goes first.
read_ns "$plain_disp" "$plain_id" >/dev/null
read_ns "$tls_disp" "$tls_id" "${tls[@]}" >/dev/null
: >"$tmp/rounds"
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then
        p=$(read_ns "$plain_disp" "$plain_id")
        t=$(read_ns "$tls_disp" "$tls_id" "${tls[@]}")
    else
        t=$(read_ns "$tls_disp" "$tls_id" "${tls[@]}")
        p=$(read_ns "$plain_disp" "$plain_id")
    fi
    echo "$p $t" >>"$tmp/rounds"
    awk -v r="$r" -v n="$n" -v s="$size" -v p="$p" -v t="$t" 'BEGIN {
        printf "round %d: plain %.0f MB/s, TLS %.0f MB/s, ratio %.2f\n", r,
               n * s / (p / 1e9) / 1e6, n * s / (t / 1e9) / 1e6, p / t }'
done

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
plain_med=$(awk '{ print $1 }' "$tmp/rounds" | median)
tls_med=$(awk '{ print $2 }' "$tmp/rounds" | median)
ratio_med=$(awk '{ print $1 / $2 }' "$tmp/rounds" | median)
awk -v n="$n" -v s="$size" -v p="$plain_med" -v t="$tls_med" -v q="$ratio_med" -v k="$rounds" \
    'BEGIN {
    printf "%d elements of %d bytes per read, %d rounds, medians:\n", n, s, k
    printf "plain TCP: %8.0f elements/s  %6.0f MB/s\n", n / (p / 1e9), n * s / (p / 1e9) / 1e6
    printf "TLS:       %8.0f elements/s  %6.0f MB/s\n", n / (t / 1e9), n * s / (t / 1e9) / 1e6
    printf "TLS / plain: %.2f (median of the per-round ratios; target >= 0.50)\n", q }'
