#!/usr/bin/env bash
# Tokenization benchmark: tokens per second per core of map(tokenize, "cl100k_base.tiktoken") on
# English-like prose and code (JSON Lines written by tests/npm/tokens_oracle.mjs, deterministic),
# beside tiktoken's WASM build (OpenAI's Rust implementation) in Node on the same documents in
# the same run, and beside Python's tiktoken when /usr/bin/python3 can import it (given the same
# rank file: it is not downloaded). sluice's figure is its whole run (reading, JSON parsing,
# loading the rank file, encoding) over its CPU time; the baselines' are their encoding alone,
# documents read and parsed before their clock starts: the comparison leans toward the
# baselines. A plain read of the documents (jsonl() alone) is timed too, to show what reading
# costs. The first round checks that sluice and tiktoken count the same tokens. Rounds alternate
# the tools; prints each round, the medians and the ratio sluice/tiktoken-WASM.
# Usage: bench/tokens.sh [BUILD_DIR]   (default build/; builds nothing itself)
# Environment: SLUICE_BENCH_TOK_MB (size of the documents, default 100), SLUICE_BENCH_TOK_ROUNDS
# (default 3), SLUICE_BENCH_TOK_ENCODING (cl100k_base, o200k_base, p50k_base or r50k_base;
# default cl100k_base).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${1:-build}/bin
for t in node awk date; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
[ -d tests/npm/node_modules/tiktoken ] || { echo "needs the tests' npm packages (scripts/deps.sh)"; exit 1; }
mb=${SLUICE_BENCH_TOK_MB:-100}
rounds=${SLUICE_BENCH_TOK_ROUNDS:-3}
encoding=${SLUICE_BENCH_TOK_ENCODING:-cl100k_base}
oracle=tests/npm/tokens_oracle.mjs

with_scratch

echo "writing about $mb MB of documents"
node "$oracle" corpus "$tmp/docs.jsonl" $((mb * 1000000)) 1
node "$oracle" files "$tmp/files" >/dev/null
ranks="$tmp/files/$encoding.tiktoken"
bytes=$(stat -c %s "$tmp/docs.jsonl")
echo "documents: $(wc -l <"$tmp/docs.jsonl") in $bytes bytes; tokenizer: $ranks"

python=no
if /usr/bin/python3 -c 'import tiktoken' 2>/dev/null; then python=yes; fi

# Prints "TOKENS SECONDS" for Python's tiktoken on the same rank file, encoding alone timed.
python_tiktoken() {
    /usr/bin/python3 - "$tmp/docs.jsonl" "$ranks" "$tmp/files/specials.json" "$encoding" <<'EOF'
import json, sys, time
import tiktoken
from tiktoken.load import load_tiktoken_bpe
docs, ranks, specials, name = sys.argv[1:5]
spec = json.load(open(specials))[name]
enc = tiktoken.Encoding(name, pat_str=spec["pat_str"], mergeable_ranks=load_tiktoken_bpe(ranks),
                        special_tokens=spec["special_tokens"])
texts = [json.loads(l)["text"] for l in open(docs, encoding="utf-8") if l.strip()]
t0 = time.process_time()
n = sum(len(enc.encode_ordinary(t)) for t in texts)
print(n, "%.3f" % (time.process_time() - t0))
EOF
}

# Prints "WALL CPU" seconds of one sluice run (CPU: user + system).
sluice_time() {
    local t
    t=$({ TIMEFORMAT='%R %U %S'; time "$bin/sluice" run "$1" --format count >/dev/null; } 2>&1)
    awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }' <<<"$t"
}

pipeline="jsonl(\"$tmp/docs.jsonl\", \"text\") | map(tokenize, \"$ranks\")"
: >"$tmp/results"
for r in $(seq 1 "$rounds"); do
    if [ "$r" = 1 ]; then
        # The ids are checked against tiktoken's by tests/tokenize; here their count.
        n_sluice=$("$bin/sluice" run "$pipeline" | awk -F', ' '$0 != "[]" { n += NF } END { print n }')
    fi
    set -- $(sluice_time "$pipeline")
    echo "sluice $1 $2" >>"$tmp/results"
    set -- $(sluice_time "jsonl(\"$tmp/docs.jsonl\", \"text\")")
    echo "read $1 $2" >>"$tmp/results"
    set -- $(node "$oracle" bench "$tmp/docs.jsonl" "$encoding")
    tokens=$1
    echo "tiktoken_wasm $2 $2" >>"$tmp/results"
    if [ "$python" = yes ]; then
        set -- $(python_tiktoken)
        echo "tiktoken_python $2 $2" >>"$tmp/results"
    fi
    if [ "$r" = 1 ] && [ "$n_sluice" != "$tokens" ]; then
        echo "sluice made $n_sluice tokens, tiktoken $tokens"
        exit 1
    fi
    echo "round $r (tool wall cpu): $(tail -n $([ "$python" = yes ] && echo 4 || echo 3) "$tmp/results" | paste -sd ';' -)"
done
[ "$python" = yes ] || echo "Python tiktoken: not importable by /usr/bin/python3 (not measured)"

awk -v bytes="$bytes" -v tokens="$tokens" -v enc="$encoding" '
    { wall[$1] = wall[$1] " " $2; cpu[$1] = cpu[$1] " " $3 }
    function median(s,   a, n, i, j, x) {
        n = split(s, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        printf "%s, %d tokens, %.1f MB of JSON Lines (%.2f bytes a token)\n", enc, tokens, bytes / 1e6, bytes / tokens
        printf "%-16s %10s %10s %14s %10s\n", "tool", "wall s", "cpu s", "tokens/s/core", "MB/s/core"
        n = split("sluice read tiktoken_wasm tiktoken_python", order, " ")
        for (i = 1; i <= n; i++) {
            k = order[i]
            if (!(k in cpu)) continue
            w = median(wall[k]); c = median(cpu[k]); rate[k] = tokens / c
            printf "%-16s %10.3f %10.3f %14s %10.1f\n", k, w, c, k == "read" ? "-" : sprintf("%.0f", tokens / c), bytes / c / 1e6
        }
        printf "sluice / tiktoken (WASM): %.2fx tokens/s per core\n", rate["sluice"] / rate["tiktoken_wasm"]
        if ("tiktoken_python" in rate)
            printf "sluice / tiktoken (Python): %.2fx tokens/s per core\n", rate["sluice"] / rate["tiktoken_python"]
    }' "$tmp/results"
