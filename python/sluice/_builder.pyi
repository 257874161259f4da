"""Type stubs of sluice.Pipeline (the implementation is _builder.py)."""

from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

from typing_extensions import TypeAlias

from . import Dataset, _Plugins, _Service, _StrPath, _sluice

__all__ = ["Pipeline", "SHARD_HINT"]

class _ShardHint:
    """tf.data's SHARD_HINT: in shard(), a count or index the hint sharding mode fills in."""

SHARD_HINT: _ShardHint
"""In Pipeline.shard(), a count or index the hint sharding mode fills in."""

_Value: TypeAlias = Any
"""A value from_list() and the functions' arguments take: int, float, bool, str, bytes, a
list (a tensor), a numpy array, or a tuple of them."""

_Fn: TypeAlias = Union[str, Callable[..., Any]]
"""A function for map() and filter(): a built-in's name, "module:function", or a module-level
Python function."""

_Patterns: TypeAlias = Union[_StrPath, List[_StrPath], Tuple[_StrPath, ...]]
"""File patterns: a glob or path, or a list (or tuple) of them."""

_P = TypeVar("_P", bound="Pipeline")

class Pipeline:
    """A pipeline built from Python calls, mirroring tf.data's names; str(p) is its text."""

    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    @property
    def steps(self) -> Tuple[str, ...]:
        """The steps' texts, the source first."""
    @classmethod
    def from_text(cls: type[_P], text: str) -> _P:
        """A Pipeline holding text as it is, to go on building from it."""
    @classmethod
    def range(cls: type[_P], *args: int) -> _P:
        """range(stop), range(start, stop[, step]): int64 scalars."""
    @classmethod
    def from_list(cls: type[_P], values: Iterable[_Value]) -> _P:
        """list(...): the values, one element each."""
    @classmethod
    def tfrecord(cls: type[_P], patterns: _Patterns, *more: _StrPath) -> _P:
        """The records of TFRecord files."""
    @classmethod
    def lines(cls: type[_P], patterns: _Patterns, *more: _StrPath) -> _P:
        """The lines of text files."""
    @classmethod
    def tar(cls: type[_P], patterns: _Patterns, *extensions: str) -> _P:
        """The samples of WebDataset shards."""
    @classmethod
    def parquet(cls: type[_P], patterns: _Patterns, *columns: str) -> _P:
        """The rows of Parquet files."""
    @classmethod
    def jsonl(cls: type[_P], patterns: _Patterns, *fields: str) -> _P:
        """One element per line of JSON Lines files."""
    @classmethod
    def megatron(cls: type[_P], prefix: _StrPath) -> _P:
        """The documents of a Megatron-LM indexed dataset."""
    @classmethod
    def snapshot(cls: type[_P], path: _StrPath) -> _P:
        """The elements of a distributed snapshot."""
    @staticmethod
    def sample_from_datasets(datasets: Sequence["Pipeline"],
                             weights: Optional[Sequence[float]] = None,
                             seed: Optional[int] = None,
                             stop_on_empty_dataset: bool = False) -> "Pipeline":
        """Each element drawn from one of the datasets, in proportion to weights."""
    @staticmethod
    def choose_from_datasets(datasets: Sequence["Pipeline"], choice_dataset: "Pipeline",
                             stop_on_empty_dataset: bool = True) -> "Pipeline":
        """choice_dataset names the dataset each element comes from."""
    def map(self: _P, fn: _Fn, *args: _Value, plugin: bool = False) -> _P:
        """map(FN, ARGS...)."""
    def filter(self: _P, fn: _Fn, *args: _Value, plugin: bool = False) -> _P:
        """filter(FN, ARGS...): keeps the elements for which fn is true."""
    def shuffle(self: _P, buffer_size: int, seed: Optional[int] = None) -> _P:
        """shuffle(BUFFER[, SEED])."""
    def batch(self: _P, batch_size: int, drop_remainder: bool = False) -> _P:
        """batch(N[, drop_remainder])."""
    def take(self: _P, count: int) -> _P:
        """take(N): the first count elements (-1: all of them)."""
    def skip(self: _P, count: int) -> _P:
        """skip(N): all but the first count elements."""
    def repeat(self: _P, count: Optional[int] = None) -> _P:
        """repeat([N]): the pipeline count times; None: forever."""
    def shard(self: _P, num_shards: Union[int, _ShardHint], index: Union[int, _ShardHint]) -> _P:
        """shard(N, INDEX): every num_shards-th element from the index-th."""
    def prefetch(self: _P, buffer_size: int) -> _P:
        """prefetch(N): elements produced ahead."""
    def global_shuffle(self: _P, seed: int) -> _P:
        """global_shuffle(SEED), right after the source."""
    def pack(self: _P, sequence_length: int, policy: str = "best_fit",
             window: Optional[int] = None) -> _P:
        """pack(SEQ_LEN[, POLICY[, WINDOW]]): token documents into sequences."""
    def apply(self, transformation: Callable[["Pipeline"], "Pipeline"]) -> "Pipeline":
        """transformation(self), which must return a Pipeline."""
    def run(self, plugins: _Plugins = None) -> _sluice.Local:
        """Runs the pipeline in this process, without a service."""
    def register(self, service: _Service, **kwargs: Any) -> str:
        """Registers the pipeline with the service and returns its dataset id."""
    def distribute(self, processing_mode: str, service: _Service, **kwargs: Any) -> Dataset:
        """Registers the pipeline and reads it from the service."""
