#!/usr/bin/env bash
# Object-store benchmark: 1 MiB records (lines of 1,048,575 base64 characters and a newline) read
# with `sluice run 'lines("s3://bench/obj-*")' --format count` from a local s3rver, reached
# directly (no relay), beside the same records from the same files on local disk, and beside raw
# curl downloading the same objects to /dev/null (one curl, one connection, the objects one
# after another, as sluice reads them), and beside a dispatcher with two workers reading the
# same objects in distributed_epoch for one `sluice read` (each object read by one worker, its
# records sent on to the reader), in the same run. The modes alternate in each round;
# prints each round, the medians of MB/s, the ratios s3/local, s3/curl and 2 workers/curl (the
# issue's target: at least 0.9 of curl with two workers), and the requests per
# GiB sluice makes (counted in one more pass through the tests' relay, tests/npm/s3_relay.mjs,
# which counts every request), with --object-range-bytes as given.
# Usage: bench/objects.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_OBJ_MB (MiB of records, default 1024), SLUICE_BENCH_OBJ_FILES
# (objects, default 8), SLUICE_BENCH_OBJ_ROUNDS (default 3), SLUICE_BENCH_OBJ_RANGE (bytes per
# ranged GET, default 8388608).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
for t in node curl awk base64 head date; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
[ -d tests/npm/node_modules/s3rver ] || { echo "needs the tests' npm packages (scripts/deps.sh)"; exit 1; }
mb=${SLUICE_BENCH_OBJ_MB:-1024}
files=${SLUICE_BENCH_OBJ_FILES:-8}
rounds=${SLUICE_BENCH_OBJ_ROUNDS:-3}
range=${SLUICE_BENCH_OBJ_RANGE:-8388608}

with_scratch

per=$((mb / files))
[ "$per" -ge 1 ] || { echo "SLUICE_BENCH_OBJ_MB must be at least SLUICE_BENCH_OBJ_FILES"; exit 1; }
echo "writing $files objects of $per MiB ($((per * files)) records of 1 MiB)"
mkdir -p "$tmp/data/bench"
for i in $(seq 0 $((files - 1))); do
    # 786432 random bytes are 1048576 base64 characters: 1048575 on a line and one carried over,
    # so each line is cut at 1048575 characters and the file holds exactly per lines.
    # head stops reading before base64's last short line: base64 may die of SIGPIPE (fine).
    { head -c $((per * 786432)) /dev/urandom | base64 -w 1048575 || true; } | head -n "$per" \
        >"$tmp/data/bench/obj-$(printf %03d "$i")"
done
bytes=$(cat "$tmp"/data/bench/obj-* | wc -c)
records=$(cat "$tmp"/data/bench/obj-* | wc -l)
echo "objects: $records records in $bytes bytes"

node tests/npm/s3_relay.mjs "$tmp/data" S3RVER S3RVER >"$tmp/relay.out" 2>"$tmp/relay.log" &
pids+=($!)
relay=$(wait_listen "$tmp/relay.out" $!) || { echo "the relay did not start"; exit 1; }
direct=$(sed -n 's/.* s3rver itself on //p' "$tmp/relay.out")
echo "s3rver on $direct, relay on $relay"
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1

# A dispatcher and two workers on the same server, for the cluster's figure (distributed_epoch:
# each object read by one worker, its elements sent on to the reader).
AWS_ENDPOINT_URL=$direct "$bin/sluice-dispatcher" --port 0 --object-range-bytes "$range" \
    >"$tmp/d.out" 2>"$tmp/d.err" &
pids+=($!)
disp=$(wait_listen "$tmp/d.out" $!)
for w in 1 2; do
    AWS_ENDPOINT_URL=$direct "$bin/sluice-worker" --dispatcher "$disp" --port 0 \
        --object-range-bytes "$range" >"$tmp/w$w.out" 2>"$tmp/w$w.err" &
    pids+=($!)
    wait_listen "$tmp/w$w.out" $! >/dev/null
done

urls=()
for f in "$tmp"/data/bench/obj-*; do urls+=("$direct/bench/$(basename "$f")"); done

# Prints the seconds one command takes, after checking it read every record.
timed() {
    local start end out
    start=$(date +%s.%N)
    out=$("$@")
    end=$(date +%s.%N)
    [ -z "$out" ] || [ "$out" = "$records" ] || { echo "read $out records, not $records" >&2; exit 1; }
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}
sluice_s3() {
    AWS_ENDPOINT_URL=$direct "$bin/sluice" run 'lines("s3://bench/obj-*")' --format count \
        --object-range-bytes "$range"
}
sluice_cluster() {
    "$bin/sluice" read --dispatcher "$disp" 'lines("s3://bench/obj-*")' --mode distributed_epoch \
        --format count
}
sluice_local() {
    "$bin/sluice" run "lines(\"$tmp/data/bench/obj-*\")" --format count
}
raw_curl() {
    local args=()
    for u in "${urls[@]}"; do args+=(-o /dev/null "$u"); done
    curl -sS --fail "${args[@]}"
}

: >"$tmp/times"
for r in $(seq 1 "$rounds"); do
    s3=$(timed sluice_s3)
    local_s=$(timed sluice_local)
    c=$(timed raw_curl)
    cl=$(timed sluice_cluster)
    echo "round $r: s3 ${s3}s, local ${local_s}s, curl ${c}s, 2 workers ${cl}s"
    echo "$s3 $local_s $c $cl" >>"$tmp/times"
done

# Requests per GiB: one more pass, through the relay, which counts them.
curl -sS -X POST "http://$relay/__relay/reset" >/dev/null
AWS_ENDPOINT_URL=http://$relay "$bin/sluice" run 'lines("s3://bench/obj-*")' --format count \
    --object-range-bytes "$range" >/dev/null
stats=$(curl -sS "http://$relay/__relay/stats")
gets=$(sed 's/.*"get":\([0-9]*\).*/\1/' <<<"$stats")
lists=$(sed 's/.*"list":\([0-9]*\).*/\1/' <<<"$stats")

awk -v bytes="$bytes" -v gets="$gets" -v lists="$lists" -v range="$range" '
    function median(col,   a, n, i, j, x) {
        n = 0
        for (i = 1; i <= NR; i++) a[++n] = t[i, col]
        for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { t[NR, 1] = $1; t[NR, 2] = $2; t[NR, 3] = $3; t[NR, 4] = $4 }
    END {
        s3 = bytes / median(1) / 1e6; lo = bytes / median(2) / 1e6; c = bytes / median(3) / 1e6
        cl = bytes / median(4) / 1e6
        printf "%-30s %10s\n", "reader (medians)", "MB/s"
        printf "%-30s %10.1f\n", "sluice run, s3://", s3
        printf "%-30s %10.1f\n", "sluice run, local files", lo
        printf "%-30s %10.1f\n", "curl, same objects", c
        printf "%-30s %10.1f\n", "2 workers, s3://, one reader", cl
        printf "s3 / local: %.2fx; s3 / curl: %.2fx; 2 workers / curl: %.2fx\n", s3 / lo, s3 / c, cl / c
        printf "requests: %d GETs and %d listing pages for %.3f GiB (ranges of %d bytes): %.1f per GiB\n",
               gets, lists, bytes / 1073741824, range, (gets + lists) / (bytes / 1073741824)
    }' "$tmp/times"
