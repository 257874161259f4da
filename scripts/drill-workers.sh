#!/usr/bin/env bash
# The worker crash drill: a dispatcher and DRILL_WORKERS workers serve a distributed_epoch read
# while, at random moments, a worker is killed with SIGKILL, a worker is drained with SIGTERM, or
# a new worker joins (never fewer than one live worker); with DRILL_DISPATCHER_RESTARTS > 0 the
# dispatcher is fault-tolerant and is also killed with SIGKILL and restarted on the same port and
# work dir that many times. A drained worker must exit 0 within its drain bound. At the end the
# elements read are compared with the expected multiset; the drill prints one line
#     elements N, worker kills K, drains T, joins J, dispatcher restarts R, lost L, duplicated D
# and exits non-zero unless L and D are 0, the read exited 0, every drained worker exited 0 in
# time and every action asked for was done.
#
#   scripts/drill-workers.sh [BUILD_DIR]           default: build (built if missing)
#   DRILL_ELEMENTS=N       elements in the pipeline range(N) (default 200000)
#   DRILL_SLEEP_US=U       simulated preprocessing per element in microseconds (default 100)
#   DRILL_OP=OP            the builtin that simulates it: sleep_us keeps a core busy for the
#                          time, wait_us waits without one (default sleep_us; the CTest drill
#                          waits)
#   DRILL_WORKERS=W        workers at the start (default 3)
#   DRILL_MAX_WORKERS=M    joins stop at this many live workers (default 2 W)
#   DRILL_THREADS=T        producer threads per worker (default 1)
#   DRILL_ACTIONS=A        worker actions: kills, drains and joins (default 10)
#   DRILL_DISPATCHER_RESTARTS=R  dispatcher kills, mixed in among the actions (default 0)
#   DRILL_SEED=S           seed of the actions and their times (default: the time)
#   DRILL_PAUSE_MS=LO,HI   pause before each action, uniform in [LO, HI) (default 300,1500)
#   DRILL_DRAIN_TIMEOUT_MS=D  the workers' --drain-timeout-ms (default 5000); a drained worker
#                          must exit 0 within D + 10 s
#   DRILL_WORKER_TIMEOUT_MS=T  the dispatcher's --worker-timeout-ms (default 1000)
#   DRILL_READ_TIMEOUT_S=T how long the read may take after the last action (default 180)
#   DRILL_LOG_LEVEL=L      log level of the dispatcher and the workers (default info)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
build=${1:-build}
if [ ! -x "$build/bin/sluice-dispatcher" ]; then
    scripts/build.sh "$build"
fi
bin=$build/bin
elements=${DRILL_ELEMENTS:-200000}
sleep_us=${DRILL_SLEEP_US:-100}
op=$(drill_op "${DRILL_OP:-sleep_us}")
nworkers=${DRILL_WORKERS:-3}
max_workers=${DRILL_MAX_WORKERS:-$((2 * nworkers))}
threads=${DRILL_THREADS:-1}
actions=${DRILL_ACTIONS:-10}
restarts=${DRILL_DISPATCHER_RESTARTS:-0}
seed=${DRILL_SEED:-$(date +%s)}
pause=${DRILL_PAUSE_MS:-300,1500}
pause_lo=${pause%,*}
pause_hi=${pause#*,}
drain_timeout_ms=${DRILL_DRAIN_TIMEOUT_MS:-5000}
drain_bound_s=$((drain_timeout_ms / 1000 + 10))
worker_timeout_ms=${DRILL_WORKER_TIMEOUT_MS:-1000}
read_timeout=${DRILL_READ_TIMEOUT_S:-180}
log_level=${DRILL_LOG_LEVEL:-info}
RANDOM=$seed
if [ "$nworkers" -lt 1 ] || [ "$max_workers" -lt "$nworkers" ]; then
    echo "drill: DRILL_WORKERS must be at least 1 and at most DRILL_MAX_WORKERS" >&2
    exit 2
fi

work=$(mktemp -d)
disp_pid=""
reader=""
declare -A live=()     # worker number -> pid, for workers running and not draining
declare -A draining=() # worker number -> pid, for workers sent SIGTERM and not yet reaped
declare -A drain_deadline=()
# Every child not yet reaped, by PID: the only processes the drill signals on exit (a reaped
# PID may already belong to someone else).
declare -A running=()
next_worker=1
kills=0
drains=0
joins=0
disp_restarts=0
failures=()
status=0

now_s() { date +%s; }

fail() {
    echo "drill: $*" >&2
    failures+=("$*")
}

# On any exit: everything still running is killed by PID (nothing by name), and the work dir
# (logs, what was read, the journal) stays behind when the drill failed.
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    local p
    for p in "${!running[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
    done
    for p in "${!running[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    if [ "$status" -eq 0 ]; then
        rm -rf "$work"
    else
        echo "drill: kept $work" >&2
    fi
}
diagnosed=0
trap 'rc=$?; if [ "$rc" -ne 0 ]; then status=1; [ "$diagnosed" -eq 1 ] || diagnostics; fi; cleanup' EXIT
trap 'exit 1' INT TERM

