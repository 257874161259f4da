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
