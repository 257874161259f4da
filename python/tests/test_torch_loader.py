"""sluice.torch.DataLoader over the DataLoader options a training script sets: every epoch is
the dataset exactly once, a state taken at any boundary (before the first batch, mid-epoch,
after the last batch, after the loop ended) restores exactly (with another num_workers too),
and two loaders over one dataset at once each read whole epochs.

Each case runs against workers in this process (sluice.WorkerServer), and a representative
subset against sluice-worker processes. The loader's logic does not depend on where the sluice
workers run: it only reaches them over sockets. Where the kind of worker does matter is a loader
that forks its workers from a process whose sluice worker and dispatcher threads do not follow
into the child, which only workers in this process exercise; so the whole matrix runs against
those. Against sluice-worker processes (workers that register late, over real sockets between
processes) run: each test without a matrix, and from each matrix a case of every kind of reader
it has (in this process, forked workers started every epoch, persistent ones) and of every
boundary a state is taken at. Spawned and forkserver loader workers start as new processes
that inherit nothing from this one, so the kind of sluice worker makes no difference to them:
they run against workers in this process only.

Then the three ways the loader lost data before it named each epoch's job itself: empty epochs
with persistent workers, a lost epoch when num_workers changes on resume, and an empty epoch
after a state taken at the end of an epoch."""

import collections
import re
import tempfile
import time

import pytest

torch = pytest.importorskip("torch")

import sluice  # noqa: E402
import sluice.torch  # noqa: E402

from conftest import Cluster  # noqa: E402

N = 600  # elements of the small dataset
BATCH = 6
BATCHES = N // BATCH
PIPELINE = f"range({N}) | batch({BATCH})"


# Shorter intervals than the defaults, the same for both kinds of worker. A loader that goes
# away mid-epoch (a break, a state taken and the loader dropped, persistent workers started
# again) stops its workers while one may be waiting for an element that another one fetched
# and will never hand out: torch waits up to 5 s for each such worker to exit, and the splits
# come back to the job only after the re-issue grace, three heartbeats (the longer of a worker's
# and a client's) and a second. Heartbeats at a fifth of the timeouts (workers every 400 ms, as
# the conftest Cluster's 2 s worker timeout gives, readers every 600 ms) make that 2.8 s, not 4 s;
# a live reader is still released only after 3 s without a heartbeat (five missed), a closed one
# after two heartbeats (the least grace). In-process workers leave without waiting long for
# readers to fetch what they hold: their stop at the end drains them, which nothing here checks.
WORKER_TIMEOUT_MS = 2000
CLIENT_TIMEOUT_MS = 3000
DISCONNECT_GRACE_MS = 1200
DRAIN_TIMEOUT_MS = 500


@pytest.fixture(scope="module", params=["in_process", "out_of_process"])
def service(request):
    """The target of a dispatcher and two workers, in this process or sluice-worker processes.
    A case that runs against workers in this process only parametrizes it with IN_PROCESS."""
    if request.param == "in_process":
        with sluice.DispatchServer(worker_timeout_ms=WORKER_TIMEOUT_MS,
                                   client_timeout_ms=CLIENT_TIMEOUT_MS,
                                   disconnect_grace_ms=DISCONNECT_GRACE_MS) as d:
            workers = [sluice.WorkerServer(d, drain_timeout_ms=DRAIN_TIMEOUT_MS)
                       for _ in range(2)]
            yield d.target
            for w in workers:
                w.stop()
    else:
        with tempfile.TemporaryDirectory(prefix="sluice-torch-") as log_dir:
            c = Cluster(log_dir, ["--worker-timeout-ms", str(WORKER_TIMEOUT_MS),
                                  "--client-timeout-ms", str(CLIENT_TIMEOUT_MS),
                                  "--disconnect-grace-ms", str(DISCONNECT_GRACE_MS)])
            try:
                c.add_worker()
                c.add_worker()
                yield c.target
            finally:
                c.stop()


# parametrize("service", IN_PROCESS, indirect=True): a case against workers in this process only.
IN_PROCESS = ["in_process"]

