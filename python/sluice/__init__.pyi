"""Type stubs of the sluice package's public API (the implementation is __init__.py)."""

import os
from types import TracebackType
from typing import (Any, Callable, Dict, Iterable, Iterator as _Iterator, List, Mapping,
                    Optional, Sequence, Tuple, Type, TypeVar, Union)

from typing_extensions import TypeAlias

from . import _sluice
from ._builder import SHARD_HINT as SHARD_HINT, Pipeline as Pipeline
from ._sluice import (
    AlreadyExistsError as AlreadyExistsError,
    AuthenticationError as AuthenticationError,
    CancelledError as CancelledError,
    Error as Error,
    InvalidArgumentError as InvalidArgumentError,
    NotFoundError as NotFoundError,
    TaskFailedError as TaskFailedError,
    TimeoutError as TimeoutError,
    UnavailableError as UnavailableError,
)

__version__: str
__all__ = [
    "AlreadyExistsError",
    "AuthenticationError",
    "CancelledError",
    "CrossTrainerCache",
    "Dataset",
    "DispatchServer",
    "Error",
    "InvalidArgumentError",
    "NotFoundError",
    "Pipeline",
    "SHARD_HINT",
    "TaskFailedError",
    "TimeoutError",
    "UnavailableError",
    "WorkerServer",
    "distribute",
    "from_dataset_id",
    "job_state",
    "register_dataset",
    "run",
    "save_snapshot",
    "set_weights",
    "snapshot_status",
    "status",
    "why",
]

_Element: TypeAlias = Any
"""One element: a numpy.ndarray (0-d for a scalar), bytes (a bytes scalar), or a tuple of them
(an element of several components)."""

_StateDict: TypeAlias = Dict[str, bytes]
"""An iterator's state_dict(): {"position": bytes} ({} before any read)."""

_Counts: TypeAlias = Dict[str, int]
"""An iterator's progress(): elements, splits_done, splits_total, copies_cut."""

_PipelineLike: TypeAlias = Union[str, Pipeline]
"""A pipeline: its text in sluice's pipeline language, or a sluice.Pipeline."""

_Service: TypeAlias = Union[str, "DispatchServer"]
"""A dispatcher: "sluice://HOST:PORT", "HOST:PORT" or a DispatchServer."""

_StrPath: TypeAlias = Union[str, "os.PathLike[str]"]
"""A path: a str or a path-like object."""

_Dirs: TypeAlias = Union[_StrPath, Sequence[_StrPath], None]
"""A directory or a sequence of them (None: none)."""

_Plugins: TypeAlias = Union[str, Sequence[str], None]
"""Plugin shared objects: a path or a sequence of paths (None: none)."""

_S = TypeVar("_S", bound="_Server")

class _Server:
    """What the two in-process servers share: start, join, stop, context manager."""

    def __init__(self, args: Tuple[Any, ...], start: bool) -> None: ...
    def start(self) -> None:
        """Starts the server (when created with start=False)."""
    def join(self, timeout: Optional[float] = None) -> None:
        """Blocks until the server stops (or timeout seconds pass)."""
    def stop(self) -> None:
        """Stops the server (a worker drains first). Safe to call twice."""
    def __enter__(self: _S) -> _S: ...
    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None: ...

