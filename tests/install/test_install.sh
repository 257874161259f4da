#!/usr/bin/env bash
# Installs a build tree into a temporary prefix with `cmake --install` and uses it as a program
# would: checks the installed files (the man pages as docs/man has them), the library's SONAME
# and exported symbols and every binary's --version, then builds examples/embed.c against the
# prefix with pkg-config (shared and static) and with find_package(sluice) (shared and static),
# and runs each build: it starts a dispatcher and two workers in-process, reads range(10) in
# distributed_epoch and checks 0..9 arrived exactly once. Also checks that docs/embedding.md
# shows that example as it is.
#
#   test_install.sh BUILD_DIR SOURCE_DIR C_COMPILER VERSION [EXTRA_C_FLAGS]
#
# EXTRA_C_FLAGS are the flags the tree was built with that a program must share (the sanitizer
# build's -fsanitize=...).
set -euo pipefail
build=$1 src=$(cd "$2" && pwd) cc=$3 version=$4 flags=${5:-}
major=${version%%.*}

tmp=$(mktemp -d /tmp/sluice-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "install: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }

for f in bin/sluice bin/sluice-dispatcher bin/sluice-worker \
         lib/libsluice.so "lib/libsluice.so.$major" "lib/libsluice.so.$version" lib/libsluice.a \
         include/sluice/sluice.h include/sluice/server.h include/sluice/version.h \
         lib/pkgconfig/sluice.pc lib/cmake/sluice/sluiceConfig.cmake \
         lib/cmake/sluice/sluiceConfigVersion.cmake share/man/man1/sluice.1 \
         share/man/man1/sluice-dispatcher.1 share/man/man1/sluice-worker.1; do
    [ -e "$prefix/$f" ] || fail "missing $f"
done
# Every man page, as committed in docs/man.
for page in "$src"/docs/man/*.1; do
    cmp -s "$page" "$prefix/share/man/man1/${page##*/}" \
        || fail "man page ${page##*/} is not installed as docs/man has it"
done
soname=$(readelf -d "$prefix/lib/libsluice.so.$version" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libsluice.so.$major" ] || fail "SONAME is '$soname', expected libsluice.so.$major"
# Only the public API is exported, from both libraries.
leaked=$(nm -D --defined-only "$prefix/lib/libsluice.so" | awk '{print $3}' | grep -v '^sluice_' || true)
[ -z "$leaked" ] || fail "libsluice.so exports internal symbols: $leaked"
leaked=$(nm -g --defined-only "$prefix/lib/libsluice.a" | awk 'NF == 3 {print $3}' | grep -v '^sluice_' || true)
[ -z "$leaked" ] || fail "libsluice.a exports internal symbols: $leaked"
for b in sluice sluice-dispatcher sluice-worker; do
    out=$("$prefix/bin/$b" --version) || fail "$b --version failed"
    [ "$out" = "sluice $version" ] || fail "$b --version printed '$out'"
done

# The public headers stand alone, in C11 with every warning.
for h in sluice/sluice.h sluice/server.h; do
    printf '#include <%s>\nint main(void) { return 0; }\n' "$h" >"$tmp/header.c"
    $cc -std=c11 -Wall -Wextra -Wpedantic -Werror -I"$prefix/include" -c "$tmp/header.c" \
        -o "$tmp/header.o" || fail "$h does not compile alone"
done

# docs/embedding.md shows the example as it is.
awk '/^<!-- examples\/embed.c:/ {found = 1; next} found == 1 && /^```c$/ {found = 2; next}
     found == 2 && /^```$/ {exit} found == 2 {print}' "$src/docs/embedding.md" >"$tmp/doc_example.c"
cmp -s "$tmp/doc_example.c" "$src/examples/embed.c" \
    || fail "docs/embedding.md's example differs from examples/embed.c"

expect="read 10 elements from 2 workers: 0..9, each exactly once"
run() {
    local what=$1
    shift
    local out
    out=$("$@") || fail "$what: the example failed"
    [ "$out" = "$expect" ] || fail "$what: the example printed '$out'"
    echo "install: $what: $out"
}

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion sluice)" = "$version" ] || fail "pkg-config --modversion sluice"
# shellcheck disable=SC2046,SC2086
$cc $flags "$src/examples/embed.c" $(pkg-config --cflags --libs sluice) -o "$tmp/embed_pc" \
    || fail "pkg-config: the example does not build"
LD_LIBRARY_PATH=$prefix/lib run "pkg-config, libsluice.so" "$tmp/embed_pc"
# The static library with what sluice.pc names for it (-l:libsluice.a picks the archive over the
# shared library beside it).
static_libs=$(pkg-config --libs --static sluice | sed 's/-lsluice\b/-l:libsluice.a/')
# shellcheck disable=SC2046,SC2086
$cc $flags "$src/examples/embed.c" $(pkg-config --cflags sluice) $static_libs -o "$tmp/embed_pc_static" \
    || fail "pkg-config --static: the example does not build"
if ldd "$tmp/embed_pc_static" | grep -q libsluice; then
    fail "pkg-config --static: linked libsluice.so"
fi
run "pkg-config --static, libsluice.a" "$tmp/embed_pc_static"

cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
    -DEXAMPLE="$src/examples/embed.c" -DSLUICE_EXPECTED_VERSION="$version" \
    >"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log" >&2; fail "find_package(sluice): configure failed"; }
cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 \
    || { cat "$tmp/consumer.log" >&2; fail "find_package(sluice): build failed"; }
run "find_package, sluice::sluice" "$tmp/consumer/embed_shared"
run "find_package, sluice::sluice_static" "$tmp/consumer/embed_static"
# The Python package, when the build has one: imported from the installed tree alone.
if ls "$build"/python/sluice/_sluice*.so >/dev/null 2>&1; then
    pkg=$(ls -d "$prefix"/lib/python3*/dist-packages 2>/dev/null | head -n 1)
    [ -n "$pkg" ] || fail "the Python package was not installed"
    got=$(cd "$tmp" && PYTHONPATH="$pkg" /usr/bin/python3 -c \
        'import sluice; print([int(x) for x in sluice.run("range(3) | map(square)")])') \
        || fail "the installed Python package does not import"
    [ "$got" = "[0, 1, 4]" ] || fail "the installed Python package read $got"
    echo "install: the Python package imports from $pkg"
fi
echo "install: every check passed"
