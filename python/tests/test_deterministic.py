"""Deterministic reads from Python: the canonical order with two workers, a dataset registered
deterministic, the refusal in another mode, and the torch dataset forwarding the flag."""

import pytest

import sluice


def test_distribute_deterministic(cluster2):
    t = cluster2.target
    ds = sluice.distribute("range(3000) | map(square)", "distributed_epoch", t, split_size=50,
                           deterministic=True)
    assert [int(x) for x in ds] == [i * i for i in range(3000)]
    # A small reorder bound still gives the canonical order.
    ds = sluice.distribute("range(3000) | map(square)", "distributed_epoch", t, split_size=50,
                           deterministic=True, reorder_bytes=4096)
    assert [int(x) for x in ds] == [i * i for i in range(3000)]


def test_registered_deterministic(cluster2):
    t = cluster2.target
    ds_id = sluice.register_dataset(t, "range(2000) | shuffle(16, 3)", split_size=40,
                                    deterministic=True)
    # The same pipeline without the flag is another dataset.
    assert sluice.register_dataset(t, "range(2000) | shuffle(16, 3)", split_size=40) != ds_id
    first = [int(x) for x in sluice.from_dataset_id("distributed_epoch", t, ds_id)]
    again = [int(x) for x in sluice.from_dataset_id("distributed_epoch", t, ds_id)]
    assert first == again
    assert sorted(first) == list(range(2000))
    # Each block of 40 is split k's values: the splits come in order.
    assert all(v // 40 == i // 40 for i, v in enumerate(first))


def test_deterministic_refused_in_other_modes(cluster2):
    t = cluster2.target
    with pytest.raises(sluice.InvalidArgumentError, match="deterministic reads need mode "
                       "distributed_epoch, not parallel_epochs"):
        list(sluice.distribute("range(10)", "parallel_epochs", t, deterministic=True))
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        sluice.distribute("range(10)", "distributed_epoch", t, deterministic=1)


def test_torch_forwards_deterministic(cluster2):
    torch = pytest.importorskip("torch")
    import sluice.torch as st
    ds = st.IterableDataset(cluster2.target, pipeline="range(500) | map(square)",
                            deterministic=True)
    got = [int(x) for x in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)]
    assert got == [i * i for i in range(500)]


def interleaved(shards):
    """One element of each shard in turn, by index."""
    return [s[j] for j in range(max(len(s) for s in shards)) for s in shards if j < len(s)]


def test_shards(cluster2):
    """shard=(i, n): n readers, one element of each in turn, are the canonical order; the merge
    of their positions after 10 elements each, restored into 2 shards, continues it from place
    30, each element once; a dataset registered deterministic shards without the flag."""
    t = cluster2.target
    ds_id = sluice.register_dataset(t, "range(200) | map(wait_us, 100)", split_size=7,
                                    deterministic=True)

    def shard(i, n, **kw):
        return sluice.from_dataset_id("distributed_epoch", t, ds_id, shard=(i, n), **kw)

    assert interleaved([[int(x) for x in shard(i, 3)] for i in range(3)]) == list(range(200))
    states = []
    for i in range(3):
        it = iter(shard(i, 3, deterministic=True))
        assert [int(next(it)) for _ in range(10)] == list(range(i, 30, 3))
        states.append(it.state_dict())
        it.close()
    merged = sluice.merge_positions(states)
    rest = []
    for i in range(2):
        ds = shard(i, 2)
        ds.load_state_dict(merged)
        rest.append([int(x) for x in ds])
    assert interleaved(rest) == list(range(30, 200))


def test_shards_refused(cluster2):
    t = cluster2.target
    for bad in [(3, 3), (-1, 2), (0, 0), [0, 2], (0, True)]:
        with pytest.raises(ValueError, match="shard"):
            sluice.distribute("range(10)", "distributed_epoch", t, deterministic=True, shard=bad)
    with pytest.raises(ValueError, match="a sharded read reads a job of its own"):
        sluice.distribute("range(10)", "distributed_epoch", t, deterministic=True, shard=(0, 2),
                          job_name="j")
    with pytest.raises(sluice.InvalidArgumentError, match="a sharded read needs a deterministic "
                       "read"):
        list(sluice.distribute("range(10)", "distributed_epoch", t, shard=(0, 2)))
    with pytest.raises(sluice.InvalidArgumentError, match="sharded reads need mode "
                       "distributed_epoch, not parallel_epochs"):
        list(sluice.distribute("range(10)", "parallel_epochs", t, shard=(0, 2)))
