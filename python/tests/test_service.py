"""The package against a real dispatcher and workers: every mode with exact multisets, shared
jobs, tails, status, argument validation, timeouts, Ctrl-C and a server lost mid-read."""

import collections
import os
import signal
import threading
import time

import numpy as np
import pytest

import sluice


def ints(ds):
    return sorted(int(x) for x in ds)


def drain_retrying(it, limit_s=30):
    """Every element of it, waiting through sluice.TimeoutError for at most limit_s."""
    got, deadline = [], time.monotonic() + limit_s
    while True:
        try:
            got.append(next(it))
        except StopIteration:
            return got
        except sluice.TimeoutError:
            assert time.monotonic() < deadline, "the read did not finish"


def test_register_and_read_every_mode(cluster2):
    t = cluster2.target
    ds_id = sluice.register_dataset(t, "range(100)")
    assert isinstance(ds_id, str) and ds_id
    # The same pipeline under the same id is the same dataset.
    assert sluice.register_dataset(t, "range(100)", dataset_id=ds_id) == ds_id
    assert ints(sluice.from_dataset_id("distributed_epoch", t, ds_id)) == list(range(100))
    assert ints(sluice.from_dataset_id("dynamic", t, ds_id)) == list(range(100))
    # parallel_epochs: each of the two workers serves a whole copy.
    assert ints(sluice.from_dataset_id("parallel_epochs", t, ds_id)) == sorted(list(range(100)) * 2)
    assert ints(sluice.from_dataset_id("off", t, ds_id)) == sorted(list(range(100)) * 2)


def test_distribute_with_stream_operations(cluster2):
    t = cluster2.target
    assert ints(sluice.distribute("range(1000) | skip(10) | take(5)", "distributed_epoch", t)) == \
        [10, 11, 12, 13, 14]
    batches = list(sluice.distribute("range(100) | batch(32)", "distributed_epoch", t))
    assert sorted(len(b) for b in batches) == [4, 32, 32, 32]
    assert sorted(int(v) for b in batches for v in b) == list(range(100))


def test_split_size(cluster2):
    t = cluster2.target
    got = ints(sluice.distribute("range(100) | map(identity)", "distributed_epoch", t,
                                 split_size=25))
    assert got == list(range(100))
    ds = {d["pipeline"]: d for d in sluice.status(t)["datasets"]}
    assert ds["range(100) | map(identity)"]["split_size"] == 25
    job = [j for j in sluice.status(t)["jobs"]
           if j["dataset_id"] == ds["range(100) | map(identity)"]["id"]][0]
    assert job["splits"]["size"] == 25 and job["splits"]["total"] == 4


def test_batched_tuples_from_the_service(cluster2):
    got = list(sluice.distribute('list((1, "a"), (2, "bb"), (3, "c"), (4, "d")) | batch(2)',
                                 "distributed_epoch", cluster2.target))
    assert len(got) == 2
    for nums, strs in got:
        assert nums.dtype == np.int64 and nums.shape == (2,)
        assert strs.dtype == object and strs.shape == (2,)
    pairs = sorted((int(n), s) for nums, strs in got for n, s in zip(nums, strs))
    assert pairs == [(1, b"a"), (2, b"bb"), (3, b"c"), (4, b"d")]


def test_large_elements_arrive_intact(cluster2):
    got = list(sluice.distribute("range(40000) | batch(10000)", "distributed_epoch",
                                 cluster2.target))
    flat = np.sort(np.concatenate(got))
    assert flat.dtype == np.int64 and np.array_equal(flat, np.arange(40000))


def test_local_tail(cluster2):
    got = ints(sluice.distribute("range(5) | map(square)", "parallel_epochs", cluster2.target,
                                 local="map(add, 1)"))
    assert got == sorted([1, 2, 5, 10, 17] * 2)


def test_shared_job_from_two_iterators(cluster2):
    ds = sluice.distribute("range(2000) | map(wait_us, 500)", "distributed_epoch",
                           cluster2.target, job_name="shared")
    a, b = iter(ds), iter(ds)
    got = collections.Counter()
    seen = {"a": 0, "b": 0}
    live = {"a": a, "b": b}
    while live:
        for name in list(live):
            try:
                got[int(next(live[name]))] += 1
                seen[name] += 1
            except StopIteration:
                del live[name]
    assert sorted(got) == list(range(2000)) and set(got.values()) == {1}
    assert seen["a"] > 0 and seen["b"] > 0


def test_status_is_a_dict(cluster2):
    sluice.register_dataset(cluster2.target, "range(3)", dataset_id="three")
    st = sluice.status(cluster2.target)
    assert isinstance(st, dict)
    assert "three" in str(st)


