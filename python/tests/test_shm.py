"""Shared-memory reads from Python (docs/reading.md "Local workers"): a sluice-worker process on
this host is read over shared memory by default and over TCP with shm=False, element for element
the same; the worker maps the reader's region only in the first case, and lets it go once the read
is closed; shm_bytes out of range is refused.

Zero copies: a numpy array of a large fixed-width tensor read over shared memory is a view of the
reader's region (its address lies in the region's mapping, /proc/self/maps), equal to what TCP
gives; it stays valid after its iterator and client are gone, and the region stays mapped until
the last view is; a consumer that holds batches of views makes the worker wait (every element a
view, none over the socket); one that keeps every view fills the region and no more: the worker
writes no block over a held one (every kept view keeps its values), and once the reader waits
with the region full the rest comes over the socket."""

import gc
import os
import time

import numpy as np
import pytest

import sluice
from conftest import BIN_DIR, Server, wait_workers

PIPELINE = "range(40) | map(bytes, 300000)"


def regions(pid):
    """The shared regions process pid maps, from /proc/PID/maps."""
    with open(f"/proc/{pid}/maps") as f:
        return [line for line in f if "memfd:sluice-shm" in line]


def read(target, pid, **kw):
    """The elements' bytes in order of arrival, and whether the worker mapped a region while the
    read was open."""
    ds = sluice.distribute(PIPELINE, "parallel_epochs", target, target_workers="local", **kw)
    out, mapped = [], False
    it = iter(ds)
    for x in it:
        mapped = mapped or bool(regions(pid))
        out.append(x if isinstance(x, bytes) else bytes(memoryview(np.ascontiguousarray(x))))
    it.close()
    return out, mapped


def test_shm_and_tcp_give_the_same_elements(cluster):
    w = cluster.add_worker()
    wait_workers(cluster.target, 1)
    pid = w.proc.pid
    shm, mapped = read(cluster.target, pid)
    assert mapped
    tcp, mapped = read(cluster.target, pid, shm=False)
    assert not mapped
    assert len(shm) == 40 and all(len(x) == 300000 for x in shm)
    assert sorted(shm) == sorted(tcp)
    assert len(set(shm)) == 40
    # Closed reads leave nothing mapped in the worker.
    deadline = time.monotonic() + 15
    while regions(pid):
        assert time.monotonic() < deadline, "the worker still maps a region"
        time.sleep(0.05)


def test_shm_bytes_checked(cluster):
    cluster.add_worker()
    wait_workers(cluster.target, 1)
    with pytest.raises(sluice.InvalidArgumentError, match=r"^shm_bytes: expected a multiple of 64"):
        next(iter(sluice.distribute(PIPELINE, "parallel_epochs", cluster.target,
                                    shm_bytes=1000)))
    with pytest.raises(TypeError):
        sluice.distribute(PIPELINE, "parallel_epochs", cluster.target, shm="yes")


TENSORS = """
import numpy as np



def make(x):
    x = int(x)
    pixels = np.random.default_rng(x).integers(0, 256, 300000, dtype=np.uint8)
    return pixels, np.linspace(0, 1, 3000, dtype=np.float32) + x, np.int64(x)


def wide(x, dtype):
    return np.arange(100000, dtype=dtype) * 3 + int(x)


def wide_int64(x):
    return wide(x, np.int64)


def wide_float32(x):
    return wide(x, np.float32)


def wide_float64(x):
    return wide(x, np.float64)
"""


def expected(x):
    """The element make(x) gives, computed here (random pixels: snappy does not pay off, so the
    records are stored uncompressed, as images' are)."""
    pixels = np.random.default_rng(x).integers(0, 256, 300000, dtype=np.uint8)
    return pixels, np.linspace(0, 1, 3000, dtype=np.float32) + x, x


@pytest.fixture
def tensor_worker(cluster, tmp_path):
    """A sluice-worker process whose py functions include tensors:make (TENSORS)."""
    (tmp_path / "tensors.py").write_text(TENSORS)
    w = Server([str(BIN_DIR / "sluice-worker"), "--dispatcher", cluster.dispatcher.address,
                "--port", "0", "--python-path", str(tmp_path)], log_dir=cluster.log_dir)
    cluster.workers.append(w)
    wait_workers(cluster.target, 1)
    return w


