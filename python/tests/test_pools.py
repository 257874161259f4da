"""Worker pools from Python (docs/operations.md "Pools and selectors"): worker_selector places a
job's tasks only on the workers whose labels match; weight, min_workers and max_workers are
recorded and shown by status; bad values are refused with their messages."""

import subprocess
import time

import pytest

import sluice

from conftest import BIN_DIR, wait_workers


@pytest.fixture
def pools():
    d = sluice.DispatchServer(log_level="warn")
    procs = []
    try:
        for pool in ("a", "b"):
            argv = [str(BIN_DIR / "sluice-worker"), "--dispatcher", d.target, "--port", "0",
                    "--heartbeat-ms", "100", "--label", f"pool={pool}",
                    # A case may leave elements unread: the drain at the end waits for no
                    # reader that is gone (test_drain_outage.py tests that wait).
                    "--drain-timeout-ms", "200"]
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True)
            procs.append(p)
            line = p.stdout.readline()
            assert " listening on " in line, line
        wait_workers(d, 2)
        yield d
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(15)
            p.stdout.close()
        d.stop()


def test_selector_reads_one_pool(pools):
    d = pools
    # parallel_epochs: every worker with a task produces the whole range, so one copy means
    # one worker.
    got = sorted(int(x) for x in sluice.distribute("range(200)", "parallel_epochs", d,
                                                  job_name="onb", worker_selector="pool=b",
                                                  weight=2, min_workers=1, max_workers=1))
    assert got == list(range(200))
    st = sluice.status(d)
    job = [j for j in st["jobs"] if j["name"] == "onb"][0]
    assert job["worker_selector"] == "pool=b"
    assert job["weight"] == 2.0
    assert (job["min_workers"], job["max_workers"]) == (1, 1)
    labels = sorted(w["labels"] for w in st["workers"])
    assert labels == ["pool=a", "pool=b"]
    # Without a selector both workers serve.
    got = sorted(int(x) for x in sluice.distribute("range(50)", "parallel_epochs", d))
    assert got == sorted(list(range(50)) * 2)


def test_bad_values(pools):
    d = pools
    with pytest.raises(sluice.InvalidArgumentError,
                       match=r"^worker selector: expected ',' at byte 7$"):
        list(sluice.distribute("range(3)", "parallel_epochs", d, worker_selector="pool=a b"))
    with pytest.raises(ValueError,
                       match=r"^weight must be a number above 0 and at most 1000000, not -1$"):
        sluice.distribute("range(3)", "parallel_epochs", d, weight=-1)
    with pytest.raises(ValueError, match=r"^min_workers 3 is above max_workers 2$"):
        sluice.distribute("range(3)", "parallel_epochs", d, min_workers=3, max_workers=2)


def test_worker_server_labels():
    d = sluice.DispatchServer(log_level="warn")
    try:
        w = sluice.WorkerServer(d, heartbeat_ms=100, labels={"pool": "inproc", "zone": "x"})
        try:
            wait_workers(d, 1)
            assert [x["labels"] for x in sluice.status(d)["workers"]] == ["pool=inproc,zone=x"]
            got = sorted(int(x) for x in sluice.distribute(
                "range(20)", "parallel_epochs", d, worker_selector="pool in (inproc)"))
            assert got == list(range(20))
        finally:
            w.stop()
        with pytest.raises(sluice.InvalidArgumentError,
                           match=r"^labels: label 1: expected KEY=VALUE$"):
            sluice.WorkerServer(d, labels=["pool"])
    finally:
        d.stop()


def test_worker_server_task_slots():
    """WorkerServer(task_slots=1): the slot is registered and shown in the status, a read goes
    through it; task_slots above max_tasks or negative is refused."""
    d = sluice.DispatchServer(log_level="warn")
    try:
        w = sluice.WorkerServer(d, heartbeat_ms=100, task_slots=1)
        try:
            wait_workers(d, 1)
            assert [x.get("task_slots") for x in sluice.status(d)["workers"]] == [1]
            got = sorted(int(x) for x in sluice.distribute("range(20)", "parallel_epochs", d))
            assert got == list(range(20))
        finally:
            w.stop()
        with pytest.raises(sluice.InvalidArgumentError,
                           match=r"^task_slots: expected a number from 0 to 4 \(max_tasks\), "
                                 r"got 5$"):
            sluice.WorkerServer(d, max_tasks=4, task_slots=5)
        with pytest.raises(ValueError, match=r"^task_slots must be between 0 and"):
            sluice.WorkerServer(d, task_slots=-1)
    finally:
        d.stop()


def test_dispatch_server_pool_label():
    """DispatchServer(autoscale_pool_label=...): the recommendation per pool groups the workers
    by that label (shown in the status once a window closed); a bad key raises."""
    d = sluice.DispatchServer(log_level="warn", autoscale_window_ms=100,
                              autoscale_pool_label="team")
    try:
        w = sluice.WorkerServer(d, heartbeat_ms=100, labels={"team": "prod", "pool": "x"})
        try:
            wait_workers(d, 1)
            deadline = time.monotonic() + 10
            while True:
                auto = sluice.status(d)["autoscale"]
                if auto["pools"] or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert auto["pool_label"] == "team"
            assert [(p["pool"], p["workers"]) for p in auto["pools"]] == [("prod", 1)]
        finally:
            w.stop()
    finally:
        d.stop()
    with pytest.raises(sluice.InvalidArgumentError,
                       match=r"^autoscale_pool_label: key: ' ' is not allowed at byte 2$"):
        sluice.DispatchServer(autoscale_pool_label="te am")


def test_torch_loader_pool(pools):
    """sluice.torch reads on one pool too: every epoch's job carries the selector and weight,
    with the loader's worker processes sharing it; bad values are refused in the trainer."""
    torch = pytest.importorskip("torch")
    import sluice.torch as st
    d = pools
    ds = st.IterableDataset(d, pipeline="range(120)", processing_mode="distributed_epoch",
                            worker_selector="pool=b", weight=3, min_workers=1, max_workers=1)
    loader = st.DataLoader(ds, num_workers=2, batch_size=None)
    for _ in range(2):
        got = sorted(int(x) for x in loader)
        assert got == list(range(120))
    jobs = [j for j in sluice.status(d)["jobs"] if j["worker_selector"] == "pool=b"]
    assert len(jobs) == 2  # one per epoch
    assert all(j["weight"] == 3.0 and (j["min_workers"], j["max_workers"]) == (1, 1)
               for j in jobs)
    with pytest.raises(ValueError, match=r"^min_workers 2 is above max_workers 1$"):
        st.IterableDataset(d, pipeline="range(3)", min_workers=2, max_workers=1)
    with pytest.raises(TypeError, match=r"^weight must be a number, not str$"):
        st.IterableDataset(d, pipeline="range(3)", weight="2")
    assert torch.is_tensor(next(iter(st.DataLoader(
        st.IterableDataset(d, pipeline="range(3)", worker_selector="pool=a"), batch_size=None))))
