"""Checkpoints of distributed_epoch reads from Python: an iterator's state_dict() restored in a
new read (through pickle), load_state_dict() on a live iterator, merged positions of a shared
job, and sluice.torch.DataLoader resumed with num_workers=2; every read is checked against the
exact multiset of its elements."""

import collections
import pickle

import pytest

import sluice


@pytest.fixture(scope="module")
def service():
    with sluice.DispatchServer() as d:
        # Stopped after the last case, which may leave elements unread (a loader stopped
        # mid-epoch): the drain waits for no reader that is gone (test_drain_outage.py tests it).
        workers = [sluice.WorkerServer(d, drain_timeout_ms=200) for _ in range(2)]
        yield d
        for w in workers:
            w.stop()


def values(elements):
    return [int(x) for x in elements]


def test_iterator_state_round_trip(service):
    ds = sluice.distribute("range(20000)", "distributed_epoch", service, split_size=100)
    it = iter(ds)
    first = values(next(it) for _ in range(7000))
    state = pickle.loads(pickle.dumps(it.state_dict()))
    assert set(state) == {"position"} and len(state["position"]) < 200
    it.close()
    again = sluice.distribute("range(20000)", "distributed_epoch", service, split_size=100)
    again.load_state_dict(state)
    rest = values(again)
    seen = collections.Counter(first + rest)
    assert sorted(seen) == list(range(20000)) and set(seen.values()) == {1}


def test_load_state_dict_on_a_live_iterator(service):
    ds = sluice.distribute("range(5000)", "distributed_epoch", service, split_size=50)
    it = iter(ds)
    first = values(next(it) for _ in range(1000))
    state = it.state_dict()
    values(next(it) for _ in range(500))  # read past the checkpoint, then go back to it
    it.load_state_dict(state)
    rest = values(it)
    seen = collections.Counter(first + rest)
    assert sorted(seen) == list(range(5000)) and set(seen.values()) == {1}


def test_errors(service):
    it = iter(sluice.distribute("range(10)", "parallel_epochs", service))
    with pytest.raises(sluice.InvalidArgumentError,
                       match="need processing mode distributed_epoch"):
        it.state_dict()
    it.close()
    ds = sluice.distribute("range(10)", "distributed_epoch", service)
    with pytest.raises(ValueError, match="'position' bytes"):
        ds.load_state_dict({"position": "text"})
    ds.load_state_dict({"position": b"not a checkpoint"})
    with pytest.raises(sluice.InvalidArgumentError, match="not a sluice checkpoint"):
        iter(ds)
    other = iter(sluice.distribute("range(11)", "distributed_epoch", service))
    next(other)
    ds.load_state_dict(other.state_dict())
    other.close()
    with pytest.raises(sluice.InvalidArgumentError, match="pipeline is not the one"):
        iter(ds)


def test_shared_job_positions_merge(service):
    """Two consumers of one shared job stop at checkpoints; their merged position continues in
    two consumers of a new job: the epoch exactly once across all four reads."""
    def reader(job):
        return iter(sluice.distribute("range(30000)", "distributed_epoch", service,
                                      job_name=job, split_size=100))
    a, b = reader("merge-1"), reader("merge-1")
    got = []
    for _ in range(3000):
        got.append(int(next(a)))
        got.append(int(next(b)))
    merged = sluice.merge_positions([a.state_dict(), b.state_dict()])
    a.close()
    b.close()
    c, d = reader("merge-2"), reader("merge-2")
    c.load_state_dict(merged)
    d.load_state_dict(merged)
    got += values(c) + values(d)
    seen = collections.Counter(got)
    assert sorted(seen) == list(range(30000)) and set(seen.values()) == {1}


def test_merge_positions_bad_arguments():
    """What is not a list of state_dict()s is refused naming the argument and the cause."""
    cases = [
        ([b"junk"], r"^merge_positions\(\): states\[0\] is not a state_dict\(\) of a sluice "
                    r"iterator \(a dict with 'position' bytes\): it is bytes$"),
        ([{"position": b"x"}, {}], r"^merge_positions\(\): states\[1\] is not a state_dict\(\) "
                                   r"of a sluice iterator \(a dict with 'position' bytes\): it "
                                   r"is a dict without 'position' bytes$"),
        (b"junk", r"^merge_positions\(\): states must be a list of state_dict\(\)s of sluice "
                  r"iterators \(dicts with 'position' bytes\), not bytes$"),
        (None, r"^merge_positions\(\): states must be .*, not NoneType$"),
        ([], r"^merge_positions\(\): states is empty: "),
    ]
    for states, message in cases:
        with pytest.raises(ValueError, match=message):
            sluice.merge_positions(states)
    # Well-formed but not a position: the library's refusal, naming which one.
    with pytest.raises(sluice.InvalidArgumentError, match=r"^checkpoint 1: not a sluice checkpoint$"):
        sluice.merge_positions([{"position": b"junk"}])


