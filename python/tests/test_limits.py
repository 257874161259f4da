"""The servers' resource limits from Python: each keyword reaches its server, a request past a
limit fails with the limit's name, and the server goes on serving."""

import pytest

import sluice


def test_dispatcher_limits():
    with sluice.DispatchServer(max_datasets=2, max_pipeline_bytes=64) as d, \
            sluice.WorkerServer(d):
        sluice.register_dataset(d, "range(3)")
        sluice.register_dataset(d, "range(4)")
        with pytest.raises(sluice.Error) as e:
            sluice.register_dataset(d, "range(5)")
        assert "dataset limit reached: 2 datasets (--max-datasets)" in str(e.value)
        with pytest.raises(sluice.Error) as e:
            sluice.register_dataset(d, "range(6) | " + " | ".join(["map(add, 1)"] * 20))
        assert "--max-pipeline-bytes" in str(e.value)
        # Registering an existing pipeline again is never refused, and reads go on.
        again = sluice.register_dataset(d, "range(3)")
        got = sorted(int(x) for x in sluice.from_dataset_id("distributed_epoch", d, again))
        assert got == [0, 1, 2]


def test_worker_element_limit():
    with sluice.DispatchServer() as d, sluice.WorkerServer(d, max_element_bytes=4096):
        with pytest.raises(sluice.Error) as e:
            list(sluice.distribute("range(3) | map(bytes, 5000)", "parallel_epochs", d,
                                   timeout=30))
        assert ("element of 5000 bytes is over the worker's limit of 4096 (--max-element-bytes)"
                in str(e.value))
        got = [bytes(x) for x in sluice.distribute("range(3) | map(bytes, 4000)",
                                                   "parallel_epochs", d, timeout=30)]
        assert [len(x) for x in got] == [4000, 4000, 4000]


@pytest.mark.parametrize("keyword", ["max_datasets", "max_pipeline_bytes", "max_jobs_per_client"])
def test_dispatcher_limit_keywords_checked(keyword):
    with pytest.raises(ValueError):
        sluice.DispatchServer(**{keyword: 0})
    with pytest.raises(TypeError):
        sluice.DispatchServer(**{keyword: "10"})
