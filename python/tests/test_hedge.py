"""hedge= from Python (docs/operations.md "Stragglers: hedged splits"): the keyword's values, and a
hedged distributed_epoch read over three workers, one of them stopped for a while with SIGSTOP,
that gets every element exactly once while the dispatcher copies the stopped worker's splits."""

import json
import signal
import subprocess
import time

import pytest

import sluice
from conftest import BIN_DIR, running_cluster

# Ten-element splits of 20 ms elements (no CPU): the stopped worker's splits are copied once they
# have been out three median split times.
PIPELINE = "range(600) | map(wait_us, 20000)"


def test_hedge_values(cluster):
    assert sluice.distribute("range(10)", "distributed_epoch", cluster.target).hedge == 0
    assert sluice.distribute("range(10)", "distributed_epoch", cluster.target,
                             hedge=True).hedge == 3
    assert sluice.distribute("range(10)", "distributed_epoch", cluster.target,
                             hedge=1.5).hedge == 1.5
    assert sluice.distribute("range(10)", "distributed_epoch", cluster.target,
                             hedge=False).hedge == 0
    with pytest.raises(ValueError, match="^hedge must be True, False or a factor above 0 and at "
                       "most 1000, not -1$"):
        sluice.distribute("range(10)", "distributed_epoch", cluster.target, hedge=-1)
    with pytest.raises(TypeError):
        sluice.distribute("range(10)", "distributed_epoch", cluster.target, hedge="yes")


def status(cluster):
    out = subprocess.run([str(BIN_DIR / "sluice"), "status",
                          "--dispatcher", cluster.target, "--json"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return json.loads(out)


def hedged(cluster):
    jobs = status(cluster)["jobs"]
    return max(jobs, key=lambda j: j["id"])["splits"]


def served(cluster, worker):
    """The elements the worker served so far, as the dispatcher last heard."""
    for w in status(cluster)["workers"]:
        if w["address"] == worker.address:
            return w.get("elements", 0)
    return 0


@pytest.fixture
def patient_cluster():
    """A cluster whose dispatcher removes a silent worker only after 30 s: nothing but hedging
    moves the splits of a worker stopped for less."""
    with running_cluster(("--worker-timeout-ms", "30000")) as c:
        yield c


def test_hedged_read_exactly_once(patient_cluster):
    cluster = patient_cluster
    for _ in range(3):
        cluster.add_worker()
    ds = sluice.distribute(PIPELINE, "distributed_epoch", cluster.target, split_size=10,
                           element_timeout=60, hedge=True)
    it = iter(ds)
    got = []
    # Once the straggler has served elements it holds splits (its queue is two per producer; 60
    # splits go to three workers): then it stops.
    deadline = time.monotonic() + 30
    while served(cluster, cluster.workers[2]) == 0:
        assert time.monotonic() < deadline
        got.append(int(next(it)))
    straggler = cluster.workers[2].proc
    straggler.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 30
        # Reading on while it is stopped: the others serve copies of its splits.
        while time.monotonic() < deadline and hedged(cluster).get("hedged", 0) == 0:
            got.append(int(next(it)))
    finally:
        straggler.send_signal(signal.SIGCONT)
    got += [int(x) for x in it]
    it.close()
    assert sorted(got) == list(range(600))
    assert hedged(cluster)["hedged"] > 0