# Every wait is bounded: a read that stops delivering fails with sluice.TimeoutError.
WAIT_S = 120


def dataset(service, pipeline=PIPELINE, **kw):
    return sluice.torch.IterableDataset(service, pipeline=pipeline, element_timeout=WAIT_S, **kw)


def loader(ds, **options):
    if options.get("num_workers", 0) == 0:
        options.pop("persistent_workers", None)  # which torch refuses without workers
    return sluice.torch.DataLoader(ds, **options)


def elements(batches):
    return [x for b in batches for x in b.tolist()]


def assert_epoch(got, n=N):
    seen = collections.Counter(got)
    assert sorted(seen) == list(range(n)), f"{len(got)} elements, {len(seen)} distinct of {n}"
    assert set(seen.values()) == {1}, "duplicates: " + str(
        sorted(x for x, c in seen.items() if c > 1)[:20])


# Each option of torch's DataLoader a training script sets, in the combinations that change
# how the loader starts its readers: in this process, one worker, several (fork, spawn and
# forkserver), persistent or started again every epoch, with a shallow and a deep prefetch.
# CONFIGS runs against both kinds of sluice worker: one of each kind of reader (in this process,
# forked workers started every epoch, persistent ones, with pinned memory); the rest of the
# matrix, MORE_CONFIGS, against workers in this process only.
CONFIGS = [
    dict(num_workers=0),
    dict(num_workers=2),
    dict(num_workers=4, persistent_workers=True, pin_memory=True),
]
MORE_CONFIGS = [
    dict(num_workers=0, pin_memory=True),
    dict(num_workers=1),
    dict(num_workers=1, persistent_workers=True, prefetch_factor=1),
    dict(num_workers=2, persistent_workers=True),
    dict(num_workers=2, persistent_workers=True, prefetch_factor=1, pin_memory=True),
    dict(num_workers=4, prefetch_factor=4),
    # The slowest: every start of a worker imports torch again (-m "not slow" leaves them out).
    pytest.param(dict(num_workers=2, multiprocessing_context="spawn"), marks=pytest.mark.slow),
    pytest.param(dict(num_workers=2, multiprocessing_context="spawn", persistent_workers=True),
                 marks=pytest.mark.slow),
    pytest.param(dict(num_workers=2, multiprocessing_context="forkserver",
                      persistent_workers=True), marks=pytest.mark.slow),
    pytest.param(dict(num_workers=1, multiprocessing_context="forkserver"),
                 marks=pytest.mark.slow),
]


def config_id(c):
    return "-".join(f"{k}={v}" for k, v in c.items())


@pytest.mark.parametrize("options", CONFIGS, ids=config_id)
def test_epochs_and_boundary_states(service, options):
    """Three epochs, each the dataset exactly once; the state before the first batch is {},
    mid-epoch a position, after the last batch and after the loop an end of epoch."""
    ld = loader(dataset(service), **options)
    assert ld.state_dict() == {}
    for epoch in range(3):
        got = []
        it = iter(ld)
        assert ld.state_dict() == {}, f"epoch {epoch}: before the first batch"
        for k, batch in enumerate(it):
            got += batch.tolist()
            state = ld.state_dict()
            if k == BATCHES // 2:
                assert set(state) == {"position"}, f"epoch {epoch}: mid-epoch"
            if k == BATCHES - 1:
                assert state.get("end_of_epoch") is True, f"epoch {epoch}: after the last batch"
        assert_epoch(got)
        assert ld.state_dict().get("end_of_epoch") is True


@pytest.mark.parametrize("options", MORE_CONFIGS, ids=config_id)
@pytest.mark.parametrize("service", IN_PROCESS, indirect=True)
def test_epochs_and_boundary_states_more_options(service, options):
    """test_epochs_and_boundary_states over MORE_CONFIGS."""
    test_epochs_and_boundary_states(service, options)


