"""Python reading large uint8 tensors from a sluice-worker process on the same host: over shared
memory, where each numpy array is a view of the reader's region, against TCP on loopback
(shm=False, the baseline), in the same run, from the same worker. Prints the throughput and the
reader process's CPU seconds per GiB of each, their ratios, and the machine's load average, since
other processes on the machine take cores from the ones measured.

The worker's function returns one of 8 arrays made at import, so producing an element costs the
worker a conversion and no arithmetic; the reader touches one byte of each array.

    /usr/bin/python3 bench/shm_views.py [--size BYTES] [--elements N] [--rounds R]

Needs the Python package (PYTHONPATH=build/python) and the binaries (SLUICE_BIN_DIR, default
build/bin). Each round measures both ways once, in a rotating order; the medians over R rounds
are printed. A benchmark, not a test: it never fails on timing.
"""

import argparse
import contextlib
import os
import pathlib
import resource
import statistics
import tempfile
import time

import sluice
from pyfn import BIN, Server

MODULE = '''\
import numpy as np

_ARRAYS = [np.random.default_rng(i).integers(0, 256, SIZE, dtype=np.uint8) for i in range(8)]


def block(x):
    return _ARRAYS[int(x) % 8]
'''


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@contextlib.contextmanager
def array_worker(size, prefix):
    """A dispatcher and one sluice-worker process whose map(py, "viewmod:block") returns uint8
    arrays of size bytes; yields the service's target once the worker has registered, and stops
    both after."""
    with tempfile.TemporaryDirectory(prefix=prefix) as mod_dir:
        pathlib.Path(mod_dir, "viewmod.py").write_text(MODULE.replace("SIZE", str(size)))
        dispatcher = Server([str(BIN / "sluice-dispatcher"), "--port", "0",
                             "--log-level", "error"])
        worker = None
        try:
            target = "sluice://" + dispatcher.address
            worker = Server([str(BIN / "sluice-worker"), "--dispatcher", dispatcher.address,
                             "--port", "0", "--python-path", mod_dir, "--log-level", "error"])
            deadline = time.monotonic() + 30
            while not sluice.status(target)["workers"]:
                assert time.monotonic() < deadline, "the worker did not register"
                time.sleep(0.05)
            yield target
        finally:
            if worker:
                worker.stop()
            dispatcher.stop()


def measure(target, elements, size, shm):
    """One read of elements arrays; returns (bytes/s, reader CPU seconds per GiB)."""
    ds = sluice.distribute(f'range({elements}) | map(py, "viewmod:block")', "parallel_epochs",
                           target, target_workers="local", shm=shm)
    start, cpu = time.perf_counter(), cpu_seconds()
    n = 0
    for a in ds:
        n += 1 + int(a[0]) * 0
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    assert n == elements, (n, elements)
    return elements * size / elapsed, cpu / (elements * size / 2**30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1 << 20, help="bytes per element")
    ap.add_argument("--elements", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    ways = [("tcp (baseline)", False), ("shm views", True)]
    rate = {name: [] for name, _ in ways}
    cpu = {name: [] for name, _ in ways}
    load_before = os.getloadavg()[0]
    with array_worker(args.size, "sluice-views-bench-") as target:
        measure(target, 16, args.size, True)  # warm-up: numpy imported in the worker
        for r in range(args.rounds):
            for name, shm in ways[r % 2:] + ways[:r % 2]:
                got = measure(target, args.elements, args.size, shm)
                rate[name].append(got[0])
                cpu[name].append(got[1])

    print(f"{args.elements} x {args.size} bytes (uint8), parallel_epochs, one worker process, "
          f"{os.cpu_count()} cores, medians of {args.rounds} rounds, load average "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    base = ways[0][0]
    for name, _ in ways:
        print(f"  {name:16s} {statistics.median(rate[name]) / 1e9:6.2f} GB/s "
              f"x{statistics.median(rate[name]) / statistics.median(rate[base]):.2f}   "
              f"reader CPU {statistics.median(cpu[name]):.3f} s/GiB "
              f"x{statistics.median(cpu[name]) / statistics.median(cpu[base]):.2f}")


if __name__ == "__main__":
    main()
