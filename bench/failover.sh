#!/usr/bin/env bash
# Failover benchmark: how long a dispatcher group of 3 replicas (Raft) is without a serving
# leader. Three replicas, two workers and a distributed_epoch read always in progress through the
# list of the three (`sluice read` again whenever one ends; every read must return exactly N
# elements), then:
#   kills      the leader killed (-9) again and again, each restarted 1 s after the next leader
#              serves: prints the time from the kill to the first 200 of GET /readyz on another
#              replica (the new leader's first reply), p50 and p99;
#   handovers  the leader stopped by SIGTERM (it hands leadership over first) and restarted:
#              prints the time without any serving replica, p50 and max.
# The baseline is the election timeout of the same run: a kill cannot be noticed sooner, so the
# ratio p50 / election timeout says what the failover adds to it.
# Usage: bench/failover.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_FAILOVER_KILLS (default 20), SLUICE_BENCH_FAILOVER_HANDOVERS
# (default 5), SLUICE_BENCH_FAILOVER_TIMEOUT_MS (the election timeout, default 600, the dispatcher's),
# SLUICE_BENCH_FAILOVER_N (elements per read, default 100000).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
for t in awk sort date curl /usr/bin/python3; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
kills=${SLUICE_BENCH_FAILOVER_KILLS:-20}
handovers=${SLUICE_BENCH_FAILOVER_HANDOVERS:-5}
timeout_ms=${SLUICE_BENCH_FAILOVER_TIMEOUT_MS:-600} # the dispatcher's default
n=${SLUICE_BENCH_FAILOVER_N:-100000}

# The processes are killed with -9 at the end: a leader left alone may not finish a SIGTERM.
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT

read -r -a ports <<<"$(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(9)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
declare -A rpc raft met rp
for i in 1 2 3; do
    rpc[$i]=${ports[$((i - 1))]}
    raft[$i]=${ports[$((i + 2))]}
    met[$i]=${ports[$((i + 5))]}
done
cluster="1=127.0.0.1:${raft[1]},2=127.0.0.1:${raft[2]},3=127.0.0.1:${raft[3]}"
list="127.0.0.1:${rpc[1]},127.0.0.1:${rpc[2]},127.0.0.1:${rpc[3]}"

start() {
    "$bin/sluice-dispatcher" --port "${rpc[$1]}" --work-dir "$tmp/d$1" --raft-id "$1" \
        --raft-address "127.0.0.1:${raft[$1]}" --raft-cluster "$cluster" \
        --metrics-port "${met[$1]}" --raft-election-timeout-ms "$timeout_ms" \
        >>"$tmp/d$1.out" 2>>"$tmp/d$1.log" &
    rp[$1]=$!
    pids+=($!)
}

# serving [EXCLUDE]: prints the id of a replica (not EXCLUDE) whose /readyz answers 200.
serving() {
    local i
    for i in 1 2 3; do
        [ "$i" = "${1:-}" ] && continue
        if [ "$(curl -s -m 0.3 -o /dev/null -w '%{http_code}' \
                "http://127.0.0.1:${met[$i]}/readyz")" = 200 ]; then
            echo "$i"
            return
        fi
    done
}

# wait_serving [EXCLUDE]: prints the serving replica's id once there is one (30 s at most).
wait_serving() {
    local l
    for _ in $(seq 1 1500); do
        l=$(serving "${1:-}")
        [ -n "$l" ] && { echo "$l"; return 0; }
        sleep 0.02
    done
    echo "no replica serves after 30 s" >&2
    tail -n 5 "$tmp"/d*.log >&2
    return 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# pct P: the P-th percentile (nearest rank) of the numbers on stdin.
pct() { sort -g | awk -v p="$1" '{ v[NR] = $1 } END { r = int((p * NR + 99) / 100); if (r < 1) r = 1; print v[r] }'; }

for i in 1 2 3; do start $i; done
wait_serving >/dev/null
for w in 1 2; do
    "$bin/sluice-worker" --dispatcher "$list" --port 0 >"$tmp/w$w.out" 2>"$tmp/w$w.log" &
    pids+=($!)
    wait_listen "$tmp/w$w.out" $! >/dev/null
done

# A read always in progress: each prints its count, which must be n.
(
    r=0
    while :; do
        r=$((r + 1))
        "$bin/sluice" read --dispatcher "$list" --mode distributed_epoch --job-name "j$r" \
            --format count --quiet "range($n) | map(sleep_us, 100)" >>"$tmp/counts" \
            2>>"$tmp/read.err" || echo "failed" >>"$tmp/counts"
    done
) &
pids+=($!)
reader=$!
sleep 2

echo "3 replicas, 2 workers, reads of $n elements in progress; election timeout ${timeout_ms} ms"
: >"$tmp/kill_ms"
for k in $(seq 1 "$kills"); do
    l=$(wait_serving)
    t0=$(now_ms)
    kill -9 "${rp[$l]}"
    wait "${rp[$l]}" 2>/dev/null || true
    wait_serving "$l" >/dev/null
    echo $(($(now_ms) - t0)) >>"$tmp/kill_ms"
    sleep 1
    start "$l"
    sleep 1
done

: >"$tmp/handover_ms"
for h in $(seq 1 "$handovers"); do
    l=$(wait_serving)
    # Time without any serving replica, from SIGTERM until another replica serves.
    down=0
    last=$(now_ms)
    began=$last
    kill -TERM "${rp[$l]}"
    while :; do
        s=$(serving)
        t=$(now_ms)
        [ -z "$s" ] && down=$((down + t - last))
        last=$t
        [ -n "$s" ] && [ "$s" != "$l" ] && break
        [ $((t - began)) -gt 30000 ] && { echo "no leader after SIGTERM" >&2; exit 1; }
        sleep 0.01
    done
    for _ in $(seq 1 300); do kill -0 "${rp[$l]}" 2>/dev/null || break; sleep 0.1; done
    kill -9 "${rp[$l]}" 2>/dev/null && echo "replica $l still running 30 s after SIGTERM" >&2
    wait "${rp[$l]}" 2>/dev/null || true
    echo "$down" >>"$tmp/handover_ms"
    start "$l"
    sleep 2
done

kill "$reader" 2>/dev/null || true
wait "$reader" 2>/dev/null || true
ms() { awk '{ printf "%.3f", $1 / 1000 }'; }
echo "kill -9 of the leader to the next leader's first reply, $kills kills:" \
    "p50 $(pct 50 <"$tmp/kill_ms" | ms) s, p99 $(pct 99 <"$tmp/kill_ms" | ms) s," \
    "max $(pct 100 <"$tmp/kill_ms" | ms) s;" \
    "p50 / election timeout $(pct 50 <"$tmp/kill_ms" | awk -v t="$timeout_ms" '{ printf "%.2f", $1 / t }')"
echo "SIGTERM of the leader (handover), $handovers times: unavailability" \
    "p50 $(pct 50 <"$tmp/handover_ms" | ms) s, max $(pct 100 <"$tmp/handover_ms" | ms) s"
total=$(grep -c . "$tmp/counts" || true)
exact=$(grep -cx "$n" "$tmp/counts" || true)
echo "reads finished meanwhile: $total, of which exact ($n elements): $exact"
# What went wrong in the replicas, if anything (their logs go with the scratch directory).
if grep -h -i "assert\|abort\|error \|fatal" "$tmp"/d*.log >"$tmp/trouble"; then
    echo "replica logs:"
    sed 's/^/  /' "$tmp/trouble"
fi