class DispatchServer(_Server):
    """A dispatcher running in this process, on a thread of its own."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1", work_dir: Optional[str] = None,
                 fault_tolerant_mode: bool = False, worker_timeout_ms: Optional[int] = None,
                 client_timeout_ms: Optional[int] = None, job_gc_timeout_ms: Optional[int] = None,
                 autoscale_window_ms: Optional[int] = None, snapshot_every: Optional[int] = None,
                 journal_max_mb: Optional[int] = None,
                 worker_addresses: Optional[Sequence[str]] = None,
                 metrics_port: Optional[int] = None, log_level: Optional[str] = "warn",
                 data_roots: _Dirs = None, start: bool = True,
                 auth_token_file: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, tls_ca: Optional[str] = None,
                 insecure: bool = False, metrics_host: Optional[str] = None,
                 handshake_timeout_ms: Optional[int] = None,
                 max_connections: Optional[int] = None, max_handshakes: Optional[int] = None,
                 max_datasets: Optional[int] = None, max_pipeline_bytes: Optional[int] = None,
                 max_jobs_per_client: Optional[int] = None,
                 max_jobs_per_address: Optional[int] = None, raft_id: Optional[int] = None,
                 raft_address: Optional[str] = None, raft_cluster: Optional[str] = None,
                 raft_bind: Optional[str] = None, advertise: Optional[str] = None,
                 raft_election_timeout_ms: Optional[int] = None,
                 autoscale_pool_label: Optional[str] = None,
                 disconnect_grace_ms: Optional[int] = None) -> None: ...
    @property
    def target(self) -> str:
        """"sluice://HOST:PORT", what workers and readers are given."""
    @property
    def metrics_address(self) -> Optional[str]:
        """HOST:PORT of the metrics server, or None."""

class WorkerServer(_Server):
    """A worker running in this process, on a thread of its own."""

    def __init__(self, dispatcher_address: _Service, port: int = 0, host: str = "127.0.0.1",
                 advertise: Optional[str] = None, threads: Optional[int] = None,
                 plugins: _Plugins = None, heartbeat_ms: Optional[int] = None,
                 drain_timeout_ms: Optional[int] = None, metrics_port: Optional[int] = None,
                 log_level: Optional[str] = "warn", python_path: _Dirs = None,
                 data_roots: _Dirs = None, start: bool = True,
                 auth_token_file: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, tls_ca: Optional[str] = None,
                 insecure: bool = False, metrics_host: Optional[str] = None,
                 handshake_timeout_ms: Optional[int] = None,
                 max_connections: Optional[int] = None, max_handshakes: Optional[int] = None,
                 max_element_bytes: Optional[int] = None, max_tasks: Optional[int] = None,
                 max_buffer_bytes: Optional[int] = None,
                 labels: Union[Mapping[str, str], Sequence[str], None] = None,
                 task_slots: Optional[int] = None) -> None: ...
    @property
    def address(self) -> str:
        """HOST:PORT readers use to reach this worker."""
    @property
    def metrics_address(self) -> Optional[str]:
        """HOST:PORT of the metrics server (metrics_port), or None."""
    def drain(self) -> None:
        """Starts a lossless drain and returns at once; stop() waits for it."""

class CrossTrainerCache:
    """Shares one job's stream between trainers (cross_trainer_cache= of distribute and
    from_dataset_id)."""

    trainer_id: str
    cache_bytes: Optional[int]
    def __init__(self, trainer_id: str, cache_bytes: Optional[int] = None) -> None: ...

class Dataset:
    """The elements of a dataset as the service serves them; every iteration opens a reader."""

    processing_mode: str
    dataset_id: Optional[str]
    pipeline: Optional[str]
    job_name: Optional[str]
    num_consumers: int
    consumer_index: int
    max_outstanding_requests: int
    local: Optional[str]
    deterministic: bool
    reorder_bytes: int
    cross_trainer_cache: Optional[CrossTrainerCache]
    target_workers: str
    whole_copies: bool
    worker_selector: Optional[str]
    weight: float
    min_workers: int
    max_workers: int
    hedge: float
    shm: bool
    shm_bytes: int
    shard: Optional[Tuple[int, int]]
    def __init__(self, conn: Any, processing_mode: str, dataset_id: Optional[str] = None,
                 pipeline: Optional[str] = None, job_name: Optional[str] = None,
                 consumer_index: Optional[int] = None, num_consumers: Optional[int] = None,
                 max_outstanding_requests: Optional[int] = None, local: Optional[str] = None,
                 element_timeout: Optional[float] = None, split_size: Optional[int] = None,
                 deterministic: bool = False, reorder_bytes: Optional[int] = None,
                 cross_trainer_cache: Optional[CrossTrainerCache] = None,
                 target_workers: Optional[str] = None, whole_copies: bool = False,
                 worker_selector: Optional[str] = None, weight: Optional[float] = None,
                 min_workers: Optional[int] = None,
                 max_workers: Optional[int] = None,
                 hedge: Union[bool, float, None] = None, shm: bool = True,
                 shm_bytes: Optional[int] = None,
                 shard: Optional[Tuple[int, int]] = None) -> None:
        """Made by distribute() and from_dataset_id()."""
    def load_state_dict(self, state: Mapping[str, bytes]) -> None:
        """Makes the next iteration continue from state, an iterator's state_dict()."""
    def __iter__(self) -> _sluice.Iterator: ...

def register_dataset(service: _Service, pipeline: _PipelineLike, dataset_id: Optional[str] = None,
                     compression: Optional[str] = "auto", split_size: Optional[int] = None,
                     plugins: _Plugins = None,
                     timeout: Optional[float] = None, auth_token_file: Optional[str] = None,
                     tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                     tls_ca: Optional[str] = None, deterministic: bool = False) -> str:
    """Registers a pipeline with the dispatcher and returns its dataset id."""

