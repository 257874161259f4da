"""sluice.torch.IterableDataset fed by two sluice workers against PyTorch's
DataLoader(num_workers=2) over a map-style dataset, on the same machine in the same run, with
the same elements and the same per-element CPU cost. Prints elements/s, GB/s and the ratio
sluice / DataLoader for each case, then Python's own cost: from_dataset_id against
`sluice read --format count` on the same cluster.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_loader.py [--scale S]

A benchmark, not a test: it never fails on timing.
"""

import argparse
import os
import pathlib
import subprocess
import time

import numpy as np
import torch
import torch.utils.data

import sluice
import sluice.torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(os.environ.get("SLUICE_BIN_DIR", ROOT / "build" / "bin"))
MIB = 1 << 20


def busy_us(us):
    """Burns about us microseconds of CPU, as sluice's sleep_us does."""
    end = time.perf_counter_ns() + us * 1000
    while time.perf_counter_ns() < end:
        pass


class Bytes1M(torch.utils.data.Dataset):
    """1 MiB uint8 tensors derived from the index, produced at memory speed."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.from_numpy(np.full(MIB, i & 0xFF, dtype=np.uint8))


class Int64Batches(torch.utils.data.Dataset):
    """Batches of 1024 int64 scalars: batch i holds i*1024 ... i*1024+1023."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.arange(i * 1024, (i + 1) * 1024, dtype=torch.int64)


class Cpu20(torch.utils.data.Dataset):
    """int64 scalars, each costing 20 us of CPU."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        busy_us(20)
        return torch.tensor(i, dtype=torch.int64)


def consume(iterable):
    """Elements and payload bytes of a full pass, and the seconds it took."""
    n = nbytes = 0
    start = time.perf_counter()
    for x in iterable:
        n += 1
        nbytes += len(x) if isinstance(x, bytes) else x.numel() * x.element_size()
    return n, nbytes, time.perf_counter() - start


def report(name, base, ours):
    (bn, bb, bs), (sn, sb, ss) = base, ours
    print(f"{name}:")
    print(f"  DataLoader(num_workers=2): {bn / bs:12.0f} elements/s  {bb / bs / 1e9:6.2f} GB/s")
    print(f"  sluice, 2 workers:         {sn / ss:12.0f} elements/s  {sb / ss / 1e9:6.2f} GB/s")
    print(f"  ratio sluice / DataLoader: {(sn / ss) / (bn / bs):.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the element counts")
    args = ap.parse_args()
    n_big = int(2000 * args.scale)
    n_batches = int(5000 * args.scale)
    n_cpu = int(100000 * args.scale)
    n_range = int(10_000_000 * args.scale)

    cases = [
        ("1 MiB uint8 elements", Bytes1M(n_big), f"range({n_big}) | map(bytes, {MIB})"),
        ("int64 scalars in batches of 1024", Int64Batches(n_batches),
         f"range({n_batches * 1024}) | batch(1024)"),
        ("20 us of CPU per element", Cpu20(n_cpu), f"range({n_cpu}) | map(sleep_us, 20)"),
    ]
    with sluice.DispatchServer() as d:
        workers = [sluice.WorkerServer(d) for _ in range(2)]
        for name, ds, pipeline in cases:
            base = consume(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
            ours = consume(sluice.torch.IterableDataset(d, pipeline=pipeline,
                                                        processing_mode="distributed_epoch"))
            assert base[0] == ours[0], (base[0], ours[0])
            report(name, base, ours)

        # Python's own cost: the same read through the package and through the CLI.
        ds_id = sluice.register_dataset(d, f"range({n_range}) | batch(1024)")

        def python_read():
            start = time.perf_counter()
            n = sum(1 for _ in sluice.from_dataset_id("distributed_epoch", d, ds_id))
            return n, time.perf_counter() - start

        def cli_read():
            start = time.perf_counter()
            out = subprocess.run([str(BIN / "sluice"), "read", "--dispatcher", d.target,
                                  "--dataset-id", ds_id, "--mode", "distributed_epoch",
                                  "--format", "count"], check=True, capture_output=True,
                                 text=True)
            return int(out.stdout), time.perf_counter() - start

        # Alternated, best of two each: the first read of a dataset also warms the workers.
        runs = [cli_read(), python_read(), cli_read(), python_read()]
        n = runs[0][0]
        assert all(r[0] == n for r in runs), runs
        cli_s = min(runs[0][1], runs[2][1])
        py_s = min(runs[1][1], runs[3][1])
        print(f"range({n_range}) | batch(1024), {n} batches:")
        print(f"  sluice read --format count: {n / cli_s:10.0f} batches/s")
        print(f"  from_dataset_id in Python:  {n / py_s:10.0f} batches/s")
        print(f"  ratio Python / CLI:         {cli_s / py_s:.2f}")
        for w in workers:
            w.stop()


if __name__ == "__main__":
    main()
