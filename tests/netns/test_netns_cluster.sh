#!/usr/bin/env bash
# A multi-host cluster on one machine: a dispatcher, four workers and two clients, each in its own
# network namespace with its own address on a bridge (the bridge lives in a "switch" namespace,
# joined to every host by a veth pair). Servers bind their namespace's address, workers advertise
# it, and everything authenticates with a token made here (and speaks mutual TLS, with
# certificates naming those addresses, when openssl is at hand). Two clients read
# `range(N) | map(nap_us, U)` in distributed_epoch mode at the same time: once on a healthy
# network, for the time it takes, then in three phases while the network breaks under them:
#   1. worker 1 is cut off from the dispatcher (not from the clients) for longer than the
#      dispatcher's --worker-timeout-ms, then healed;
#   2. the dispatcher is cut off from everyone for 5 s, then healed;
#   3. 20 ms of delay are added on the link between worker 4 and its readers.
# Every read must get each element of the range exactly once. One line per read:
#     read N: ELEMENTS elements, lost L, duplicated D, T s
# The faults must also have taken: the dispatcher must have removed worker 1 in phase 1 (its
# heartbeats stopped arriving) and workers in phase 2, every worker must register again within
# 30 s of the heal, and in phase 3 the relay (below) must have delayed what it carried.
# Exit 0 when all hold, 1 when any does not, 77 (skipped) when this machine cannot make network
# namespaces, veth pairs or bridges (not root, no iproute2, no permission, ...).
#
#   tests/netns/test_netns_cluster.sh BUILD_DIR
#   NETNS_ELEMENTS=N   elements per read (default 30000)
#   NETNS_NAP_US=U     microseconds each element sleeps on its worker (default 1000)
#   NETNS_TLS=0        token only, no TLS
#   NETNS_KEEP=1       keep the work dir (logs, what was read) even when the test passes
#   NETNS_DELAY=relay  add the delay with the relay even where tc netem works
#
# Partitions are routes: cutting A off from B adds `ip route add blackhole B/32` in A's namespace
# and the mirror in B's; healing deletes them. A packet either side sends to the other is dropped
# before it leaves, so nothing crosses in either direction: an established TCP connection stays
# open but delivers nothing (the sender's retransmissions are dropped too) and resumes once the
# routes are gone, as across a real partition. (A new connect() fails at once with EINVAL instead
# of timing out; both sides retry it with backoff either way.) This needs only iproute2, where
# dropping frames in the bridge would need nftables or tc classifiers a kernel may lack.
#
# The delay is `tc qdisc add dev eth0 root netem delay 20ms` in worker 4's namespace where the
# kernel has netem (it then delays all worker 4 sends, to the dispatcher as well). Where it
# does not, worker 4 advertises a relay in a namespace of its own
# (tests/netns/delay_relay.py), which forwards its readers' connections and, once switched on,
# holds what worker 4 sends back for 20 ms, as netem on worker 4's interface would. The output
# says which one ran.
set -euo pipefail
export LC_ALL=C # sort, uniq and comm agree on one order
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=scripts/lib.sh
. "$src/scripts/lib.sh"
build=$(cd "${1:?usage: test_netns_cluster.sh BUILD_DIR}" && pwd)
bin=$build/bin
plugin=$build/plugins/plugin_nap.so
elements=${NETNS_ELEMENTS:-30000}
nap_us=${NETNS_NAP_US:-1000}
use_tls=${NETNS_TLS:-1}
worker_timeout_ms=3000
partition_s=5
delay_ms=20
read_timeout_ms=30000 # a read that gets nothing for this long fails
read_bound_s=60       # and no read runs longer than this, whatever happens

skip() {
    echo "SKIP: $*"
    exit 77
}

for f in "$bin/sluice" "$bin/sluice-dispatcher" "$bin/sluice-worker" "$plugin"; do
    [ -e "$f" ] || { echo "netns: $f is missing: build $build first" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (running as uid $(id -u))"
command -v ip >/dev/null || skip "no 'ip' command (install iproute2)"
command -v jq >/dev/null || skip "no 'jq' command (scripts/deps.sh installs it)"
command -v nsenter >/dev/null || skip "no 'nsenter' command (util-linux)"

pfx=sl$$ # namespace names: unique per run, so parallel runs do not collide
sw=$pfx-sw
net=10.201.0
work=$(mktemp -d)
namespaces=() # every namespace this run created: the only ones it deletes
declare -A running=() # every child not yet reaped, by PID: the only processes it signals
status=1

# On any exit: every process still running is killed by PID, then every namespace this run made
# is deleted. The work dir (logs, what was read) stays behind when the test failed.
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    local p n
    for p in "${!running[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "${!running[@]}"; do wait "$p" 2>/dev/null || true; done
    for n in "${namespaces[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    if [ "$status" -ne 0 ] && [ "$status" -ne 77 ] || [ "${NETNS_KEEP:-0}" != 0 ]; then
        echo "netns: kept $work" >&2
    else
        rm -rf "$work"
    fi
}
trap 'status=$?; cleanup' EXIT
trap 'exit 1' INT TERM

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

