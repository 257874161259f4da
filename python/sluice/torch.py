"""sluice for PyTorch: an IterableDataset over a sluice service, and the DataLoader to read it.

    ds = sluice.torch.IterableDataset(service, pipeline="range(1000) | batch(32)",
                                      processing_mode="distributed_epoch")
    loader = sluice.torch.DataLoader(ds, num_workers=2, persistent_workers=True)
    for epoch in range(3):
        for batch in loader:
            ...

Elements arrive as torch.Tensors made from the received numpy arrays without a copy (bytes stay
bytes, tuples stay tuples). Batch in the pipeline (batch_size=None in the DataLoader). With
num_workers > 0 the loader's worker processes hand tensors that lie in the shared region of a
sluice worker on this host to the training process by reference: it maps the region and its
tensors are views of it (shm_handover=False: PyTorch copies them as usual; sluice/_handover.py).

Every iteration of a loader (every epoch) reads a job of its own. With num_workers > 1 the
loader's worker processes are the consumers of one shared job, so in distributed_epoch every
element arrives exactly once across them (and in parallel_epochs each worker's copy is split
between them). The job's name comes from sluice.torch.DataLoader, new at every start of its
workers, and the epochs a persistent worker has begun: a plain torch.utils.data.DataLoader
cannot tell its workers which epoch they read, and with num_workers > 1 it raises an error that
says so. With num_workers 0 or 1 a plain torch DataLoader works too.

Checkpoints (distributed_epoch): sluice.torch.DataLoader's state_dict() is the position after
the last element the training loop received, whatever num_workers is and however far the
workers ran ahead; load_state_dict() on a new loader (in a new process) continues from it, in a
new job, so the elements received before the checkpoint and those after are the epoch exactly
once. A state taken after the last element of an epoch restores into the next epoch, whole:

    loader = sluice.torch.DataLoader(ds, num_workers=2)
    ...
    torch.save({"data": loader.state_dict(), ...}, "ckpt.pt")
    ...
    loader.load_state_dict(torch.load("ckpt.pt")["data"])

The dataset has the same two methods (the shape of PyTorch's Stateful protocol); used without
the loader class they describe a read in this process (num_workers=0).

In a torch.distributed job (the default process group initialized, world size > 1) the ranks'
loaders read one job together: every epoch's job name is agreed from rank 0, so in
distributed_epoch each element reaches one rank, once. state_dict() is then a collective that
every rank calls at the same step (as torch.distributed.checkpoint does): it gathers the ranks'
positions and returns their merge on every rank, the job's position. Restored with
load_state_dict() in a job of any world size (more ranks or fewer, any num_workers), the epoch
continues exactly once across the new ranks:

    dist.init_process_group("gloo")        # or nccl
    loader = sluice.torch.DataLoader(ds, num_workers=2)
    ...
    state = loader.state_dict()            # on every rank, at the same step
    if dist.get_rank() == 0:
        torch.save({"data": state, ...}, "ckpt.pt")

share_ranks=False keeps each rank's loader to itself (every rank reads whole epochs of its own).

global_order=True (with deterministic=True): step j of the ranks, in rank order, is places j*M to
j*M + M - 1 of the canonical order (M ranks), with any num_workers, before and after a restore
into another world size. Each loader worker of each rank reads a shard of the whole epoch in a
job of its own (sluice.from_dataset_id's shard=), so the service produces the dataset once per
reader (docs/reading.md "Sharded deterministic reads").
"""

import os
import uuid

import torch
import torch.utils.data

import sluice
from sluice import _handover
from sluice._handover import _to_torch