def test_shared_job_rejoined_while_it_runs(service):
    """A consumer of a shared job restored while the job runs joins it again and never gets an
    element it had before its checkpoint; the job treats the consumer that left as any leaving
    consumer (what it had not reported received is handed out again), so nothing is lost
    beyond what it held unread when it left."""
    def reader(restore=None):
        ds = sluice.distribute("range(30000)", "distributed_epoch", service, job_name="live",
                               split_size=100, max_outstanding_requests=2)
        if restore:
            ds.load_state_dict(restore)
        return iter(ds)
    a, b = reader(), reader()
    pre, other = [], []
    for _ in range(2000):
        pre.append(int(next(a)))
        other.append(int(next(b)))
    state = a.state_dict()
    post = values(next(a) for _ in range(1000))
    a.close()
    again = values(reader(state))
    other += values(b)
    assert len(set(again)) == len(again) and len(set(other)) == len(other)
    assert not set(again) & set(pre)
    everything = set(pre + post + again + other)
    # What the closed consumer held unread: at most its two replies in flight or buffered, each
    # at most 32 of the worker's chunks, a chunk at most one split of 100 elements. It received
    # them (and said so), so they count as delivered to it and are not served again in this
    # job; a restore from positions reads them again.
    assert len(everything) >= 30000 - 2 * 32 * 100


torch = pytest.importorskip("torch")
import sluice.torch  # noqa: E402


def test_torch_loader_resume_two_workers(service):
    """A DataLoader with two worker processes stopped mid-epoch; a new dataset and loader resume
    from its state_dict() (through pickle): the epoch exactly once."""
    # 1000 batches, about 40 splits: enough for many splits in flight on both workers when the
    # loader stops; each pass through the loader costs about a millisecond a batch.
    pipeline = "range(10000) | batch(10)"

    def loader():
        ds = sluice.torch.IterableDataset(service, pipeline=pipeline,
                                          processing_mode="distributed_epoch")
        return sluice.torch.DataLoader(ds, num_workers=2)

    first = loader()
    seen = collections.Counter()
    for k, batch in enumerate(first):
        seen.update(batch.tolist())
        if k == 375:
            break
    state = pickle.loads(pickle.dumps(first.state_dict()))
    del first
    second = loader()
    second.load_state_dict(state)
    for batch in second:
        seen.update(batch.tolist())
    assert sorted(seen) == list(range(10000)) and set(seen.values()) == {1}
    # At the end of the epoch the state says so, and it restores into the next epoch, whole.
    end = second.state_dict()
    assert end["end_of_epoch"] is True
    third = loader()
    third.load_state_dict(end)
    again = collections.Counter(x for batch in third for x in batch.tolist())
    assert sorted(again) == list(range(10000)) and set(again.values()) == {1}


def test_torch_dataset_state_in_process(service):
    ds = sluice.torch.IterableDataset(service, pipeline="range(3000)",
                                      processing_mode="distributed_epoch")
    it = iter(ds)
    first = [int(next(it)) for _ in range(1234)]
    state = ds.state_dict()
    it.close()
    again = sluice.torch.IterableDataset(service, pipeline="range(3000)",
                                         processing_mode="distributed_epoch")
    again.load_state_dict(state)
    seen = collections.Counter(first + [int(x) for x in again])
    assert sorted(seen) == list(range(3000)) and set(seen.values()) == {1}


def test_progress_reports(service):
    """sluice.progress reports increasing counts while reading and the whole epoch at its end;
    without a callback (and without tqdm) it prints lines on standard error."""
    reports = []
    ds = sluice.distribute("range(200000) | map(wait_us, 5)", "distributed_epoch", service,
                           split_size=1000)
    it = sluice.progress(ds, reports.append, every=0.05)
    n = sum(1 for _ in it)
    assert n == 200000
    assert len(reports) >= 3
    counts = [r["elements"] for r in reports]
    assert counts == sorted(counts)
    last = reports[-1]
    assert last["done"] and last["elements"] == 200000
    assert last["splits_total"] == 200 and last["splits_done"] == 200 and last["fraction"] == 1.0
    assert any(r["eta_seconds"] is not None for r in reports[:-1])
    # Methods pass through to the iterator.
    it2 = sluice.progress(iter(sluice.distribute("range(10)", "distributed_epoch", service)),
                          reports.append)
    next(it2)
    assert set(it2.state_dict()) == {"position"}
    it2.close()
    with pytest.raises(TypeError, match="report must be callable"):
        sluice.progress(ds, report=3)


def test_progress_on_stderr(service, capsys):
    it = sluice.progress(sluice.distribute("range(1000)", "distributed_epoch", service),
                         every=1000)
    import sys
    if "tqdm" in sys.modules or it._bar is not None:
        pytest.skip("tqdm is installed: the bar is drawn instead")
    assert sum(1 for _ in it) == 1000
    err = capsys.readouterr().err
    assert err.startswith("sluice: read 1000 elements  ") and "100%" in err
