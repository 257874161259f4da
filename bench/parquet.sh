#!/usr/bin/env bash
# Parquet benchmark: how fast `sluice run 'parquet(...)'` reads a file of 8 numeric and 2 string
# columns (snappy, dictionary where it pays, written by the Rust Arrow/Parquet writer through
# parquet-wasm), all columns and 2 of the 10, on one thread, beside hyparquet (the JavaScript
# reader) reading the same file in Node on the same machine (an independent baseline), and
# beside the same rows as tf.train.Example records in a TFRecord file read with
# tfrecord() | map(parse_example, ...) (all 10 features). The modes alternate in each round;
# prints per round and the medians of rows/s and MB/s (the Parquet file's bytes over wall time,
# for every reader), and the ratios sluice/hyparquet, 2-columns/all and Parquet/TFRecord.
# Usage: bench/parquet.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_PQ_ROWS (rows, default 4000000: about 180 MB; 22000000 is about
# 1 GB), SLUICE_BENCH_PQ_TF_ROWS (rows of the TFRecord file, default the same up to 4000000:
# its rows/s is compared), SLUICE_BENCH_PQ_ROUNDS (default 3), SLUICE_BENCH_PQ_FILE (reuse a
# Parquet file written before; its TFRecord file is FILE without .parquet, plus .tfrecord).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
for t in node awk sort date; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
[ -d tests/npm/node_modules/hyparquet ] || { echo "needs the tests' npm packages (scripts/deps.sh)"; exit 1; }
rows=${SLUICE_BENCH_PQ_ROWS:-4000000}
tf_rows=${SLUICE_BENCH_PQ_TF_ROWS:-$((rows < 4000000 ? rows : 4000000))}
rounds=${SLUICE_BENCH_PQ_ROUNDS:-3}

with_scratch

file=${SLUICE_BENCH_PQ_FILE:-$tmp/bench.parquet}
if [ ! -f "$file" ]; then
    echo "writing $rows rows to $file"
    node tests/npm/parquet_bench.mjs write "$file" "$rows"
fi
bytes=$(stat -c %s "$file")
echo "file: $bytes bytes"
records=${file%.parquet}.tfrecord
if [ ! -f "$records" ]; then
    echo "writing the same rows to $records"
    node tests/npm/parquet_bench.mjs tfrecord "$records" "$tf_rows"
fi
echo "TFRecord file: $(stat -c %s "$records") bytes"
example_spec='"id:int64", "small:int64", "uniform:float32", "price:float32", "big:int64",
    "label:int64", "half:float32", "noise:int64", "word:bytes", "pair:bytes"'

now() { date +%s.%N; }
# Prints "ROWS SECONDS" of one sluice run.
sluice_read() {
    local t0 t1 n
    t0=$(now)
    n=$("$bin/sluice" run "$1" --format count)
    t1=$(now)
    echo "$n $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
}

: >"$tmp/results"
for r in $(seq 1 "$rounds"); do
    set -- $(sluice_read "parquet(\"$file\")")
    echo "sluice_all $1 $2" >>"$tmp/results"
    set -- $(sluice_read "parquet(\"$file\", \"id\", \"label\")")
    echo "sluice_two $1 $2" >>"$tmp/results"
    set -- $(sluice_read "tfrecord(\"$records\") | map(parse_example, $example_spec)")
    echo "tfrecord_all $1 $2" >>"$tmp/results"
    set -- $(node tests/npm/parquet_bench.mjs read "$file")
    echo "hyparquet_all $1 $2" >>"$tmp/results"
    set -- $(node tests/npm/parquet_bench.mjs read "$file" id label)
    echo "hyparquet_two $1 $2" >>"$tmp/results"
    echo "round $r (reader rows seconds): $(tail -n 5 "$tmp/results" | paste -sd ';' -)"
done

awk -v bytes="$bytes" -v want="$rows" -v tf_want="$tf_rows" '
    { w = $1 == "tfrecord_all" ? tf_want : want
      if ($2 != w) { printf "%s read %s rows, not %s\n", $1, $2, w; bad = 1 }
      n[$1] = w
      t[$1] = t[$1] " " $3 }
    function median(s,   a, n, i, j, x) {
        n = split(s, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        for (k in t) m[k] = median(t[k])
        printf "%-14s %12s %10s %10s\n", "reader", "rows/s", "MB/s", "seconds"
        split("sluice_all sluice_two tfrecord_all hyparquet_all hyparquet_two", order, " ")
        for (i = 1; i <= 5; i++) { k = order[i]
            printf "%-14s %12.0f %10.1f %10.3f\n", k, n[k] / m[k], bytes * n[k] / want / 1e6 / m[k], m[k] }
        printf "sluice / hyparquet, all columns: %.2f (target >= 3)\n", m["hyparquet_all"] / m["sluice_all"]
        printf "sluice / hyparquet, 2 columns:   %.2f\n", m["hyparquet_two"] / m["sluice_two"]
        printf "sluice 2 columns / all:          %.2f (target >= 3)\n", m["sluice_all"] / m["sluice_two"]
        printf "Parquet / TFRecord rows/s (all): %.2f\n", (want / m["sluice_all"]) / (tf_want / m["tfrecord_all"])
        exit bad
    }' "$tmp/results"
