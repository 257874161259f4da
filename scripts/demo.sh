#!/usr/bin/env bash
# The main job: installs dependencies, builds, starts a local cluster (one dispatcher, two
# workers, on free ports) with authentication on (a fresh shared token) and file access confined
# to the dataset's directory, generates a small real dataset of text files, reads it through the
# service in distributed_epoch mode, checks that every line arrived exactly once, prints a
# summary with throughput, shows what a stranger without the token gets, and stops everything
# cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
scripts/deps.sh
echo "== building"
scripts/build.sh build
bin=build/bin

work=$(mktemp -d)
pids=()
stop_all() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT

echo "== generating a dataset: 8 text files x 25000 lines in $work/data"
mkdir -p "$work/data"
for f in $(seq 0 7); do
    awk -v f="$f" 'BEGIN { for (i = 0; i < 25000; i++) printf "file %d line %05d sample-%08d\n", f, i, f * 25000 + i }' \
        >"$work/data/part-$f.txt"
done
total=$((8 * 25000))

echo "== a shared secret for the cluster: every connection proves it knows the token"
(umask 077 && openssl rand -hex 32 >"$work/token")
export SLUICE_AUTH_TOKEN_FILE="$work/token"

echo "== starting a dispatcher and two workers (token from \$SLUICE_AUTH_TOKEN_FILE, files only"
echo "   under $work/data)"
"$bin/sluice-dispatcher" --port 0 --worker-timeout-ms 2000 --data-root "$work/data" \
    >"$work/dispatcher.out" 2>"$work/dispatcher.log" &
pids+=($!)
disp=$(wait_listen "$work/dispatcher.out")
echo "dispatcher at $disp"
declare -A wpid
start_worker() { # N
    "$bin/sluice-worker" --dispatcher "$disp" --port 0 --data-root "$work/data" \
        >"$work/worker$1.out" 2>"$work/worker$1.log" &
    wpid[$1]=$!
    pids+=($!)
    echo "worker $1 at $(wait_listen "$work/worker$1.out")"
}
start_worker 1
start_worker 2

pipeline="lines(\"$work/data/part-*.txt\")"
echo "== registering: $pipeline"
id=$("$bin/sluice" register --dispatcher "$disp" "$pipeline")
echo "dataset id $id"

echo "== reading in distributed_epoch mode (each line exactly once across both workers)"
start=$(date +%s%N)
"$bin/sluice" read --dispatcher "$disp" --dataset-id "$id" --mode distributed_epoch >"$work/read.txt"
end=$(date +%s%N)
got=$(wc -l <"$work/read.txt")
unique=$(sort -u "$work/read.txt" | wc -l)
ms=$(( (end - start) / 1000000 ))
echo "first lines read:"
head -n 3 "$work/read.txt" | sed 's/^/  /'
echo "read $got lines ($unique distinct) of $total in $ms ms" \
     "($(awk -v n="$got" -v ms="$ms" 'BEGIN { printf "%.0f", n / (ms > 0 ? ms : 1) * 1000 }') lines/s)"
if [ "$got" -ne "$total" ] || [ "$unique" -ne "$total" ]; then
    echo "demo: expected every one of $total lines exactly once" >&2
    exit 1
fi

check_once() { # FILE WHAT
    local got unique
    got=$(wc -l <"$1")
    unique=$(sort -u "$1" | wc -l)
    echo "$2: read $got lines ($unique distinct) of $total"
    if [ "$got" -ne "$total" ] || [ "$unique" -ne "$total" ]; then
        echo "demo: expected every one of $total lines exactly once" >&2
        exit 1
    fi
}

echo "== the same lines, slowed down, while the cluster changes under the reader:"
echo "   worker 1 is killed (SIGKILL), worker 3 joins, worker 2 is drained (SIGTERM)"
"$bin/sluice" read --dispatcher "$disp" "$pipeline | map(sleep_us, 40)" --mode distributed_epoch \
    >"$work/read2.txt" 2>"$work/read2.log" &
reader=$!
sleep 1
kill -KILL "${wpid[1]}"
wait "${wpid[1]}" 2>/dev/null || true
echo "killed worker 1"
start_worker 3
sleep 0.5
kill -TERM "${wpid[2]}"
echo "draining worker 2"
if wait "${wpid[2]}"; then echo "worker 2 drained and exited 0"; else
    echo "demo: worker 2 did not drain cleanly" >&2; exit 1; fi
wait "$reader"
check_once "$work/read2.txt" "after a kill, a join and a drain"

echo "== a reader killed (SIGKILL) three times and resumed from its checkpoint each time"
for k in 1 2 3 4; do
    "$bin/sluice" read --dispatcher "$disp" "$pipeline | map(sleep_us, 20)" \
        --checkpoint "$work/read3.ck" --checkpoint-every 2000 --output "$work/read3.txt" \
        2>"$work/read3.log" &
    reader=$!
    if [ "$k" -lt 4 ]; then
        sleep 0.7
        kill -KILL "$reader" 2>/dev/null || true
        wait "$reader" 2>/dev/null || true
        echo "  run $k killed at $(wc -l <"$work/read3.txt") lines written"
    elif ! wait "$reader"; then
        echo "demo: the resumed read failed: $(cat "$work/read3.log")" >&2; exit 1
    fi
done
check_once "$work/read3.txt" "after three kills and resumes"

echo "== reading range(10) | map(square) with a local tail map(add, 1), parallel_epochs"
"$bin/sluice" read --dispatcher "$disp" 'range(10) | map(square)' --local 'map(add, 1)' | sort -n | tr '\n' ' '
echo

echo "== cluster status"
"$bin/sluice" status --dispatcher "$disp"

echo "== what a stranger gets"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/wrong-token"
if SLUICE_AUTH_TOKEN_FILE="$work/wrong-token" "$bin/sluice" status --dispatcher "$disp" \
        --timeout-ms 3000 >/dev/null 2>"$work/stranger.log"; then
    echo "demo: a client with the wrong token was served" >&2; exit 1
fi
echo "  wrong token:  $(cat "$work/stranger.log")"
if "$bin/sluice" register --dispatcher "$disp" 'lines("/etc/passwd")' >/dev/null \
        2>"$work/outside.log"; then
    echo "demo: a file outside the data root was accepted" >&2; exit 1
fi
echo "  outside file: $(cat "$work/outside.log")"

echo "== stopping"
stop_all
echo "demo finished: every line read exactly once"
