#!/bin/sh
# Checks that the pure libraries stay pure: no member of the given static archives may reference
# a clock, randomness, the environment, files or other I/O, logging, signals, threads, processes,
# libuv or LMDB. Pure code computes; the shell around it does everything else (docs/design.md
# §1). Usage: check_purity.sh [--expect-impure] ARCHIVE...
# With --expect-impure it checks itself instead: it must find something in the archives given
# (a library known to do I/O), so a checker that stopped seeing anything fails too.
set -eu
expect_impure=0
if [ "${1:-}" = "--expect-impure" ]; then
    expect_impure=1
    shift
fi
[ $# -gt 0 ] || { echo "usage: $0 [--expect-impure] ARCHIVE..." >&2; exit 2; }
# Undefined symbols a pure object must not have. pthread_once is allowed: a one-time, idempotent
# table initialisation (crc32c) is a computation, not concurrency.
forbidden='^(clock_gettime|clock|time|gettimeofday|localtime(_r)?|gmtime(_r)?|mktime|rand|rand_r|random|srand|srandom|getrandom|getentropy|arc4random.*|RAND_.*|getenv|secure_getenv|setenv|fopen(64)?|fdopen|freopen|open(64)?|openat(64)?|creat|close|read|write|pread(64)?|pwrite(64)?|readv|writev|fread|fwrite|fgets|fputs|puts|printf|fprintf|vfprintf|dprintf|perror|fflush|stat(64)?|fstat(64)?|lstat(64)?|access|unlink|rename|mkdir|rmdir|opendir|readdir(64)?|readlink|realpath|mmap(64)?|socket|connect|accept4?|bind|listen|send|recv|sendmsg|recvmsg|poll|epoll_.*|select|syslog|openlog|sleep|usleep|nanosleep|sigaction|signal|raise|kill|pthread_sigmask|fork|vfork|exec[lv]p?e?|system|popen|dlopen|dlsym|pthread_(create|join|detach|mutex_.*|cond_.*|rwlock_.*|kill)|thrd_.*|mtx_.*|cnd_.*|uv_.*|mdb_.*|log_.*|__errno_location)$'
status=0
for archive in "$@"; do
    [ -f "$archive" ] || { echo "$archive: no such archive" >&2; exit 2; }
    # nm prints "archive[member]:" or "member:" headers, then one symbol per line.
    found=$(nm -u "$archive" | awk -v re="$forbidden" '
        /:$/ { member = $0; sub(/:$/, "", member); next }
        NF == 0 { next }
        { sym = $NF; sub(/@.*/, "", sym); if (sym ~ re) print member ": " sym }')
    if [ -n "$found" ]; then
        if [ "$expect_impure" -eq 0 ]; then
            echo "$(basename "$archive") is meant to be pure, but references:" >&2
            echo "$found" | sed 's/^/  /' >&2
        fi
        status=1
    fi
done
if [ "$expect_impure" -eq 1 ]; then
    if [ "$status" -eq 0 ]; then
        echo "the checker found nothing impure in $*, which does I/O: it is broken" >&2
        exit 1
    fi
    exit 0
fi
[ "$status" -eq 0 ] && echo "pure: $*"
exit "$status"
