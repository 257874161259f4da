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
    tls_cert, tls_key and tls_ca (the cluster's token and TLS files), and deterministic and
    reorder_bytes (distributed_epoch in the canonical order: with num_workers > 1 the loader's
    workers share the job, each getting its share in that order). consumer_index and
    num_consumers (coordinated reads) cannot be combined with num_workers > 1.
    """

    def __init__(self, service, dataset_id=None, pipeline=None,
                 processing_mode="distributed_epoch", job_name=None, consumer_index=None,
                 num_consumers=None, max_outstanding_requests=None, local=None, plugins=None,
                 timeout=None, element_timeout=None, auth_token_file=None, tls_cert=None,
                 tls_key=None, tls_ca=None, deterministic=False, reorder_bytes=None):
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
        self.security = dict(auth_token_file=auth_token_file, tls_cert=tls_cert, tls_key=tls_key,
                             tls_ca=tls_ca)
        # The base of the job name a loader's workers share; unique to this dataset object.
        self._shared_base = f"torch-{uuid.uuid4().hex}"
        self._registered = None  # (pid, dataset id) of the pipeline registered here

    def _dataset_id(self):
        if self.dataset_id is not None:
            return self.dataset_id
        if self._registered is None or self._registered[0] != os.getpid():
            ds_id = sluice.register_dataset(self.service, self.pipeline, plugins=self.plugins,
                                            timeout=self.timeout, **self.security)
            self._registered = (os.getpid(), ds_id)
        return self._registered[1]

    def _job_name(self, info):
        if info is None or info.num_workers <= 1:
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
        info = torch.utils.data.get_worker_info()
        ds = sluice.from_dataset_id(
            self.processing_mode, self.service, self._dataset_id(),
            job_name=self._job_name(info), consumer_index=self.consumer_index,
            num_consumers=self.num_consumers,
            max_outstanding_requests=self.max_outstanding_requests, local=self.local,
            plugins=self.plugins, timeout=self.timeout, element_timeout=self.element_timeout,
            deterministic=self.deterministic, reorder_bytes=self.reorder_bytes, **self.security)
        it = iter(ds)
        try:
            for x in it:
                yield _to_torch(x)
        finally:
            it.close()
