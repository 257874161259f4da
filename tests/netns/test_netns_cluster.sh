#!/usr/bin/env bash
# A multi-host cluster on one machine: a dispatcher, four workers and two clients, each in its own
# network namespace with its own address on a bridge (the bridge lives in a "switch" namespace,
# joined to every host by a veth pair). Servers bind their namespace's address, workers advertise
# it, and everything authenticates with a token made here (and speaks mutual TLS, with
# certificates naming those addresses, when openssl is at hand). Two clients read
# `range(N) | map(wait_us, U)` in distributed_epoch mode at the same time: once on a healthy
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
#   NETNS_WAIT_US=U    microseconds each element waits on its worker (default 1000)
#   NETNS_TLS=0        token only, no TLS
#   NETNS_KEEP=1       keep the work dir (logs, what was read) even when the test passes
#   NETNS_DELAY=relay  add the delay with the relay even where tc netem works
#
# Partitions are routes (blackholes, tests/netns/lib.sh says how they work).
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
build=$(cd "${1:?usage: test_netns_cluster.sh BUILD_DIR}" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"
elements=${NETNS_ELEMENTS:-30000}
wait_us=${NETNS_WAIT_US:-1000}
worker_timeout_ms=3000
partition_s=5
delay_ms=20

netns_begin
net=10.201.0
addr=([d]=$net.1 [w1]=$net.11 [w2]=$net.12 [w3]=$net.13 [w4]=$net.14
    [c1]=$net.21 [c2]=$net.22 [relay]=$net.30)

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

netns_security

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
        --port 6000 --advertise "$advertise" --threads 1 --data-root "$work" \
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

pipeline="range($elements) | map(wait_us, $wait_us)"

settle() { # lets the reads get going before a fault, and makes sure they are still at it
    sleep 2
    reading || fail "a read ended before the fault; raise NETNS_ELEMENTS or NETNS_WAIT_US"
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
reading || fail "a read ended before the delay; raise NETNS_ELEMENTS or NETNS_WAIT_US"
delay_on
finish_reads
delay_off

# Everything stops cleanly: the workers (no reader left, so the drain is quick), the relay,
# then the dispatcher.
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