def mapped_regions():
    """The address ranges of the shared regions this process maps."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if "memfd:sluice-shm" in line:
                lo, hi = line.split()[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return out


def in_region(arr, ranges):
    at = arr.__array_interface__["data"][0]
    return any(lo <= at and at + arr.nbytes <= hi for lo, hi in ranges)


def read_tensors(target, n, **kw):
    ds = sluice.distribute(f'range({n}) | map(py, "tensors:make")', "parallel_epochs", target,
                           target_workers="local", **kw)
    it = iter(ds)
    return ds, it


def check_element(e):
    pixels, floats, label = e
    want = expected(int(label))
    assert pixels.dtype == np.uint8 and pixels.shape == (300000,)
    assert np.array_equal(pixels, want[0])
    assert floats.dtype == np.float32 and np.array_equal(floats, want[1])


def test_views_of_the_region_equal_tcp(cluster, tensor_worker):
    ds, it = read_tensors(cluster.target, 30)
    shm = list(it)
    ranges = mapped_regions()
    it.close()
    ds, it = read_tensors(cluster.target, 30, shm=False)
    tcp = list(it)
    it.close()
    assert sorted(int(e[2]) for e in shm) == list(range(30))
    assert sorted(int(e[2]) for e in tcp) == list(range(30))
    by_label = {int(e[2]): e for e in tcp}
    for e in shm:
        check_element(e)
        t = by_label[int(e[2])]
        assert np.array_equal(e[0], t[0]) and np.array_equal(e[1], t[1])
        # The pixels (uint8: always aligned) are a view of the region; over TCP nothing is.
        assert in_region(e[0], ranges)
        assert not e[0].flags.owndata
    assert not any(in_region(t[0], ranges) for t in tcp)
    # torch takes the view as it is, without a copy.
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(shm[0][0])
    assert t.data_ptr() == shm[0][0].__array_interface__["data"][0]
    assert torch.equal(t, torch.from_numpy(expected(int(shm[0][2]))[0]))


@pytest.mark.parametrize("dtype", ["int64", "float32", "float64"])
def test_wide_dtypes_are_views_too(cluster, tensor_worker, dtype):
    """The worker aligns a large tensor's values where they land in the region (a pad record
    before its record), so arrays of 8-byte and 4-byte dtypes are views of it as uint8 ones
    are, every one of them, and equal what TCP brings."""
    # Without compression: snappy shrinks these regular values, and a compressed record is
    # decoded into memory of the element's own.
    ds_id = sluice.register_dataset(cluster.target, f'range(30) | map(py, "tensors:wide_{dtype}")',
                                    compression=None)
    ds = sluice.from_dataset_id("parallel_epochs", cluster.target, ds_id, target_workers="local")
    it = iter(ds)
    shm = list(it)
    ranges = mapped_regions()
    it.close()
    tcp = list(sluice.from_dataset_id("parallel_epochs", cluster.target, ds_id,
                                      target_workers="local", shm=False))
    base = np.arange(100000, dtype=dtype) * 3
    for got in (shm, tcp):
        assert sorted(int(a[0]) for a in got) == list(range(30))
        for a in got:
            assert a.dtype == np.dtype(dtype) and np.array_equal(a, base + int(a[0]))
    views = [in_region(a, ranges) and not a.flags.owndata for a in shm]
    assert views == [True] * 30
    assert all(a.__array_interface__["data"][0] % 64 == 0 for a in shm)
    assert not any(in_region(a, ranges) for a in tcp)


def test_view_outlives_its_iterator_and_client(cluster, tensor_worker):
    ds, it = read_tensors(cluster.target, 10)
    kept = [next(it)[0], next(it)[0]]
    labels = []
    ranges = mapped_regions()
    assert all(in_region(a, ranges) for a in kept)
    it.close()
    del it, ds
    gc.collect()
    # The read and its connections are gone; the views are not, nor the mapping under them.
    for a in kept:
        x = [x for x in range(10) if np.array_equal(a, expected(x)[0])]
        assert len(x) == 1
        labels += x
    assert len(set(labels)) == 2
    assert all(in_region(a, mapped_regions()) for a in kept)
    del kept, a
    gc.collect()
    # The last view gone, the region is unmapped.
    deadline = time.monotonic() + 15
    while mapped_regions():
        assert time.monotonic() < deadline, "the region is still mapped without views"
        time.sleep(0.05)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_slow_consumer_makes_the_worker_wait(cluster, tensor_worker):
    """A consumer that holds batches of 32 views (10 MB) for a while before it drops them, in a
    region of 16 MiB: the reader asks for more only when the region has room for the reply, so the
    worker waits while the batch is held and every element arrives as a view of the region, none
    over the socket."""
    ds, it = read_tensors(cluster.target, 256, shm_bytes=16 << 20)
    labels, copies, batch = [], 0, []
    for pixels, floats, label in it:
        labels.append(int(label))
        if in_region(pixels, mapped_regions()):
            batch.append((int(label), pixels))
        else:
            copies += 1
        if len(batch) == 32:
            time.sleep(0.1)
            for x, p in batch:
                assert np.array_equal(p, expected(x)[0]), f"view of element {x} was overwritten"
            batch.clear()
    it.close()
    assert sorted(labels) == list(range(256))
    assert copies == 0


def test_held_views_fill_the_region_and_no_more(cluster, tensor_worker):
    """A consumer that keeps every view and drops the copies: the region (4 MiB) fills; once the
    reader waits for an element with the region full of what it keeps, the worker sends the rest
    over the socket (a consumer that keeps everything, as list() does, never stalls); every kept
    view keeps its values, and memory stays bounded."""
    region = 4 << 20
    ds, it = read_tensors(cluster.target, 8, shm_bytes=region)
    for e in it:  # warm up: the interpreter and numpy allocate what they keep
        pass
    it.close()
    del ds, it, e
    gc.collect()
    rss0 = rss_bytes()
    ds, it = read_tensors(cluster.target, 300, shm_bytes=region)
    views, copies, labels = [], 0, []
    for pixels, floats, label in it:
        labels.append(int(label))
        if in_region(pixels, mapped_regions()):
            views.append((int(label), pixels))
        else:
            copies += 1
            assert np.array_equal(pixels, expected(int(label))[0])
    grown = rss_bytes() - rss0
    it.close()
    assert sorted(labels) == list(range(300))
    assert views and copies
    assert len(views) * 300000 <= region
    for x, pixels in views:
        assert np.array_equal(pixels, expected(x)[0]), f"view of element {x} was overwritten"
    print(f"held views: {len(views)} in the region, {copies} copies, rss grew {grown >> 20} MiB")
    # 300 elements are 90 MB; what stays is the region and the read's buffers.
    assert grown < 48 << 20
