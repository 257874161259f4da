#!/usr/bin/env bash
# A dispatcher group of 3 Raft replicas across hosts: each replica, each of three workers and
# each of two clients in a network namespace of its own, with its own address on a bridge (the
# helpers of tests/netns/lib.sh, as test_netns_cluster.sh). Everything authenticates with a token
# made here (and speaks mutual TLS, Raft traffic included, when openssl is at hand); workers and
# readers take the list of the three RPC addresses. Two clients read
# `range(N) | map(wait_us, U)` in distributed_epoch mode at the same time, and while they read:
#   1. the leader is cut off from the other two replicas only (workers and clients still reach
#      it) for 10 s, then healed;
#   2. the leader of then (a new one) is cut off from everyone for 10 s, then healed.
# A partition lasts longer, up to 20 s, while no split has yet finished through a new leader:
# an election can take several rounds (split votes), and each round is a random 1 to 2 election
# timeouts; on a busy machine two or three rounds in a row happen.
# What must hold, read from `sluice status --json` of each replica (asked in its own namespace,
# so a cut-off replica answers too) and from what the reads wrote:
#   - during each partition the other two elect a new leader (a higher term) that serves, and
#     the cut-off leader stops serving;
#   - the reads go on through the majority: during each partition, and within 7 s of the cut
#     or 5 s of the new leader's election, whichever is later, the new leader's state counts
#     more splits finished than the old leader's did at the cut (the workers leased them from
#     the new leader, and the readers reported them read to it);
#   - after each heal the old leader rejoins: within 20 s all three name the same leader in the
#     same term, and that leader serves;
#   - every read gets each element of the range exactly once; one line per read:
#         read N: ELEMENTS elements, lost L, duplicated D, T s
#   - at the end all three replicas report the same raft.state_digest and applied_index
#     (within 30 s), and every process exits 0 on SIGTERM.
# One line per phase says who led, who took over and how long each step took. Exit 0 when all
# hold, 1 when any does not, 77 (skipped) when this machine cannot make network namespaces,
# veth pairs or bridges (not root, no iproute2, no permission, ...).
#
#   tests/netns/test_netns_replicas.sh BUILD_DIR
#   NETNS_ELEMENTS=N   elements per read (default 60000: about 55 s with 3 workers)
#   NETNS_WAIT_US=U    microseconds each element waits on its worker (default 1000)
#   NETNS_TLS=0        token only, no TLS
#   NETNS_KEEP=1       keep the work dir (logs, what was read) even when the test passes
set -euo pipefail
export LC_ALL=C # sort, uniq and comm agree on one order
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: test_netns_replicas.sh BUILD_DIR}" && pwd)
read_bound_s=120
# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"
elements=${NETNS_ELEMENTS:-60000}
wait_us=${NETNS_WAIT_US:-1000}
election_ms=1000
partition_s=10
partition_max_s=20
# The first split finished through the new leader comes at most progress_cut_s after the cut
# (an election of one round, 1 to 2 election timeouts, and the 3 s a caller gives a silent
# replica, RPC_REPLICA_SILENCE_MS, before it moves on, with room to spare), or progress_s after
# the new leader's election when that came late: the election is Raft's, as many rounds as
# votes split.
progress_cut_s=7
progress_s=5
rejoin_s=20
converge_s=30

netns_begin
net=10.202.0
addr=([d1]=$net.1 [d2]=$net.2 [d3]=$net.3 [w1]=$net.11 [w2]=$net.12 [w3]=$net.13
    [c1]=$net.21 [c2]=$net.22)
for h in d1 d2 d3 w1 w2 w3 c1 c2; do add_host "$h"; done
echo "== namespaces ${namespaces[*]}: replicas ${addr[d1]} ${addr[d2]} ${addr[d3]}," \
    "workers ${addr[w1]}..${addr[w3]}, clients ${addr[c1]} ${addr[c2]}"

netns_security

cluster=1=${addr[d1]}:7000,2=${addr[d2]}:7000,3=${addr[d3]}:7000
disp=${addr[d1]}:5050,${addr[d2]}:5050,${addr[d3]}:5050
declare -A replica_pid=()
for i in 1 2 3; do
    start "replica$i" "d$i" "$bin/sluice-dispatcher" --host "${addr[d$i]}" --port 5050 \
        --work-dir "$work/d$i" --raft-id "$i" --raft-address "${addr[d$i]}:7000" \
        --raft-cluster "$cluster" --raft-election-timeout-ms "$election_ms" \
        --data-root "$work" "${sec[@]}"
    replica_pid[$i]=$started_pid
done
for i in 1 2 3; do
    wait_listen "$work/replica$i.out" "${replica_pid[$i]}" >/dev/null ||
        fail "replica $i did not start"
done

# ---- the replicas' own views -------------------------------------------------------------------

# view I: from replica I's `sluice status --json`, asked from its own namespace, one line of the
# fields of col below (the raft object's, and the splits it counts finished over every job, in
# its state as applied); empty when it does not answer within 2 s.
declare -A col=([role]=0 [serving]=1 [leader_id]=2 [term]=3 [applied_index]=4 [state_digest]=5
    [leader_changes]=6 [finished]=7)
