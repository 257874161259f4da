#!/usr/bin/env bash
# A reference autoscaler for one machine: follows the dispatcher's recommended_workers by
# starting and draining sluice-worker processes on this host.
#
# Every --interval-s seconds it reads `sluice status --json`, takes recommended_workers, bounds it
# to [--min, --max], and compares it with the workers it runs itself (alive): one worker is started
# (port 0) when the target is above that count, and one is drained when it is below (SIGTERM: the
# worker serves what it holds and then leaves; the script waits for it to exit). One action per
# poll: the dispatcher's policy already bounds each step, and a new worker needs a heartbeat before
# the dispatcher counts it. Each action is logged as one line on stderr. SIGINT or SIGTERM drains
# every worker it started, then exits 0. Workers started by anything else are never touched.
#
# Usage: scripts/autoscale.sh --dispatcher H:P[,H:P...] [--bin-dir DIR] [--interval-s N]
#                             [--min N] [--max N] [--worker-args "..."]
#   --bin-dir DIR      where sluice and sluice-worker are (default: build/bin of this checkout)
#   --interval-s N     seconds between polls (default 10)
#   --min N            workers to keep running at least (default 1)
#   --max N            workers to run at most (default 0: no limit)
#   --worker-args "..." extra arguments for every sluice-worker (split on spaces)
# The worker logs go to $AUTOSCALE_LOG_DIR (default: a new temporary directory, named in the log).
# A drained worker that has not exited after $AUTOSCALE_DRAIN_GRACE_S seconds (default 120) is
# killed.
set -uo pipefail

prog=autoscale
usage() {
    sed -n 's/^# \{0,1\}//; /^Usage:/,/^killed\.$/p' "$0"
    exit 0
}
log() { echo "$prog: $(date '+%Y-%m-%d %H:%M:%S') $*" >&2; }
die_usage() { echo "$prog: $*" >&2; exit 2; }
is_count() { [[ "$1" =~ ^[0-9]+$ ]]; }

dispatcher=""
. "$(dirname "$0")/lib.sh"
bin_dir="$(cd "$(dirname "$0")/.." && pwd)/build/bin"
interval=10
min=1
max=0
worker_args=""
while [ $# -gt 0 ]; do
    case "$1" in
    --dispatcher) [ $# -ge 2 ] || die_usage "$1 needs a value"; dispatcher=$2; shift 2 ;;
    --bin-dir) [ $# -ge 2 ] || die_usage "$1 needs a value"; bin_dir=$2; shift 2 ;;
    --interval-s) [ $# -ge 2 ] || die_usage "$1 needs a value"; interval=$2; shift 2 ;;
    --min) [ $# -ge 2 ] || die_usage "$1 needs a value"; min=$2; shift 2 ;;
    --max) [ $# -ge 2 ] || die_usage "$1 needs a value"; max=$2; shift 2 ;;
    --worker-args) [ $# -ge 2 ] || die_usage "$1 needs a value"; worker_args=$2; shift 2 ;;
    --help | -h) usage ;;
    *) die_usage "unknown argument '$1' (try --help)" ;;
    esac
done
[ -n "$dispatcher" ] || die_usage "--dispatcher H:P is required (try --help)"
is_count "$interval" && [ "$interval" -ge 1 ] || die_usage "--interval-s: expected a number of seconds from 1, got '$interval'"
is_count "$min" || die_usage "--min: expected a number, got '$min'"
is_count "$max" || die_usage "--max: expected a number, got '$max'"
if [ "$max" -gt 0 ] && [ "$min" -gt "$max" ]; then die_usage "--min $min is above --max $max"; fi
for b in sluice sluice-worker; do
    [ -x "$bin_dir/$b" ] || die_usage "$bin_dir/$b not found (build first, or pass --bin-dir)"
done
read -r -a extra <<<"$worker_args"
drain_grace=${AUTOSCALE_DRAIN_GRACE_S:-120}
is_count "$drain_grace" || die_usage "AUTOSCALE_DRAIN_GRACE_S: expected a number of seconds, got '$drain_grace'"

