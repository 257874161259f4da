"""sluice.torch.DataLoader's worker processes hand tensors to the training process by reference
(shm_handover, the default; sluice/_handover.py): a tensor read over shared memory from a
sluice-worker process on this host reaches the training loop as a view of that region, mapped in
the training process, not as a copy PyTorch made.

Checked: element for element what shm_handover=False (PyTorch's own handover) and a read in the
training process give, in both processing modes, with batches and with persistent workers over
two epochs; each handed tensor lies in a private mapping of the sluice region (/proc/self/maps),
writable without changing the region; tensors kept after the loader is gone stay valid, and once
they are dropped the training process maps and holds nothing of the regions or boards; a loader
worker reuses the slots its freed tensors give back, and with every slot held it waits (the
loader times out) instead of growing; a loader worker started with "spawn" hands over too."""

import gc
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import sluice
import sluice._handover
import sluice.torch
from test_shm import expected, tensor_worker  # noqa: F401 (a fixture)


@pytest.fixture
def slots():
    """Sets the slots of the loader workers started (forked) after it; restores the default."""
    before = sluice._handover.SLOTS

    def set_slots(n):
        sluice._handover.SLOTS = n

    yield set_slots
    sluice._handover.SLOTS = before


def dataset(target, n, mode="distributed_epoch", batch=None):
    pipeline = f'range({n}) | map(py, "tensors:make")'
    if batch:
        pipeline += f" | batch({batch})"
    return sluice.torch.IterableDataset(target, pipeline=pipeline, processing_mode=mode,
                                        target_workers="local")


def maps(*names):
    """The address ranges of this process's mappings of memory files named like names."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if any(f"memfd:{n}" in line for n in names):
                lo, hi = line.split()[0].split("-")
                out.append((int(lo, 16), int(hi, 16), line.split()[1]))
    return out


def open_files(*names):
    """This process's descriptors of memory files named like names."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if any(f"memfd:{n}" in target for n in names):
            out.append(target)
    return out


def in_region(t):
    """Whether tensor t's values lie in a private mapping of a sluice region of this process."""
    at, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    return any(lo <= at and end <= hi and perms[3] == "p"
               for lo, hi, perms in maps("sluice-shm"))


def labels_of(e, batch):
    pixels, floats, label = e
    xs = [int(v) for v in label.reshape(-1)] if batch else [int(label)]
    for k, x in enumerate(xs):
        p = pixels[k] if batch else pixels
        f = floats[k] if batch else floats
        want = expected(x)
        assert p.dtype == torch.uint8 and np.array_equal(p.numpy(), want[0]), x
        assert np.array_equal(f.numpy(), want[1]), x
    return xs


def wait_nothing_mapped():
    deadline = time.monotonic() + 15
    while maps("sluice-shm", "sluice-handover") or open_files("sluice-shm", "sluice-handover"):
        gc.collect()
        assert time.monotonic() < deadline, (maps("sluice-shm", "sluice-handover"),
                                             open_files("sluice-shm", "sluice-handover"))
        time.sleep(0.05)


@pytest.mark.parametrize("mode,batch", [("distributed_epoch", None), ("parallel_epochs", None),
                                        ("distributed_epoch", 4)])
def test_handed_over_like_pytorch_does(cluster, tensor_worker, mode, batch):
    n = 48
    got = {}
    for way, kw in (("handover", {}), ("pytorch", {"shm_handover": False}),
                    ("in process", {"num_workers": 0})):
        loader = sluice.torch.DataLoader(dataset(cluster.target, n, mode, batch),
                                         **{"num_workers": 2, **kw})
        labels, views = [], 0
        for e in loader:
            labels += labels_of(e, batch)
            views += in_region(e[0])
            del e
        got[way] = (sorted(labels), views)
    # The loader workers share the job: in parallel_epochs they split the sluice worker's copy.
    assert got["handover"][0] == list(range(n))
    assert got["pytorch"][0] == list(range(n))
    assert got["in process"][0] == list(range(n))
    assert got["handover"][1] == n // (batch or 1)  # every element a view of a region
    assert got["pytorch"][1] == 0
    wait_nothing_mapped()


def test_persistent_workers_two_epochs(cluster, tensor_worker):
    loader = sluice.torch.DataLoader(dataset(cluster.target, 30), num_workers=2,
                                     persistent_workers=True)
    for epoch in range(2):
        labels = []
        for e in loader:
            assert in_region(e[0])
            labels += labels_of(e, None)
        assert sorted(labels) == list(range(30)), epoch
    del loader, e
    wait_nothing_mapped()


def test_epoch_left_early_then_a_whole_one(cluster, tensor_worker):
    """A loop left early (its elements still on the way become stale, and the loader worker
    lets them go), then a whole epoch, with persistent workers."""
    loader = sluice.torch.DataLoader(dataset(cluster.target, 40), num_workers=2,
                                     persistent_workers=True, prefetch_factor=4)
    for k, e in enumerate(loader):
        if k == 3:
            break
    kept = e
    labels = []
    for e in loader:
        assert in_region(e[0])
        labels += labels_of(e, None)
    assert sorted(labels) == list(range(40))
    assert len(labels_of(kept, None)) == 1  # still valid
    del loader, e, kept
    wait_nothing_mapped()


