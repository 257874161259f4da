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

# The tests' independent oracles from the npm registry (tests/npm/package.json, versions pinned
# by its lock file): Parquet writers and a reader. The product never needs them.
npm_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/npm"
if [ ! -f "$npm_dir/node_modules/.package-lock.json" ] ||
       [ "$npm_dir/package-lock.json" -nt "$npm_dir/node_modules/.package-lock.json" ]; then
    echo "deps: installing the tests' npm packages into tests/npm" >&2
    (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
