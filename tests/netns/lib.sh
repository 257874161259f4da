# shellcheck shell=bash disable=SC2154 # src, build, elements, pipeline, disp: the caller sets them
# Shell helpers of the network-namespace tests (test_netns_*.sh): hosts in namespaces of their
# own on one bridge, partitions by blackhole routes, processes started in a host's namespace and
# killed by PID on exit, and reads checked exactly. Source it after setting src (the source tree)
# and build (the build dir); it defines functions and the variables below, and starts nothing.
#
#   netns_begin             checks what the tests need (or skips), makes the work dir, the exit
#                           trap and the switch namespace with its bridge
#   addr[NAME]=A; add_host NAME
#                           a host: namespace $pfx-NAME, address A on the bridge, interface eth0
#   netns_security          a token (and mutual TLS where openssl is at hand): sets sec
#   start NAME HOST CMD...  runs CMD in HOST's namespace (NAME.out, NAME.log): started_pid
#   cut A B / heal A B      nothing passes between hosts A and B, either way / again
#   start_reads / reading / finish_reads
#                           two reads of $pipeline from hosts c1 and c2 through $disp, each
#                           checked to get range($elements) exactly once
#   stop PID NAME           SIGTERM, and a bounded wait for exit status 0
#
# Every wait is bounded; every failure says what did not hold (fail) and every reason to skip
# why (skip, exit 77).

# shellcheck source=scripts/lib.sh
. "$src/scripts/lib.sh"
bin=$build/bin
use_tls=${NETNS_TLS:-1}
read_timeout_ms=${read_timeout_ms:-30000} # a read that gets nothing for this long fails
read_bound_s=${read_bound_s:-60}          # and no read runs longer than this, whatever happens

skip() {
    echo "SKIP: $*"
    exit 77
}

