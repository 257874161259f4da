#!/usr/bin/env bash
# TLS benchmark: 1 MiB elements (compression off) read through a dispatcher and one worker with
# TLS on every connection (mutual TLS, certificates made by tests/integration/make_certs.sh),
# against the same cluster in plain TCP, in the same run. The two clusters run side by side and
# are read in alternating rounds, so both see the same machine; the ratio is the median of the
# per-round ratios. Prints elements/s and MB/s for each and TLS / plain, and the CPU time the
# worker and the client spend per GiB, which depends less on what else the machine runs.
# Last, what AES-128-GCM alone costs here (openssl speed, CPU time, 16 KiB records: TLS's record
# size), and the CPU ratio if TLS cost nothing but that cipher. While the dispatcher, worker and
# client keep the CPUs busy, the elements/s ratio follows the CPU ratio.
# Usage: bench/tls.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_TLS_ELEMENTS (per round, default 2000), SLUICE_BENCH_TLS_ROUNDS
# (default 5), SLUICE_BENCH_TLS_SIZE (bytes per element, default 1048576), SLUICE_BENCH_TLS_PIN=1
# (the dispatchers and workers on one CPU, the client on another: the worker and the client no
# longer compete for a CPU, and the rate is set by the CPU time the worker spends per element).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
for t in openssl awk sort; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
n=${SLUICE_BENCH_TLS_ELEMENTS:-2000}
rounds=${SLUICE_BENCH_TLS_ROUNDS:-5}
size=${SLUICE_BENCH_TLS_SIZE:-1048576}
servers_on=()
client_on=()
if [ "${SLUICE_BENCH_TLS_PIN:-0}" = 1 ]; then
    command -v taskset >/dev/null || { echo "SLUICE_BENCH_TLS_PIN=1 needs taskset"; exit 1; }
    # The first two CPUs this script may use, from a list such as "0-3" or "2,5,7".
    cpus=($(awk '/^Cpus_allowed_list/ {
        n = split($2, r, ",")
        for (i = 1; i <= n && k < 2; i++) {
            split(r[i], b, "-")
            for (c = b[1]; c <= (b[2] == "" ? b[1] : b[2]) && k < 2; c++) { print c; k++ }
        } }' /proc/self/status))
    [ "${#cpus[@]}" = 2 ] || { echo "SLUICE_BENCH_TLS_PIN=1 needs 2 CPUs"; exit 1; }
    servers_on=(taskset -c "${cpus[0]}")
    client_on=(taskset -c "${cpus[1]}")
fi

with_scratch

tests/integration/make_certs.sh "$tmp/certs" >/dev/null
tls=(--tls-cert "$tmp/certs/node.pem" --tls-key "$tmp/certs/node.key" --tls-ca "$tmp/certs/ca.pem")

# start NAME [FLAGS...]: a dispatcher and a worker; sets disp to the dispatcher's address.
start() {
    local name=$1
    shift
    "${servers_on[@]}" "$bin/sluice-dispatcher" --port 0 "$@" >"$tmp/$name-d.out" \
        2>"$tmp/$name-d.log" &
    pids+=($!)
    disp=$(wait_listen "$tmp/$name-d.out" $!)
    "${servers_on[@]}" "$bin/sluice-worker" --dispatcher "$disp" --port 0 "$@" >"$tmp/$name-w.out" \
        2>"$tmp/$name-w.log" &
    wpid=$!
    pids+=($wpid)
    wait_listen "$tmp/$name-w.out" $wpid >/dev/null
}
start plain
plain_disp=$disp
plain_wpid=$wpid
start tls "${tls[@]}"
tls_disp=$disp
tls_wpid=$wpid
hz=$(getconf CLK_TCK)

pipeline="range($n) | map(bytes, $size)"
plain_id=$("$bin/sluice" register --dispatcher "$plain_disp" "$pipeline" --compression none)
tls_id=$("$bin/sluice" register --dispatcher "$tls_disp" "${tls[@]}" "$pipeline" \
         --compression none)

now_ns() { date +%s%N; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# read_once DISP ID WORKER_PID [FLAGS...]: reads the dataset once; prints the nanoseconds it took
# and the CPU seconds the worker and the client used.
read_once() {
    local disp=$1 id=$2 wpid=$3
    shift 3
    local t0 t1 w0 w1 got
    w0=$(ticks "$wpid")
    t0=$(now_ns)
    got=$( { TIMEFORMAT='%U %S'; time "${client_on[@]}" "$bin/sluice" read --dispatcher "$disp" \
             --dataset-id "$id" --format count "$@" 2>"$tmp/read.err"; } 2>"$tmp/time")
    t1=$(now_ns)
    w1=$(ticks "$wpid")
    [ "$got" = "$n" ] || { echo "read $got of $n elements from $disp:" >&2; cat "$tmp/read.err" >&2; exit 1; }
    awk -v ns=$((t1 - t0)) -v w=$((w1 - w0)) -v hz="$hz" '{ print ns, w / hz, $1 + $2 }' "$tmp/time"
}

# One warm-up read each, then the rounds, alternating which goes first.
read_once "$plain_disp" "$plain_id" "$plain_wpid" >/dev/null
read_once "$tls_disp" "$tls_id" "$tls_wpid" "${tls[@]}" >/dev/null
: >"$tmp/rounds"
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then
        p=$(read_once "$plain_disp" "$plain_id" "$plain_wpid")
        t=$(read_once "$tls_disp" "$tls_id" "$tls_wpid" "${tls[@]}")
    else
        t=$(read_once "$tls_disp" "$tls_id" "$tls_wpid" "${tls[@]}")
        p=$(read_once "$plain_disp" "$plain_id" "$plain_wpid")
    fi
    echo "$p $t" >>"$tmp/rounds"
    echo "$p $t" | awk -v r="$r" -v n="$n" -v s="$size" '{
        printf "round %d: plain %.0f MB/s, TLS %.0f MB/s, ratio %.2f; CPU s per GiB: plain %.2f, TLS %.2f\n",
               r, n * s / ($1 / 1e9) / 1e6, n * s / ($4 / 1e9) / 1e6, $1 / $4,
               ($2 + $3) / (n * s / 2^30), ($5 + $6) / (n * s / 2^30) }'
done

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
plain_med=$(awk '{ print $1 }' "$tmp/rounds" | median)
tls_med=$(awk '{ print $4 }' "$tmp/rounds" | median)
ratio_med=$(awk '{ print $1 / $4 }' "$tmp/rounds" | median)
gib=$(awk -v n="$n" -v s="$size" 'BEGIN { print n * s / 2^30 }')
plain_wcpu=$(awk -v g="$gib" '{ print $2 / g }' "$tmp/rounds" | median)
plain_ccpu=$(awk -v g="$gib" '{ print $3 / g }' "$tmp/rounds" | median)
tls_wcpu=$(awk -v g="$gib" '{ print $5 / g }' "$tmp/rounds" | median)
tls_ccpu=$(awk -v g="$gib" '{ print $6 / g }' "$tmp/rounds" | median)
awk -v n="$n" -v s="$size" -v p="$plain_med" -v t="$tls_med" -v q="$ratio_med" -v k="$rounds" \
    -v pw="$plain_wcpu" -v pc="$plain_ccpu" -v tw="$tls_wcpu" -v tc="$tls_ccpu" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" \
    -v ncpu="$(nproc)" 'BEGIN {
    printf "%d elements of %d bytes per read, %d rounds, medians (%d CPUs, load average %s):\n", n, s, k, ncpu, load
    printf "plain TCP: %8.0f elements/s  %6.0f MB/s   CPU s per GiB: worker %.2f, client %.2f\n",
           n / (p / 1e9), n * s / (p / 1e9) / 1e6, pw, pc
    printf "TLS:       %8.0f elements/s  %6.0f MB/s   CPU s per GiB: worker %.2f, client %.2f\n",
           n / (t / 1e9), n * s / (t / 1e9) / 1e6, tw, tc
    printf "TLS / plain: %.2f (median of the per-round ratios; target >= 0.50)\n", q
    printf "CPU, plain / TLS: %.2f\n", (pw + pc) / (tw + tc) }'

# The cipher alone: bytes per CPU second to encrypt and to decrypt 16 KiB records.
gcm() {
    openssl speed -seconds 1 "$@" -evp aes-128-gcm -bytes 16384 2>/dev/null |
        awk '/^AES-128-GCM/ { sub(/k$/, "", $2); print $2 * 1000 }'
}
enc=$(gcm || true)
dec=$(gcm -decrypt || true)
awk -v e="${enc:-0}" -v d="${dec:-0}" -v pw="$plain_wcpu" -v pc="$plain_ccpu" 'BEGIN {
    if (e <= 0 || d <= 0) { print "AES-128-GCM: openssl speed gave no figure"; exit }
    g = 2^30 / e + 2^30 / d
    printf "AES-128-GCM alone (openssl speed, 16 KiB): encrypt %.2f GB/s, decrypt %.2f GB/s, %.2f CPU s per GiB for both\n",
           e / 1e9, d / 1e9, g
    printf "CPU, plain / TLS if TLS cost only the cipher: %.2f\n", (pw + pc) / (pw + pc + g) }'
