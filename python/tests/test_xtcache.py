"""Cross-trainer caches from Python: two trainers of one job read the same stream from position 0,
a second reader with a trainer's id continues that trainer's cursor, the torch dataset forwards
the cache, and the refusals."""

import itertools
import re

import pytest

import sluice

ENDLESS = "range(1000000000) | repeat()"


def take(iterator, n):
    return [int(x) for x in itertools.islice(iterator, n)]


def test_two_trainers_share_the_stream(cluster):
    cluster.add_worker()
    t = cluster.target
    a = iter(sluice.distribute(ENDLESS, "parallel_epochs", t, job_name="j",
                               cross_trainer_cache=sluice.CrossTrainerCache("a")))
    first = take(a, 5000)
    b = iter(sluice.distribute(ENDLESS, "parallel_epochs", t, job_name="j",
                               cross_trainer_cache=sluice.CrossTrainerCache("b")))
    # The cache evicted nothing yet: b joins at the oldest element held, position 0.
    assert first == list(range(5000))
    assert take(b, 5000) == list(range(5000))
    assert take(a, 5000) == list(range(5000, 10000))

    # Another reader with a's id continues a's cursor: past everything a read, nothing in common.
    a2 = iter(sluice.distribute(ENDLESS, "parallel_epochs", t, job_name="j",
                                cross_trainer_cache=sluice.CrossTrainerCache("a")))
    got2 = take(a2, 3000)
    got_a = take(a, 3000)
    assert got2[0] >= 10000
    assert got2 == sorted(got2) and got_a == sorted(got_a)
    assert not set(got2) & set(got_a)
    for it in (a, b, a2):
        it.close()


def test_refusals(cluster):
    cluster.add_worker()
    t = cluster.target
    with pytest.raises(ValueError, match="CrossTrainerCache needs a non-empty trainer_id"):
        sluice.CrossTrainerCache("")
    with pytest.raises(TypeError, match="trainer_id must be a str, not int"):
        sluice.CrossTrainerCache(3)
    with pytest.raises(ValueError, match="cross_trainer_cache requires a job_name: the trainers "
                       "share one job"):
        sluice.distribute(ENDLESS, "parallel_epochs", t,
                          cross_trainer_cache=sluice.CrossTrainerCache("a"))
    with pytest.raises(TypeError, match="cross_trainer_cache must be a sluice.CrossTrainerCache "
                       "or None, not str"):
        sluice.distribute(ENDLESS, "parallel_epochs", t, job_name="j", cross_trainer_cache="a")
    with pytest.raises(sluice.InvalidArgumentError, match=re.escape(
            "cross_trainer_cache needs an infinite pipeline: 'range(100)' ends; add repeat()")):
        list(sluice.distribute("range(100)", "parallel_epochs", t, job_name="j",
                               cross_trainer_cache=sluice.CrossTrainerCache("a")))
    with pytest.raises(sluice.InvalidArgumentError, match=re.escape(
            "cross_trainer_cache cannot be used with mode distributed_epoch: its splits are "
            "handed out once, not shared between trainers")):
        list(sluice.distribute(ENDLESS, "distributed_epoch", t, job_name="j",
                               cross_trainer_cache=sluice.CrossTrainerCache("a")))

    # The job's identity includes the cache.
    with_cache = iter(sluice.distribute(ENDLESS, "parallel_epochs", t, job_name="k",
                                        cross_trainer_cache=sluice.CrossTrainerCache("a")))
    assert take(with_cache, 1) == [0]
    with pytest.raises(sluice.AlreadyExistsError, match=re.escape(
            "job 'k' exists with cross_trainer_cache on, not off")):
        next(iter(sluice.distribute(ENDLESS, "parallel_epochs", t, job_name="k")))
    with pytest.raises(sluice.AlreadyExistsError, match=re.escape(
            "job 'k' exists with cross_trainer_cache_bytes 268435456, not 4096")):
        next(iter(sluice.distribute(
            ENDLESS, "parallel_epochs", t, job_name="k",
            cross_trainer_cache=sluice.CrossTrainerCache("b", cache_bytes=4096))))
    with_cache.close()


def test_torch_forwards_the_cache(cluster):
    torch = pytest.importorskip("torch")
    import sluice.torch as st
    cluster.add_worker()
    ds_id = sluice.register_dataset(cluster.target, ENDLESS)
    loaders = []
    for trainer in ("x", "y"):
        ds = st.IterableDataset(cluster.target, dataset_id=ds_id,
                                processing_mode="parallel_epochs", job_name="t",
                                cross_trainer_cache=sluice.CrossTrainerCache(trainer))
        loaders.append(iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)))
    for it in loaders:
        assert [int(x) for x in itertools.islice(it, 2000)] == list(range(2000))