reap() { # PID: waits for the child to exit and sets reaped_rc to its status
    reaped_rc=0
    wait "$1" 2>/dev/null || reaped_rc=$?
    unset "running[$1]"
}

diagnostics() {
    local f
    diagnosed=1
    for f in "$work"/*.log; do
        [ -s "$f" ] || continue
        echo "---- $f (last 40 lines)" >&2
        tail -n 40 "$f" >&2
    done
}

start_dispatcher() { # PORT -> sets disp_pid and disp (HOST:PORT)
    local ft=()
    if [ "$restarts" -gt 0 ]; then
        ft=(--fault-tolerant --work-dir "$work/journal-dir" --snapshot-every 500)
    fi
    : >"$work/dispatcher.out"
    "$bin/sluice-dispatcher" --port "$1" "${ft[@]}" --worker-timeout-ms "$worker_timeout_ms" \
        --log-level "$log_level" >"$work/dispatcher.out" 2>>"$work/dispatcher.log" &
    disp_pid=$!
    running[$disp_pid]=1
    disp=$(wait_listen "$work/dispatcher.out" "$disp_pid")
}

start_worker() {
    local n=$next_worker pid addr
    next_worker=$((next_worker + 1))
    "$bin/sluice-worker" --dispatcher "$disp" --port 0 --threads "$threads" \
        --drain-timeout-ms "$drain_timeout_ms" --log-level "$log_level" \
        >"$work/worker$n.out" 2>"$work/worker$n.log" &
    pid=$!
    running[$pid]=1
    live[$n]=$pid
    addr=$(wait_listen "$work/worker$n.out" "$pid")
    echo "worker $n (pid $pid) at $addr"
}

# Sets picked to a random live worker's number. (Not echoed: a $(...) subshell reseeds RANDOM,
# and the actions must follow from DRILL_SEED.)
pick_live() {
    local keys
    mapfile -t keys < <(printf '%s\n' "${!live[@]}" | sort -n)
    picked=${keys[$((RANDOM % ${#keys[@]}))]}
}

# Reaps drained workers that exited and fails the ones past their bound (they are killed so the
# drill goes on). With "all", waits for every draining worker up to its bound.
check_drains() {
    local n pid rc
    for n in "${!draining[@]}"; do
        pid=${draining[$n]}
        if [ "${1:-}" = all ]; then
            while kill -0 "$pid" 2>/dev/null && [ "$(now_s)" -le "${drain_deadline[$n]}" ]; do
                sleep 0.1
            done
        fi
        if kill -0 "$pid" 2>/dev/null; then
            if [ "$(now_s)" -gt "${drain_deadline[$n]}" ]; then
                fail "drained worker $n (pid $pid) still running ${drain_bound_s} s after SIGTERM"
                kill -KILL "$pid" 2>/dev/null || true
                reap "$pid"
                unset "draining[$n]"
            fi
            continue
        fi
        reap "$pid"
        rc=$reaped_rc
        if [ "$rc" -ne 0 ]; then
            fail "drained worker $n (pid $pid) exited with status $rc, not 0"
        fi
        echo "drained worker $n exited with status $rc"
        unset "draining[$n]"
    done
}

# Fails (and forgets) live workers that exited on their own: only the drill may end a worker.
check_live() {
    local n pid
    for n in "${!live[@]}"; do
        pid=${live[$n]}
        kill -0 "$pid" 2>/dev/null && continue
        reap "$pid"
        fail "worker $n (pid $pid) exited on its own with status $reaped_rc"
        unset "live[$n]"
    done
}

pause_ms() { # LO HI: sleeps a random time in [LO, HI) milliseconds
    local ms=$(($1 + RANDOM % ($2 - $1)))
    sleep "$(awk -v ms="$ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
}

echo "== drill-workers: seed $seed, $elements elements, $nworkers workers, $actions actions," \
    "$restarts dispatcher restarts"
start_dispatcher 0
port=${disp##*:}
echo "dispatcher at $disp"
for _ in $(seq 1 "$nworkers"); do
    start_worker
done

pipeline="range($elements) | map($op, $sleep_us)"
echo "== reading '$pipeline' in distributed_epoch mode"
"$bin/sluice" read --dispatcher "$disp" "$pipeline" --mode distributed_epoch --format text \
    >"$work/read.txt" 2>"$work/read.log" &
reader=$!
running[$reader]=1
read_started=$(now_s)

# The plan: which of the actions + restarts steps are dispatcher restarts, at random places.
steps=$((actions + restarts))
declare -A restart_at=()
placed=0
while [ "$placed" -lt "$restarts" ]; do
    k=$((RANDOM % steps))
    if [ -z "${restart_at[$k]:-}" ]; then
        restart_at[$k]=1
        placed=$((placed + 1))
    fi
done

done_steps=0
for step in $(seq 0 $((steps - 1))); do
    pause_ms "$pause_lo" "$pause_hi"
    check_drains
    check_live
    if ! kill -0 "$reader" 2>/dev/null; then
        # Not a failure: what was done is still checked. The summary counts the actions taken.
        echo "drill: the read finished after $done_steps of $steps actions" \
             "(more DRILL_ELEMENTS or a larger DRILL_SLEEP_US give it time for all)" >&2
        break
    fi
    if [ -n "${restart_at[$step]:-}" ]; then
        kill -KILL "$disp_pid"
        reap "$disp_pid"
        pause_ms 0 400
        start_dispatcher "$port"
        disp_restarts=$((disp_restarts + 1))
        echo "action $((step + 1)): dispatcher killed and back on port $port"
        done_steps=$((done_steps + 1))
        continue
    fi
    # A worker action: kill or drain needs two live workers, a join room for one more.
    choices=()
    if [ "${#live[@]}" -ge 2 ]; then
        choices+=(kill drain)
    fi
    if [ "${#live[@]}" -lt "$max_workers" ] || [ "${#live[@]}" -eq 0 ]; then
        choices+=(join)
    fi
    action=${choices[$((RANDOM % ${#choices[@]}))]}
    case $action in
    kill)
        pick_live
        n=$picked
        kill -KILL "${live[$n]}"
        reap "${live[$n]}"
        echo "action $((step + 1)): worker $n killed"
        unset "live[$n]"
        kills=$((kills + 1))
        ;;
    drain)
        pick_live
        n=$picked
        kill -TERM "${live[$n]}"
        draining[$n]=${live[$n]}
        drain_deadline[$n]=$(($(now_s) + drain_bound_s))
        echo "action $((step + 1)): worker $n draining"
        unset "live[$n]"
        drains=$((drains + 1))
        ;;
    join)
        echo -n "action $((step + 1)): "
        start_worker
        joins=$((joins + 1))
        ;;
    esac
    done_steps=$((done_steps + 1))
done

deadline=$(($(now_s) + read_timeout))
while kill -0 "$reader" 2>/dev/null && [ "$(now_s)" -le "$deadline" ]; do
    check_drains
    check_live
    sleep 0.1
done
if kill -0 "$reader" 2>/dev/null; then
    fail "the read did not finish within $read_timeout s of the last action"
    # SIGINT first: the reader flushes what it has, so the tally below counts it.
    kill -INT "$reader" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$reader" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$reader" 2>/dev/null || true
fi
reap "$reader"
read_rc=$reaped_rc
echo "the read ended with status $read_rc after $(($(now_s) - read_started)) s"
if [ "$read_rc" -ne 0 ]; then
    fail "sluice read exited with status $read_rc"
fi
check_drains all

# Lost: values of the range that never arrived. Duplicated: arrivals of a value beyond its first,
# plus lines that are no value of the range at all.
read -r lost duplicated < <(sort "$work/read.txt" | uniq -c | awk -v n="$elements" '
    $2 ~ /^[0-9]+$/ && $2 + 0 < n && NF == 2 { seen++; dup += $1 - 1; next }
    { dup += $1 }
    END { printf "%d %d\n", n - seen, dup }')

# The live workers leave by SIGTERM (with no reader left, a drain has nothing to wait for); then
# the dispatcher, whose journal must verify.
for n in "${!live[@]}"; do
    kill -TERM "${live[$n]}" 2>/dev/null || true
    draining[$n]=${live[$n]}
    drain_deadline[$n]=$(($(now_s) + drain_bound_s))
    unset "live[$n]"
done
check_drains all
kill -TERM "$disp_pid" 2>/dev/null || true
for _ in $(seq 1 100); do
    kill -0 "$disp_pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$disp_pid" 2>/dev/null; then
    fail "the dispatcher did not exit within 10 s of SIGTERM"
    kill -KILL "$disp_pid" 2>/dev/null || true
fi
reap "$disp_pid"
disp_rc=$reaped_rc
if [ "$disp_rc" -ne 0 ]; then
    fail "the dispatcher exited with status $disp_rc"
fi
if [ "$restarts" -gt 0 ]; then
    "$bin/sluice" journal verify --work-dir "$work/journal-dir" ||
        fail "sluice journal verify failed"
fi

if [ "$lost" -ne 0 ] || [ "$duplicated" -ne 0 ] || [ "${#failures[@]}" -ne 0 ]; then
    status=1
    diagnostics
fi
echo "elements $elements, worker kills $kills, drains $drains, joins $joins," \
    "dispatcher restarts $disp_restarts, lost $lost, duplicated $duplicated"
exit "$status"
