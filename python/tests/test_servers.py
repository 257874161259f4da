"""In-process servers: DispatchServer and WorkerServer, restarts on a work dir, argument checks,
and no threads or file descriptors left behind."""

import os
import tempfile

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
        ds = sluice.distribute("range(3000) | map(sleep_us, 500)", "distributed_epoch", d)
        it = iter(ds)
        got = [int(next(it)) for _ in range(200)]
        d.stop()
        d = sluice.DispatchServer(port=port, work_dir=work_dir, fault_tolerant_mode=True)
        got += [int(x) for x in it]
        assert sorted(got) == list(range(3000))
        for w in workers:
            w.stop()
        d.stop()


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