def from_dataset_id(processing_mode: str, service: _Service, dataset_id: str,
                    job_name: Optional[str] = None, consumer_index: Optional[int] = None,
                    num_consumers: Optional[int] = None,
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
                    max_workers: Optional[int] = None,
                    hedge: Union[bool, float, None] = None, shm: bool = True,
                    shm_bytes: Optional[int] = None,
                    shard: Optional[Tuple[int, int]] = None) -> Dataset:
    """Reads a registered dataset from the service; returns an iterable Dataset."""

def distribute(pipeline: _PipelineLike, processing_mode: str, service: _Service,
               job_name: Optional[str] = None, consumer_index: Optional[int] = None,
               num_consumers: Optional[int] = None,
               max_outstanding_requests: Optional[int] = None, local: Optional[str] = None,
               plugins: _Plugins = None, timeout: Optional[float] = None,
               element_timeout: Optional[float] = None, split_size: Optional[int] = None,
               auth_token_file: Optional[str] = None, tls_cert: Optional[str] = None,
               tls_key: Optional[str] = None, tls_ca: Optional[str] = None,
               deterministic: bool = False, reorder_bytes: Optional[int] = None,
               tls_worker_name: Optional[str] = None,
               cross_trainer_cache: Optional[CrossTrainerCache] = None,
               target_workers: Optional[str] = None, whole_copies: bool = False,
               worker_selector: Optional[str] = None, weight: Optional[float] = None,
               min_workers: Optional[int] = None, max_workers: Optional[int] = None,
               hedge: Union[bool, float, None] = None, shm: bool = True,
               shm_bytes: Optional[int] = None,
               shard: Optional[Tuple[int, int]] = None) -> Dataset:
    """Registers pipeline and reads it from the service (register_dataset, from_dataset_id)."""

def merge_positions(states: Iterable[Mapping[str, bytes]]) -> _StateDict:
    """One state holding what several consumers of one shared job had together."""

def job_state(service: _Service, job_name: str, step: Union[int, str, None] = None,
              timeout: Optional[float] = None, auth_token_file: Optional[str] = None,
              tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
              tls_ca: Optional[str] = None) -> Dict[str, Any]:
    """The shared job's position from the dispatcher: {"position": bytes, "step": int}."""

def run(pipeline: _PipelineLike, plugins: _Plugins = None) -> _sluice.Local:
    """Runs a pipeline in this process, without a service; an iterator over its elements."""

def status(service: _Service, timeout: Optional[float] = None,
           auth_token_file: Optional[str] = None, tls_cert: Optional[str] = None,
           tls_key: Optional[str] = None, tls_ca: Optional[str] = None,
           dataset_id: Optional[str] = None) -> Dict[str, Any]:
    """The dispatcher's status (what `sluice status --json` prints) as a dict."""


def why(service: _Service, job: Union[int, str], timeout: Optional[float] = None,
        auth_token_file: Optional[str] = None, tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None, tls_ca: Optional[str] = None) -> Dict[str, Any]:
    """Why job `job` (an id or a name: its newest job) waits: the attribution `sluice status
    --why JOB --json` prints."""

def save_snapshot(service: _Service, dataset_id: str, path: _StrPath, wait: bool = True,
                  timeout: Optional[float] = None, auth_token_file: Optional[str] = None,
                  tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                  tls_ca: Optional[str] = None) -> Dict[str, Any]:
    """Saves registered dataset dataset_id into the snapshot directory path."""

def snapshot_status(service: _Service, path: _StrPath, timeout: Optional[float] = None,
                    auth_token_file: Optional[str] = None, tls_cert: Optional[str] = None,
                    tls_key: Optional[str] = None, tls_ca: Optional[str] = None) -> Dict[str, Any]:
    """Where the save into path stands: the dict save_snapshot returns."""

def set_weights(service: _Service, job_name: str, weights: Sequence[float],
                dataset_id: Optional[str] = None, at: Optional[int] = None,
                auth_token_file: Optional[str] = None, tls_cert: Optional[str] = None,
                tls_key: Optional[str] = None, tls_ca: Optional[str] = None,
                timeout: Optional[float] = None) -> int:
    """Changes the weights of the mix read as job job_name; the position they apply from."""

class _Progress:
    """What sluice.progress returns: the iterator's elements, reporting as they come."""

    def __init__(self, it: Any, report: Optional[Callable[[Dict[str, Any]], object]],
                 every: float) -> None: ...
    def __iter__(self) -> "_Progress": ...
    def __next__(self) -> _Element: ...
    def __getattr__(self, name: str) -> Any: ...
    def __enter__(self) -> "_Progress": ...
    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None: ...

def progress(iterable: Iterable[_Element],
             report: Optional[Callable[[Dict[str, Any]], object]] = None,
             every: float = 1.0) -> _Progress:
    """Wraps a sluice read so that it reports its progress every `every` seconds."""
