"""A distributed_epoch read whose consumer pauses while its only worker drains, and whose
dispatcher then stops for good: the read must raise, never end quietly with part of the epoch."""

import pytest

import sluice

N = 300000


def test_drained_worker_then_stopped_dispatcher_raises():
    d = sluice.DispatchServer()
    port = int(d.target.rsplit(":", 1)[1])
    w = sluice.WorkerServer(d)
    # timeout bounds each wait for the dispatcher: once it has been unreachable that long with
    # no task left to read, the read fails.
    it = iter(sluice.distribute(f"range({N})", "distributed_epoch", d, timeout=1))
    got = [int(next(it))]
    # The reader pauses while the worker drains: it leaves once no reader asked for a while,
    # handing its splits back to the dispatcher, which then stops.
    w.stop()
    d.stop()
    with pytest.raises(sluice.UnavailableError) as e:
        for x in it:
            got.append(int(x))
    assert str(e.value).startswith(f"dispatcher 127.0.0.1:{port} unreachable for 1000 ms: ")
    assert len(got) < N
    assert len(set(got)) == len(got)
    assert all(0 <= x < N for x in got)
