# Shell helpers shared by the scripts that start sluice servers (demo, drills, benchmarks).
# Source it; it defines functions only.

# wait_listen OUTFILE [PID]: prints HOST:PORT once the server writing OUTFILE has printed its
# "... listening on HOST:PORT" line. Gives up after 10 s, or at once when PID (if given) has
# exited; then says so on stderr, with the server's log (OUTFILE with .out replaced by .log)
# when there is one, and returns 1.
wait_listen() {
    local addr
    for _ in $(seq 1 400); do
        addr=$(sed -n 's/.* listening on //p' "$1")
        if [ -n "$addr" ]; then
            echo "$addr"
            return 0
        fi
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then
            break
        fi
        sleep 0.025
    done
    echo "no 'listening on' line in $1" >&2
    if [ "${1%.out}" != "$1" ] && [ -f "${1%.out}.log" ]; then cat "${1%.out}.log" >&2; fi
    return 1
}

# drill_op OP: prints OP if it is a builtin a drill may simulate an element's work with (sleep_us,
# which keeps a core busy for the time, or wait_us, which waits without one); else says so on
# stderr and returns 2.
drill_op() {
    case $1 in
    sleep_us | wait_us) echo "$1" ;;
    *)
        echo "drill: DRILL_OP must be sleep_us or wait_us, not '$1'" >&2
        return 2
        ;;
    esac
}

# with_scratch: sets tmp to a new temporary directory and pids to an empty list of processes,
# and on exit kills every process in pids, waits for them and removes tmp.
with_scratch() {
    tmp=$(mktemp -d)
    pids=()
    trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
}