class IterableDataset(torch.utils.data.IterableDataset):
    """Reads a sluice dataset (dataset_id) or pipeline (registered on first use) from service.

    processing_mode, job_name, max_outstanding_requests, local, plugins, timeout and
    element_timeout mean what they mean for sluice.from_dataset_id, and so do auth_token_file,
    tls_cert, tls_key, tls_ca and tls_worker_name (the cluster's token and TLS files), and
    deterministic and reorder_bytes (distributed_epoch in the canonical order: with
    num_workers > 1 the loader's workers share the job, each getting its share in that order). consumer_index and
    num_consumers (coordinated reads) cannot be combined with num_workers > 1.
    cross_trainer_cache (a sluice.CrossTrainerCache, with a job_name) shares the job's stream
    with other trainers; the loader's workers all read job_name with the one trainer id, so they
    split this trainer's stream between them. target_workers ("any", "local" or "auto") too,
    and whole_copies (parallel_epochs: a worker lost in the middle of its copy fails the read
    instead of cutting the copy short), and worker_selector, weight, min_workers and max_workers
    (the jobs' pool and share of the workers; docs/operations.md "Pools and selectors"). Without a cross-trainer cache or coordinated reads,
    job_name is the prefix of the names of the jobs the loader reads (one per epoch, never shared
    with another loader or trainer).
    """

    def __init__(self, service, dataset_id=None, pipeline=None,
                 processing_mode="distributed_epoch", job_name=None, consumer_index=None,
                 num_consumers=None, max_outstanding_requests=None, local=None, plugins=None,
                 timeout=None, element_timeout=None, auth_token_file=None, tls_cert=None,
                 tls_key=None, tls_ca=None, deterministic=False, reorder_bytes=None,
                 tls_worker_name=None, cross_trainer_cache=None, target_workers=None,
                 whole_copies=False, worker_selector=None, weight=None, min_workers=None,
                 max_workers=None):
        super().__init__()
        if (dataset_id is None) == (pipeline is None):
            raise ValueError("exactly one of dataset_id and pipeline is required")
        self.service = sluice._target(service)
        self.dataset_id = dataset_id
        self.pipeline = None if pipeline is None else sluice._pipeline(pipeline)
        self.processing_mode = processing_mode
        sluice._mode(processing_mode)
        self.job_name = job_name
        self.consumer_index = consumer_index
        self.num_consumers = num_consumers
        self.max_outstanding_requests = max_outstanding_requests
        self.local = local
        self.plugins = plugins
        self.timeout = timeout
        self.element_timeout = element_timeout
        self.deterministic = sluice._flag(deterministic, "deterministic")
        self.reorder_bytes = reorder_bytes
        self.cross_trainer_cache = sluice._cross_trainer_cache(cross_trainer_cache)
        if self.cross_trainer_cache is not None and job_name is None:
            raise ValueError("cross_trainer_cache requires a job_name: the trainers share one job")
        self.target_workers = sluice._target_workers(target_workers)
        self.whole_copies = sluice._flag(whole_copies, "whole_copies")
        # Checked here, in the trainer, rather than in each loader worker's first read.
        sluice._text(worker_selector, "worker_selector")
        sluice._weight(weight)
        lo, hi = sluice._count(min_workers, "min_workers"), sluice._count(max_workers, "max_workers")
        if lo and hi and lo > hi:
            raise ValueError(f"min_workers {lo} is above max_workers {hi}")
        self.pools = dict(worker_selector=worker_selector, weight=weight, min_workers=min_workers,
                          max_workers=max_workers)
        self.security = dict(auth_token_file=auth_token_file, tls_cert=tls_cert, tls_key=tls_key,
                             tls_ca=tls_ca)
        self.tls_worker_name = tls_worker_name
        self._registered = None  # (pid, dataset id) of the pipeline registered here
        self._restore = None  # the position the next iteration in this process continues from
        # What sluice.torch.DataLoader hands the readers it starts (_LoaderStart), set only while
        # it starts them: its worker processes keep their copy for as long as they live.
        self._start = None
        self._epochs = 0  # iterations begun by this copy under its _start
        self._live = None  # the read of this process, for state_dict()
        self._last = None  # its last position once it is closed
        self._ended = False  # that read ran to the end of its epoch

    def state_dict(self):
        """The position after the last element this process's read yielded (iterating in this
        process, num_workers=0), as {"position": bytes}; picklable. {} before any read. Once that
        read ran to its end the state also holds "end_of_epoch": True, and restoring it starts
        the next epoch from its beginning."""
        if self._live is not None:
            return self._live.state_dict()
        pos = self._last if self._last is not None else self._restore
        state = {"position": pos} if pos is not None else {}
        if self._ended and self._last is not None:
            state["end_of_epoch"] = True
        return state

    def load_state_dict(self, state):
        """The next iteration in this process continues from state (a state_dict() of this
        dataset or of sluice.torch.DataLoader, possibly of another process), in a job of its own.
        {} and a state taken at the end of an epoch start an epoch from its beginning. In a
        torch DataLoader's worker processes use sluice.torch.DataLoader.load_state_dict."""
        self._restore = _restore_of(state)
        self._last, self._ended = None, False

    def __getstate__(self):
        # A copy for a loader's worker process: the read of this process stays here.
        state = dict(self.__dict__)
        state["_live"] = None
        return state

    def _dataset_id(self):
        if self.dataset_id is not None:
            return self.dataset_id
        if self._registered is None or self._registered[0] != os.getpid():
            ds_id = sluice.register_dataset(self.service, self.pipeline, plugins=self.plugins,
                                            timeout=self.timeout, **self.security)
            self._registered = (os.getpid(), ds_id)
        return self._registered[1]

    def _job_name(self, info, restore):
        """The job this iteration reads: None for an anonymous job of its own."""
        num_workers = info.num_workers if info is not None else 0
        if self.cross_trainer_cache is not None:
            # Trainers share the job's endless stream by name; there is no epoch to end.
            return self.job_name
        if num_workers > 1 and self.num_consumers is not None:
            raise ValueError("coordinated reads (num_consumers) cannot be split over "
                             "DataLoader workers; use num_workers=0")
        if self.num_consumers is not None:
            return self.job_name  # a coordinated read: its consumers meet by name
        if self._start is not None and self._start.shard is not None:
            return None  # global order: every reader reads the whole epoch, in a job of its own
        base = self.job_name or "torch"
        if self._start is not None and self._start.shared:
            # The ranks of a torch.distributed job read one job per epoch, named from rank 0.
            return f"{base}-{self._start.nonce}-{self._epochs}"
        if num_workers > 1:
            if self._start is None:
                raise RuntimeError(
                    f"sluice.torch.IterableDataset in a torch.utils.data.DataLoader with "
                    f"num_workers={num_workers}: its worker processes cannot tell which epoch "
                    f"they read, so they could share an earlier epoch's job and deliver nothing; "
                    f"use sluice.torch.DataLoader(dataset, num_workers={num_workers}, ...), "
                    f"a torch DataLoader that gives every epoch a job of its own")
            # Every worker of one start has the same nonce and begins the same number of
            # iterations (one per epoch, persistent or not): the same name for all of them, a new
            # one per epoch. The nonce is new at every start, so no two starts share a job.
            return f"{base}-{self._start.nonce}-{self._epochs}"
        if restore is None and self.job_name is None:
            return None
        # A job of its own under a fresh name: never the checkpoint's job nor an earlier epoch's.
        return f"{base}-{uuid.uuid4().hex}"

    def __iter__(self):
        # Everything is decided now, not at the first element: a loader with num_workers=0
        # starts the generator only when it is first asked for an element.
        info = torch.utils.data.get_worker_info()
        start = self._start
        if start is not None:
            restore, positions = start.restore, start.positions
            # Persistent workers iterate their copy again for every epoch: only the first
            # iteration of a start continues from its state.
            self._start = start.without_restore()
        else:
            if info is not None and self._restore is not None:
                raise RuntimeError(
                    "sluice.torch.IterableDataset.load_state_dict() before a torch DataLoader "
                    "with worker processes: they cannot tell which epoch continues from it; use "
                    "sluice.torch.DataLoader and its load_state_dict()")
            restore, self._restore, positions = self._restore, None, False
        self._epochs += 1
        job_name = self._job_name(info, restore)
        return self._read(info, job_name, restore, positions, self._shard(info))

    def _shard(self, info):
        """The shard this iteration reads with global order, or None."""
        if self._start is None or self._start.shard is None:
            return None
        # Reader (rank r, loader worker w) of M ranks with W workers each takes places
        # i = w*M + r (mod M*W) of the canonical order: the loader takes its workers' elements in
        # turn, so rank r's j-th element is place j*M + r, and step j of the ranks, in rank
        # order, is places j*M to j*M + M - 1.
        rank, world = self._start.shard
        workers = info.num_workers if info is not None else 1
        worker = info.id if info is not None else 0
        return (worker * world + rank, world * workers)

    def _read(self, info, job_name, restore, positions, shard):
        ds = sluice.from_dataset_id(
            self.processing_mode, self.service, self._dataset_id(),
            job_name=job_name, consumer_index=self.consumer_index,
            num_consumers=self.num_consumers,
            max_outstanding_requests=self.max_outstanding_requests, local=self.local,
            plugins=self.plugins, timeout=self.timeout, element_timeout=self.element_timeout,
            deterministic=self.deterministic, reorder_bytes=self.reorder_bytes,
            tls_worker_name=self.tls_worker_name, cross_trainer_cache=self.cross_trainer_cache,
            target_workers=self.target_workers, whole_copies=self.whole_copies, shard=shard,
            **self.pools, **self.security)
        if restore is not None:
            ds.load_state_dict({"position": restore})
        it = iter(ds)
        self._live, self._last, self._ended = it, None, False
        worker = info.id if info is not None else 0
        convert = _to_torch
        start = self._start
        if info is not None and start is not None and start.handover is not None:
            # A loader worker: elements that lie in a shared region go to the training process
            # by reference (sluice/_handover.py).
            hand = _handover.sender()
            hand.begin()

            def convert(x):
                return hand.wrap(x, start.handover)
        try:
            if positions:
                for x in it:
                    yield convert(x), worker, it.save()
            else:
                for x in it:
                    yield convert(x)
            self._ended = True
        finally:
            if self.processing_mode in ("distributed_epoch", "dynamic"):
                try:
                    self._last = it.save()
                except sluice.Error:
                    self._last = None
            self._live = None
            it.close()


