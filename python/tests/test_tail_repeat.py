"""A repeat in a local tail (local="repeat(2)"): the job's whole stream read again, a new job per
repetition (a named job's next repetition), with exact multisets."""

import collections
import threading

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


def test_local_repeat_of_a_shared_job(cluster2):
    """Two readers of one named job repeating it twice share every repetition: together they get
    each element exactly twice, and the job ends at its repetition 1. Each reads on a thread of
    its own: the one that finishes a repetition first waits for the other."""
    t = cluster2.target
    its = [iter(sluice.distribute("range(300)", "distributed_epoch", t, job_name="j",
                                  local="repeat(2)")) for _ in range(2)]
    results = [collections.Counter(), collections.Counter()]

    def drain(k):
        for x in its[k]:
            results[k][int(x)] += 1

    threads = [threading.Thread(target=drain, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
        assert not th.is_alive()
    assert results[0] + results[1] == collections.Counter({v: 2 for v in range(300)})
    jobs = [j for j in sluice.status(t)["jobs"] if j["name"] == "j"]
    assert len(jobs) == 1 and jobs[0]["repetition"] == 1 and jobs[0]["clients"] == 0
