"""Type stubs of sluice.torch, sluice for PyTorch (the implementation is torch.py)."""

from typing import Any, Dict, Iterator, Mapping, Optional, Sequence

import torch.utils.data

from . import CrossTrainerCache, _Element, _PipelineLike, _Plugins, _Service

class IterableDataset(torch.utils.data.IterableDataset[Any]):
    """Reads a sluice dataset (dataset_id) or pipeline (registered on first use) from service;
    elements arrive as torch.Tensors (bytes stay bytes, tuples stay tuples)."""

    service: str
    dataset_id: Optional[str]
    pipeline: Optional[str]
    processing_mode: str
    job_name: Optional[str]
    def __init__(self, service: _Service, dataset_id: Optional[str] = None,
                 pipeline: Optional[_PipelineLike] = None,
                 processing_mode: str = "distributed_epoch", job_name: Optional[str] = None,
                 consumer_index: Optional[int] = None, num_consumers: Optional[int] = None,
                 max_outstanding_requests: Optional[int] = None, local: Optional[str] = None,
                 plugins: _Plugins = None, timeout: Optional[float] = None,
                 element_timeout: Optional[float] = None,
                 auth_token_file: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, tls_ca: Optional[str] = None,
                 deterministic: bool = False, reorder_bytes: Optional[int] = None,
                 tls_worker_name: Optional[str] = None,
                 cross_trainer_cache: Optional[CrossTrainerCache] = None,
                 target_workers: Optional[str] = None, whole_copies: bool = False,
                 worker_selector: Optional[str] = None, weight: Optional[float] = None,
                 min_workers: Optional[int] = None,
                 max_workers: Optional[int] = None) -> None: ...
    def state_dict(self) -> Dict[str, Any]:
        """The position after the last element this process's read yielded."""
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The next iteration in this process continues from state."""
    def __iter__(self) -> Iterator[_Element]: ...

class DataLoader(torch.utils.data.DataLoader[Any]):
    """A torch.utils.data.DataLoader over a sluice.torch.IterableDataset that gives every
    iteration (every epoch) a job of its own, shared by its worker processes."""

    def __init__(self, dataset: IterableDataset, *args: Any, share_ranks: bool = True,
                 global_order: bool = False, shm_handover: bool = True,
                 **kwargs: Any) -> None: ...
    # The elements (a generator, not torch's _BaseDataLoaderIter).
    def __iter__(self) -> Iterator[Any]: ...  # type: ignore[override]
    def state_dict(self) -> Dict[str, Any]:
        """{"position": bytes}: what the caller received, over every loader worker."""
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The next iteration continues from state (a state_dict() of a sluice loader or
        dataset)."""