view() {
    in_ns "$pfx-d$1" timeout 5 "$bin/sluice" status --dispatcher "${addr[d$1]}:5050" --json \
        --timeout-ms 2000 "${sec[@]}" 2>/dev/null |
        jq -r 'select(.raft) | .raft as $r | [$r.role, $r.serving, $r.leader_id, $r.term,
            $r.applied_index, $r.state_digest, $r.leader_changes,
            ([.jobs[]?.splits.finished // 0] | add // 0)] | map(tostring) | join(" ")' \
            2>/dev/null || true
}
# views: sets v[1..3] to the three views (asked at once: one slow replica does not delay the
# others' answers), and adds them to views.trace in the work dir, with the time.
declare -A v=()
views_started=$(now_ns)
views() {
    local i p=()
    for i in 1 2 3; do
        view "$i" >"$work/view$i" &
        p+=($!)
    done
    wait "${p[@]}" || true
    for i in 1 2 3; do v[$i]=$(cat "$work/view$i"); done
    echo "$(since "$views_started") s | ${v[1]} | ${v[2]} | ${v[3]}" >>"$work/views.trace"
}
field() { # I KEY: a field of replica I's view (KEY of col; "" when replica I did not answer)
    local f
    [ -n "${v[$1]}" ] || return 0
    read -r -a f <<<"${v[$1]}"
    echo "${f[${col[$2]}]}"
}
serving_leader() { # prints the id of the replica that leads and serves (among ONLY, default all)
    local i
    for i in ${1:-1 2 3}; do
        if [ "$(field "$i" role)" = leader ] && [ "$(field "$i" serving)" = true ]; then
            echo "$i"
            return
        fi
    done
}

# wait_leader SECONDS: waits until a replica leads and serves; prints its id.
wait_leader() {
    local deadline=$(($(now_ns) + $1 * 1000000000)) l
    while [ "$(now_ns)" -lt "$deadline" ]; do
        views
        l=$(serving_leader)
        if [ -n "$l" ]; then
            echo "$l"
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# wait_followed SECONDS: waits until all three answer and name the same leader in the same term,
# the leader among them serving.
wait_followed() {
    local deadline=$(($(now_ns) + $1 * 1000000000)) l
    while [ "$(now_ns)" -lt "$deadline" ]; do
        views
        l=$(serving_leader)
        if [ -n "$l" ] && [ -n "${v[1]}" ] && [ -n "${v[2]}" ] && [ -n "${v[3]}" ] &&
            [ "$(for i in 1 2 3; do echo "$(field "$i" leader_id) $(field "$i" term)"; done |
                sort -u | wc -l)" -eq 1 ]; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

leader=$(wait_leader 20) || fail "no replica led and served within 20 s of the start"
views
echo "== replica $leader leads in term $(field "$leader" term)"

declare -A worker_pid=()
for i in 1 2 3; do
    start "worker$i" "w$i" "$bin/sluice-worker" --dispatcher "$disp" --host "${addr[w$i]}" \
        --port 6000 --threads 1 --data-root "$work" "${sec[@]}"
    worker_pid[$i]=$started_pid
    wait_listen "$work/worker$i.out" "$started_pid" >/dev/null || fail "worker $i did not start"
done
registered() { # how many workers the group knows, asked of the leader from client 1
    local n
    n=$(in_ns "$pfx-c1" timeout 5 "$bin/sluice" status --dispatcher "$disp" --json \
        --timeout-ms 2000 "${sec[@]}" 2>/dev/null | jq '.workers | length' 2>/dev/null) || true
    echo "${n:-0}"
}
deadline=$(($(date +%s) + 15))
until [ "$(registered)" -eq 3 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "the three workers did not all register within 15 s"
    sleep 0.1
done
echo "== dispatchers $disp, 3 workers registered"

# ---- the phases ------------------------------------------------------------------------------

# phase N WHAT PEERS...: cuts the current leader off from PEERS (hosts) for partition_s, while
# the reads go on, and checks what must hold (the header says what). Sets leader to the new one.
phase() {
    local n=$1 what=$2 old=$leader others="" i h l t0 lasted healed
    local elected stepped progressed at_end new_term
    shift 2
    for i in 1 2 3; do [ "$i" = "$old" ] || others="$others $i"; done
    views
    local old_term baseline
    old_term=$(field "$old" term)
    reading || fail "a read ended before phase $n; raise NETNS_ELEMENTS or NETNS_WAIT_US"
    echo "== phase $n: replica $old (leader in term $old_term) cut off from $what" \
        "for $partition_s s"

    t0=$(now_ns)
    for h in "$@"; do cut "d$old" "$h"; done
    # What the old leader counts finished once cut off: all that was committed before the cut,
    # and maybe more that it applied but can no longer commit.
    views
    baseline=$(field "$old" finished)
    [ -n "$baseline" ] || fail "phase $n: replica $old did not answer in its own namespace"
    elected="" stepped="" progressed="" at_end=""
    # Until the partition ends: who takes over and when, when the old leader stops serving, and
    # when the new one first counts more splits finished than the old one did at the cut.
    while [ "$(now_ns)" -lt $((t0 + partition_s * 1000000000)) ] ||
        { [ -z "$progressed" ] && [ "$(now_ns)" -lt $((t0 + partition_max_s * 1000000000)) ]; }; do
        views
        if [ -z "$elected" ]; then
            l=$(serving_leader "$others")
            if [ -n "$l" ] && [ "$(field "$l" term)" -gt "$old_term" ]; then
                leader=$l
                new_term=$(field "$l" term)
                elected=$(since "$t0")
            fi
        fi
        if [ -z "$stepped" ] && [ -n "${v[$old]}" ] &&
            ! { [ "$(field "$old" role)" = leader ] && [ "$(field "$old" serving)" = true ]; }; then
            stepped=$(since "$t0")
        fi
        if [ -n "$elected" ] && [ -n "${v[$leader]}" ]; then
            at_end=$(field "$leader" finished)
            [ -n "$progressed" ] || [ "$at_end" -le "$baseline" ] || progressed=$(since "$t0")
        fi
        sleep 0.1
    done
    reading || echo "(a read ended during the partition)"
    lasted=$(since "$t0")
    for h in "$@"; do heal "d$old" "$h"; done
    healed=$(now_ns)
    local summary="replica $old cut off from $what for $lasted s: "
    if [ -n "$elected" ]; then
        summary+="replica $leader led in term $new_term after $elected s"
    else
        summary+="no other replica led"
    fi
    summary+=", replica $old stopped serving after ${stepped:-(never)} s;"
    summary+=" $((${at_end:-$baseline} - baseline)) splits finished through the new leader"
    summary+=" during the partition${progressed:+, the first $progressed s after the cut}"
    [ -n "$elected" ] ||
        fail "phase $n: no other replica led and served in a term above $old_term during the" \
            "partition ($summary; views: ${v[*]})"
    [ -n "$stepped" ] || fail "phase $n: replica $old still served at the end ($summary)"
    [ -n "$progressed" ] ||
        fail "phase $n: no split finished through the new leader during the partition" \
            "($summary)"
    awk -v a="$progressed" -v e="$elected" -v b="$progress_s" -v c="$progress_cut_s" \
        'BEGIN { exit !(a <= c || a - e <= b) }' ||
        fail "phase $n: the first split finished through the new leader more than" \
            "$progress_cut_s s after the cut and $progress_s s after its election ($summary)"
    wait_followed "$rejoin_s" ||
        fail "phase $n: the replicas did not agree on one leader within $rejoin_s s of the" \
            "heal ($summary; views: ${v[1]} ${v[2]} ${v[3]})"
    local rejoined now_leader
    rejoined=$(since "$healed")
    now_leader=$(serving_leader)
    echo "phase $n: $summary; replica $old rejoined (as $(field "$old" role)) $rejoined s" \
        "after the heal"
    [ "$now_leader" = "$leader" ] ||
        echo "(replica $now_leader took over from replica $leader after the heal)"
    leader=$now_leader
}

pipeline="range($elements) | map(wait_us, $wait_us)"
reads_started=$(now_ns)
start_reads
sleep 2
old=$leader
others=()
for i in 1 2 3; do [ "$i" = "$old" ] || others+=("d$i"); done
phase 1 "the other replicas (${others[*]})" "${others[@]}"
sleep 2
others=()
for h in d1 d2 d3 w1 w2 w3 c1 c2; do [ "$h" = "d$leader" ] || others+=("$h"); done
phase 2 "everyone" "${others[@]}"
finish_reads
echo "reads: both done $(since "$reads_started") s after they started"

# The replicas converge: the same state, applied to the same index.
t0=$(now_ns)
deadline=$((t0 + converge_s * 1000000000))
while :; do
    views
    if [ -n "${v[1]}" ] && [ -n "${v[2]}" ] && [ -n "${v[3]}" ] &&
        [ "$(for i in 1 2 3; do echo "$(field "$i" state_digest) $(field "$i" applied_index)"
        done | sort -u | wc -l)" -eq 1 ]; then
        break
    fi
    [ "$(now_ns)" -lt "$deadline" ] ||
        fail "the replicas did not converge within $converge_s s: ${v[1]} ${v[2]} ${v[3]}"
    sleep 0.2
done
echo "replicas: state_digest $(field 1 state_digest) at applied_index $(field 1 applied_index)" \
    "on all three after $(since "$t0") s; leader changes seen by replica 1, 2, 3:" \
    "$(field 1 leader_changes), $(field 2 leader_changes), $(field 3 leader_changes)"

# Everything stops cleanly: the workers, the followers, then the leader.
for i in 1 2 3; do stop "${worker_pid[$i]}" "worker $i"; done
for i in 1 2 3; do [ "$i" = "$leader" ] || stop "${replica_pid[$i]}" "replica $i"; done
stop "${replica_pid[$leader]}" "replica $leader"
echo "netns: both reads exact through 2 leader partitions"
status=0
