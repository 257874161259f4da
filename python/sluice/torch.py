"""sluice for PyTorch: an IterableDataset over a sluice service.

    ds = sluice.torch.IterableDataset(service, pipeline="range(1000) | batch(32)",
                                      processing_mode="distributed_epoch")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    for batch in loader:
        ...

Elements arrive as torch.Tensors made from the received numpy arrays without a copy (bytes stay
bytes, tuples stay tuples). Batch in the pipeline (batch_size=None in the DataLoader).

With num_workers > 1 the loader's worker processes become the consumers of one shared job,
named after this dataset and the loader's epoch, so in distributed_epoch every element arrives
exactly once across them (and in parallel_epochs each worker's copy is split between them).
With num_workers 0 or 1 each epoch is a job of its own unless job_name is given.

Checkpoints (distributed_epoch): sluice.torch.DataLoader is a torch DataLoader whose
state_dict() is the position after the last element the training loop received, whatever
num_workers is and however far the workers ran ahead; load_state_dict() on a new loader (in a
new process) continues from it, so the elements received before the checkpoint and those after
are the epoch exactly once:

    loader = sluice.torch.DataLoader(ds, num_workers=2)
    ...
    torch.save({"data": loader.state_dict(), ...}, "ckpt.pt")
    ...
    loader.load_state_dict(torch.load("ckpt.pt")["data"])

The dataset has the same two methods (the shape of PyTorch's Stateful protocol); used without
the loader class they describe a read in this process (num_workers=0).
"""

import os
import uuid

import numpy as np
import torch
import torch.utils.data

import sluice


