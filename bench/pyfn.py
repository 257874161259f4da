"""A CPU-bound pure-Python function in map(py, ...) on sluice-worker processes: elements/s with
one worker process (the baseline), one process with two producer threads, and two worker
processes, in the same run, on the same dispatcher, reading distributed_epoch with
`sluice read --format count`. Prints each configuration's rate and its ratio to the baseline,
the same function called in a plain Python loop (what one core can do), and the machine's load
average, since other processes on the machine take cores from the ones measured.

CPython runs one Python function at a time per process (the GIL), so threads inside one worker
do not add throughput to a CPU-bound Python function; worker processes do, up to the cores.

    /usr/bin/python3 bench/pyfn.py [--elements N] [--loops L] [--rounds R]

Each round measures every configuration once, in a rotating order, and its ratios to that
round's baseline; the medians over R rounds are printed, which keeps a burst of load from other
processes on one measurement from deciding the result. A benchmark, not a test: it never fails
on timing.
"""

import argparse
import os
import pathlib
import signal
import statistics
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(os.environ.get("SLUICE_BIN_DIR", ROOT / "build" / "bin"))

MODULE = '''\
def burn(x, loops):
    """Pure-Python CPU work: no numpy, no I/O, the GIL held throughout."""
    s = 0
    for i in range(loops):
        s += i * i % 7
    return int(x) + (s & 0)
'''


class Server:
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        line = self.proc.stdout.readline()
        if " listening on " not in line:
            self.stop()
            raise RuntimeError(f"{argv[0]} did not start: {line!r}")
        self.address = line.rsplit(" ", 1)[1].strip()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


def read(dispatcher, pipeline, mode):
    out = subprocess.run([str(BIN / "sluice"), "read", "--dispatcher", dispatcher, pipeline,
                          "--mode", mode, "--format", "count"],
                         check=True, capture_output=True, text=True, timeout=600)
    return int(out.stdout)


def measure(dispatcher, mod_dir, processes, threads, elements, loops):
    """Starts the workers, starts Python in each (a warm-up read every worker runs), then times
    one distributed_epoch read. Returns elements/s."""
    workers = [Server([str(BIN / "sluice-worker"), "--dispatcher", dispatcher, "--port", "0",
                       "--threads", str(threads), "--python-path", mod_dir,
                       "--log-level", "error"])
               for _ in range(processes)]
    try:
        fn = f'map(py, "benchmod:burn", {loops})'
        assert read(dispatcher, f"range(1) | {fn}", "parallel_epochs") == processes
        start = time.perf_counter()
        n = read(dispatcher, f"range({elements}) | {fn}", "distributed_epoch")
        elapsed = time.perf_counter() - start
        assert n == elements, (n, elements)
        return elements / elapsed
    finally:
        for w in workers:
            w.stop()


def plain_rate(loops, seconds=1.0):
    """The function called in a loop in this process: one core's worth."""
    scope = {}
    exec(MODULE, scope)
    burn = scope["burn"]
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        burn(n, loops)
        n += 1
    return n / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elements", type=int, default=1500)
    ap.add_argument("--loops", type=int, default=20000, help="loop iterations per element")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    configs = [("1 process x 1 thread", 1, 1), ("1 process x 2 threads", 1, 2),
               ("2 processes x 1 thread", 2, 1)]
    rates = {name: [] for name, _, _ in configs}
    ratios = {name: [] for name, _, _ in configs}
    plain = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="sluice-pyfn-bench-") as mod_dir:
        pathlib.Path(mod_dir, "benchmod.py").write_text(MODULE)
        dispatcher = Server([str(BIN / "sluice-dispatcher"), "--port", "0",
                             "--log-level", "error"])
        try:
            for r in range(args.rounds):
                plain.append(plain_rate(args.loops))
                got = {}
                for name, processes, threads in configs[r % 3:] + configs[:r % 3]:
                    got[name] = measure(dispatcher.address, mod_dir, processes, threads,
                                        args.elements, args.loops)
                for name in got:
                    rates[name].append(got[name])
                    ratios[name].append(got[name] / got[configs[0][0]])
                plain[-1] /= got[configs[0][0]]
        finally:
            dispatcher.stop()

    print(f"map(py, \"benchmod:burn\", {args.loops}) over range({args.elements}), "
          f"distributed_epoch, {os.cpu_count()} cores, medians of {args.rounds} rounds, "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    for name, _, _ in configs:
        print(f"  {name:24s} {median(rates[name]):8.1f} elements/s   "
              f"x{median(ratios[name]):.2f}   (per round: "
              + " ".join(f"x{x:.2f}" for x in ratios[name]) + ")")
    print(f"  {'plain Python loop':24s} {'':8s}              x{median(plain):.2f}   "
          "(the function alone in one process, for scale)")


def median(values):
    return statistics.median(values)


if __name__ == "__main__":
    main()