@pytest.mark.parametrize("call,exc,text", [
    (lambda t: sluice.from_dataset_id("sideways", t, "1"), ValueError, "processing_mode"),
    (lambda t: sluice.from_dataset_id(1, t, "1"), TypeError, "processing_mode"),
    (lambda t: sluice.from_dataset_id("parallel_epochs", t, "1", consumer_index=0),
     ValueError, "consumer_index requires num_consumers"),
    (lambda t: sluice.from_dataset_id("parallel_epochs", t, "1", num_consumers=2),
     ValueError, "num_consumers requires consumer_index"),
    (lambda t: sluice.from_dataset_id("parallel_epochs", t, "1", job_name="j",
                                      consumer_index=2, num_consumers=2),
     ValueError, "consumer_index 2 must be below num_consumers 2"),
    (lambda t: sluice.from_dataset_id("parallel_epochs", t, "1", max_outstanding_requests=-1),
     ValueError, "max_outstanding_requests"),
    (lambda t: sluice.from_dataset_id("parallel_epochs", 5050, "1"), TypeError, "service"),
    (lambda t: sluice.from_dataset_id("parallel_epochs", "sluice://nohost", "1"),
     ValueError, "service"),
    (lambda t: sluice.register_dataset(t, "range(3)", compression="zstd"), ValueError,
     "compression"),
    (lambda t: sluice.register_dataset(t, "range(3)", split_size=-1), ValueError, "split_size"),
    (lambda t: sluice.register_dataset(t, "range(3)", split_size=0), ValueError,
     "split_size must be positive, not 0"),
    (lambda t: sluice.distribute("range(3)", "distributed_epoch", t, split_size=2.5), TypeError,
     "split_size must be an int, not float"),
])
def test_arguments_are_checked_before_the_network(call, exc, text):
    # A port nobody listens on: a check that reached the network would hang or fail otherwise.
    with pytest.raises(exc, match=text):
        call("sluice://127.0.0.1:1")


@pytest.mark.parametrize("service, want", [
    ("sluice://h1:5050", "h1:5050"),
    ("h1:5050", "h1:5050"),
    ("sluice://h1:5050,h2:5050,h3:5050", "h1:5050,h2:5050,h3:5050"),
    ("h1:5050, h2:5050 ,[::1]:5050", "h1:5050,h2:5050,[::1]:5050"),
])
def test_service_replica_lists(service, want):
    assert sluice._target(service) == want


@pytest.mark.parametrize("service, text", [
    ("sluice://h1:5050,,h2:5050", "service: address 2 of 'sluice://h1:5050,,h2:5050' is empty"),
    ("h1:5050,h1:5050", "service: h1:5050 is listed twice in 'h1:5050,h1:5050'"),
    ("h1:5050,sluice://h2:5050",
     "service: address 2 of 'h1:5050,sluice://h2:5050': sluice:// goes once, before the list"),
    ("h1:5050,h2", "service must look like 'sluice://HOST:PORT' or a list of replicas"),
    (",".join(f"h{i}:1" for i in range(17)), "service lists more than 16 addresses"),
])
def test_service_replica_lists_refused(service, text):
    with pytest.raises(ValueError) as e:
        sluice._target(service)
    assert str(e.value).startswith(text)


def test_read_through_a_list_of_replicas(cluster2):
    # The first address is a closed port: the client moves on to the next of the list.
    t = "sluice://127.0.0.1:1," + cluster2.target[len("sluice://"):]
    assert ints(sluice.distribute("range(50)", "distributed_epoch", t)) == list(range(50))
    assert sluice.status(t)["workers"]


def test_unknown_dataset(cluster2):
    with pytest.raises(sluice.NotFoundError, match="dataset 'nope' not found"):
        iter(sluice.from_dataset_id("parallel_epochs", cluster2.target, "nope"))


def test_malformed_pipeline(cluster2):
    with pytest.raises(sluice.InvalidArgumentError, match="column"):
        sluice.register_dataset(cluster2.target, "range(3) | map(")


def test_element_timeout(cluster):
    # No worker: nothing arrives, and the wait ends when asked.
    ds = sluice.distribute("range(10)", "parallel_epochs", cluster.target, element_timeout=0.3)
    it = iter(ds)
    start = time.monotonic()
    with pytest.raises(sluice.TimeoutError,
                       match=r"no element within 300 ms: job \d+: (no worker registered yet"
                             r"|waiting for the dispatcher's task list)"):
        next(it)
    assert time.monotonic() - start < 5
    # The iterator stays usable: a worker joins and the read completes.
    cluster.add_worker()
    assert sorted(int(x) for x in drain_retrying(it)) == list(range(10))


def test_element_timeout_with_reader_side_operations(cluster):
    # A batch after a filter runs in the reader; its wait can time out without breaking it.
    ds = sluice.distribute("range(20) | filter(even) | batch(4)", "distributed_epoch",
                           cluster.target, element_timeout=0.3)
    it = iter(ds)
    with pytest.raises(sluice.TimeoutError):
        next(it)
    cluster.add_worker()
    got = drain_retrying(it)
    assert sorted(len(b) for b in got) == [2, 4, 4]
    assert sorted(int(v) for b in got for v in b) == list(range(0, 20, 2))


def test_ctrl_c_interrupts_a_blocked_next(cluster):
    it = iter(sluice.distribute("range(10)", "parallel_epochs", cluster.target))
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        next(it)
    elapsed = time.monotonic() - start
    timer.join()
    assert elapsed < 2.0
    it.close()


def test_server_lost_mid_read(cluster2):
    it = iter(sluice.distribute("range(1000000) | map(wait_us, 200)", "parallel_epochs",
                                cluster2.target, timeout=1, element_timeout=1))
    # The first element may take longer than the bound of 1 s on a loaded machine: asked again.
    deadline = time.monotonic() + 30
    while True:
        try:
            next(it)
            break
        except sluice.TimeoutError:
            assert time.monotonic() < deadline, "no first element within 30 s"
    for w in cluster2.workers:
        w.stop(signal.SIGKILL)
    cluster2.dispatcher.stop(signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(sluice.Error):
        for _ in it:
            pass
    assert time.monotonic() - start < 30


def test_iterator_close_and_context_manager(cluster2):
    ds = sluice.distribute("range(1000000) | repeat()", "parallel_epochs", cluster2.target)
    with iter(ds) as it:
        assert next(it) is not None
    with pytest.raises(StopIteration):
        next(it)
