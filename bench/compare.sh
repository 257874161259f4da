#!/usr/bin/env bash
# Regression gate: the key figures of two builds, measured alternately in one run.
#
#   bench/compare.sh OLD_REV [NEW_REV] [--rounds N] [--quick] [--only NAME,NAME...] [--raw]
#
# Builds both revisions (Release, each in its own directory under build-compare/, cached by
# commit; NEW_REV defaults to HEAD, and "." means the working tree as it is, uncommitted changes
# included), then runs every figure ROUNDS times (default 3), the two builds alternating and the
# order swapped every round, so that a machine that gets busier or quieter during the run weighs
# on both builds alike. For each figure it prints the median of each build, the ratio new/old of
# the medians (> 1: the new build is better, whether the figure is a rate or a latency), and the
# spread of the per-round ratios (min-max).
#
# A figure regresses when the new build is more than 10 % worse than the old one in every round
# (the best per-round ratio is below 0.9): a change beyond the noise of this machine. The script
# exits 1 when any figure regresses, 2 on a build or run failure, 0 otherwise.
#
# Figures (--only takes these names):
#   small_pe    8-byte elements, range(10^7), parallel_epochs, `sluice read --format count` (M/s)
#   small_de    the same in distributed_epoch (M/s)
#   small_*_cpu the reader's CPU time (user + system) per element of those reads (ns, lower is
#               better): the reader's own cost, which a busy machine disturbs far less than rates
#   big_pe      1 MiB elements without compression, parallel_epochs (MiB/s)
#   big_de      the same in distributed_epoch (MiB/s)
#   py_batches  Python sluice.from_dataset_id over range(2*10^6) | batch(256), batches/s
#   journal     bench_journal's group-commit journaled updates/s
#   restart     bench_journal's restart to serving after 200,000 changes (s, lower is better)
#   cp_*        control plane at 100 workers and 10 clients: worker heartbeat, client heartbeat
#               and split lease p99 (ms, lower is better), the journal in /dev/shm so that the
#               dispatcher's own work is measured, not the disk's fsyncs
#   images      bench/images.py: JPEG decode + crop epoch through two in-process workers (images/s)
#
# --quick: one round and smaller sizes, to check the script itself. --raw: every measurement
# ("FIGURE old|new VALUE", in order) on standard error before the table.
#
# Environment: SLUICE_COMPARE_DIR (default build-compare/) holds the builds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/lib.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

old_rev="" new_rev="HEAD" rounds=3 quick=0 only="" raw=0
positional=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --quick) quick=1; rounds=1; shift ;;
        --only) only=",$2,"; shift 2 ;;
        --raw) raw=1; shift ;;
        -h|--help) usage ;;
        -*) echo "compare: unknown option $1" >&2; usage ;;
        *) positional+=("$1"); shift ;;
    esac
