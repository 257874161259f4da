"""sluice.torch.IterableDataset in a DataLoader, with 0 and 2 loader workers."""

import collections

import pytest

torch = pytest.importorskip("torch")

import sluice  # noqa: E402
import sluice.torch  # noqa: E402


@pytest.fixture(scope="module")
def service():
    with sluice.DispatchServer() as d:
        workers = [sluice.WorkerServer(d) for _ in range(2)]
        yield d
        for w in workers:
            w.stop()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_element_once_per_epoch(service, num_workers):
    ds = sluice.torch.IterableDataset(service, pipeline="range(2000) | batch(16)")
    loader = sluice.torch.DataLoader(ds, num_workers=num_workers)
    for _ in range(2):
        seen = collections.Counter()
        for batch in loader:
            assert isinstance(batch, torch.Tensor) and batch.dtype == torch.int64
            seen.update(batch.tolist())
        assert sorted(seen) == list(range(2000)) and set(seen.values()) == {1}


def test_tuples_and_bytes(service):
    ds = sluice.torch.IterableDataset(
        service, pipeline='list((1, "a", 0.5), (2, "b", 1.5)) | batch(2)')
    (x,) = list(torch.utils.data.DataLoader(ds, batch_size=None))
    ints, strs, floats = x
    assert ints.tolist() == [1, 2] and floats.dtype == torch.float64
    assert strs.tolist() == [b"a", b"b"]


def test_large_elements(service):
    ds = sluice.torch.IterableDataset(service, pipeline="range(1) | map(bytes, 1048576)",
                                      processing_mode="distributed_epoch")
    (x,) = list(ds)
    assert isinstance(x, bytes) and len(x) == 1048576
    ds = sluice.torch.IterableDataset(service, pipeline="range(262144) | batch(262144)")
    (t,) = list(ds)
    assert t.shape == (262144,) and int(t[-1]) == 262143


def test_needs_one_source():
    with pytest.raises(ValueError, match="exactly one of dataset_id and pipeline"):
        sluice.torch.IterableDataset("sluice://127.0.0.1:1")
