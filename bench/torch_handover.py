"""What handing elements from a DataLoader's worker processes to the training process costs, next
to reading them in the training process itself, for large uint8 tensors from a sluice-worker
process on the same host, in the same run:

  - num_workers=0: the training process reads over shared memory; each tensor is a view of the
    reader's region (torch.from_numpy of the array, no copy);
  - num_workers=2: the loader's two worker processes read the same way and hand each tensor to
    the training process by reference: where it lies in their region, which the training process
    maps once (sluice.torch.DataLoader's shm_handover, the default);
  - num_workers=2, shm_handover=False: PyTorch hands each tensor over itself (it moves the
    tensor's bytes into a shared segment of its own and passes the segment's descriptor).

Element by element, and batched in the pipeline (`| batch(B)`: one tensor of B elements;
sluice.torch.DataLoader takes batch_size=None, the pipeline batches). Prints the throughput,
the training process's CPU seconds per GiB (what a handover could save it) and the machine's
CPU seconds per GiB (every process of the run: the worker processes included), each way's
ratios against num_workers=0, and the load average.

    /usr/bin/python3 bench/torch_handover.py [--size BYTES] [--elements N] [--rounds R] [--batch B]

Needs the Python package (PYTHONPATH=build/python) and the binaries (SLUICE_BIN_DIR, default
build/bin). A benchmark, not a test: it never fails on timing.
"""

import argparse
import os
import statistics
import time

import sluice
import sluice.torch
from shm_views import array_worker, cpu_seconds as own_cpu


def machine_cpu():
    """CPU seconds of the whole machine so far (user + nice + system + irq + softirq)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:8]]
    ticks = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
    return ticks / os.sysconf("SC_CLK_TCK")


def measure(target, elements, size, workers, batch, handover=True):
    """One epoch; returns (bytes/s, training process CPU s/GiB, machine CPU s/GiB)."""
    pipeline = f'range({elements}) | map(py, "viewmod:block")'
    if batch:
        pipeline += f" | batch({batch})"
    ds = sluice.torch.IterableDataset(target, pipeline=pipeline, processing_mode="parallel_epochs",
                                      target_workers="local")
    loader = sluice.torch.DataLoader(ds, num_workers=workers, shm_handover=handover)
    start, cpu, mcpu = time.perf_counter(), own_cpu(), machine_cpu()
    n = 0
    for t in loader:
        n += t.shape[0] if batch else 1
        int(t.reshape(-1)[0])  # touch the tensor, as a training step would
    elapsed = time.perf_counter() - start
    cpu, mcpu = own_cpu() - cpu, machine_cpu() - mcpu
    assert n == elements, (n, elements)
    gib = elements * size / 2**30
    return elements * size / elapsed, cpu / gib, mcpu / gib


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1 << 20, help="bytes per element")
    ap.add_argument("--elements", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="elements per batch of the batched "
                    "ways")
    args = ap.parse_args()

    ways = [("num_workers=0", 0, None, True),
            ("num_workers=2", 2, None, True),
            ("num_workers=2, shm_handover=False", 2, None, False),
            (f"num_workers=0, batch({args.batch})", 0, args.batch, True),
            (f"num_workers=2, batch({args.batch})", 2, args.batch, True),
            (f"num_workers=2, batch({args.batch}), no handover", 2, args.batch, False)]
    got = {name: [] for name, _, _, _ in ways}
    load_before = os.getloadavg()[0]
    with array_worker(args.size, "sluice-handover-bench-") as target:
        measure(target, 64, args.size, 0, None)  # warm-up: numpy imported in the worker
        for r in range(args.rounds):
            k = r % len(ways)
            for name, workers, batch, handover in ways[k:] + ways[:k]:
                got[name].append(measure(target, args.elements, args.size, workers, batch,
                                         handover))

    print(f"{args.elements} x {args.size} bytes (uint8), one sluice-worker process on this host, "
          f"{os.cpu_count()} cores, medians of {args.rounds} rounds, load average "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"  {'':42s} {'GB/s':>6s} {'':6s}  {'training process':>22s}  {'machine':>18s}")
    for i, (name, _, _, _) in enumerate(ways):
        base = ways[i - i % 3][0]
        med = [statistics.median(x[j] for x in got[name]) for j in range(3)]
        ref = [statistics.median(x[j] for x in got[base]) for j in range(3)]
        print(f"  {name:42s} {med[0] / 1e9:6.2f} x{med[0] / ref[0]:4.2f}  "
              f"{med[1]:6.3f} s/GiB x{med[1] / ref[1]:5.2f}  "
              f"{med[2]:6.3f} s/GiB x{med[2] / ref[2]:4.2f}")


if __name__ == "__main__":
    main()
