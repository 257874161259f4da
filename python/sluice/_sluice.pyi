"""Type stubs of sluice._sluice, the C extension under the sluice package (python/src).

The exceptions are re-exported by sluice itself; the other types are what sluice's functions
return (Iterator, Local) or wrap (Dispatcher, Worker, Client)."""

import builtins
from types import TracebackType
from typing import Any, Dict, Optional, Sequence, Tuple, Type, final

from . import _Counts, _Element, _StateDict

class Error(Exception):
    """A failure reported by sluice: str(e) is the message, e.code the library's (negative)
    error code."""

    code: int

class TimeoutError(Error, builtins.TimeoutError):
    """A bounded wait ran out."""

class NotFoundError(Error, LookupError):
    """An unknown id, name or file."""

class InvalidArgumentError(Error, ValueError):
    """An argument, pipeline or request the service refused."""

class UnavailableError(Error, ConnectionError):
    """A server is unreachable, closed, or restarted and lost the job."""

class AuthenticationError(Error, PermissionError):
    """A peer could not prove the cluster's token, or refused ours (a wrong or missing
    auth_token_file), or TLS failed."""

class CancelledError(Error):
    """The read was cancelled."""

class AlreadyExistsError(Error):
    """A dataset or job exists with a different definition."""

class TaskFailedError(Error):
    """A pipeline failed on a worker; the message says why."""

def version() -> str:
    """The sluice version this module was built from."""

def shm_place(array: object, /) -> tuple[int, int, int, int] | None:
    """(fd, offset, region_len, region_id) when the array's values lie in a shared-memory region
    of this process, else None."""

def merge_positions(positions: Sequence[bytes], /) -> bytes:
    """One position holding what several consumers of one shared job had together."""

@final
class Iterator:
    """An iterator over the elements a dataset's workers serve."""

    def __iter__(self) -> "Iterator": ...
    def __next__(self) -> _Element: ...
    def save(self) -> bytes:
        """The read's position after the last element returned, as bytes (distributed_epoch)."""
    def progress(self) -> _Counts:
        """{'elements', 'splits_done', 'splits_total', 'copies_cut'} of the read so far."""
    def state_dict(self, step: Optional[int] = None) -> _StateDict:
        """{'position': save()}, picklable; a named job's consumer keeps it as step `step`."""
    def load_state_dict(self, state: _StateDict, /) -> None:
        """Continues the read from a state_dict() (of this read or another process's)."""
    def close(self) -> None:
        """Releases the reader on the dispatcher; the iterator ends."""
    def __enter__(self) -> "Iterator": ...
    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None: ...

@final
class Local:
    """Local(pipeline, plugins=()): a pipeline run in this process."""

    def __init__(self, pipeline: str, plugins: Sequence[str] = ...) -> None: ...
    def __iter__(self) -> "Local": ...
    def __next__(self) -> _Element: ...

@final
class Client:
    """A connection to a dispatcher (sluice's functions open one as needed)."""

    def __init__(self, *args: Any) -> None: ...
    def register(self, *args: Any) -> str: ...
    def status(self, dataset_id: Optional[str], /) -> str: ...
    def job_position(self, job_name: str, step: int, /) -> Tuple[bytes, int]: ...
    def save_snapshot(self, dataset_id: str, path: str, /) -> Dict[str, Any]: ...
    def snapshot_status(self, path: str, /) -> Dict[str, Any]: ...
    def snapshot_wait(self, path: str, timeout_ms: int, /) -> Dict[str, Any]: ...
    def set_weights(self, job_name: str, dataset_id: Optional[str], weights: Sequence[float],
                    at: int, /) -> int: ...
    def read(self, *args: Any) -> Iterator: ...

class Dispatcher:
    """A dispatcher on a thread of this process (sluice.DispatchServer wraps it)."""

    def __init__(self, *args: Any) -> None: ...
    def join(self, timeout_ms: int, /) -> None: ...
    def stop(self) -> None: ...
    def shutdown(self) -> None: ...
    @property
    def target(self) -> str: ...
    @property
    def metrics_address(self) -> Optional[str]: ...

class Worker:
    """A worker on a thread of this process (sluice.WorkerServer wraps it)."""

    def __init__(self, *args: Any) -> None: ...
    def join(self, timeout_ms: int, /) -> None: ...
    def stop(self) -> None: ...
    def drain(self) -> None: ...
    def shutdown(self) -> None: ...
    @property
    def address(self) -> str: ...
    @property
    def metrics_address(self) -> Optional[str]: ...
