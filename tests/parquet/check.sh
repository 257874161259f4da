#!/usr/bin/env bash
# The parquet() source against files from two independent writers (tests/parquet/gen.mjs):
# every fixture read whole, read with a default for each nullable column, and read as a
# projection of two columns in reverse order, each compared line by line with what hyparquet
# reads from the same file. Then the errors: a null met without a default names the file, the
# row group, the column and the row; a file that is not Parquet, and a truncated one, end the run
# with one line naming the file; a column the file lacks is named in the error.
#
#   tests/parquet/check.sh SLUICE WORKDIR [NODE]
#
# SLUICE is the sluice binary, WORKDIR a directory for the fixtures (made afresh), NODE the
# node binary (default: node on PATH). Needs the npm packages of tests/npm (scripts/deps.sh).
# Fails, never skips, when node or the packages are missing. Exits 0 when every check passed.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 SLUICE WORKDIR [NODE]" >&2
    exit 2
fi
sluice=$1
work=$2
node=${3:-node}
here=$(cd "$(dirname "$0")" && pwd)

if ! command -v "$node" >/dev/null 2>&1; then
    echo "check.sh: node not found ('$node'): install nodejs (scripts/deps.sh)" >&2
    exit 1
fi
[ -x "$sluice" ] || { echo "check.sh: $sluice is not an executable" >&2; exit 1; }

fixtures="$work/fixtures"
rm -rf "$fixtures"
mkdir -p "$fixtures"
"$node" "$here/gen.mjs" "$fixtures"

failures=0
checks=0
out="$work/out"
err="$work/err"

# The manifest entry of a fixture, one field a line, for a failure's report.
# shellcheck disable=SC2016 # the JavaScript is meant literally
manifest_entry() {
    "$node" -e '
        const m = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
        const e = m.find((x) => x.file === process.argv[2]) || {};
        for (const [k, v] of Object.entries(e)) console.log(`${k}: ${JSON.stringify(v)}`);' \
        "$fixtures/manifest.json" "$1" </dev/null | cut -c 1-300 | sed 's/^/    /'
}

# Reports a failed check: the message, then DETAIL (a file, when given and not empty), then the
# fixture's manifest entry.
fail() {
    local file=$1 message=$2 detail=${3:-}
    failures=$((failures + 1))
    echo "FAIL ${file:-(no fixture)}: $message"
    if [ -n "$detail" ] && [ -s "$detail" ]; then
        sed 's/^/    /' "$detail"
    fi
    if [ -n "$file" ]; then
        echo "  manifest entry:"
        manifest_entry "$file"
    fi
}

# Runs sluice on a pipeline, stdout to $out and stderr to $err; sets rc.
run_pipeline() {
    rc=0
    timeout 120 "$sluice" run "$1" </dev/null >"$out" 2>"$err" || rc=$?
}

# parquet("FILE", "ARG", ...) with ARGS comma-separated (no argument holds a comma).
pipeline_text() {
    local file=$1 args=$2 text
    text="parquet(\"$file\""
    if [ -n "$args" ]; then
        local a
        IFS=',' read -r -a list <<<"$args"
        for a in "${list[@]}"; do
            text="$text, \"$a\""
        done
    fi
    echo "$text)"
}

# Compares $out with an expected file: equal, or the first differing lines.
expect_output() {
    local name=$1 what=$2 expected=$3 pipeline=$4
    checks=$((checks + 1))
    if [ "$rc" != 0 ]; then
        fail "$name" "$what: exit $rc (pipeline: $pipeline)" "$err"
        return
    fi
    if ! cmp -s "$expected" "$out"; then
        diff "$expected" "$out" | head -n 12 | cut -c 1-400 >"$work/diff" || true
        fail "$name" "$what: output differs from $(basename "$expected") (pipeline: $pipeline;\
 $(wc -l <"$out") lines, $(wc -l <"$expected") expected); first differences (< expected):" \
            "$work/diff"
    fi
}

# Checks that the run failed with exactly one line on stderr holding each given fixed string,
# or extended regex when prefixed "re:".
expect_error() {
    local name=$1 what=$2
    shift 2
    checks=$((checks + 1))
    if [ "$rc" = 0 ]; then
        fail "$name" "$what: exit 0, an error expected" "$err"
        return
    fi
    if [ "$(wc -l <"$err")" != 1 ]; then
        fail "$name" "$what: $(wc -l <"$err") lines on stderr, one expected:" "$err"
        return
    fi
    local p
    for p in "$@"; do
        case $p in
        re:*) grep -Eq -- "${p#re:}" "$err" ||
            { fail "$name" "$what: error lacks /${p#re:}/:" "$err"; return; } ;;
        *) grep -Fq -- "$p" "$err" ||
            { fail "$name" "$what: error lacks '$p':" "$err"; return; } ;;
        esac
    done
}

nfiles=0
while IFS='|' read -r name defaults proj null_col null_rg null_row; do
    [ -n "$name" ] || continue
    nfiles=$((nfiles + 1))
    file="$fixtures/$name"

    pipeline=$(pipeline_text "$file" "")
    run_pipeline "$pipeline"
    if [ -z "$null_col" ]; then
        expect_output "$name" "every column" "$file.expected" "$pipeline"
    else
        # The run stops at the first null; what it printed before must be the rows before it.
        expect_error "$name" "a null without a default" "$name" "re:row group $null_rg\\b" \
            "re:(^|[^[:alnum:]_])$null_col([^[:alnum:]_]|$)" "re:row $null_row\\b"
        checks=$((checks + 1))
        if ! head -n "$(wc -l <"$out")" "$file.expected" | cmp -s - "$out"; then
            diff <(head -n "$(wc -l <"$out")" "$file.expected") "$out" | head -n 12 |
                cut -c 1-400 >"$work/diff" || true
            fail "$name" "the rows printed before the null error are not the file's first rows:" \
                "$work/diff"
        fi
    fi

    if [ -n "$defaults" ]; then
        pipeline=$(pipeline_text "$file" "$defaults")
        run_pipeline "$pipeline"
        expect_output "$name" "every column with defaults" "$file.defaults.expected" "$pipeline"
    fi
    if [ -n "$proj" ]; then
        pipeline=$(pipeline_text "$file" "$proj")
        run_pipeline "$pipeline"
        expect_output "$name" "two columns in reverse order" "$file.proj.expected" "$pipeline"
    fi
done <"$fixtures/cases.txt"

# Errors that end the stream: one line naming the file.
printf 'this is not a parquet file\n' >"$work/not_parquet.parquet"
run_pipeline "parquet(\"$work/not_parquet.parquet\")"
expect_error "" "a file that is not Parquet" "not_parquet.parquet"

good="$fixtures/pw_plain_v1_uncompressed.parquet"
head -c "$(($(wc -c <"$good") / 2))" "$good" >"$work/truncated.parquet"
run_pipeline "parquet(\"$work/truncated.parquet\")"
expect_error "" "a truncated file" "truncated.parquet"

: >"$work/zero_bytes.parquet"
run_pipeline "parquet(\"$work/zero_bytes.parquet\")"
expect_error "" "a file of zero bytes" "zero_bytes.parquet"

run_pipeline "parquet(\"$good\", \"no_such_column\")"
expect_error "" "a column the file lacks" "pw_plain_v1_uncompressed.parquet" "no_such_column"

echo "check.sh: $nfiles files, $checks checks, $failures failed"
[ "$failures" = 0 ]