class _LoaderStart:
    """What sluice.torch.DataLoader gives the readers it starts for an iteration (its worker
    processes, or the dataset in this process): a nonce new at every start, the position the
    first epoch continues from, and whether to send positions along with the elements."""

    def __init__(self, restore, positions):
        self.nonce = uuid.uuid4().hex
        self.restore = restore
        self.positions = positions
        self.shared = False  # the ranks of a torch.distributed job read one job
        self.shard = None  # global order: (rank, world size); each reader a shard of its own
        # The loader's token when its worker processes hand elements over by reference
        # (shm_handover), else None.
        self.handover = None

    def without_restore(self):
        later = _LoaderStart(None, self.positions)
        later.nonce = self.nonce
        later.shared = self.shared
        later.shard = self.shard
        later.handover = self.handover
        return later


def _restore_of(state):
    """The position a state continues from: None for {} and for a state taken at the end of an
    epoch (the next iteration reads the next epoch from its beginning)."""
    if not isinstance(state, dict):
        raise ValueError("load_state_dict() takes a state_dict() of a sluice reader: a dict "
                         "with 'position' bytes")
    end = state.get("end_of_epoch", False)
    if not isinstance(end, bool):
        raise ValueError("load_state_dict(): 'end_of_epoch' must be a bool")
    if state == {} or end:
        return None
    pos = state.get("position")
    if not isinstance(pos, bytes):
        raise ValueError("load_state_dict() takes a state_dict() of a sluice reader: a dict "
                         "with 'position' bytes")
    return pos


