#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs a real pipeline over a generated
# dataset with the local engine (`sluice run`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
echo "== building"
scripts/build.sh build
bin=build/bin
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== generating a small text dataset in $out"
for f in 0 1 2 3; do
    for i in $(seq 1 2500); do echo "shard $f line $i"; done >"$out/part-$f.txt"
done

echo "== running locally (no service yet): lines | shuffle | take 5"
"$bin/sluice" run "lines(\"$out/part-*.txt\") | shuffle(1000, 42) | take(5)"
echo "== counting lines"
"$bin/sluice" run "lines(\"$out/part-*.txt\")" --format count
echo "== throughput of range | map | batch"
start=$(date +%s%N)
n=$("$bin/sluice" run 'range(20000000) | map(add, 1) | batch(1024)' --format count)
end=$(date +%s%N)
echo "$n batches of 1024 in $(( (end - start) / 1000000 )) ms"