done
[ ${#positional[@]} -ge 1 ] && [ ${#positional[@]} -le 2 ] || usage
old_rev=${positional[0]}
[ ${#positional[@]} -eq 2 ] && new_rev=${positional[1]}
case "$rounds" in ''|*[!0-9]*|0) echo "compare: --rounds takes a positive number" >&2; exit 2 ;; esac

cache=${SLUICE_COMPARE_DIR:-$root/build-compare}
mkdir -p "$cache"
jobs=$(nproc)

# build REV: prints the build directory of REV, building it when it is not cached.
build_rev() {
    local rev=$1 key src dir
    if [ "$rev" = "." ]; then
        key=worktree
        src="$cache/$key/src"
        mkdir -p "$src"
        # Tracked and untracked (not ignored) files with their times, so the build is
        # incremental from one run to the next; files the tree no longer has are removed first
        # (a stale header left there would shadow the one that replaced it).
        git ls-files -z -co --exclude-standard | sort -z >"$cache/$key/files"
        (cd "$src" && find . -type f -printf '%P\0' | sort -z) |
            comm -z -23 - "$cache/$key/files" | (cd "$src" && xargs -0 -r rm -f --)
        tar -c --null -T "$cache/$key/files" --ignore-failed-read -f - 2>/dev/null |
            tar -x -p -C "$src" -f -
        rm -f "$cache/$key/ok"
    else
        key=$(git rev-parse --verify --quiet "$rev^{commit}") ||
            { echo "compare: no such revision: $rev" >&2; return 2; }
        src="$cache/$key/src"
        if [ ! -f "$cache/$key/ok" ]; then
            rm -rf "$src"
            mkdir -p "$src"
            git archive "$key" | tar -x -C "$src"
        fi
    fi
    dir="$cache/$key/build"
    if [ ! -f "$cache/$key/ok" ]; then
        echo "compare: building $rev ($key) in $dir" >&2
        if ! { cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
               cmake --build "$dir" -j "$jobs" -- --no-print-directory >"$cache/$key/build.log" 2>&1; }; then
            echo "compare: the build of $rev failed; its log is $cache/$key/build.log" >&2
            return 2
        fi
        touch "$cache/$key/ok"
    fi
    echo "$dir"
}

old_dir=$(build_rev "$old_rev") || exit 2
new_dir=$(build_rev "$new_rev") || exit 2

with_scratch
now_ns() { date +%s%N; }
# rate N NS: N per second, in the unit the caller scaled N to.
rate() { awk -v n="$1" -v ns="$2" 'BEGIN { printf "%.4f", n / (ns / 1e9) }'; }

if [ $quick = 1 ]; then
    n_small=1000000 n_big=200 n_py=200000 n_changes=20000 n_images=100 cp_seconds=2
else
    n_small=10000000 n_big=1000 n_py=2000000 n_changes=200000 n_images=400 cp_seconds=5
fi

want() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }
want_prefix() { [ -z "$only" ] || [[ "$only" == *",$1"* ]]; }

# Each measurement appends "FIGURE BUILD VALUE" to $tmp/results; a figure a build cannot give
# (an old build without the benchmark) is left out.
record() { echo "$1 $2 $3" >>"$tmp/results"; }

# A dispatcher and one worker of build $1 for the data-plane figures; sets disp.
cluster_up() {
    local bin=$1/bin
    "$bin/sluice-dispatcher" --port 0 >"$tmp/d.out" 2>"$tmp/d.err" &
    cluster_pids=($!)
    pids+=($!)
    disp=$(wait_listen "$tmp/d.out" "${cluster_pids[0]}")
    "$bin/sluice-worker" --dispatcher "$disp" --port 0 >"$tmp/w.out" 2>"$tmp/w.err" &
    cluster_pids+=($!)
    pids+=($!)
    wait_listen "$tmp/w.out" "${cluster_pids[1]}" >/dev/null
}
cluster_down() {
    kill "${cluster_pids[@]}" 2>/dev/null || true
    wait "${cluster_pids[@]}" 2>/dev/null || true
}

# timed_count BUILD EXPECTED ARGS...: runs `sluice read ARGS --format count`, checks the count,
# prints the nanoseconds it took and the reader's CPU seconds (user + system).
timed_count() {
    local bin=$1/bin want=$2 t0 t1 got cpu
    shift 2
    t0=$(now_ns)
    cpu=$( { TIMEFORMAT='%3U %3S'; time "$bin/sluice" read --dispatcher "$disp" "$@" --format count \
             >"$tmp/count" 2>"$tmp/read.err"; } 2>&1 ) ||
        { echo "compare: sluice read $* failed: $(cat "$tmp/read.err")" >&2; return 1; }
    t1=$(now_ns)
    got=$(cat "$tmp/count")
    if [ "$got" != "$want" ]; then
        echo "compare: read $got of $want elements (sluice read $*)" >&2
        return 1
    fi
    echo "$((t1 - t0)) $(echo "$cpu" | awk '{ print $1 + $2 }')"
}

# small FIGURE BUILD_TAG BUILD ARGS...: the wall-clock rate (M elements/s) and the reader's CPU
# per element (ns; robust against a busy machine) of a read of n_small elements.
small() {
    local fig=$1 tag=$2 dir=$3 out
    shift 3
    out=$(timed_count "$dir" "$n_small" "$@")
    record "$fig" "$tag" "$(echo "$out" | awk -v n="$n_small" '{ printf "%.4f", n / ($1 / 1e9) / 1e6 }')"
    record "${fig}_cpu" "$tag" "$(echo "$out" | awk -v n="$n_small" '{ printf "%.2f", $2 * 1e9 / n }')"
}

measure_dataplane() {
    local tag=$1 dir=$2 ns id
    want_prefix small || want_prefix big || want py_batches || return 0
    cluster_up "$dir"
    want small_pe && small small_pe "$tag" "$dir" "range($n_small)"
    want small_de && small small_de "$tag" "$dir" "range($n_small)" --mode distributed_epoch
    if want big_pe || want big_de; then
        id=$("$dir/bin/sluice" register --dispatcher "$disp" "range($n_big) | map(bytes, 1048576)" \
             --compression none)
        if want big_pe; then
            ns=$(timed_count "$dir" "$n_big" --dataset-id "$id" | cut -d' ' -f1)
            record big_pe "$tag" "$(rate "$n_big" "$ns")"
        fi
        if want big_de; then
            ns=$(timed_count "$dir" "$n_big" --dataset-id "$id" --mode distributed_epoch | cut -d' ' -f1)
            record big_de "$tag" "$(rate "$n_big" "$ns")"
        fi
    fi
    if want py_batches && [ -d "$dir/python/sluice" ]; then
        local v
        v=$(PYTHONPATH="$dir/python" /usr/bin/python3 - "$disp" "$n_py" <<'EOF'
import sys, time
import sluice
disp, n = sys.argv[1], int(sys.argv[2])
dataset_id = sluice.register_dataset(disp, f"range({n}) | batch(256)")
t0 = time.monotonic()
batches = sum(1 for _ in sluice.from_dataset_id("parallel_epochs", disp, dataset_id))
secs = time.monotonic() - t0
want = (n + 255) // 256
if batches != want:
    sys.exit(f"compare: python read {batches} of {want} batches")
print(f"{batches / secs:.2f}")
EOF
        ) && record py_batches "$tag" "$v"
    fi
    cluster_down
}

measure_journal() {
    local tag=$1 dir=$2 out
    want journal || want restart || return 0
    [ -x "$dir/bench/bench_journal" ] || return 0
    out=$("$dir/bench/bench_journal" --seconds 2 --changes "$n_changes" \
          --dispatcher "$dir/bin/sluice-dispatcher" 2>&1) ||
        { echo "compare: bench_journal of the $tag build failed: $(echo "$out" | tail -n 3)" >&2; return 0; }
    if want journal; then
        record journal "$tag" "$(echo "$out" | awk '$1 == "group" { print $2; exit }')"
    fi
    if want restart; then
        record restart "$tag" "$(echo "$out" |
            awk '/restart to serving/ { for (i = 1; i < NF; i++) if ($i == "best") { print $(i + 1); exit } }')"
    fi
}

measure_control_plane() {
    local tag=$1 dir=$2 out
    want_prefix cp_ || return 0
    [ -x "$dir/bench/control_plane" ] || return 0
    # The same peers in the simulator for both builds: a bench that has a probe process (which
    # takes some of them out of the simulator's figures) runs without it.
    local probe=() where=()
    if "$dir/bench/control_plane" --help | grep -q -- --no-probe; then probe=(--no-probe); fi
    # The journal in memory (/dev/shm) where there is one: on a disk, a client heartbeat's and a
    # lease's p99 at this scale is the slowest fsync of the run (1 to 60 ms from one run to the
    # next on the same build), which says nothing of either build.
    if [ -d /dev/shm ] && [ -w /dev/shm ]; then where=(--work-root /dev/shm); fi
    out=$("$dir/bench/control_plane" --workers 100 --clients 10 --jobs 4 --seconds "$cp_seconds" \
          --no-baseline "${probe[@]}" "${where[@]}" --dispatcher "$dir/bin/sluice-dispatcher" 2>/dev/null) ||
        { echo "compare: control_plane of the $tag build failed" >&2; return 0; }
    p99() { echo "$out" | awk -v what="$1" 'index($0, what) { for (i = 2; i <= NF; i++) if ($i == "ms" && $(i - 1) == "p99") { print $(i + 2); exit } }'; }
    want cp_worker_hb && record cp_worker_hb "$tag" "$(p99 "worker heartbeat p99")"
    want cp_client_hb && record cp_client_hb "$tag" "$(p99 "client heartbeat p99")"
    want cp_lease && record cp_lease "$tag" "$(p99 "split lease (GetSplits) p99")"
    return 0
}

measure_images() {
    local tag=$1 dir=$2 out
    want images || return 0
    [ -d "$dir/python/sluice" ] || return 0
    out=$(PYTHONPATH="$dir/python" /usr/bin/python3 "$root/bench/images.py" --images "$n_images" \
          --epochs 1 2>&1) || { echo "compare: images.py of the $tag build failed: $(echo "$out" | tail -n 3)" >&2; return 0; }
    record images "$tag" "$(echo "$out" | awk -F: '/^sluice, 2 workers, decode_jpeg/ { print $2 + 0; exit }')"
}

measure() {
    measure_dataplane "$1" "$2"
    measure_journal "$1" "$2"
    measure_control_plane "$1" "$2"
    measure_images "$1" "$2"
}

: >"$tmp/results"
echo "compare: $rounds round(s), old $old_rev ($old_dir), new $new_rev ($new_dir)" >&2
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for b in $order; do
        echo "compare: round $r/$rounds, $b build" >&2
        if [ $b = old ]; then d=$old_dir; else d=$new_dir; fi
        measure "$b" "$d" || { echo "compare: a measurement of the $b build failed" >&2; exit 2; }
    done
done

[ $raw = 1 ] && cat "$tmp/results" >&2

# Figures where lower is better; the ratio is then old/new so that > 1 always means better.
awk -v lower="small_pe_cpu small_de_cpu restart cp_worker_hb cp_client_hb cp_lease" '
BEGIN {
    n = split(lower, l, " "); for (i = 1; i <= n; i++) low[l[i]] = 1
    order = "small_pe small_pe_cpu small_de small_de_cpu big_pe big_de py_batches journal restart cp_worker_hb cp_client_hb cp_lease images"
    nf = split(order, fig, " ")
    unit["small_pe"] = "M el/s"; unit["small_de"] = "M el/s"; unit["small_pe_cpu"] = "ns/el"
    unit["small_de_cpu"] = "ns/el"; unit["big_pe"] = "MiB/s"
    unit["big_de"] = "MiB/s"; unit["py_batches"] = "batch/s"; unit["journal"] = "upd/s"
    unit["restart"] = "s"; unit["cp_worker_hb"] = "ms"; unit["cp_client_hb"] = "ms"
    unit["cp_lease"] = "ms"; unit["images"] = "img/s"
}
function median(arr, k,    i, j, t, a) {
    for (i = 1; i <= k; i++) a[i] = arr[i]
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
$3 != "" {
    if ($2 == "old") { old[$1, ++no[$1]] = $3 } else { new[$1, ++nn[$1]] = $3 }
}
END {
    printf "%-14s %8s %14s %14s %8s %15s  %s\n", "figure", "unit", "old (median)", "new (median)", "new/old", "per-round", "verdict"
    bad = 0
    for (f = 1; f <= nf; f++) {
        name = fig[f]
        k = no[name] < nn[name] ? no[name] : nn[name]
        if (k == 0) continue
        lo = 1e99; hi = -1e99
        for (i = 1; i <= k; i++) {
            o = old[name, i]; w = new[name, i]; ov[i] = o; nv[i] = w
            if (low[name]) r = (w > 0 ? o / w : 1); else r = (o > 0 ? w / o : 1)
            if (r < lo) lo = r; if (r > hi) hi = r
        }
        mo = median(ov, k); mn = median(nv, k)
        if (low[name]) ratio = (mn > 0 ? mo / mn : 1); else ratio = (mo > 0 ? mn / mo : 1)
        verdict = hi < 0.9 ? "REGRESSION" : "ok"
        if (hi < 0.9) bad = 1
        printf "%-14s %8s %14.4g %14.4g %8.2f %7.2f-%-7.2f  %s\n", name, unit[name], mo, mn, ratio, lo, hi, verdict
    }
    print "(new/old > 1: the new build is better; lower-is-better figures are inverted)"
    exit bad
}' "$tmp/results"