# (num_workers of the loader that saves, num_workers of the one that restores, options of
# both): fewer workers, more, the same, persistent ones.
RESTORES = [
    (2, 0, {}),
    (4, 1, {}),
    (0, 2, {}),
    (1, 4, {}),
    (2, 2, dict(persistent_workers=True)),
    (4, 0, dict(persistent_workers=True)),
    (0, 1, dict(persistent_workers=True)),
]
BOUNDARIES = ["before_first", "mid", "after_last", "after_loop"]
# Against both kinds of sluice worker: every boundary once, each with a restore of its own
# (more workers, fewer, the same persistent ones, persistent ones into none); every other
# combination of RESTORES and BOUNDARIES against workers in this process only.
BOTH_KINDS_RESTORES = [(0, 2, "before_first"), (4, 1, "mid"), (2, 2, "after_last"),
                       (4, 0, "after_loop")]


def restore_params(both_kinds):
    return [pytest.param(saves, restores, options, boundary,
                         id=f"{saves}to{restores}{'-persistent' if options else ''}-{boundary}")
            for saves, restores, options in RESTORES for boundary in BOUNDARIES
            if ((saves, restores, boundary) in BOTH_KINDS_RESTORES) == both_kinds]


@pytest.mark.parametrize("saves,restores,options,boundary", restore_params(True))
def test_restore_at_every_boundary(service, saves, restores, options, boundary):
    """A state taken at a boundary, restored into a new dataset and loader with another
    num_workers: mid-epoch the rest of the epoch exactly, at either end of the epoch the next
    epoch whole, and the iteration after that whole again."""
    first = loader(dataset(service), num_workers=saves, **options)
    before = []
    if boundary == "before_first":
        iter(first)
        state = first.state_dict()
    else:
        for k, batch in enumerate(first):
            before += batch.tolist()
            if boundary == "mid" and k == BATCHES // 3:
                break
            if boundary == "after_last" and k == BATCHES - 1:
                break
        state = first.state_dict()
    del first
    second = loader(dataset(service), num_workers=restores, **options)
    second.load_state_dict(state)
    assert second.state_dict() == ({"position": state["position"]} if boundary == "mid" else {})
    after = elements(second)
    if boundary == "mid":
        assert len(before) == (BATCHES // 3 + 1) * BATCH
        assert_epoch(before + after)
    else:
        assert_epoch(after)
    assert_epoch(elements(second))


@pytest.mark.parametrize("saves,restores,options,boundary", restore_params(False))
@pytest.mark.parametrize("service", IN_PROCESS, indirect=True)
def test_restore_at_every_boundary_more_restores(service, saves, restores, options, boundary):
    """test_restore_at_every_boundary over the rest of RESTORES and BOUNDARIES."""
    test_restore_at_every_boundary(service, saves, restores, options, boundary)


# Against both kinds of sluice worker with persistent workers; with none and with workers
# started every epoch, against workers in this process only.
@pytest.mark.parametrize("options", [dict(num_workers=2, persistent_workers=True)],
                         ids=config_id)
def test_two_loaders_over_one_dataset_at_once(service, options):
    """Two loaders over the same dataset object, with generators seeded alike, read in turn,
    batch by batch: each reads every epoch whole (neither joins the other's job)."""
    ds = dataset(service)
    a, b = [loader(ds, generator=torch.Generator().manual_seed(7), **options) for _ in "ab"]
    for _ in range(2):
        got_a, got_b = [], []
        ia, ib = iter(a), iter(b)
        for x, y in zip(ia, ib):
            got_a += x.tolist()
            got_b += y.tolist()
        got_a += elements(ia)
        got_b += elements(ib)
        assert_epoch(got_a)
        assert_epoch(got_b)


@pytest.mark.parametrize("options", [dict(num_workers=0), dict(num_workers=2)], ids=config_id)
@pytest.mark.parametrize("service", IN_PROCESS, indirect=True)
def test_two_loaders_over_one_dataset_at_once_more_options(service, options):
    """test_two_loaders_over_one_dataset_at_once without workers and with workers started every
    epoch."""
    test_two_loaders_over_one_dataset_at_once(service, options)


def test_restore_belongs_to_its_loader(service):
    """load_state_dict() on one of two loaders over one dataset: the other, iterated first,
    reads a whole epoch, and the restored one the rest of its epoch."""
    first = loader(dataset(service), num_workers=2)
    before = []
    for k, batch in enumerate(first):
        before += batch.tolist()
        if k == 30:
            break
    state = first.state_dict()
    del first
    ds = dataset(service)
    restored, other = loader(ds, num_workers=2), loader(ds, num_workers=2)
    restored.load_state_dict(state)
    assert_epoch(elements(other))
    assert_epoch(before + elements(restored))


def test_parallel_epochs_split_between_loader_workers(service):
    """parallel_epochs with two sluice workers: each epoch is two copies of the dataset, split
    between the loader's workers, persistent ones too; there is no state to take."""
    deadline = time.monotonic() + 30
    while len(sluice.status(service)["workers"]) < 2:  # sluice-worker processes register late
        assert time.monotonic() < deadline, "the two workers did not register"
        time.sleep(0.05)
    ds = dataset(service, processing_mode="parallel_epochs")
    ld = loader(ds, num_workers=2, persistent_workers=True)
    for _ in range(2):
        seen = collections.Counter(elements(ld))
        assert sorted(seen) == list(range(N)) and set(seen.values()) == {2}
    with pytest.raises(ValueError, match="checkpoints distributed_epoch reads; this dataset "
                       "reads parallel_epochs"):
        ld.state_dict()


def test_restore_into_running_persistent_workers(service):
    """load_state_dict() on a loader whose persistent workers already run: they are started
    again to take the state, and the epoch continues exactly."""
    first = loader(dataset(service), num_workers=2)
    before = []
    for k, batch in enumerate(first):
        before += batch.tolist()
        if k == 20:
            break
    state = first.state_dict()
    del first
    ld = loader(dataset(service), num_workers=2, persistent_workers=True)
    assert_epoch(elements(ld))
    ld.load_state_dict(state)
    assert_epoch(before + elements(ld))
    assert_epoch(elements(ld))


# Against both kinds of sluice worker: workers started every epoch; with none and with
# persistent ones, against workers in this process only.
@pytest.mark.parametrize("options", [dict(num_workers=2)], ids=config_id)
def test_iteration_after_a_break_is_a_whole_epoch(service, options):
    """A loop left in the middle of an epoch; the next iteration (a new epoch) is the dataset
    whole, and its state before the first batch is {}, not the abandoned epoch's."""
    ld = loader(dataset(service), **options)
    for k, _ in enumerate(ld):
        if k == 10:
            break
    it = iter(ld)
    assert ld.state_dict() == {}
    assert_epoch(elements(it))


@pytest.mark.parametrize("options", [dict(num_workers=0),
                                     dict(num_workers=2, persistent_workers=True)],
                         ids=config_id)
@pytest.mark.parametrize("service", IN_PROCESS, indirect=True)
def test_iteration_after_a_break_is_a_whole_epoch_more_options(service, options):
    """test_iteration_after_a_break_is_a_whole_epoch without workers and with persistent ones."""
    test_iteration_after_a_break_is_a_whole_epoch(service, options)


def test_job_name_is_a_prefix(service):
    """A job_name names the loader's jobs; every epoch still reads a job of its own (before,
    with num_workers 0 or 1 every epoch after the first joined the first's finished job)."""
    for workers in (0, 1, 2):
        ld = loader(dataset(service, job_name="train"), num_workers=workers)
        for _ in range(2):
            assert_epoch(elements(ld))
    plain = torch.utils.data.DataLoader(dataset(service, job_name="train"), batch_size=None)
    for _ in range(2):
        assert_epoch(elements(plain))


def test_plain_torch_loader(service):
    """A torch.utils.data.DataLoader: with num_workers 0 and 1 every epoch whole; with more it
    cannot tell its workers the epoch, and says what to use instead."""
    for options in (dict(num_workers=0), dict(num_workers=1),
                    dict(num_workers=1, persistent_workers=True)):
        ld = torch.utils.data.DataLoader(dataset(service), batch_size=None, **options)
        for _ in range(2):
            assert_epoch(elements(ld))
    ld = torch.utils.data.DataLoader(dataset(service), batch_size=None, num_workers=2)
    assert_refused(ld, "sluice.torch.IterableDataset in a torch.utils.data.DataLoader with "
                   "num_workers=2: its worker processes cannot tell which epoch they read, so "
                   "they could share an earlier epoch's job and deliver nothing; use "
                   "sluice.torch.DataLoader(dataset, num_workers=2, ...), a torch DataLoader "
                   "that gives every epoch a job of its own")
    # A dataset-level restore cannot reach a plain loader's workers only once.
    first = loader(dataset(service))
    next(iter(first))
    ds = dataset(service)
    ds.load_state_dict(first.state_dict())
    assert_refused(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1),
                   "sluice.torch.IterableDataset.load_state_dict() before a torch DataLoader "
                   "with worker processes: they cannot tell which epoch continues from it; use "
                   "sluice.torch.DataLoader and its load_state_dict()")


