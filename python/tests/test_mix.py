"""sluice.run of mixed datasets: sample_from_datasets and choose_from_datasets."""

import pytest

import sluice

MIX = ("sample_from_datasets([(range(30)), (range(100, 105)), (range(200, 260))], "
       "[0.5, 0.2, 0.3], 11)")


def test_sample_reads_every_weighted_element_once_in_a_fixed_order():
    first = [int(x) for x in sluice.run(MIX)]
    assert sorted(first) == list(range(30)) + list(range(100, 105)) + list(range(200, 260))
    assert [int(x) for x in sluice.run(MIX)] == first
    assert first != sorted(first)


def test_ops_after_the_mix_apply_to_the_mixed_stream():
    got = [int(x) for x in sluice.run(MIX + " | map(add, 1000) | take(3)")]
    want = [int(x) + 1000 for x in sluice.run(MIX)][:3]
    assert got == want


def test_choose_follows_the_choices():
    got = [bytes(x).decode() for x in sluice.run(
        'choose_from_datasets([(list("foo") | repeat()), (list("bar") | repeat())], '
        '(list(0, 1, 1, 0)))')]
    assert got == ["foo", "bar", "bar", "foo"]


def test_choice_out_of_range_is_an_error():
    with pytest.raises(Exception, match=r"the choice at position 1 is 5, not an input index"):
        list(sluice.run("choose_from_datasets([(range(3))], (list(0, 5)))"))


# ---- distributed_epoch: each input a read of its own, mixed in the reader -----------------------

@pytest.fixture(scope="module")
def service():
    with sluice.DispatchServer() as d:
        # Stopped after the last case, which may leave elements unread (a loader stopped
        # mid-epoch): the drain waits for no reader that is gone (test_drain_outage.py tests it).
        workers = [sluice.WorkerServer(d, drain_timeout_ms=200) for _ in range(2)]
        yield d
        for w in workers:
            w.stop()


def test_distributed_deterministic_is_the_local_sequence(service):
    p = sluice.Pipeline.sample_from_datasets(
        [sluice.Pipeline.range(3000), sluice.Pipeline.range(100000, 101000).map("add", 7)],
        [0.7, 0.3], seed=5).map("mul", 2)
    want = [int(x) for x in sluice.run(str(p))]
    got = [int(x) for x in p.distribute("distributed_epoch", service, deterministic=True,
                                        split_size=64)]
    assert got == want
    batched = [list(map(int, b)) for b in sluice.distribute(
        str(p) + " | batch(10)", "distributed_epoch", service, deterministic=True)]
    assert batched == [want[i:i + 10] for i in range(0, len(want), 10)]


def test_distributed_state_dict_resumes_the_mix(service):
    text = MIX + " | map(add, 1)"
    want = [int(x) for x in sluice.run(text)]
    ds = sluice.distribute(text, "distributed_epoch", service, deterministic=True)
    it = iter(ds)
    first = [int(next(it)) for _ in range(37)]
    state = it.state_dict()
    it.close()
    again = sluice.distribute(text, "distributed_epoch", service, deterministic=True)
    again.load_state_dict(state)
    assert first + [int(x) for x in again] == want


def test_job_state_of_a_shared_mix(service):
    """Two readers of a shared mix job keep their positions with the dispatcher under the mix's
    name; the job's position from it is the merge of theirs, and a new job restored from it
    reads the rest: every element once."""
    p = "sample_from_datasets([(range(1000)), (range(5000, 5500))], [0.5, 0.5], 3)"
    a = iter(sluice.distribute(p, "distributed_epoch", service, job_name="kept-mix"))
    b = iter(sluice.distribute(p, "distributed_epoch", service, job_name="kept-mix"))
    got = [int(next(a)) for _ in range(100)] + [int(next(b)) for _ in range(50)]
    sa, sb = a.state_dict(), b.state_dict()
    kept = sluice.job_state(service, "kept-mix")
    assert kept["step"] == 1
    assert kept["position"] == sluice.merge_positions([sa, sb])["position"]
    a.close()
    b.close()
    ds = sluice.distribute(p, "distributed_epoch", service, job_name="kept-mix-2")
    ds.load_state_dict(kept)
    got += [int(x) for x in ds]
    assert sorted(got) == list(range(1000)) + list(range(5000, 5500))


def test_set_weights_while_reading(service):
    text = ("sample_from_datasets([(range(1000000)), (range(1000000, 2000000))], [0.5, 0.5], 3)")
    ds = sluice.distribute(text, "distributed_epoch", service, job_name="py-weights",
                           deterministic=True)
    it = iter(ds)
    got = [int(next(it)) for _ in range(300)]
    at = sluice.set_weights(service, "py-weights", [0, 1])
    assert at >= 300
    while len(got) < at + 500:
        got.append(int(next(it)))
    it.close()
    assert any(v < 1000000 for v in got[:at])
    # From the position the dispatcher named on, input 0 has weight 0.
    assert all(v >= 1000000 for v in got[at:])
    (mix,) = [m for m in sluice.status(service)["mixes"] if m["job_name"] == "py-weights"]
    assert mix["weights"] == [0, 1] and mix["weights_from"] == at
    with pytest.raises(sluice.InvalidArgumentError, match="may already be read"):
        sluice.set_weights(service, "py-weights", [1, 1], at=1)
    with pytest.raises(sluice.InvalidArgumentError, match="the mix has 2 inputs, 3 weights given"):
        sluice.set_weights(service, "py-weights", [1, 1, 1])


def test_torch_loader_reads_and_resumes_a_mix(service):
    torch_sluice = pytest.importorskip("sluice.torch")
    import collections
    # Each input many splits of 16 (the least); a loader passes about a thousand elements a
    # second, one at a time.
    text = "sample_from_datasets([(range(1500)), (range(100000, 100500))], [0.7, 0.3], 3)"
    ds = torch_sluice.IterableDataset(service, pipeline=text, processing_mode="distributed_epoch")
    loader = torch_sluice.DataLoader(ds, num_workers=2)
    want = list(range(1500)) + list(range(100000, 100500))
    assert sorted(int(x) for x in loader) == want
    # Two loader workers' positions merged (mix checkpoints merge) and restored: each once.
    it = iter(loader)
    first = [int(next(it)) for _ in range(500)]
    state = loader.state_dict()
    del it
    again = torch_sluice.DataLoader(ds, num_workers=2)
    again.load_state_dict(state)
    seen = collections.Counter(first + [int(x) for x in again])
    assert sorted(seen) == want and set(seen.values()) == {1}