def test_tensors_outlive_the_loader_and_stay_private(cluster, tensor_worker):
    loader = sluice.torch.DataLoader(dataset(cluster.target, 20), num_workers=2)
    kept = []
    for e in loader:
        kept.append(e)
    del loader, e
    gc.collect()
    # The loader's workers are gone; their elements are not.
    assert sorted(x for e in kept for x in labels_of(e, None)) == list(range(20))
    pixels = kept[0][0]
    assert in_region(pixels)
    before = pixels.clone()
    pixels.add_(1)  # writable: a private copy of the page, not the region
    assert torch.equal(pixels, before + 1)
    del kept, pixels, before
    wait_nothing_mapped()


def test_freed_slots_are_reused(cluster, tensor_worker, slots):
    slots(3)
    loader = sluice.torch.DataLoader(dataset(cluster.target, 40), num_workers=1)
    labels = []
    for e in loader:
        labels += labels_of(e, None)
        del e
    assert sorted(labels) == list(range(40))
    del loader
    wait_nothing_mapped()


def test_held_slots_make_the_worker_wait(cluster, tensor_worker, slots):
    slots(3)
    loader = sluice.torch.DataLoader(dataset(cluster.target, 40), num_workers=1, timeout=3)
    kept = []
    with pytest.raises(RuntimeError, match="DataLoader timed out after 3 seconds"):
        for e in loader:
            kept.append(e)
    # Every slot held: the loader worker handed three elements over and waits for the fourth;
    # the caller has two (the loader holds one back, to tell the epoch's last element).
    assert len(kept) == 2
    assert len({x for e in kept for x in labels_of(e, None)}) == 2
    del loader, e, kept
    wait_nothing_mapped()


KILLED = """
import faulthandler, os, signal, sys, threading, time
sys.path.insert(0, {tests!r})
import sluice.torch
import torch.utils.data._utils.signal_handling as torch_signals
from test_torch_handover import dataset, labels_of, wait_nothing_mapped

# Should this hang, every process of it prints its threads' stacks (the loader workers inherit
# the SIGUSR1 handler) and it ends, so that the output says where.
WATCHDOG_S = float(os.environ.get("SLUICE_TEST_WATCHDOG_S", "90"))
faulthandler.register(signal.SIGUSR1, all_threads=True)
def watchdog():
    time.sleep(WATCHDOG_S)
    for w in getattr(getattr(loader, "_iterator", None), "_workers", []):
        try:
            os.kill(w.pid, signal.SIGUSR1)
        except OSError:
            pass
threading.Thread(target=watchdog, daemon=True).start()
faulthandler.dump_traceback_later(WATCHDOG_S + 3, exit=True)  # this process, even holding the GIL

# Without torch's SIGCHLD handler (it raises wherever this process happens to be): the loader
# finds its worker dead when it next checks on its workers, and fails there.
torch_signals._SIGCHLD_handler_set = True
loader = sluice.torch.DataLoader(dataset({target!r}, 200), num_workers=2,
                                 persistent_workers=True)
kept, failed = [], None
try:
    for k, e in enumerate(loader):
        kept.append(e)
        if k == 5:
            os.kill(loader._iterator._workers[0].pid, signal.SIGKILL)
except (RuntimeError, OSError, EOFError) as exc:  # torch's failure, or a descriptor lost with it
    failed = repr(exc)  # not the exception: its traceback's frames hold elements
assert failed is not None and len(kept) >= 6, (failed, len(kept))
assert len({{x for e in kept for x in labels_of(e, None)}}) == len(kept)
loader._iterator._shutdown_workers()
del loader, e, kept
wait_nothing_mapped()
print("ok")
"""


def test_loader_worker_killed(cluster, tensor_worker, tmp_path):
    """A loader worker killed with SIGKILL in the middle of an epoch: the loader fails as torch's
    does, the tensors received stay valid, and once they are dropped nothing of the regions or
    boards stays in the training process (in a process of its own)."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED.format(tests=os.path.dirname(__file__), target=cluster.target))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_spawned_workers_hand_over(cluster, tensor_worker):
    loader = sluice.torch.DataLoader(dataset(cluster.target, 12), num_workers=1,
                                     multiprocessing_context="spawn")
    labels = []
    for e in loader:
        assert in_region(e[0])
        labels += labels_of(e, None)
    assert sorted(labels) == list(range(12))
    del loader, e
    wait_nothing_mapped()


def test_shm_handover_checked():
    ds = sluice.torch.IterableDataset("127.0.0.1:1", pipeline="range(3)")
    with pytest.raises(TypeError):
        sluice.torch.DataLoader(ds, shm_handover="yes")