def _to_torch(x):
    if isinstance(x, tuple):
        return tuple(_to_torch(c) for c in x)
    if isinstance(x, np.ndarray) and x.dtype != object:
        return torch.from_numpy(x)
    return x


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
    instead of cutting the copy short).
    """

    def __init__(self, service, dataset_id=None, pipeline=None,
                 processing_mode="distributed_epoch", job_name=None, consumer_index=None,
                 num_consumers=None, max_outstanding_requests=None, local=None, plugins=None,
                 timeout=None, element_timeout=None, auth_token_file=None, tls_cert=None,
                 tls_key=None, tls_ca=None, deterministic=False, reorder_bytes=None,
                 tls_worker_name=None, cross_trainer_cache=None, target_workers=None,
                 whole_copies=False):
        super().__init__()
        if (dataset_id is None) == (pipeline is None):
            raise ValueError("exactly one of dataset_id and pipeline is required")
        self.service = sluice._target(service)
        self.dataset_id = dataset_id
        self.pipeline = pipeline
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
        self.security = dict(auth_token_file=auth_token_file, tls_cert=tls_cert, tls_key=tls_key,
                             tls_ca=tls_ca)
        self.tls_worker_name = tls_worker_name
        # The base of the job name a loader's workers share; unique to this dataset object.
        self._shared_base = f"torch-{uuid.uuid4().hex}"
        self._registered = None  # (pid, dataset id) of the pipeline registered here
        self._restore = None  # the position the next iteration continues from
        self._with_positions = False  # yield (element, worker, position): sluice.torch.DataLoader
        self._live = None  # the read of this process, for state_dict()
        self._last = None  # its last position once it is closed

    def state_dict(self):
        """The position after the last element this process's read yielded (iterating in this
        process, num_workers=0), as {"position": bytes}; picklable. {} before any read."""
        if self._live is not None:
            return self._live.state_dict()
        pos = self._last if self._last is not None else self._restore
        return {"position": pos} if pos is not None else {}

    def load_state_dict(self, state):
        """The next iteration continues from state (a state_dict() of this dataset or of
        sluice.torch.DataLoader, possibly of another process). {} starts from the beginning."""
        if state == {}:
            self._restore = None
            return
        pos = state.get("position") if isinstance(state, dict) else None
        if not isinstance(pos, bytes):
            raise ValueError("load_state_dict() takes a state_dict() of a sluice reader: a dict "
                             "with 'position' bytes")
        self._restore = pos

    def _dataset_id(self):
        if self.dataset_id is not None:
            return self.dataset_id
        if self._registered is None or self._registered[0] != os.getpid():
            ds_id = sluice.register_dataset(self.service, self.pipeline, plugins=self.plugins,
                                            timeout=self.timeout, **self.security)
            self._registered = (os.getpid(), ds_id)
        return self._registered[1]

    def _job_name(self, info):
        if info is None or info.num_workers <= 1 or self.cross_trainer_cache is not None:
            return self.job_name
        if self.num_consumers is not None:
            raise ValueError("coordinated reads (num_consumers) cannot be split over "
                             "DataLoader workers; use num_workers=0")
        # Every worker of one epoch has seed = base_seed + id with the same base_seed, drawn anew
        # by the loader for each epoch: the same name for the workers, a new one per epoch.
        epoch_key = info.seed - info.id
        base = self.job_name or self._shared_base
        return f"{base}-{epoch_key}"

    def __iter__(self):
        # Taken now: a loader with num_workers=0 runs the generator only at its first element.
        restore, self._restore = self._restore, None
        return self._read(restore)

    def _read(self, restore):
        info = torch.utils.data.get_worker_info()
        ds = sluice.from_dataset_id(
            self.processing_mode, self.service, self._dataset_id(),
            job_name=self._job_name(info), consumer_index=self.consumer_index,
            num_consumers=self.num_consumers,
            max_outstanding_requests=self.max_outstanding_requests, local=self.local,
            plugins=self.plugins, timeout=self.timeout, element_timeout=self.element_timeout,
            deterministic=self.deterministic, reorder_bytes=self.reorder_bytes,
            tls_worker_name=self.tls_worker_name, cross_trainer_cache=self.cross_trainer_cache,
            target_workers=self.target_workers, whole_copies=self.whole_copies, **self.security)
        if restore is not None:
            ds.load_state_dict({"position": restore})
        it = iter(ds)
        self._live, self._last = it, None
        worker = info.id if info is not None else 0
        try:
            if self._with_positions:
                for x in it:
                    yield _to_torch(x), worker, it.save()
            else:
                for x in it:
                    yield _to_torch(x)
        finally:
            if self.processing_mode in ("distributed_epoch", "dynamic"):
                try:
                    self._last = it.save()
                except sluice.Error:
                    self._last = None
            self._live = None
            it.close()


class DataLoader(torch.utils.data.DataLoader):
    """A torch.utils.data.DataLoader over a sluice.torch.IterableDataset (distributed_epoch)
    whose state_dict() is the position after the last element the caller received from it,
    with any num_workers: each loader worker sends its read's position along with every element,
    and the positions of the elements received are merged (sluice.merge_positions) into one.
    load_state_dict() makes the next iteration continue from such a state, in a new job shared
    by the loader's workers. Elements come one by one as the pipeline makes them (batch in the
    pipeline): batch_size must be None, the default here."""

    def __init__(self, dataset, *args, **kwargs):
        if not isinstance(dataset, IterableDataset):
            raise TypeError("sluice.torch.DataLoader reads a sluice.torch.IterableDataset")
        if dataset.processing_mode not in ("distributed_epoch", "dynamic"):
            raise ValueError("sluice.torch.DataLoader checkpoints distributed_epoch reads; "
                             f"this dataset reads {dataset.processing_mode}")
        if kwargs.setdefault("batch_size", None) is not None:
            raise ValueError("sluice.torch.DataLoader takes batch_size=None: batch in the "
                             "pipeline")
        super().__init__(dataset, *args, **kwargs)
        self._positions = {}
        self._base = None

    def __iter__(self):
        ds = self.dataset
        ds._with_positions = True
        self._positions = {}
        self._base = ds._restore
        # The workers start here, each with a copy of the dataset and its position.
        it = super().__iter__()
        ds._restore = None
        for x, worker, position in it:
            self._positions[worker] = position
            yield x

    def state_dict(self):
        """{"position": bytes}: what the caller received, over every loader worker ({} before
        the first element of a fresh loader). Picklable."""
        positions = list(self._positions.values())
        if not positions:
            return {"position": self._base} if self._base is not None else {}
        return sluice.merge_positions([{"position": p} for p in positions])

    def load_state_dict(self, state):
        """The next iteration continues from state (a state_dict() of a sluice loader or
        dataset)."""
        self.dataset.load_state_dict(state)
        self._base = self.dataset._restore
        self._positions = {}