def assert_refused(ld, message):
    """The first element of ld raises, from its loader workers, a RuntimeError with message
    (exactly). The exception's traceback holds torch's iterator in a reference cycle: left to the
    garbage collector, the iterator stops its workers after the queues to them were closed, and
    waits 5 s for each before killing it (torch 1.13, with any IterableDataset that raises).
    Without the traceback the iterator goes at once, and its workers with it."""
    it = iter(ld)
    with pytest.raises(RuntimeError, match=re.escape(message)) as refused:
        next(it)
    refused.value.__traceback__ = None
    del refused, it


def test_dataset_state_in_process_at_the_end(service):
    """The dataset's own state (num_workers=0, no loader) after its read ended restores into
    the next epoch, whole; {} and a state of another loader's mid-epoch continue exactly."""
    ds = dataset(service)
    assert_epoch(elements(ds))
    end = ds.state_dict()
    assert end.get("end_of_epoch") is True
    again = dataset(service)
    again.load_state_dict(end)
    assert_epoch(elements(again))
    with pytest.raises(ValueError, match="'end_of_epoch' must be a bool"):
        again.load_state_dict({"position": b"x", "end_of_epoch": 1})
    with pytest.raises(ValueError, match="'position' bytes"):
        loader(again).load_state_dict({"position": "text"})