log_dir=${AUTOSCALE_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/sluice-autoscale.XXXXXX")}
mkdir -p "$log_dir"
log "following $dispatcher every ${interval}s, between $min and $([ "$max" -gt 0 ] && echo "$max" || echo "any number of") workers; worker logs in $log_dir"

pids=() # the workers this script started and has not drained, oldest first
started=0
stopping=0
trap 'stopping=1' INT TERM

# Waits for worker $1 to exit and returns its status. The worker's own drain timeout bounds the
# drain; a worker still running drain_grace seconds later is hung, and is killed.
wait_exit() {
    local deadline=$((SECONDS + drain_grace))
    while kill -0 "$1" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "drain: worker pid $1 still running after ${drain_grace}s: killing it"
            kill -KILL "$1" 2>/dev/null
            break
        fi
        sleep 0.2
    done
    wait "$1" 2>/dev/null
}

# Forgets workers that exited on their own (a crash, or a kill from outside).
reap() {
    local alive=() p
    for p in "${pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
            alive+=("$p")
        else
            wait "$p" 2>/dev/null
            log "worker pid $p exited on its own (status $?)"
        fi
    done
    pids=("${alive[@]}")
}

start_worker() {
    started=$((started + 1))
    local out="$log_dir/worker-$started.out" err="$log_dir/worker-$started.log"
    "$bin_dir/sluice-worker" --dispatcher "$dispatcher" --port 0 "${extra[@]}" >"$out" 2>"$err" &
    local pid=$!
    pids+=("$pid")
    # The address is reported once it listens; a worker that fails at once is noticed here.
    local addr
    addr=$(wait_listen "$out" "$pid") || addr=""
    log "start: worker pid $pid at ${addr:-(not listening yet)}, $1 (now ${#pids[@]})"
}

# Drains the newest worker: it got the least work, so it has the least to hand over.
drain_worker() {
    local last=$((${#pids[@]} - 1))
    local pid=${pids[$last]}
    pids=("${pids[@]:0:$last}")
    log "drain: worker pid $pid, $1 (now ${#pids[@]})"
    kill -TERM "$pid" 2>/dev/null
    wait_exit "$pid"
    log "drain: worker pid $pid exited (status $?)"
}

recommended() {
    local json
    json=$("$bin_dir/sluice" status --dispatcher "$dispatcher" --json --timeout-ms $((interval * 1000)) 2>/dev/null) || return 1
    if command -v jq >/dev/null; then
        jq -er '.recommended_workers | select(type == "number")' <<<"$json"
    else
        grep -o '"recommended_workers":[0-9]*' <<<"$json" | head -n 1 | cut -d: -f2 | grep .
    fi
}

status_failing=0
while [ "$stopping" -eq 0 ]; do
    reap
    target=""
    if rec=$(recommended); then
        [ "$status_failing" -eq 1 ] && log "status: the dispatcher answers again"
        status_failing=0
        target=$rec
    elif [ "$status_failing" -eq 0 ]; then
        status_failing=1
        log "status: no recommendation from $dispatcher (retrying; keeping ${#pids[@]} workers)"
    fi
    # Without a recommendation only the bounds apply.
    want=${target:-${#pids[@]}}
    [ "$want" -lt "$min" ] && want=$min
    [ "$max" -gt 0 ] && [ "$want" -gt "$max" ] && want=$max
    why="recommended ${target:-unknown}, bounds [$min, $([ "$max" -gt 0 ] && echo "$max" || echo "-")]"
    if [ "${#pids[@]}" -lt "$want" ]; then
        start_worker "$why"
    elif [ "${#pids[@]}" -gt "$want" ]; then
        drain_worker "$why"
    fi
    [ "$stopping" -eq 0 ] || break
    # Sleeping in the background keeps the traps prompt.
    sleep "$interval" &
    sleeper=$!
    wait "$sleeper" 2>/dev/null
    kill "$sleeper" 2>/dev/null
done

log "stopping: draining ${#pids[@]} worker(s)"
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${pids[@]}"; do
    wait_exit "$p"
    log "drain: worker pid $p exited (status $?)"
done
log "stopped"
exit 0
