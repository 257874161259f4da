"""Shared-memory reads from Python (docs/reading.md "Local workers"): a sluice-worker process on
this host is read over shared memory by default and over TCP with shm=False, element for element
the same; the worker maps the reader's region only in the first case, and lets it go once the read
is closed; shm_bytes out of range is refused."""

import time

import numpy as np
import pytest

import sluice

PIPELINE = "range(40) | map(bytes, 300000)"


def regions(pid):
    """The shared regions process pid maps, from /proc/PID/maps."""
    with open(f"/proc/{pid}/maps") as f:
        return [line for line in f if "memfd:sluice-shm" in line]


def wait_workers(target, n):
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if len(sluice.status(target)["workers"]) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{n} workers did not register within 15 s")


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