# ---- The three cases of the issue, by name -------------------------------------------------

def test_persistent_workers_every_epoch_whole(service):
    """persistent_workers=True with num_workers=2 over range(2000): every epoch 2000 elements
    (it was [2000, 0, 0]: the workers kept their seed, and the job name came from it). In
    batches of 10, which the loader's workers hand over as they read them: torch's queue between
    processes costs about a millisecond an item on a 2-core machine, whatever its size."""
    ds = dataset(service, pipeline="range(2000) | batch(10)", processing_mode="distributed_epoch")
    ld = sluice.torch.DataLoader(ds, num_workers=2, persistent_workers=True, batch_size=None)
    for _ in range(3):
        assert_epoch(elements(ld), 2000)


# Against both kinds of sluice worker: 4 restored with 0; 2 with 0 or 1 and 4 with 1 against
# workers in this process only.
@pytest.mark.parametrize("restores,saves", [(0, 4)], ids=["0-4"])
def test_state_of_more_workers_restored_with_fewer(service, saves, restores):
    """A state taken after 60 of 200 batches with num_workers 2 or 4, restored with 0 or 1: the
    other 140 batches (it was 0: the restored read joined the checkpoint's consumed job)."""
    pipeline = "range(2000) | batch(10)"
    first = loader(dataset(service, pipeline), num_workers=saves)
    before = []
    for k, batch in enumerate(first):
        before += batch.tolist()
        if k == 59:
            break
    state = first.state_dict()
    del first
    second = loader(dataset(service, pipeline), num_workers=restores)
    second.load_state_dict(state)
    rest = list(second)
    assert len(rest) == 140
    assert_epoch(before + elements(rest), 2000)


@pytest.mark.parametrize("restores,saves", [(0, 2), (1, 2), (1, 4)], ids=["0-2", "1-2", "1-4"])
@pytest.mark.parametrize("service", IN_PROCESS, indirect=True)
def test_state_of_more_workers_restored_with_fewer_more_workers(service, saves, restores):
    """test_state_of_more_workers_restored_with_fewer from 2 workers, and from 4 into 1."""
    test_state_of_more_workers_restored_with_fewer(service, saves, restores)