# The switch, with probes for what the test needs: where any of them fails, the machine cannot
# run the test and it says why.
add_ns sw || skip "cannot set up a network namespace: $(cat "$work/ip.err")"
in_ns "$sw" ip link add br0 type bridge 2>"$work/ip.err" ||
    skip "cannot create a bridge: $(cat "$work/ip.err")"
in_ns "$sw" ip link set br0 up

declare -A addr=([d]=$net.1 [w1]=$net.11 [w2]=$net.12 [w3]=$net.13 [w4]=$net.14
    [c1]=$net.21 [c2]=$net.22 [relay]=$net.30)

add_host() { # NAME: a namespace on the bridge with address ${addr[NAME]}, its interface eth0
    local ns=$pfx-$1
    add_ns "$1" || skip "cannot set up a network namespace: $(cat "$work/ip.err")"
    in_ns "$sw" ip link add "v-$1" type veth peer name eth0 netns "$ns" 2>"$work/ip.err" ||
        skip "cannot create a veth pair: $(cat "$work/ip.err")"
    in_ns "$sw" ip link set "v-$1" master br0 up
    in_ns "$ns" ip addr add "${addr[$1]}/24" dev eth0
    in_ns "$ns" ip link set eth0 up
}

# netem, probed on a throwaway veth pair in the switch namespace; without it the relay adds the
# delay, and that needs python3.
delay_by=netem
if [ "${NETNS_DELAY:-}" = relay ]; then
    delay_by=relay
    echo "NETNS_DELAY=relay: the 20 ms delay will be added by a userspace TCP relay"
elif ! in_ns "$sw" ip link add probe0 type veth peer name probe1 2>"$work/tc.err" ||
    ! in_ns "$sw" tc qdisc add dev probe0 root netem delay 1ms 2>"$work/tc.err"; then
    delay_by=relay
    echo "tc netem is not available ($(head -n 1 "$work/tc.err")):" \
        "the 20 ms delay will be added by a userspace TCP relay"
fi
in_ns "$sw" ip link del probe0 2>/dev/null || true
if [ "$delay_by" = relay ]; then
    [ -x /usr/bin/python3 ] || skip "neither tc netem nor /usr/bin/python3 (for the delay relay)"
fi

hosts=(d w1 w2 w3 w4 c1 c2)
[ "$delay_by" = relay ] && hosts+=(relay)
for h in "${hosts[@]}"; do add_host "$h"; done
echo "== namespaces ${namespaces[*]}: dispatcher ${addr[d]}, workers ${addr[w1]}..${addr[w4]}," \
    "clients ${addr[c1]} ${addr[c2]}, delay by $delay_by"

# Security: a token, and mutual TLS with one certificate naming every address.
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

start() { # NAME HOST CMD...: runs CMD in host's namespace; NAME.out/.log; sets started_pid
    local name=$1 host=$2
    shift 2
    # nsenter execs the command: $! is the server itself, for the kills below.
    nsenter --net="/run/netns/$pfx-$host" "$@" >"$work/$name.out" 2>"$work/$name.log" &
    started_pid=$!
    running[$started_pid]=1
}

disp=${addr[d]}:5050
start dispatcher d "$bin/sluice-dispatcher" --host "${addr[d]}" --port 5050 \
    --worker-timeout-ms "$worker_timeout_ms" --data-root "$work" "${sec[@]}"
disp_pid=$started_pid
wait_listen "$work/dispatcher.out" "$disp_pid" >/dev/null || fail "the dispatcher did not start"

if [ "$delay_by" = relay ]; then
    start relay relay /usr/bin/python3 "$src/tests/netns/delay_relay.py" \
        "${addr[relay]}:6000" "${addr[w4]}:6000" "$delay_ms"
    relay_pid=$started_pid
    wait_listen "$work/relay.out" "$relay_pid" >/dev/null || fail "the delay relay did not start"
fi
declare -A worker_pid=()
for i in 1 2 3 4; do
    advertise=${addr[w$i]}:6000
    [ "$i" -eq 4 ] && [ "$delay_by" = relay ] && advertise=${addr[relay]}:6000
    start "worker$i" "w$i" "$bin/sluice-worker" --dispatcher "$disp" --host "${addr[w$i]}" \
        --port 6000 --advertise "$advertise" --threads 1 --plugin "$plugin" --data-root "$work" \
        "${sec[@]}"
    worker_pid[$i]=$started_pid
    wait_listen "$work/worker$i.out" "$started_pid" >/dev/null || fail "worker $i did not start"
done