class DataLoader(torch.utils.data.DataLoader):
    """A torch.utils.data.DataLoader over a sluice.torch.IterableDataset that gives every
    iteration (every epoch) a job of its own, shared by its worker processes, with any
    num_workers, persistent_workers, prefetch_factor, pin_memory or multiprocessing_context.
    It takes the same arguments; elements come one by one as the pipeline makes them (batch in
    the pipeline): batch_size must be None, the default here.

    In distributed_epoch its state_dict() is the position after the last element the caller
    received from it: each loader worker sends its read's position along with every element,
    and the positions of the elements received are merged (sluice.merge_positions) into one.
    load_state_dict() makes the next iteration continue from such a state, in a new job shared
    by the loader's workers (persistent workers are started again to take it). A state taken
    after the last element of an epoch (or after the loop over it ended) holds
    "end_of_epoch": True: restored, the next iteration reads the NEXT epoch, whole, as
    torchdata's StatefulDataLoader does.

    shm_handover (default True): worker processes hand tensors that lie in the shared region of
    a sluice worker on this host to the training process by reference, as views of that region
    mapped here, instead of PyTorch's copy into a segment of its own."""

    def __init__(self, dataset, *args, share_ranks=True, global_order=False, shm_handover=True,
                 **kwargs):
        if not isinstance(dataset, IterableDataset):
            raise TypeError("sluice.torch.DataLoader reads a sluice.torch.IterableDataset")
        self._global_order = sluice._flag(global_order, "global_order")
        if self._global_order:
            if not dataset.deterministic or dataset.processing_mode not in (
                    "distributed_epoch", "dynamic"):
                raise ValueError("global_order=True needs a deterministic distributed_epoch "
                                 "dataset (sluice.torch.IterableDataset(..., deterministic=True))")
            if dataset.cross_trainer_cache is not None or dataset.num_consumers is not None:
                raise ValueError("global_order=True cannot be combined with cross_trainer_cache "
                                 "or num_consumers")
        if kwargs.setdefault("batch_size", None) is not None:
            raise ValueError("sluice.torch.DataLoader takes batch_size=None: batch in the "
                             "pipeline")
        self._share_ranks = sluice._flag(share_ranks, "share_ranks")
        # Worker processes hand elements over by reference (sluice/_handover.py); the token
        # names this loader's shared memory in this process.
        self._handover = uuid.uuid4().hex if sluice._flag(shm_handover, "shm_handover") else None
        super().__init__(dataset, *args, **kwargs)
        self._checkpoints = dataset.processing_mode in ("distributed_epoch", "dynamic")
        self._restore = None  # the position the next iteration continues from
        self._base = None  # the position the current iteration started from
        self._positions = {}  # loader worker -> position after its last element received
        self._at_end = False  # the caller received the last element of the iteration
        self._iterations = 0  # iterations begun

    def __iter__(self):
        ds = self.dataset
        restore, self._restore = self._restore, None
        self._base, self._positions, self._at_end = restore, {}, False
        # The readers started now (worker processes, or the dataset here with num_workers=0)
        # take this start with them; persistent workers already running keep theirs.
        start = _LoaderStart(restore, self._checkpoints)
        start.handover = self._handover
        if self._global_order:
            shares = self._ranks_share()
            start.shard = (torch.distributed.get_rank() if shares else 0,
                           torch.distributed.get_world_size() if shares else 1)
        elif self._ranks_share():
            # Every rank's readers join one job per epoch: the name's nonce comes from rank 0.
            nonce = [start.nonce]
            torch.distributed.broadcast_object_list(nonce, src=0)
            start.nonce, start.shared = nonce[0], True
        ds._start = start
        if self._handover is not None:
            _handover.begin(self._handover)
        try:
            it = super().__iter__()
        finally:
            ds._start = None
        self._iterations += 1
        return self._deliver(it, self._iterations)

    def _deliver(self, it, iteration):
        # One element ahead: the last element of the epoch is known as such when the caller
        # gets it, so a state taken right after it is the end of the epoch.
        held = None
        try:
            for item in it:
                if held is not None:
                    yield self._hand(held[0])
                held = (item,)
        finally:
            # The iteration ended (or failed, or the caller left it): its loader workers'
            # elements still on the way are stale (sluice/_handover.py). Not when a later
            # iteration already began: its elements are not.
            if self._handover is not None and iteration == self._iterations:
                _handover.forget(self._handover)
        if held is not None:
            self._at_end = True
            yield self._hand(held[0])
        self._at_end = True

    def _hand(self, item):
        if not self._checkpoints:
            x = item
        else:
            x, worker, position = item
            self._positions[worker] = position
        if x is _handover.STALE:
            raise RuntimeError("sluice.torch.DataLoader: an element of an iteration that ended "
                               "arrived in the next")
        return x

    def _ranks_share(self):
        """Whether this loader reads one job with the other ranks of a torch.distributed job."""
        ds = self.dataset
        return (self._share_ranks and ds.cross_trainer_cache is None
                and ds.num_consumers is None and torch.distributed.is_available()
                and torch.distributed.is_initialized()
                and torch.distributed.get_world_size() > 1)

    def state_dict(self):
        """{"position": bytes}: what the caller received, over every loader worker ({} before
        the first element of a fresh iteration); with "end_of_epoch": True once the caller has
        the epoch's last element. Picklable. In a torch.distributed job whose ranks share the
        read, a collective: every rank calls it at the same step and gets the same state, the
        merge of all ranks' positions (end_of_epoch once every rank has its last element)."""
        if not self._checkpoints:
            raise ValueError("sluice.torch.DataLoader checkpoints distributed_epoch reads; "
                             f"this dataset reads {self.dataset.processing_mode}")
        positions = list(self._positions.values())
        if not positions and self._base is not None:
            positions = [self._base]
        at_end = self._at_end
        if self._ranks_share():
            gathered = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, (positions, at_end))
            positions = [p for rank_positions, _ in gathered for p in rank_positions]
            at_end = all(end for _, end in gathered)
        if len(positions) > 1:
            state = sluice.merge_positions([{"position": p} for p in positions])
        else:
            state = {"position": positions[0]} if positions else {}
        if at_end:
            state["end_of_epoch"] = True
        return state

    def load_state_dict(self, state):
        """The next iteration continues from state (a state_dict() of a sluice loader or
        dataset); a state taken at the end of an epoch starts the next epoch, whole."""
        if not self._checkpoints:
            raise ValueError("sluice.torch.DataLoader checkpoints distributed_epoch reads; "
                             f"this dataset reads {self.dataset.processing_mode}")
        restore = _restore_of(state)
        if self._iterator is not None:
            # Persistent workers hold the start they were given: new ones take this state.
            self._iterator._shutdown_workers()
            self._iterator = None
        self._restore = self._base = restore
        self._positions, self._at_end = {}, False
