"""parallel_epochs from Python through the loss of a worker: by default the read goes on (the lost
copy is the prefix it got, counted in progress()["copies_cut"], and a new worker's copy is read
from its start); with whole_copies=True the read fails naming the lost task."""

import signal

import pytest

import sluice

from conftest import running_cluster

# range(200) at 10 ms an element (a wait, no CPU): a copy takes 2 s, so the worker dies in the
# middle (after 20 elements).
N = 200
PIPELINE = f"range({N}) | map(wait_us, 10000)"


@pytest.fixture
def cluster():
    """conftest's cluster, whose dispatcher removes a worker 300 ms after its connection closed
    (not its 2 s timeout): a killed worker is found lost sooner. A live worker's connection
    stays open, so no live worker is removed by it, however loaded the machine."""
    with running_cluster(("--disconnect-grace-ms", "300")) as c:
        yield c


def test_lost_copy_is_cut_short(cluster):
    cluster.add_worker()
    ds = sluice.distribute(PIPELINE, "parallel_epochs", cluster.target, element_timeout=60)
    it = iter(ds)
    got = [int(next(it)) for _ in range(20)]
    assert got == list(range(20))
    assert it.progress()["copies_cut"] == 0
    cluster.workers[0].stop(signal.SIGKILL)
    cluster.add_worker()
    got += [int(x) for x in it]
    # The lost worker's prefix, then the new worker's whole copy, in order.
    k = len(got) - N
    assert 20 <= k < N
    assert got == list(range(k)) + list(range(N))
    assert it.progress()["copies_cut"] == 1
    it.close()


def test_whole_copies_fails_naming_the_task(cluster):
    w = cluster.add_worker()
    ds = sluice.distribute(PIPELINE, "parallel_epochs", cluster.target, element_timeout=60,
                           whole_copies=True)
    it = iter(ds)
    got = [int(next(it)) for _ in range(20)]
    w.stop(signal.SIGKILL)
    with pytest.raises(sluice.Error) as e:
        for x in it:
            got.append(int(x))
    assert str(e.value) == (f"task 1 on worker {w.address}: the worker was lost after "
                            f"{len(got)} elements: its copy is incomplete")
    assert got == list(range(len(got)))
    it.close()


def test_whole_copies_refused_where_it_means_nothing(cluster):
    with pytest.raises(sluice.InvalidArgumentError, match="^whole_copies cannot be used with mode "
                       "distributed_epoch: its elements arrive exactly once through any worker "
                       "loss, not in copies$"):
        iter(sluice.distribute("range(10)", "distributed_epoch", cluster.target,
                               whole_copies=True))
    with pytest.raises(TypeError):
        sluice.distribute("range(10)", "parallel_epochs", cluster.target, whole_copies="yes")


def test_torch_dataset_passes_whole_copies(cluster):
    torch_sluice = pytest.importorskip("sluice.torch")
    cluster.add_worker()
    ds = torch_sluice.IterableDataset(cluster.target, pipeline="range(5)",
                                      processing_mode="parallel_epochs", whole_copies=True)
    assert [int(x) for x in ds] == [0, 1, 2, 3, 4]
    ds = torch_sluice.IterableDataset(cluster.target, pipeline="range(5)",
                                      processing_mode="distributed_epoch", whole_copies=True)
    with pytest.raises(sluice.InvalidArgumentError, match="^whole_copies cannot be used with mode "
                       "distributed_epoch"):
        list(ds)