registered() { # how many workers the dispatcher knows, asked from client 1's namespace
    local n
    n=$(in_ns "$pfx-c1" "$bin/sluice" status --dispatcher "$disp" --json \
        --timeout-ms 2000 "${sec[@]}" 2>/dev/null | jq '.workers | length' 2>/dev/null) || true
    echo "${n:-0}"
}
wait_workers() { # SECONDS: waits until the dispatcher knows all four workers again
    local deadline=$(($(date +%s) + $1))
    until [ "$(registered)" -eq 4 ]; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
wait_workers 15 || fail "the four workers did not all register within 15 s"
echo "== dispatcher $disp, 4 workers registered (worker 4 advertised as $advertise)"

# ---- partitions and delay --------------------------------------------------------------------

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

delay_on() {
    if [ "$delay_by" = netem ]; then
        in_ns "$pfx-w4" tc qdisc add dev eth0 root netem delay "${delay_ms}ms"
        in_ns "$pfx-w4" tc qdisc show dev eth0 | grep -q "netem.*delay" ||
            fail "no netem delay on worker 4's interface"
    else
        kill -USR1 "$relay_pid"
    fi
}
delay_off() {
    if [ "$delay_by" = netem ]; then
        in_ns "$pfx-w4" tc qdisc del dev eth0 root
    else
        kill -USR2 "$relay_pid"
    fi
}

# ---- reads -----------------------------------------------------------------------------------

pipeline="range($elements) | map(nap_us, $nap_us)"
seq 0 $((elements - 1)) | sort >"$work/expected.txt"
declare -A read_pid=() read_started=()
next_read=1

start_reads() { # two reads at once, one from each client; sets reads to their numbers
    local c n
    reads=()
    for c in 1 2; do
        n=$next_read
        next_read=$((next_read + 1))
        start "read$n" "c$c" "$bin/sluice" read \
            --dispatcher "$disp" "$pipeline" --mode distributed_epoch --plugin "$plugin" \
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

settle() { # lets the reads get going before a fault, and makes sure they are still at it
    sleep 2
    reading || fail "a read ended before the fault; raise NETNS_ELEMENTS or NETNS_NAP_US"
}

removals() { # how often the dispatcher has removed a worker at ADDRESS (any, without one)
    grep -c "at ${1:-}.* sent no heartbeat" "$work/dispatcher.log" || true
}

echo "== phase 0: no fault, for comparison"
start_reads
finish_reads

echo "== phase 1: worker 1 cut off from the dispatcher, not from the clients, for" \
    "$partition_s s (worker timeout $worker_timeout_ms ms)"
before=$(removals "${addr[w1]}:6000")
start_reads
settle
cut w1 d
sleep "$partition_s"
reading || echo "(a read ended during the partition)"
heal w1 d
healed=$(now_ns)
wait_workers 30 || fail "worker 1 did not register again within 30 s of the heal"
echo "healed; worker 1 registered again $(since "$healed") s later"
finish_reads
[ "$(removals "${addr[w1]}:6000")" -gt "$before" ] ||
    fail "the dispatcher never removed worker 1: the partition did not take"

echo "== phase 2: the dispatcher cut off from everyone for $partition_s s"
before=$(removals)
start_reads
settle
for h in w1 w2 w3 w4 c1 c2; do cut d "$h"; done
[ "$delay_by" = relay ] && cut d relay
sleep "$partition_s"
reading || echo "(a read ended during the partition)"
for h in w1 w2 w3 w4 c1 c2; do heal d "$h"; done
[ "$delay_by" = relay ] && heal d relay
healed=$(now_ns)
wait_workers 30 || fail "the workers did not all register again within 30 s of the heal"
echo "healed; all 4 workers registered again $(since "$healed") s later"
finish_reads
[ "$(removals)" -gt "$before" ] ||
    fail "the dispatcher removed no worker: the partition did not take"

echo "== phase 3: ${delay_ms} ms of delay on worker 4's link to its readers (by $delay_by)"
start_reads
sleep 1
reading || fail "a read ended before the delay; raise NETNS_ELEMENTS or NETNS_NAP_US"
delay_on
finish_reads
delay_off

# Everything stops cleanly: the workers (no reader left, so the drain is quick), the relay,
# then the dispatcher. A server that crashed or hangs fails the test.
stop() { # PID NAME
    local rc=0 i
    kill -TERM "$1" 2>/dev/null || true
    for i in $(seq 1 150); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$1" 2>/dev/null && fail "$2 did not exit within 15 s of SIGTERM"
    wait "$1" || rc=$?
    unset "running[$1]"
    [ "$rc" -eq 0 ] || fail "$2 exited with status $rc"
}
for i in 1 2 3 4; do stop "${worker_pid[$i]}" "worker $i"; done
if [ "$delay_by" = relay ]; then
    stop "$relay_pid" "the delay relay"
    sed -n 's/^delay-relay: /delay relay: /p' "$work/relay.out"
    delayed=$(sed -n 's/.*chunks delayed \([0-9]*\).*/\1/p' "$work/relay.out")
    [ "${delayed:-0}" -gt 0 ] || fail "the relay delayed nothing: worker 4 served no reader"
fi
stop "$disp_pid" "the dispatcher"
echo "netns: all $((next_read - 1)) reads exact"
status=0
