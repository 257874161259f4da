"""A repeat in a local tail (local="repeat(2)"): the job's whole stream read again, a new job per
repetition, with exact multisets; the reads it cannot serve exactly refused with their reason."""

import collections

import pytest

import sluice


def test_local_repeat_distributed_epoch(cluster2):
    t = cluster2.target
    got = collections.Counter(int(x) for x in sluice.distribute(
        "range(500)", "distributed_epoch", t, local="repeat(2)"))
    assert got == collections.Counter({v: 2 for v in range(500)})
    jobs = [j for j in sluice.status(t)["jobs"] if j["mode"] == "distributed_epoch"]
    assert len(jobs) == 2
    assert all(j["clients"] == 0 for j in jobs)


def test_local_repeat_then_batch_in_order(cluster2):
    got = [b.tolist() for b in sluice.distribute("range(10)", "distributed_epoch",
                                                  cluster2.target, deterministic=True,
                                                  local="repeat(2) | batch(8)")]
    assert got == [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]


def test_local_repeat_parallel_epochs_progress(cluster2):
    it = iter(sluice.distribute("range(100)", "parallel_epochs", cluster2.target,
                                local="repeat(2)"))
    got = collections.Counter(int(x) for x in it)
    # Each of the two workers' copies, in each of the two repetitions.
    assert got == collections.Counter({v: 4 for v in range(100)})
    p = it.progress()
    assert p["elements"] == 400 and p["splits_total"] == 0


def test_local_repeat_of_nothing_ends(cluster2):
    assert list(sluice.distribute("range(0)", "distributed_epoch", cluster2.target,
                                  local="repeat()")) == []


def test_local_repeat_in_a_shared_job_is_refused(cluster2):
    ds = sluice.distribute("range(10)", "distributed_epoch", cluster2.target, job_name="j",
                           local="repeat(2)")
    with pytest.raises(sluice.InvalidArgumentError) as e:
        list(ds)
    assert str(e.value) == (
        "local tail: column 1: repeat reads the stream again with a new job for each "
        "repetition, which a shared job (job name 'j') cannot do exactly: its readers split each "
        "pass between them; read without a job name, or repeat in the dataset's pipeline")
