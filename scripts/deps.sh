#!/usr/bin/env bash
# Installs the Debian packages sluice builds, tests and runs with. Does nothing when all of them
# are present. Needs root (or sudo) only when something is missing.
set -euo pipefail

# Every package the scripts, tests, benchmarks and demo call, including the ones a development
# machine tends to have already: clang alone (without recommends) lacks the sanitizer and
# libFuzzer runtimes, which live in libclang-rt-dev. python3-venv, -pip, -setuptools and -wheel:
# pip install --no-build-isolation . (setup.py's backend); python3-mypy: the typed API's checks;
# chromium: the dashboard's browser test (tests/dashboard), headless.
packages=(build-essential cmake pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler
          liblmdb-dev libsnappy-dev libcmocka-dev libjansson-dev clang libclang-rt-dev
          iperf3 procps jq python3-dev python3-numpy python3-pytest python3-torch python3-yaml
          zlib1g-dev libturbojpeg0-dev libarchive-dev python3-pil gzip tar libssl-dev openssl
          iproute2 stress-ng libzstd-dev liblz4-dev libbrotli-dev libpcre2-dev libcurl4-openssl-dev curl nodejs
          python3-venv python3-pip python3-setuptools python3-wheel python3-mypy
          chromium)
# npm: Debian's, unless the machine's nodejs already carries its own (a nodejs from elsewhere
# bundles npm and conflicts with Debian's package).
command -v npm >/dev/null 2>&1 || packages+=(npm)
if [ "${SLUICE_DEPS_EXTRA:-}" != "" ]; then
    read -r -a extra <<<"$SLUICE_DEPS_EXTRA"
    packages+=("${extra[@]}")
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}" >&2
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "deps: need root to install ${missing[*]}" >&2; exit 1; }
        sudo="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -q >/dev/null
    $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# C-Raft, the dispatcher replicas' consensus engine: 0.17.1 or newer (older ones can let replicas
# diverge under repeated leader kills). Debian 12's own suite has 0.15.0, so on bookworm it comes
# from bookworm-backports, on the mirror the machine's own apt sources already use for bookworm.
raft_ok() {
    local v
    v=$(dpkg-query -W -f='${Version}' libraft-dev 2>/dev/null) || return 1
    dpkg-query -W -f='${Status}' libraft-dev 2>/dev/null | grep -q 'install ok installed' || return 1
    dpkg --compare-versions "$v" ge 0.17.1
}
# Prints the URI of the first apt source (one-line or deb822) that serves suite $1, or nothing.
apt_uri_of_suite() {
    local suite=$1 f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v s="$suite" '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                            if ($(i + 1) == s) { print $i; exit } }' "$f"
    done | head -n 1
    for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
        [ -f "$f" ] || continue
        awk -v s="$suite" 'BEGIN { RS = ""; FS = "\n" }
            { uri = ""; ok = 0; deb = 0
              for (k = 1; k <= NF; k++) {
                  if ($k ~ /^URIs:/) { split($k, a, /[ \t]+/); uri = a[2] }
                  if ($k ~ /^Types:/ && $k ~ /(^|[ \t])deb([ \t]|$)/) deb = 1
                  if ($k ~ /^Suites:/) { n = split($k, b, /[ \t]+/); for (m = 2; m <= n; m++) if (b[m] == s) ok = 1 }
              }
              if (ok && deb && uri != "") { print uri; exit } }' "$f"
    done | head -n 1
}
if ! raft_ok; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "deps: need root to install libraft-dev" >&2; exit 1; }
        sudo="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ "$codename" = bookworm ]; then
        uri=$(apt_uri_of_suite bookworm || true)
        [ -n "$uri" ] || { echo "deps: no apt source for bookworm found to take bookworm-backports from" >&2; exit 1; }
        echo "deps: installing libraft-dev from bookworm-backports ($uri)" >&2
        printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$uri" | $sudo tee /etc/apt/sources.list.d/sluice-bookworm-backports.sources >/dev/null
        $sudo apt-get update -q >/dev/null
        $sudo apt-get install -y -q --no-install-recommends -t bookworm-backports libraft-dev >/dev/null
    else
        echo "deps: installing libraft-dev" >&2
        $sudo apt-get update -q >/dev/null
        $sudo apt-get install -y -q --no-install-recommends libraft-dev >/dev/null
    fi
    raft_ok || { echo "deps: libraft-dev 0.17.1 or newer is needed; apt installed $(dpkg-query -W -f='${Version}' libraft-dev 2>/dev/null || echo none)" >&2; exit 1; }
fi

# The tests' independent oracles from the npm registry (tests/npm/package.json, versions pinned
# by its lock file): Parquet writers and a reader. The product never needs them.
npm_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/npm"
if [ ! -f "$npm_dir/node_modules/.package-lock.json" ] ||
       [ "$npm_dir/package-lock.json" -nt "$npm_dir/node_modules/.package-lock.json" ]; then
    echo "deps: installing the tests' npm packages into tests/npm" >&2
    (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
