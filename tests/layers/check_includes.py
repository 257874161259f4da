#!/usr/bin/python3
"""Checks the include structure of src/ against docs/design.md §1.

1. No include cycle between modules (a module is x.c with x.h), except a module and its own
   x_internal.h (x and x_internal form a pair by design).
2. Layering: which parts of src/ each part may include. The pure libraries (sluice_base, named in
   src/common/CMakeLists.txt as BASE_SRCS, and the dispatcher core, CORE_SRCS in
   src/dispatcher/CMakeLists.txt) may include only pure headers; the servers do not include each
   other, and the client includes no server.

Usage: check_includes.py SOURCE_DIR. First checks itself on a small tree it must refuse, so it
cannot pass by finding nothing. Exits 1 with every violation listed.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# The parts of src/ each part may include (besides itself, public headers and generated
# protobuf headers).
ALLOWED = {
    "common": {"common"},
    "journal": {"common"},
    "pipeline": {"common"},
    "pyfn": {"common", "pipeline"},
    "dispatcher": {"common", "journal", "pipeline"},
    "worker": {"common", "journal", "pipeline", "pyfn"},
    "client": {"common", "pipeline"},
    "cli": {"common", "journal", "pipeline", "pyfn", "client", "dispatcher"},
}


def cmake_list(path, var):
    """The file stems of `set(VAR a.c b.c ...)` in a CMakeLists.txt."""
    text = open(path).read()
    m = re.search(r"set\(%s\s+([^)]*)\)" % var, text)
    if not m:
        raise SystemExit("%s: no set(%s ...)" % (path, var))
    return {os.path.splitext(w)[0] for w in m.group(1).split()}


def scan(src):
    """{module: {included module}} and {module: [files]} for every .c/.h under src."""
    edges, files = {}, {}
    for d, _, names in os.walk(src):
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            path = os.path.join(d, n)
            mod = os.path.relpath(os.path.splitext(path)[0], src)
            files.setdefault(mod, []).append(path)
            out = edges.setdefault(mod, set())
            for inc in INCLUDE.findall(open(path, errors="replace").read()):
                for cand in (os.path.join(d, inc), os.path.join(src, inc)):
                    if os.path.isfile(cand):
                        target = os.path.relpath(os.path.splitext(os.path.normpath(cand))[0], src)
                        if target != mod:
                            out.add(target)
                        break
    return edges, files


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def internal_pair(comp):
    return len(comp) == 2 and comp[1] == comp[0] + "_internal"


def check(src, base, core):
    edges, _ = scan(src)
    problems = []
    for comp in cycles(edges):
        if not internal_pair(comp):
            problems.append("include cycle among: " + ", ".join(comp))
    pure = {"common/" + b for b in base} | {"dispatcher/" + c for c in core}
    pure |= {m + "_internal" for m in pure if m + "_internal" in edges}
    # Header-only modules of common count as pure when they include only pure modules.
    for mod in edges:
        if mod.startswith("common/") and not os.path.exists(os.path.join(src, mod + ".c")):
            pure.add(mod)
    changed = True
    while changed:
        changed = False
        for mod in sorted(pure):
            bad = [t for t in edges.get(mod, ()) if t not in pure]
            if bad and mod.startswith("common/") and mod.split("/")[1] not in base:
                pure.discard(mod)  # a header-only module that is not pure after all
                changed = True
    for mod in sorted(edges):
        part = mod.split("/")[0]
        for target in sorted(edges[mod]):
            tpart = target.split("/")[0]
            if mod in pure and target not in pure:
                problems.append("%s is pure but includes %s" % (mod, target))
            elif tpart != part and tpart in ALLOWED and tpart not in ALLOWED.get(part, set()):
                problems.append("%s (%s) may not include %s" % (mod, part, target))
    return problems


def write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def self_check():
    """A small tree with a cycle, an allowed x/x_internal pair, an impure include into a pure
    module and a forbidden part: each must be reported, and nothing else."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        write(tmp, {
            "common/a.c": '#include "a.h"\n#include "b.h"\n',
            "common/a.h": "",
            "common/b.c": '#include "b.h"\n#include "a.h"\n',
            "common/b.h": "",
            "common/log.c": '#include "log.h"\n',
            "common/log.h": "",
            "common/pure.c": '#include "pure.h"\n#include "common/log.h"\n',
            "common/pure.h": "",
            "worker/w.c": '#include "w_internal.h"\n#include "dispatcher/d.h"\n',
            "worker/w_internal.h": '#include "w.h"\n',
            "worker/w.h": "",
            "dispatcher/d.c": '#include "d.h"\n',
            "dispatcher/d.h": "",
        })
        got = sorted(check(tmp, {"a", "b", "pure"}, set()))
    want = sorted([
        "include cycle among: common/a, common/b",
        "common/pure is pure but includes common/log",
        "worker/w (worker) may not include dispatcher/d",
    ])
    if got != want:
        print("check_includes.py is broken: on its test tree it reported\n  %s\nnot\n  %s"
              % ("\n  ".join(got), "\n  ".join(want)), file=sys.stderr)
        sys.exit(1)


def main():
    if len(sys.argv) != 2:
        print("usage: check_includes.py SOURCE_DIR", file=sys.stderr)
        return 2
    self_check()
    root = sys.argv[1]
    src = os.path.join(root, "src")
    base = cmake_list(os.path.join(src, "common", "CMakeLists.txt"), "BASE_SRCS")
    core = cmake_list(os.path.join(src, "dispatcher", "CMakeLists.txt"), "CORE_SRCS")
    problems = check(src, base, core)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print("check_includes.py: no include cycle, every part within its layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