def test_end_of_epoch_state_starts_the_next_epoch(service):
    """A trainer saves after the last batch of an epoch, restores, and runs its next epoch: the
    whole epoch, not zero batches."""
    ld = loader(dataset(service), num_workers=2)
    got = []
    for batch in ld:
        got += batch.tolist()
        state = ld.state_dict()  # the last one is taken after the last batch
    assert_epoch(got)
    assert state["end_of_epoch"] is True
    restored = loader(dataset(service), num_workers=2)
    restored.load_state_dict(state)
    assert_epoch(elements(restored))


@pytest.mark.slow
@pytest.mark.parametrize("service", IN_PROCESS, indirect=True)  # spawned: the module docstring
def test_spawned_workers_while_the_dataset_reads_here(service):
    """A loader spawning its workers while the same dataset is read in this process: the copy
    pickled for them leaves this process's read behind (it was "cannot pickle
    '_sluice.Iterator' object")."""
    ds = dataset(service)
    here = iter(ds)
    first = next(here).tolist()
    assert_epoch(elements(loader(ds, num_workers=1, multiprocessing_context="spawn")))
    assert_epoch(first + elements(here))


# Against both kinds of sluice worker with 2 loader workers; with 4 against workers in this
# process only.
@pytest.mark.parametrize("num_workers", [2])
def test_deterministic_shared_between_loader_workers(service, num_workers):
    # The loader's workers share one deterministic distributed_epoch job: each split goes whole
    # to one of them, and together they read every element once.
    n = 6000
    ds = dataset(service, pipeline=f"range({n}) | map(wait_us, 20) | batch({BATCH})",
                 processing_mode="distributed_epoch", deterministic=True)
    for _ in range(2):
        assert_epoch(elements(loader(ds, num_workers=num_workers, batch_size=None)), n)


@pytest.mark.parametrize("num_workers", [4])
@pytest.mark.parametrize("service", IN_PROCESS, indirect=True)
def test_deterministic_shared_between_loader_workers_more_workers(service, num_workers):
    """test_deterministic_shared_between_loader_workers with 4 loader workers."""
    test_deterministic_shared_between_loader_workers(service, num_workers)


# Against both kinds of sluice worker with persistent workers; with none and with 3 started
# every epoch against workers in this process only.
@pytest.mark.parametrize("options", [dict(num_workers=2, persistent_workers=True,
                                          prefetch_factor=1)],
                         ids=["workers=2-persistent"])
def test_global_order(service, options):
    # global_order=True: the loop gets the canonical order (range(N) here) with any num_workers,
    # every epoch; a state taken mid-epoch, restored with another num_workers, continues it.
    ds = dataset(service, processing_mode="distributed_epoch", deterministic=True)
    ld = loader(ds, global_order=True, **options)
    for _ in range(2):
        assert elements(ld) == list(range(N))
    it = iter(ld)
    head = elements(next(it) for _ in range(BATCHES // 3))
    state = ld.state_dict()
    assert head == list(range(len(head)))
    other = loader(dataset(service, processing_mode="distributed_epoch", deterministic=True),
                   global_order=True, num_workers=2 if options["num_workers"] != 2 else 3)
    other.load_state_dict(state)
    assert elements(other) == list(range(len(head), N))


@pytest.mark.parametrize("options", [dict(num_workers=0), dict(num_workers=3)],
                         ids=["workers=0", "workers=3"])
@pytest.mark.parametrize("service", IN_PROCESS, indirect=True)
def test_global_order_more_options(service, options):
    """test_global_order without loader workers and with 3 started every epoch."""
    test_global_order(service, options)


def test_global_order_refused_without_a_deterministic_dataset(service):
    with pytest.raises(ValueError, match="global_order=True needs a deterministic "
                                         "distributed_epoch dataset"):
        sluice.torch.DataLoader(dataset(service, processing_mode="distributed_epoch"),
                                global_order=True)
