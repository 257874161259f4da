"""Local workers from Python (docs/reading.md "Local workers"): a sluice.WorkerServer in the
trainer's process is read without the network, target_workers="local" reads only the workers of this
host, and a host without a worker is refused with "no local worker"."""

import gc
import os
import subprocess
import urllib.request

import numpy as np
import pytest

import sluice

from conftest import BIN_DIR, wait_workers


def metrics(server):
    with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=10) as r:
        body = r.read().decode()
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


@pytest.fixture
def servers():
    d = sluice.DispatchServer(log_level="warn")
    w = sluice.WorkerServer(d, metrics_port=0, heartbeat_ms=100)
    # A worker on another host: a process of its own that says so.
    env = dict(os.environ, SLUICE_HOST_ID="another-host")
    argv = [str(BIN_DIR / "sluice-worker"), "--dispatcher", d.target, "--port", "0",
            "--heartbeat-ms", "100"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    try:
        line = proc.stdout.readline()
        assert " listening on " in line, line
        wait_workers(d, 2)
        yield d, w
    finally:
        proc.terminate()
        proc.wait(15)
        proc.stdout.close()
        w.stop()
        d.stop()


def test_local_reads_in_process(servers):
    d, w = servers
    before = metrics(w)
    got = sorted(int(x) for x in sluice.distribute("range(1000)", "parallel_epochs", d,
                                                  target_workers="local"))
    # One copy: the worker of this process; the one on another host has no task of the job.
    assert got == list(range(1000))
    after = metrics(w)

    def grew(name):
        return after[name] - before.get(name, 0)

    # Every element came over the in-process connection; no GetElements came over TCP.
    assert grew("sluice_worker_elements_served_total") == 1000
    assert grew("sluice_worker_local_elements_served_total") == 1000
    assert grew("sluice_worker_requests_total") > 0
    assert grew("sluice_worker_requests_total") == grew("sluice_worker_local_requests_total")
    jobs = sluice.status(d)["jobs"]
    assert [j["target_workers"] for j in jobs] == ["local"]
    assert [t["worker"] for t in jobs[0]["tasks"]] == [w.address]


def test_local_distributed_epoch(servers):
    d, w = servers
    before = metrics(w)
    got = sorted(int(x) for x in sluice.distribute("range(5000)", "distributed_epoch", d,
                                                  target_workers="local"))
    assert got == list(range(5000))
    after = metrics(w)

    def grew(name):
        return after[name] - before.get(name, 0)

    # The records served count each split's end marker too: all of them came in-process.
    assert grew("sluice_worker_elements_served_total") >= 5000
    assert grew("sluice_worker_local_elements_served_total") == \
        grew("sluice_worker_elements_served_total")
    assert grew("sluice_worker_requests_total") == grew("sluice_worker_local_requests_total")


def test_auto_reads_every_worker(servers):
    d, w = servers
    got = sorted(int(x) for x in sluice.distribute("range(100)", "parallel_epochs", d,
                                                  target_workers="auto"))
    assert got == sorted(list(range(100)) * 2)


def test_no_local_worker(servers, monkeypatch):
    d, _ = servers
    monkeypatch.setenv("SLUICE_HOST_ID", "a-host-without-workers")
    with pytest.raises(sluice.NotFoundError, match=r"^no local worker: target_workers local "
                       r"needs a worker on this host \(host id a-host-without-workers\), and none "
                       r"is registered$"):
        list(sluice.distribute("range(10)", "parallel_epochs", d, target_workers="local"))


def test_target_workers_is_checked():
    with pytest.raises(ValueError, match="target_workers must be 'any', 'local' or 'auto', not "
                                         "'near'"):
        sluice.distribute("range(3)", "parallel_epochs", "127.0.0.1:1", target_workers="near")
    with pytest.raises(TypeError, match="target_workers must be a str, not int"):
        sluice.from_dataset_id("parallel_epochs", "127.0.0.1:1", "x", target_workers=1)


def test_large_elements_in_process(servers):
    # Replies of 64 KiB and more hand their payload over in memory, not through the socket.
    d, w = servers
    pipeline = "range(48) | map(bytes, 262144)"
    want = sorted(sluice.run(pipeline))
    before = metrics(w)
    got = sorted(sluice.distribute(pipeline, "parallel_epochs", d, target_workers="local",
                                   max_outstanding_requests=4))
    after = metrics(w)
    assert len(got) == 48 and all(len(x) == 262144 for x in got)
    assert got == want
    assert after["sluice_worker_local_elements_served_total"] - \
        before.get("sluice_worker_local_elements_served_total", 0) == 48
    assert after["sluice_worker_requests_total"] - before.get("sluice_worker_requests_total", 0) \
        == after["sluice_worker_local_requests_total"] - \
        before.get("sluice_worker_local_requests_total", 0)


def test_torch_dataset_reads_local(servers):
    torch = pytest.importorskip("torch")
    import sluice.torch
    d, w = servers
    before = metrics(w)
    data = sluice.torch.IterableDataset(d, pipeline="range(200)",
                                        processing_mode="parallel_epochs",
                                        target_workers="local")
    assert data.target_workers == "local"
    got = sorted(int(x) for x in torch.utils.data.DataLoader(data, batch_size=None))
    assert got == list(range(200))
    after = metrics(w)
    assert after["sluice_worker_local_elements_served_total"] - \
        before.get("sluice_worker_local_elements_served_total", 0) == 200
    with pytest.raises(ValueError, match="target_workers must be 'any', 'local' or 'auto'"):
        sluice.torch.IterableDataset(d, pipeline="range(3)", target_workers="nearby")


def test_large_arrays_in_process_outlive_the_read(servers):
    # Values of 2.4 MB, one to a reply: the arrays lie in the block the worker filled (no copy
    # in the reader) and keep it after the read is gone; each its own bytes, writable.
    d, w = servers
    ds = sluice.distribute("range(1200000) | batch(300000)", "parallel_epochs", d,
                           target_workers="local")
    it = iter(ds)
    got = [next(it) for _ in range(4)]
    with pytest.raises(StopIteration):
        next(it)
    del it, ds
    gc.collect()
    got.sort(key=lambda a: int(a[0]))
    for k, a in enumerate(got):
        assert a.dtype == np.int64 and a.shape == (300000,)
        assert np.array_equal(a, np.arange(k * 300000, (k + 1) * 300000))
    got[0][:] = -1
    assert int(got[1][0]) == 300000 and int(got[0][-1]) == -1
