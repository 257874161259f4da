#!/usr/bin/env bash
# The dispatcher crash drill: a fault-tolerant dispatcher and two workers serve a
# distributed_epoch read while the dispatcher is killed with SIGKILL at random moments, K times,
# and restarted each time on the same port and work dir. The reader and the workers reconnect on
# their own. At the end the elements read are compared with the expected multiset; the drill
# prints
#     elements N, restarts K, lost L, duplicated D
# and exits non-zero unless L and D are 0 (and the reader succeeded).
#
#   scripts/drill-dispatcher.sh [BUILD_DIR]        default: build (built if missing)
#   DRILL_RESTARTS=K   dispatcher kills (default 5)
#   DRILL_ELEMENTS=N   elements in the pipeline (default 40000)
#   DRILL_SLEEP_US=U   simulated preprocessing per element in microseconds (default 300)
#   DRILL_OP=OP        the builtin that simulates it: sleep_us keeps a core busy for the time,
#                      wait_us waits without one (default sleep_us; the CTest drill waits)
#   DRILL_SEED=S       seed of the kill times (default: the time)
#   DRILL_LOG_LEVEL=L  log level of the dispatcher and the workers (default warn)
#   DRILL_READ_TIMEOUT_S=T  how long the read may take after the last restart (default 120)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
build=${1:-build}
if [ ! -x "$build/bin/sluice-dispatcher" ]; then
    scripts/build.sh "$build"
fi
bin=$build/bin
restarts=${DRILL_RESTARTS:-5}
elements=${DRILL_ELEMENTS:-40000}
sleep_us=${DRILL_SLEEP_US:-300}
op=$(drill_op "${DRILL_OP:-sleep_us}")
log_level=${DRILL_LOG_LEVEL:-warn}
read_timeout=${DRILL_READ_TIMEOUT_S:-120}
RANDOM=${DRILL_SEED:-$(date +%s)}

work=$(mktemp -d)
pids=()
disp_pid=""
stop_all() {
    [ -n "$disp_pid" ] && kill -TERM "$disp_pid" 2>/dev/null || true
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    [ -n "$disp_pid" ] && wait "$disp_pid" 2>/dev/null || true
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    disp_pid=""
}
status=0
# The work dir (logs, journal, what was read) stays behind when the drill fails.
trap 'stop_all; if [ "$status" -eq 0 ]; then rm -rf "$work"; else echo "drill: kept $work" >&2; fi' EXIT

start_dispatcher() { # PORT -> sets disp_pid and disp (HOST:PORT)
    : >"$work/dispatcher.out"
    "$bin/sluice-dispatcher" --fault-tolerant --work-dir "$work/journal-dir" --port "$1" \
        --snapshot-every 500 --log-level "$log_level" >"$work/dispatcher.out" 2>>"$work/dispatcher.log" &
    disp_pid=$!
    disp=$(wait_listen "$work/dispatcher.out")
}

# Milliseconds to sleep: uniform in [lo, hi).
pause_ms() {
    local ms=$(( $1 + RANDOM % ($2 - $1) ))
    sleep "$(awk -v ms="$ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
}

echo "== a fault-tolerant dispatcher and two workers"
start_dispatcher 0
port=${disp##*:}
echo "dispatcher at $disp (work dir $work/journal-dir)"
for w in 1 2; do
    "$bin/sluice-worker" --dispatcher "$disp" --port 0 --log-level "$log_level" \
        >"$work/worker$w.out" 2>"$work/worker$w.log" &
    pids+=($!)
    echo "worker $w at $(wait_listen "$work/worker$w.out")"
done

pipeline="range($elements) | map($op, $sleep_us)"
echo "== reading '$pipeline' in distributed_epoch mode while the dispatcher is killed $restarts times"
"$bin/sluice" read --dispatcher "$disp" "$pipeline" --mode distributed_epoch --job-name drill \
    >"$work/read.txt" 2>"$work/read.log" &
reader=$!

killed=0
while [ "$killed" -lt "$restarts" ]; do
    pause_ms 300 1500
    if ! kill -0 "$reader" 2>/dev/null; then
        echo "drill: the read finished after $killed restarts; use more DRILL_ELEMENTS" >&2
        break
    fi
    kill -KILL "$disp_pid"
    wait "$disp_pid" 2>/dev/null || true
    killed=$((killed + 1))
    pause_ms 0 400
    start_dispatcher "$port"
    echo "restart $killed: dispatcher killed and back on port $port"
done

for _ in $(seq 1 $((read_timeout * 10))); do
    kill -0 "$reader" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$reader" 2>/dev/null; then
    echo "drill: the read did not finish within $read_timeout s of the last restart" >&2
    kill -TERM "$reader" || true
    status=1
fi
wait "$reader" || { echo "drill: sluice read failed:" >&2; cat "$work/read.log" >&2; status=1; }

# Lost: expected values that never arrived. Duplicated: arrivals beyond the first of a value,
# and values that were never expected at all.
seq 0 $((elements - 1)) | sort >"$work/expected.txt"
sort -u "$work/read.txt" >"$work/distinct.txt"
lost=$(comm -23 "$work/expected.txt" "$work/distinct.txt" | wc -l)
unexpected=$(comm -13 "$work/expected.txt" "$work/distinct.txt" | wc -l)
got=$(wc -l <"$work/read.txt")
distinct=$(wc -l <"$work/distinct.txt")
duplicated=$((got - distinct + unexpected))

echo "== verifying the journal"
stop_all
"$bin/sluice" journal verify --work-dir "$work/journal-dir" || status=1

echo "elements $elements, restarts $killed, lost $lost, duplicated $duplicated"
if [ "$lost" -ne 0 ] || [ "$duplicated" -ne 0 ] || [ "$killed" -lt "$restarts" ]; then
    status=1
fi
exit "$status"
