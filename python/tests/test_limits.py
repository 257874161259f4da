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


def test_worker_task_limit():
    with sluice.DispatchServer() as d, sluice.WorkerServer(d, max_tasks=1) as w:
        first = iter(sluice.distribute("range(1000000000000)", "parallel_epochs", d, timeout=30))
        assert int(next(first)) == 0
        with pytest.raises(sluice.Error) as e:
            list(sluice.distribute("range(3)", "parallel_epochs", d, timeout=30))
        assert (f"worker {w.address}: task limit reached: it runs 1 tasks (--max-tasks)"
                in str(e.value))


def test_jobs_per_address():
    with sluice.DispatchServer(max_jobs_per_address=1) as d, sluice.WorkerServer(d):
        first = iter(sluice.distribute("range(1000000000000)", "parallel_epochs", d, timeout=30))
        assert int(next(first)) == 0
        with pytest.raises(sluice.Error) as e:
            next(iter(sluice.distribute("range(3)", "parallel_epochs", d, timeout=30)))
        assert ("job limit reached: clients at 127.0.0.1 hold 1 jobs (--max-jobs-per-address)"
                in str(e.value))


@pytest.mark.parametrize("keyword", ["max_tasks", "max_buffer_bytes"])
def test_worker_limit_keywords_checked(keyword):
    with sluice.DispatchServer() as d:
        with pytest.raises(TypeError):
            sluice.WorkerServer(d, **{keyword: "10"})
        value, message = {
            "max_tasks": (200000, "max_tasks: expected a number from 1 to 100000, got 200000"),
            "max_buffer_bytes": (1000, "max_buffer_bytes: expected a number of at least "
                                       "16777216, got 1000"),
        }[keyword]
        with pytest.raises(sluice.Error) as e:
            sluice.WorkerServer(d, **{keyword: value})
        assert message in str(e.value)


@pytest.mark.parametrize("keyword", ["max_datasets", "max_pipeline_bytes", "max_jobs_per_client",
                                     "max_jobs_per_address"])
def test_dispatcher_limit_keywords_checked(keyword):
    with pytest.raises(ValueError):
        sluice.DispatchServer(**{keyword: 0})
    with pytest.raises(TypeError):
        sluice.DispatchServer(**{keyword: "10"})


def test_status_carries_pipeline_previews():
    """A long pipeline's text is in the status as its first 256 bytes, its length and its
    SHA-256; status(dataset_id=...) has the whole text."""
    import hashlib
    text = "list(\"" + "x" * 1000 + "\")"
    with sluice.DispatchServer() as d:
        ds = sluice.register_dataset(d, text)
        entry, = sluice.status(d)["datasets"]
        assert (entry["pipeline"], entry["pipeline_bytes"], entry["pipeline_truncated"]) == \
            (text[:256], len(text), True)
        assert entry["pipeline_digest"] == hashlib.sha256(text.encode()).hexdigest()
        whole, = sluice.status(d, dataset_id=ds)["datasets"]
        assert (whole["pipeline"], whole["pipeline_truncated"]) == (text, False)
        with pytest.raises(sluice.NotFoundError) as e:
            sluice.status(d, dataset_id="nope")
        assert "dataset 'nope' not found" in str(e.value)
