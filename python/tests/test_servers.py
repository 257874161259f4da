"""In-process servers: DispatchServer and WorkerServer, restarts on a work dir, argument checks,
and no threads or file descriptors left behind."""

import os
import tempfile
import time

import pytest

import sluice


def native_threads():
    return len(os.listdir("/proc/self/task"))


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_in_process_cluster_reads_exactly_once():
    with sluice.DispatchServer() as d:
        assert d.target.startswith("sluice://127.0.0.1:")
        with sluice.WorkerServer(d) as w1, sluice.WorkerServer(d.target) as w2:
            assert w1.address != w2.address
            got = sorted(int(x) for x in sluice.distribute("range(1000)", "distributed_epoch", d))
            assert got == list(range(1000))
            got = sorted(int(x) for x in sluice.distribute("range(100)", "parallel_epochs", d))
            assert got == sorted(list(range(100)) * 2)


def test_fault_tolerant_restart_mid_read():
    with tempfile.TemporaryDirectory(prefix="sluice-ft-") as work_dir:
        d = sluice.DispatchServer(work_dir=work_dir, fault_tolerant_mode=True)
        port = int(d.target.rsplit(":", 1)[1])
        workers = [sluice.WorkerServer(d) for _ in range(2)]
        ds = sluice.distribute("range(3000) | map(wait_us, 500)", "distributed_epoch", d)
        it = iter(ds)
        got = [int(next(it)) for _ in range(200)]
        d.stop()
        d = sluice.DispatchServer(port=port, work_dir=work_dir, fault_tolerant_mode=True)
        got += [int(x) for x in it]
        assert sorted(got) == list(range(3000))
        for w in workers:
            w.stop()
        d.stop()


@pytest.mark.parametrize("kw,timeout,grace,worker_grace", [
    ({}, None, 5000, 5000),
    ({"disconnect_grace_ms": 0}, None, 0, 0),
    ({"disconnect_grace_ms": 7000}, None, 7000, 7000),
    ({"disconnect_grace_ms": 7000}, 4000, 4000, 7000),
])
def test_disconnect_grace(kw, timeout, grace, worker_grace):
    """disconnect_grace_ms reaches the dispatcher (its status config, per kind of peer): the
    default, off, a value, and a value capped by the client timeout."""
    with sluice.DispatchServer(client_timeout_ms=timeout, **kw) as d:
        config = sluice.status(d)["config"]
        assert config["client_disconnect_grace_ms"] == grace
        assert config["worker_disconnect_grace_ms"] == worker_grace


def test_join_returns_once_stopped_elsewhere():
    d = sluice.DispatchServer()
    d._server.shutdown()
    d.join(timeout=10)
    d.stop()
    with pytest.raises(RuntimeError, match="not running"):
        d.target


def test_bad_arguments():
    with pytest.raises(ValueError, match="fault_tolerant_mode requires a work_dir"):
        sluice.DispatchServer(fault_tolerant_mode=True)
    with pytest.raises(ValueError, match="port"):
        sluice.DispatchServer(port=70000)
    with pytest.raises(ValueError, match="dispatcher_address"):
        sluice.WorkerServer("nowhere")
    with pytest.raises(ValueError, match="disconnect_grace_ms must be between 0 and"):
        sluice.DispatchServer(disconnect_grace_ms=-1)
    with pytest.raises(ValueError, match="disconnect_grace_ms must be between 0 and"):
        sluice.DispatchServer(disconnect_grace_ms=2**32 - 1)
    with sluice.DispatchServer() as d:
        port = int(d.target.rsplit(":", 1)[1])
        with pytest.raises(sluice.Error, match="Address already in use"):
            sluice.DispatchServer(port=port)


def test_no_threads_or_fds_left_after_100_servers():
    # Warm up what is created once per process (the libuv thread pool, imports).
    with sluice.DispatchServer() as d, sluice.WorkerServer(d):
        list(sluice.distribute("range(10)", "distributed_epoch", d))
    threads, fds = native_threads(), open_fds()
    for _ in range(50):
        with sluice.DispatchServer() as d, sluice.WorkerServer(d):
            pass
    assert native_threads() == threads
    assert open_fds() == fds


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("mode", ["data", "hint"])
def test_static_sharding_modes(mode):
    # The fixed worker list of the static modes: the workers' ports are chosen first.
    ports = [free_port(), free_port()]
    addresses = [f"127.0.0.1:{p}" for p in ports]
    with sluice.DispatchServer(worker_addresses=addresses) as d:
        workers = [sluice.WorkerServer(d, port=p) for p in ports]
        pipeline = "range(20)" if mode == "data" else "range(20) | shard(SHARD_HINT, SHARD_HINT)"
        got = sorted(int(x) for x in sluice.distribute(pipeline, mode, d))
        assert got == list(range(20))
        for w in workers:
            w.stop()


def test_static_sharding_waits_for_every_fixed_worker():
    # One of the two fixed workers registers late: the read must not end with half the data.
    ports = [free_port(), free_port()]
    with sluice.DispatchServer(worker_addresses=[f"127.0.0.1:{p}" for p in ports]) as d:
        first = sluice.WorkerServer(d, port=ports[0])
        it = iter(sluice.distribute("range(20)", "data", d, element_timeout=0.2))
        got = []
        # The read goes on for 1 s after the first worker's first element (its shard of 20 is
        # served in milliseconds): a read that ends with the workers registered so far ends
        # then. The whole wait is bounded.
        start = time.monotonic()
        deadline = start + 30
        first_at = None
        while first_at is None or time.monotonic() < first_at + 1:
            assert time.monotonic() < deadline, "no element of the registered worker in 30 s"
            try:
                got.append(int(next(it)))
                first_at = first_at or time.monotonic()
            except sluice.TimeoutError:
                pass
            except StopIteration:
                pytest.fail(f"the read ended with one of two fixed workers: {sorted(got)}")
        second = sluice.WorkerServer(d, port=ports[1])
        while True:
            try:
                got.append(int(next(it)))
            except sluice.TimeoutError:
                assert time.monotonic() < deadline + 30
            except StopIteration:
                break
        assert sorted(got) == list(range(20))
        first.stop()
        second.stop()