fail() {
    echo "netns: FAIL: $*" >&2
    local f
    for f in "$work"/*.log; do
        [ -s "$f" ] || continue
        echo "---- $f (last 20 lines)" >&2
        tail -n 20 "$f" >&2
    done
    exit 1
}

now_ns() { date +%s%N; }
since() { awk -v a="$1" -v b="$(now_ns)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }

# On any exit: every process still running is killed by PID, then every namespace this run made
# is deleted. The work dir (logs, what was read) stays behind when the test failed.
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    local p n
    for p in "${!running[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
    for p in "${!running[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "${!running[@]}"; do wait "$p" 2>/dev/null || true; done
    for n in "${namespaces[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    if [ "$status" -ne 0 ] && [ "$status" -ne 77 ] || [ "${NETNS_KEEP:-0}" != 0 ]; then
        echo "netns: kept $work" >&2
    else
        rm -rf "$work"
    fi
}

# in_ns NS CMD...: runs CMD in network namespace NS. nsenter enters the namespace alone; `ip netns
# exec` and `ip -n` also remount /sys in a new mount namespace, which fails where / is not a mount
# point (a chroot), although network namespaces themselves work there.
in_ns() {
    local ns=$1
    shift
    nsenter --net="/run/netns/$ns" "$@"
}

add_ns() { # NAME: creates namespace $pfx-NAME with its loopback up
    ip netns add "$pfx-$1" 2>"$work/ip.err" || return 1
    namespaces+=("$pfx-$1")
    in_ns "$pfx-$1" ip link set lo up 2>"$work/ip.err"
}

# netns_begin: the checks (a machine that cannot run the test skips it and says why), then pfx
# (namespace names: unique per run, so parallel runs do not collide), sw (the switch namespace,
# holding bridge br0), work (the work dir), and the exit trap.
netns_begin() {
    local f
    for f in "$bin/sluice" "$bin/sluice-dispatcher" "$bin/sluice-worker"; do
        [ -e "$f" ] || { echo "netns: $f is missing: build $build first" >&2; exit 1; }
    done
    [ "$(id -u)" -eq 0 ] || skip "network namespaces need root (running as uid $(id -u))"
    command -v ip >/dev/null || skip "no 'ip' command (install iproute2)"
    command -v jq >/dev/null || skip "no 'jq' command (scripts/deps.sh installs it)"
    command -v nsenter >/dev/null || skip "no 'nsenter' command (util-linux)"

    pfx=sl$$
    sw=$pfx-sw
    work=$(mktemp -d)
    namespaces=()          # every namespace this run created: the only ones it deletes
    declare -gA running=() # every child not yet reaped, by PID: the only processes it signals
    declare -gA addr=()    # every host's address on the bridge, by name
    status=1
    trap 'status=$?; cleanup' EXIT
    trap 'exit 1' INT TERM

    add_ns sw || skip "cannot set up a network namespace: $(cat "$work/ip.err")"
    in_ns "$sw" ip link add br0 type bridge 2>"$work/ip.err" ||
        skip "cannot create a bridge: $(cat "$work/ip.err")"
    in_ns "$sw" ip link set br0 up
}

add_host() { # NAME: a namespace on the bridge with address ${addr[NAME]}, its interface eth0
    local ns=$pfx-$1
    add_ns "$1" || skip "cannot set up a network namespace: $(cat "$work/ip.err")"
    in_ns "$sw" ip link add "v-$1" type veth peer name eth0 netns "$ns" 2>"$work/ip.err" ||
        skip "cannot create a veth pair: $(cat "$work/ip.err")"
    in_ns "$sw" ip link set "v-$1" master br0 up
    in_ns "$ns" ip addr add "${addr[$1]}/24" dev eth0
    in_ns "$ns" ip link set eth0 up
}

# netns_security: a token, and mutual TLS with one certificate naming every address of addr
# (unless NETNS_TLS=0 or openssl is missing). Sets sec to the options every process takes.
netns_security() {
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
    chmod 600 "$work/token"
    sec=(--auth-token-file "$work/token")
    if [ "$use_tls" != 0 ] && command -v openssl >/dev/null; then
        "$src/tests/integration/make_certs.sh" "$work/certs" "${addr[@]}" >/dev/null
        sec+=(--tls-cert "$work/certs/node.pem" --tls-key "$work/certs/node.key"
            --tls-ca "$work/certs/ca.pem")
        echo "== token and mutual TLS"
    else
        echo "== token only (no TLS: NETNS_TLS=0 or no openssl)"
    fi
}

start() { # NAME HOST CMD...: runs CMD in host's namespace; NAME.out/.log; sets started_pid
    local name=$1 host=$2
    shift 2
    # nsenter execs the command: $! is the server itself, for the kills below.
    nsenter --net="/run/netns/$pfx-$host" "$@" >"$work/$name.out" 2>"$work/$name.log" &
    started_pid=$!
    running[$started_pid]=1
}

# Everything stops cleanly: a server that crashed or hangs fails the test.
stop() { # PID NAME
    local rc=0
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 1 150); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$1" 2>/dev/null && fail "$2 did not exit within 15 s of SIGTERM"
    wait "$1" || rc=$?
    unset "running[$1]"
    [ "$rc" -eq 0 ] || fail "$2 exited with status $rc"
}

# ---- partitions ------------------------------------------------------------------------------
# Partitions are routes: cutting A off from B adds `ip route add blackhole B/32` in A's namespace
# and the mirror in B's; healing deletes them. A packet either side sends to the other is dropped
# before it leaves, so nothing crosses in either direction: an established TCP connection stays
# open but delivers nothing (the sender's retransmissions are dropped too) and resumes once the
# routes are gone, as across a real partition. (A new connect() fails at once with EINVAL instead
# of timing out; both sides retry it with backoff either way.) This needs only iproute2, where
# dropping frames in the bridge would need nftables or tc classifiers a kernel may lack.

route() { # add|del HOST PEER: the blackhole route to PEER in HOST's namespace
    in_ns "$pfx-$2" ip route "$1" blackhole "${addr[$3]}/32"
}
cut() { # A B: nothing passes between A and B, either way
    route add "$1" "$2"
    route add "$2" "$1"
}
heal() {
    route del "$1" "$2"
    route del "$2" "$1"
}

# ---- reads -----------------------------------------------------------------------------------
# The caller sets elements, pipeline (reading range($elements)) and disp (the dispatcher's
# address, or the list of its replicas' addresses).

declare -A read_pid=() read_started=()
next_read=1

start_reads() { # two reads at once, one from each client; sets reads to their numbers
    local c n
    [ -e "$work/expected.txt" ] || seq 0 $((elements - 1)) | sort >"$work/expected.txt"
    reads=()
    for c in 1 2; do
        n=$next_read
        next_read=$((next_read + 1))
        start "read$n" "c$c" "$bin/sluice" read \
            --dispatcher "$disp" "$pipeline" --mode distributed_epoch \
            --timeout-ms "$read_timeout_ms" --quiet --output "$work/read$n.txt" "${sec[@]}"
        read_pid[$n]=$started_pid
        read_started[$n]=$(now_ns)
        reads+=("$n")
    done
}

reading() { # true while every read of this phase is still going
    local n
    for n in "${reads[@]}"; do kill -0 "${read_pid[$n]}" 2>/dev/null || return 1; done
}

finish_reads() { # waits for this phase's reads (each at most read_bound_s) and checks them
    local n pid rc t got distinct lost unexpected dup
    for n in "${reads[@]}"; do
        pid=${read_pid[$n]}
        while kill -0 "$pid" 2>/dev/null &&
            [ $(($(now_ns) - ${read_started[$n]})) -lt $((read_bound_s * 1000000000)) ]; do
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null && echo "netns: read $n killed after $read_bound_s s" >&2
        rc=0
        wait "$pid" || rc=$?
        unset "running[$pid]"
        t=$(since "${read_started[$n]}")
        # Lost: values of the range that never came. Duplicated: arrivals of a value beyond its
        # first, plus lines that are no value of the range at all.
        sort "$work/read$n.txt" >"$work/sorted$n.txt"
        uniq "$work/sorted$n.txt" >"$work/distinct$n.txt"
        got=$(wc -l <"$work/sorted$n.txt")
        distinct=$(wc -l <"$work/distinct$n.txt")
        lost=$(comm -23 "$work/expected.txt" "$work/distinct$n.txt" | wc -l)
        unexpected=$(comm -13 "$work/expected.txt" "$work/distinct$n.txt" | wc -l)
        dup=$((got - distinct + unexpected))
        echo "read $n: $got elements, lost $lost, duplicated $dup, $t s"
        [ "$rc" -eq 0 ] || fail "read $n exited with status $rc"
        if [ "$lost" -ne 0 ] || [ "$dup" -ne 0 ] ||
            ! cmp -s "$work/sorted$n.txt" "$work/expected.txt"; then
            fail "read $n did not get range($elements) exactly once ($work/read$n.txt)"
        fi
    done
}
