"""sluice: an input-data service for machine-learning training.

A dispatcher keeps the cluster's state, workers run dataset pipelines and serve their elements,
and this package registers pipelines and reads the elements back, as numpy arrays::

    import sluice
    ds = sluice.distribute("range(10) | map(square)", "distributed_epoch",
                           "sluice://127.0.0.1:5050")
    for x in ds:
        print(int(x))

Pipelines can be built with Python calls named as tf.data's, sluice.Pipeline::

    p = sluice.Pipeline.range(10).map("square").filter("even").batch(2)
    str(p)              # 'range(10) | map(square) | filter(even) | batch(2)'
    for x in p.distribute("distributed_epoch", "sluice://127.0.0.1:5050"):
        ...

where map() and filter() take a built-in's name or a module-level Python function, and every
argument is checked at the call. Every call that takes a pipeline takes a Pipeline or its text.

Pipelines are text in sluice's pipeline language (see docs/pipelines.md): a source such as
``range(N)``, ``list(...)``, ``tfrecord("GLOB")``, ``lines("GLOB")``, ``tar("GLOB", "EXT", ...)``
(WebDataset shards: a tuple of the bytes of each sample's members), ``parquet("GLOB", "COLUMN",
...)`` (the rows of Parquet files), ``jsonl("GLOB", "FIELD", ...)`` (JSON Lines), ``megatron("PREFIX")``
(the documents of a Megatron-LM indexed dataset, PREFIX.idx and PREFIX.bin, as int32 arrays of
tokens), ``snapshot("DIR")`` (a distributed snapshot, readable while
its save runs) or a mix of whole pipelines, ``sample_from_datasets([(P1), (P2)], [W1, W2], SEED)``
and ``choose_from_datasets([(P1), (P2)], (CHOICE))`` as in tf.data, followed by operations
(``map``, ``filter``, ``shuffle``, ``batch``, ``take``, ``skip``, ``repeat``, ``shard``,
``prefetch``, ``pack(SEQ_LEN)`` (token documents into (tokens, segment_ids, positions)
sequences), and ``global_shuffle(SEED)`` right after the source) separated by ``|``. ``map(py, "module:function", ARG...)`` and
``filter(py, ...)`` call a Python function on each element (numpy arrays in, the same forms
out); workers started here (WorkerServer), run() and local tails call it in this interpreter.
A worker calls only functions of modules in its own python_path directories.

An element with one component is a numpy array (0-d for a scalar; a bytes scalar is ``bytes``,
a bytes tensor an object array of ``bytes``); an element with several is a tuple of them.
Large arrays are handed over without a copy.
"""

import atexit as _atexit
import json as _json
import math as _math
import numbers as _numbers
import os as _os
import sys as _sys
import time as _time
import weakref as _weakref

from . import _sluice
from ._sluice import (
    AlreadyExistsError,
    AuthenticationError,
    CancelledError,
    Error,
    InvalidArgumentError,
    NotFoundError,
    TaskFailedError,
    TimeoutError,
    UnavailableError,
)

from ._builder import SHARD_HINT, Pipeline

__version__ = _sluice.version()

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

# The processing modes, by the names the command line takes.
_MODES = {
    "parallel_epochs": 0,
    "off": 0,
    "distributed_epoch": 1,
    "dynamic": 1,
    "file": 2,
    "data": 3,
    "file_or_data": 4,
    "hint": 5,
}

_U32_MAX = 2**32 - 1


_MAX_REPLICAS = 16


def _target(service, name="service", replicas=True):
    """HOST:PORT of a service given as "sluice://HOST:PORT", "HOST:PORT" or a server object.

    With replicas, also the replicas of a dispatcher group as a comma-separated list,
    "sluice://H1:P,H2:P,H3:P" or "H1:P,H2:P,H3:P" (at most 16, each once), returned as
    "H1:P,H2:P,H3:P": the client finds the leader among them."""
    target = getattr(service, "target", service)
    if not isinstance(target, str):
        raise TypeError(f"{name} must be a 'sluice://HOST:PORT' string or a DispatchServer, "
                        f"not {type(service).__name__}")
    if target.startswith("sluice://"):
        target = target[len("sluice://"):]
    shape = "'sluice://HOST:PORT'"
    if replicas:
        shape += " or a list of replicas 'sluice://H1:P,H2:P,H3:P'"
    elements = [e.strip() for e in target.split(",")] if replicas else [target]
    if len(elements) > _MAX_REPLICAS:
        raise ValueError(f"{name} lists more than {_MAX_REPLICAS} addresses: {service!r}")
    seen = set()
    for i, element in enumerate(elements):
        if not element and len(elements) > 1:
            raise ValueError(f"{name}: address {i + 1} of {service!r} is empty")
        if element.startswith("sluice://") and len(elements) > 1:
            raise ValueError(f"{name}: address {i + 1} of {service!r}: sluice:// goes once, "
                             "before the list")
        host, sep, port = element.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{name} must look like {shape}, not {service!r}")
        key = (host.lower(), int(port))
        if key in seen:
            raise ValueError(f"{name}: {element} is listed twice in {service!r}")
        seen.add(key)
    return ",".join(elements)


def _mode(processing_mode):
    if not isinstance(processing_mode, str):
        raise TypeError("processing_mode must be a string such as 'parallel_epochs' or "
                        f"'distributed_epoch', not {type(processing_mode).__name__}")
    try:
        return _MODES[processing_mode]
    except KeyError:
        raise ValueError(f"processing_mode must be one of {', '.join(sorted(_MODES))}, "
                         f"not {processing_mode!r}") from None


def _count(value, name, minimum=0):
    """A non-negative int argument (None: 0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum or value > _U32_MAX:
        raise ValueError(f"{name} must be between {minimum} and {_U32_MAX}, not {value}")
    return value


def _size(value, name):
    """A non-negative 64-bit int argument (None: 0, the server's default)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1 or value >= 1 << 64:
        raise ValueError(f"{name} must be between 1 and {(1 << 64) - 1}, not {value}")
    return value


def _text(value, name, allow_none=True):
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _pipeline(value):
    """The text of a pipeline given as text or as a sluice.Pipeline."""
    if isinstance(value, Pipeline):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"pipeline must be a str or a sluice.Pipeline, not {type(value).__name__}")
    return value


def _split_size(value):
    """split_size: None (0, the dispatcher's default) or a positive int."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"split_size must be an int, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"split_size must be positive, not {value}")
    return value


def _flag(value, name):
    """A bool option."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def _timeout_ms(timeout):
    """Seconds (None: no limit) as whole milliseconds, at least 1."""
    if timeout is None:
        return 0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, not {timeout}")
    return max(1, min(_U32_MAX, int(timeout * 1000)))


def _plugins(plugins):
    if plugins is None:
        return ()
    if isinstance(plugins, str):
        return (plugins,)
    return tuple(_text(p, "plugins", allow_none=False) for p in plugins)


def _dirs(dirs, name):
    """A directory or a sequence of them (str or path-like) as a list of str."""
    if dirs is None:
        return []
    if isinstance(dirs, (str, _os.PathLike)):
        dirs = (dirs,)
    out = []
    for d in dirs:
        if not isinstance(d, (str, _os.PathLike)):
            raise TypeError(f"{name} must hold str or path-like objects, not {type(d).__name__}")
        out.append(_os.fsdecode(d))
    return out


def _labels(labels):
    """A worker's labels: a mapping {key: value} or a sequence of "KEY=VALUE" (None: none)."""
    if labels is None:
        return []
    if isinstance(labels, str):
        raise TypeError("labels must be a mapping or a sequence of 'KEY=VALUE' strings, not str")
    if hasattr(labels, "items"):
        items = [f"{k}={v}" for k, v in labels.items()]
    else:
        items = list(labels)
    for kv in items:
        if not isinstance(kv, str):
            raise TypeError(f"labels must hold str, not {type(kv).__name__}")
    return items


def _ms(value, name):
    """An optional non-negative number of milliseconds (None: the server's default, 0)."""
    return _count(value, name)


def _port(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f"{name} must be an int from 0 to 65535, not {value!r}")
    return value


def _path(value, name):
    if value is None:
        return None
    path = _os.fspath(value)
    if isinstance(path, bytes):
        path = _os.fsdecode(path)
    if not path:
        raise ValueError(f"{name} must not be empty")
    return path


def _security(auth_token_file, tls_cert, tls_key, tls_ca):
    """The security keywords, checked, in the order the native types take them."""
    return (_path(auth_token_file, "auth_token_file"), _path(tls_cert, "tls_cert"),
            _path(tls_key, "tls_key"), _path(tls_ca, "tls_ca"))


def _limits(insecure, metrics_host, handshake_timeout_ms, max_connections, max_handshakes):
    """The servers' keywords after the security files, in the order the native types take
    them."""
    return (bool(insecure), _text(metrics_host, "metrics_host"),
            _ms(handshake_timeout_ms, "handshake_timeout_ms"),
            _count(max_connections, "max_connections"), _count(max_handshakes, "max_handshakes"))


_SECURITY_DOC = """
    Security (the same on clients and servers): auth_token_file is the cluster's shared secret
    (at least 16 bytes; None: the file $SLUICE_AUTH_TOKEN_FILE names, if set). Every connection
    then proves the token both ways (HMAC challenge-response; the token never crosses the wire),
    and a peer without it, or with another one, is refused with AuthenticationError
    ("authentication failed: wrong token"). tls_cert, tls_key and tls_ca are PEM files for TLS.
"""


class _Server:
    """What the two in-process servers share: start, join, stop, context manager."""

    _kind = "server"
    _native = None  # the _sluice type

    def __init__(self, args, start):
        self._args = args
        self._server = None
        if start:
            self.start()

    def start(self):
        """Starts the server (when created with start=False); raises sluice.Error when it
        cannot (a port in use, a damaged journal...)."""
        if self._server is None:
            self._server = type(self)._native(*self._args)

    def join(self, timeout=None):
        """Blocks until the server stops (or timeout seconds pass); Ctrl-C interrupts."""
        self._live().join(_timeout_ms(timeout))

    def stop(self):
        """Stops the server (a worker drains first). Safe to call twice."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def _live(self):
        if self._server is None:
            raise RuntimeError(f"the {self._kind} is not running (start() it, or it was stopped)")
        return self._server

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        state = self._where() if self._server is not None else "stopped"
        return f"sluice.{type(self).__name__}({state})"


class DispatchServer(_Server):
    """A dispatcher running in this process, on a thread of its own (tf.data service's
    DispatchServer).

    port: 0 picks a free one. host: the address to listen on ("0.0.0.0" serves other
    machines). work_dir and fault_tolerant_mode: journal every change under work_dir so a
    dispatcher started again on it carries on (fault_tolerant_mode needs work_dir).
    worker_timeout_ms, client_timeout_ms, job_gc_timeout_ms, autoscale_window_ms,
    snapshot_every, journal_max_mb, worker_addresses, metrics_port (None: no metrics) and
    log_level ("debug", "info", "warn", "error", "off") are the dispatcher's flags of the same
    names. disconnect_grace_ms (--disconnect-grace-ms; None: 5000, 0: off): how long after its
    connection closed a client (worker) that sent no heartbeat since is released (removed): a
    killed trainer's or worker's splits go to others then, not at its timeout.
    autoscale_pool_label (--autoscale-pool-label; None: "pool"): the worker label whose
    value names a worker's pool, for the recommendation per pool (docs/operations.md
    "Autoscaling by pool"). data_roots (a str or a sequence, --data-root): register_dataset
    refuses file sources (lines, tfrecord, tar, snapshot) naming files outside these
    directories, after ".." and symbolic links are resolved; None: not confined. start=False defers the start to start().

    auth_token_file, tls_cert, tls_key, tls_ca: see below. insecure: allow a host beyond
    loopback without a token. metrics_host (None: 127.0.0.1), handshake_timeout_ms (None:
    10000), max_connections (None: 4096) and max_handshakes (None: 256) are the flags of the
    same names; with a token, /metrics wants "Authorization: Bearer TOKEN". max_datasets
    (None: 10000), max_pipeline_bytes (None: 1048576), max_jobs_per_client (None: 1000) and
    max_jobs_per_address (None: 1000: reads held by all the clients of one address, whatever
    incarnations they send) bound what clients can make the dispatcher hold; past one, the request fails with the
    limit's name and the dispatcher serves everyone else.

    Replicas (docs/operations.md "Dispatcher replicas"): raft_id (1, 2, ...) makes this
    dispatcher one of a group of 3 or 5 on Raft; raft_cluster lists the group's Raft addresses
    ("1=HOST:PORT,2=HOST:PORT,3=HOST:PORT"), raft_address is this one's as listed, and work_dir
    holds its Raft log (it implies fault_tolerant_mode). The leader serves; the others refuse
    with the leader's address, which callers given the list of targets follow. raft_bind
    listens for Raft elsewhere ("0.0.0.0:7001"), advertise is the RPC address the others give
    for this one (None: the bound host and port), raft_election_timeout_ms (None: 600) is
    Raft's election timeout. These are the flags --raft-id, --raft-address, --raft-cluster,
    --raft-bind, --advertise and --raft-election-timeout-ms; a bad combination raises
    sluice.InvalidArgumentError with the dispatcher's message.

    Use it as a context manager, or call stop(); target is "sluice://HOST:PORT".
    """

    _kind = "dispatcher"
    _native = _sluice.Dispatcher

    def __init__(self, port=0, host="127.0.0.1", work_dir=None, fault_tolerant_mode=False,
                 worker_timeout_ms=None, client_timeout_ms=None, job_gc_timeout_ms=None,
                 autoscale_window_ms=None, snapshot_every=None, journal_max_mb=None,
                 worker_addresses=None, metrics_port=None, log_level="warn", data_roots=None,
                 start=True, auth_token_file=None, tls_cert=None, tls_key=None, tls_ca=None,
                 insecure=False, metrics_host=None, handshake_timeout_ms=None,
                 max_connections=None, max_handshakes=None, max_datasets=None,
                 max_pipeline_bytes=None, max_jobs_per_client=None, max_jobs_per_address=None,
                 raft_id=None, raft_address=None, raft_cluster=None, raft_bind=None,
                 advertise=None, raft_election_timeout_ms=None, autoscale_pool_label=None,
                 disconnect_grace_ms=None):
        _port(port, "port")
        grace = _count(disconnect_grace_ms, "disconnect_grace_ms")
        if disconnect_grace_ms is not None and grace == _U32_MAX:
            raise ValueError(f"disconnect_grace_ms must be between 0 and {_U32_MAX - 1}, "
                             f"not {grace}")
        _text(host, "host", allow_none=False)
        _text(work_dir, "work_dir")
        if fault_tolerant_mode and not work_dir:
            raise ValueError("fault_tolerant_mode requires a work_dir")
        super().__init__((
            host, port, work_dir, bool(fault_tolerant_mode),
            _ms(worker_timeout_ms, "worker_timeout_ms"),
            _ms(client_timeout_ms, "client_timeout_ms"),
            _ms(job_gc_timeout_ms, "job_gc_timeout_ms"),
            _ms(autoscale_window_ms, "autoscale_window_ms"),
            0 if snapshot_every is None else snapshot_every,
            0 if journal_max_mb is None else journal_max_mb,
            None if worker_addresses is None else [_target(a, "worker_addresses", replicas=False)
                                                   for a in worker_addresses],
            -1 if metrics_port is None else _port(metrics_port, "metrics_port"),
            _text(log_level, "log_level"),
            _dirs(data_roots, "data_roots"),
            *_security(auth_token_file, tls_cert, tls_key, tls_ca),
            *_limits(insecure, metrics_host, handshake_timeout_ms, max_connections,
                     max_handshakes),
            _size(max_datasets, "max_datasets"), _size(max_pipeline_bytes, "max_pipeline_bytes"),
            _size(max_jobs_per_client, "max_jobs_per_client"),
            _size(max_jobs_per_address, "max_jobs_per_address"),
            _size(raft_id, "raft_id"), _text(raft_address, "raft_address"),
            _text(raft_cluster, "raft_cluster"), _text(raft_bind, "raft_bind"),
            _text(advertise, "advertise"),
            _ms(raft_election_timeout_ms, "raft_election_timeout_ms"),
            _text(autoscale_pool_label, "autoscale_pool_label"),
            # The C option: 0 the default, UINT32_MAX off.
            0 if disconnect_grace_ms is None else grace if grace else _U32_MAX,
        ), start)

    @property
    def target(self):
        """"sluice://HOST:PORT", what workers and readers are given."""
        return "sluice://" + self._live().target

    @property
    def metrics_address(self):
        """HOST:PORT of the metrics server, or None."""
        return self._live().metrics_address

    def _where(self):
        return self.target


# A class's docstring is a literal: the shared paragraph is added after.
DispatchServer.__doc__ += _SECURITY_DOC


class WorkerServer(_Server):
    """A worker running in this process, on a thread of its own (tf.data service's
    WorkerServer).

    dispatcher_address: "sluice://HOST:PORT", "HOST:PORT" or a DispatchServer, or the replicas
    of a dispatcher group as "sluice://H1:P,H2:P,H3:P" (the worker finds the leader); it need
    not be up yet. port: 0 picks a free one. host, advertise (the address readers use), threads
    (the threads every task's pipeline runs on, in turns; default twice the cores, at least
    8), plugins (shared objects adding functions),
    heartbeat_ms, drain_timeout_ms, metrics_port (None: no metrics) and log_level are the
    worker's flags of the same names. start=False defers the start to start().

    Python functions (map(py, "module:function")) run in this interpreter, on the worker's
    threads, one at a time with the rest of the program (the GIL). python_path: directories
    (a str or a sequence) put at the front of sys.path when the worker starts, for their
    modules. A pipeline served by this worker may call only functions of modules found in
    these directories: other modules, even ones importable here (the standard library,
    site-packages, the program's own directory), are refused ("module 'os' is not in the
    worker's --python-path"). Pipelines run locally (sluice.run, local tails) are not confined.

    data_roots (a str or a sequence, --data-root): file sources (lines, tfrecord, tar,
    snapshot) read only files within these directories, after ".." and symbolic links are
    resolved; None: not confined. Set them on any worker that serves other users.

    stop() drains first: readers receive everything the worker holds, then it leaves. A worker
    still running when the interpreter exits is stopped at once before it finalises.

    auth_token_file, tls_cert, tls_key, tls_ca, insecure, metrics_host, handshake_timeout_ms,
    max_connections and max_handshakes: as for DispatchServer. With a token the worker also
    refuses a dispatcher that cannot prove it. max_element_bytes (None: 134217728): an element
    or batch over it fails its task with an error its readers get, before it is allocated
    where its size is known in advance. max_tasks (None: 256) and max_buffer_bytes (None:
    4294967296, each task counted at its 16 MiB bound): a task past either is not started and
    fails with the reason, which its readers get. labels (--label): the worker's labels, a
    mapping {"pool": "bigmem"} or a sequence of "pool=bigmem" strings, which jobs' worker
    selectors match (docs/operations.md "Pools and selectors"); a bad one raises
    InvalidArgumentError ("labels: label 1: expected KEY=VALUE"). task_slots (--task-slots;
    None: no limit): how many tasks the dispatcher places on this worker at once, at most
    max_tasks; jobs take free slots heaviest first and a task is never taken away
    (docs/operations.md "Task slots").
    """

    _kind = "worker"
    _native = _sluice.Worker

    def __init__(self, dispatcher_address, port=0, host="127.0.0.1", advertise=None,
                 threads=None, plugins=None, heartbeat_ms=None, drain_timeout_ms=None,
                 metrics_port=None, log_level="warn", python_path=None, data_roots=None,
                 start=True, auth_token_file=None, tls_cert=None, tls_key=None, tls_ca=None,
                 insecure=False, metrics_host=None, handshake_timeout_ms=None,
                 max_connections=None, max_handshakes=None, max_element_bytes=None,
                 max_tasks=None, max_buffer_bytes=None, labels=None, task_slots=None):
        super().__init__((
            _target(dispatcher_address, "dispatcher_address"), _text(host, "host"),
            _port(port, "port"), _text(advertise, "advertise"),
            _ms(heartbeat_ms, "heartbeat_ms"), _count(threads, "threads"),
            list(_plugins(plugins)),
            -1 if metrics_port is None else _port(metrics_port, "metrics_port"),
            _ms(drain_timeout_ms, "drain_timeout_ms"), _text(log_level, "log_level"),
            _dirs(python_path, "python_path"), _dirs(data_roots, "data_roots"),
            *_security(auth_token_file, tls_cert, tls_key, tls_ca),
            *_limits(insecure, metrics_host, handshake_timeout_ms, max_connections,
                     max_handshakes),
            _size(max_element_bytes, "max_element_bytes"),
            _count(max_tasks, "max_tasks"), _size(max_buffer_bytes, "max_buffer_bytes"),
            _labels(labels), _count(task_slots, "task_slots"),
        ), start)

    def start(self):
        """Starts the worker (when created with start=False); raises sluice.Error when it
        cannot (a port in use, a bad plugin...)."""
        super().start()
        _live_workers.add(self)

    def _stop_now(self):
        """Stops at once, without draining (at interpreter exit)."""
        if self._server is not None:
            self._server.shutdown()
            self.stop()

    @property
    def address(self):
        """HOST:PORT readers use to reach this worker."""
        return self._live().address

    @property
    def metrics_address(self):
        """HOST:PORT of the metrics server (metrics_port), or None."""
        return self._live().metrics_address

    def drain(self):
        """Starts a lossless drain and returns at once; stop() waits for it."""
        self._live().drain()

    def _where(self):
        return self.address


WorkerServer.__doc__ += _SECURITY_DOC


# Workers running in this process. Their threads may be inside py functions, which need the
# interpreter: at exit they are stopped while it still runs (atexit handlers run before it
# finalises), not left to be collected during its finalisation.
_live_workers = _weakref.WeakSet()


@_atexit.register
def _stop_live_workers():
    for worker in list(_live_workers):
        worker._stop_now()


class _Connection:
    """One client per (service, plugins), opened on first use and shared by a dataset's
    iterators."""

    def __init__(self, service, plugins, timeout, security=(None, None, None, None),
                 tls_worker_name=None):
        self.target = _target(service)
        self.plugins = _plugins(plugins)
        self.timeout_ms = _timeout_ms(timeout)
        self.security = security
        self.tls_worker_name = _text(tls_worker_name, "tls_worker_name")
        self._client = None

    def client(self):
        if self._client is None:
            self._client = _sluice.Client(self.target, self.timeout_ms, self.plugins,
                                          *self.security, self.tls_worker_name)
        return self._client


def register_dataset(service, pipeline, dataset_id=None, compression="auto", split_size=None,
                     plugins=None, timeout=None, auth_token_file=None, tls_cert=None, tls_key=None,
                     tls_ca=None, deterministic=False):
    """Registers a pipeline with the dispatcher and returns its dataset id.

    service: "sluice://HOST:PORT", "HOST:PORT" or a DispatchServer, or the replicas of a
    dispatcher group as "sluice://H1:P,H2:P,H3:P" (the leader is found). pipeline: the pipeline
    text, or a sluice.Pipeline. dataset_id: register under this id (the same pipeline under the
    same id returns it again; another pipeline is refused with AlreadyExistsError); None lets the
    dispatcher choose. compression: "auto" (snappy when it pays off) or None/"none". split_size: elements
    per split for distributed_epoch over range()/list() sources (None: a default). plugins:
    paths of plugin shared objects whose functions the pipeline uses. timeout: seconds to wait
    for an unreachable dispatcher (None: without limit). auth_token_file, tls_cert, tls_key,
    tls_ca: as for DispatchServer. deterministic: distributed_epoch reads of the dataset are
    deterministic by default (see from_dataset_id); part of the dataset's identity.
    """
    pipeline = _pipeline(pipeline)
    _text(dataset_id, "dataset_id")
    if compression is None:
        compression = "none"
    if compression not in ("auto", "none"):
        raise ValueError(f"compression must be 'auto' or None, not {compression!r}")
    size = _split_size(split_size)
    conn = _Connection(service, plugins, timeout,
                       _security(auth_token_file, tls_cert, tls_key, tls_ca))
    return conn.client().register(pipeline, dataset_id, compression, size,
                                  _flag(deterministic, "deterministic"))


class CrossTrainerCache:
    """Shares one job's stream between trainers (see docs/reading.md "Cross-trainer cache"): pass it
    as cross_trainer_cache= to distribute or from_dataset_id, with a job_name and a pipeline that
    never ends (repeat() with no count), in a mode other than distributed_epoch. Each worker
    task keeps what it produced in a cache of cache_bytes (None: 256 MiB) and serves every
    trainer id from its own cursor: an id seen for the first time starts at the oldest element
    cached, a known id continues where it left off (readers with one id never get the same
    element), and a trainer that falls further behind than the cache holds skips ahead.

    trainer_id: a non-empty str of at most 127 bytes naming this trainer."""

    def __init__(self, trainer_id, cache_bytes=None):
        if not isinstance(trainer_id, str):
            raise TypeError(f"trainer_id must be a str, not {type(trainer_id).__name__}")
        if not trainer_id:
            raise ValueError("CrossTrainerCache needs a non-empty trainer_id")
        if len(trainer_id.encode("utf-8")) > 127:
            raise ValueError("trainer_id must be at most 127 bytes in UTF-8")
        if cache_bytes is not None:
            if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int):
                raise TypeError(f"cache_bytes must be an int, not {type(cache_bytes).__name__}")
            if cache_bytes < 1 or cache_bytes >= 1 << 64:
                raise ValueError(f"cache_bytes must be between 1 and 2**64 - 1, not "
                                 f"{cache_bytes}")
        self.trainer_id = trainer_id
        self.cache_bytes = cache_bytes

    def __repr__(self):
        return f"sluice.CrossTrainerCache({self.trainer_id!r}, cache_bytes={self.cache_bytes!r})"


def _cross_trainer_cache(value):
    if value is not None and not isinstance(value, CrossTrainerCache):
        raise TypeError(f"cross_trainer_cache must be a sluice.CrossTrainerCache or None, not "
                        f"{type(value).__name__}")
    return value


_TARGET_WORKERS = ("any", "local", "auto")


def _target_workers(value):
    if value is None:
        return "any"
    if not isinstance(value, str):
        raise TypeError(f"target_workers must be a str, not {type(value).__name__}")
    v = value.lower()
    if v not in _TARGET_WORKERS:
        raise ValueError(f"target_workers must be 'any', 'local' or 'auto', not {value!r}")
    return v


def _weight(value):
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"weight must be a number, not {type(value).__name__}")
    v = float(value)
    if not (0 < v <= 1e6):
        raise ValueError(f"weight must be a number above 0 and at most 1000000, not {value!r}")
    return v


def _hedge(value):
    """hedge= as a factor: None or False 0 (off), True the default 3, or a number in (0, 1000]."""
    if value is None or value is False:
        return 0.0
    if value is True:
        return 3.0
    if not isinstance(value, (int, float)):
        raise TypeError(f"hedge must be a bool or a number, not {type(value).__name__}")
    v = float(value)
    if not (0 < v <= 1000):
        raise ValueError(f"hedge must be True, False or a factor above 0 and at most 1000, not "
                         f"{value!r}")
    return v


def _shard(value):
    if value is None:
        return None
    if (not isinstance(value, tuple) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise ValueError(f"shard must be (index, count) with integers, not {value!r}")
    index, count = value
    if not 0 < count < 2 ** 32 or not 0 <= index < count:
        raise ValueError(f"shard (index, count) needs 0 <= index < count, not {value!r}")
    return (index, count)


class Dataset:
    """The elements of a dataset as the service serves them. Iterating opens a new reader each
    time (a new job unless job_name names a shared one); an iterator can be closed early with
    close() or used as a context manager."""

    def __init__(self, conn, processing_mode, dataset_id=None, pipeline=None, job_name=None,
                 consumer_index=None, num_consumers=None, max_outstanding_requests=None,
                 local=None, element_timeout=None, split_size=None, deterministic=False,
                 reorder_bytes=None, cross_trainer_cache=None, target_workers=None,
                 whole_copies=False, worker_selector=None, weight=None, min_workers=None,
                 max_workers=None, hedge=None, shm=True, shm_bytes=None, shard=None):
        self._conn = conn
        self.processing_mode = processing_mode
        self._mode = _mode(processing_mode)
        self.dataset_id = _text(dataset_id, "dataset_id")
        self.pipeline = _text(pipeline, "pipeline")
        if (self.dataset_id is None) == (self.pipeline is None):
            raise ValueError("exactly one of dataset_id and pipeline is required")
        self.job_name = _text(job_name, "job_name")
        if self.job_name == "":
            raise ValueError("job_name must not be empty (None for a job of its own)")
        if consumer_index is not None and num_consumers is None:
            raise ValueError("consumer_index requires num_consumers")
        if num_consumers is not None and consumer_index is None:
            raise ValueError("num_consumers requires consumer_index")
        self.num_consumers = _count(num_consumers, "num_consumers")
        self.consumer_index = _count(consumer_index, "consumer_index")
        if num_consumers is not None:
            if self.num_consumers == 0:
                raise ValueError("num_consumers must be positive")
            if self.consumer_index >= self.num_consumers:
                raise ValueError(f"consumer_index {self.consumer_index} must be below "
                                 f"num_consumers {self.num_consumers}")
            if self.job_name is None:
                raise ValueError("coordinated reads (num_consumers) require a job_name")
        self.max_outstanding_requests = _count(max_outstanding_requests,
                                               "max_outstanding_requests")
        self.local = _text(local, "local")
        self._element_timeout_ms = _timeout_ms(element_timeout)
        self._split_size = _split_size(split_size)
        self.deterministic = _flag(deterministic, "deterministic")
        self.reorder_bytes = _count(reorder_bytes, "reorder_bytes")
        if self.reorder_bytes and not self.deterministic:
            raise ValueError("reorder_bytes goes with deterministic=True")
        self.cross_trainer_cache = _cross_trainer_cache(cross_trainer_cache)
        if self.cross_trainer_cache is not None and self.job_name is None:
            raise ValueError("cross_trainer_cache requires a job_name: the trainers share one job")
        self.target_workers = _target_workers(target_workers)
        self.whole_copies = _flag(whole_copies, "whole_copies")
        self.worker_selector = _text(worker_selector, "worker_selector")
        self.weight = _weight(weight)
        self.min_workers = _count(min_workers, "min_workers")
        self.max_workers = _count(max_workers, "max_workers")
        if self.min_workers and self.max_workers and self.min_workers > self.max_workers:
            raise ValueError(f"min_workers {self.min_workers} is above max_workers "
                             f"{self.max_workers}")
        self.hedge = _hedge(hedge)
        self.shm = _flag(shm, "shm")
        self.shm_bytes = _count(shm_bytes, "shm_bytes")
        self.shard = _shard(shard)
        if self.shard is not None and self.job_name is not None:
            raise ValueError("a sharded read reads a job of its own: job_name must be None")
        self._restore = None

    def load_state_dict(self, state):
        """Makes the next iteration continue from state, an iterator's state_dict() (of this
        process or another): in distributed_epoch the elements handed out before it and those
        after are the epoch exactly once. A malformed state raises ValueError; one of another
        dataset or a damaged one raises InvalidArgumentError or DataLossError when iterating."""
        pos = state.get("position") if isinstance(state, dict) else None
        if not isinstance(pos, bytes):
            raise ValueError("load_state_dict() takes a state_dict() of a sluice iterator: a dict "
                             "with 'position' bytes")
        self._restore = pos

    def __iter__(self):
        restore, self._restore = self._restore, None
        return self._conn.client().read(
            self.dataset_id, self.pipeline, self._mode, self.job_name, self.consumer_index,
            self.num_consumers, self.max_outstanding_requests, self.local,
            self._element_timeout_ms, self._split_size, restore, self.deterministic,
            self.reorder_bytes, *self._xtc_args(), self.target_workers, self.whole_copies,
            self.worker_selector, self.weight, self.min_workers, self.max_workers, self.hedge,
            self.shm, self.shm_bytes, *(self.shard or (0, 0)))

    def _xtc_args(self):
        x = self.cross_trainer_cache
        if x is None:
            return (False, None, 0)
        return (True, x.trainer_id, x.cache_bytes or 0)

    def __repr__(self):
        what = f"dataset_id={self.dataset_id!r}" if self.dataset_id else \
            f"pipeline={self.pipeline!r}"
        return f"sluice.Dataset({what}, processing_mode={self.processing_mode!r}, " \
               f"service={self._conn.target!r})"


def from_dataset_id(processing_mode, service, dataset_id, job_name=None, consumer_index=None,
                    num_consumers=None, max_outstanding_requests=None, local=None, plugins=None,
                    timeout=None, element_timeout=None, auth_token_file=None, tls_cert=None,
                    tls_key=None, tls_ca=None, deterministic=False, reorder_bytes=None,
                    tls_worker_name=None, cross_trainer_cache=None, target_workers=None,
                    whole_copies=False, worker_selector=None, weight=None, min_workers=None,
                    max_workers=None, hedge=None, shm=True, shm_bytes=None, shard=None):
    """Reads a registered dataset from the service.

    processing_mode: "parallel_epochs" (every worker runs the whole pipeline; alias "off"),
    "distributed_epoch" (workers split the source: every element exactly once; alias
    "dynamic"), or "file", "data", "file_or_data", "hint" (static sharding). service:
    "sluice://HOST:PORT", "HOST:PORT" or a DispatchServer, or the replicas of a dispatcher group
    as "sluice://H1:P,H2:P,H3:P" (the leader is found, and followed through a failover).
    job_name: readers with the same name
    share one job and split its elements. consumer_index/num_consumers: coordinated reads, in
    lockstep rounds (need a job_name and an infinite pipeline). max_outstanding_requests: worker
    requests in flight at once (bounds memory). local: a pipeline tail applied here to the
    elements that arrive ("map(add, 1) | batch(2)"); a repeat in it ("repeat(2)") reads the whole
    stream again for every pass, as a new job (not with a job_name). plugins: plugin shared objects for local
    checks and tails. timeout: seconds to wait for an unreachable dispatcher. element_timeout:
    seconds next() may wait for an element before raising sluice.TimeoutError (None: no limit).
    auth_token_file, tls_cert, tls_key, tls_ca: as for DispatchServer (a wrong or missing token
    raises AuthenticationError). deterministic: distributed_epoch only (other modes and
    coordinated reads raise InvalidArgumentError): the elements come in the canonical order, splits
    by sequence number and elements by position in their split, the same with any number of
    workers and across worker failures, drains, joins and fault-tolerant dispatcher restarts.
    reorder_bytes: with deterministic, the bytes of replies held to reorder them (None: 256 MiB).
    tls_worker_name: with tls_ca, verify every worker's certificate against this DNS name instead
    of the address the worker advertises (one certificate for all workers, e.g. pods).
    cross_trainer_cache: a sluice.CrossTrainerCache(trainer_id): the trainers reading job_name
    share each worker task's stream, each from its own cursor (needs a pipeline that never ends;
    refused in distributed_epoch, with num_consumers and with deterministic).
    target_workers: "any" (None, the default): every worker; "local": only workers on this host
    (one kernel and network namespace, or what SLUICE_HOST_ID names), a sluice.WorkerServer in
    this process being read in memory, without the network; a host with no worker raises
    NotFoundError "no local worker: ..."; "auto": every worker, those on this host first. Part of
    a named job's identity; local and auto cannot be combined with num_consumers (docs/reading.md
    "Local workers").
    whole_copies: parallel_epochs and the static sharding modes: a worker lost in the middle of
    its copy fails the read (sluice.Error naming the task). By default the read goes on without
    the rest of that copy, as tf.data service's does (a restarted worker's new copy is read from
    its start; the iterator's progress()["copies_cut"] counts the copies cut short). Refused in
    distributed_epoch and with num_consumers.
    worker_selector: run the job's tasks only on workers whose labels (sluice-worker --label)
    match this label selector: "pool=bigmem", "zone in (a,b),!gpu" (key=value, key!=value,
    key in (...), key notin (...), key, !key; all must hold). A job whose selector matches no
    worker waits for one to register. A malformed one raises InvalidArgumentError.
    weight (default 1; above 0), min_workers, max_workers (default none): the job's weight and
    the bounds on the number of workers running its tasks. Like target_workers, these four are
    part of a named job's identity (docs/operations.md "Pools and selectors").
    hedge: distributed_epoch: True (factor 3) or a factor K: a split leased longer than K times
    the job's median split time is leased again to a worker with room for it; the first copy
    received wins and the other's elements are dropped, so every element still arrives exactly
    once. Only a read of its own hedges (not with job_name or deterministic). None or False (the
    default): off (docs/operations.md "Stragglers: hedged splits").
    shm: a worker process on this host (the same host id) is read over shared memory: its element
    payloads come through a memory region this reader shares with it alone, written once by the
    worker (docs/reading.md "Local workers"). False: over TCP, as any worker. shm_bytes: the
    size of each such region (a multiple of 64 from 1 MiB to 1 TiB; None: 1 GiB).
    shard: (index, count), in a deterministic read (deterministic=True, or a dataset registered
    so; otherwise InvalidArgumentError): this reader takes the elements at places i of the
    canonical order with i % count == index (from the start, or from the restored position), in
    a job of its own (not with job_name). count readers with indexes 0 to count - 1 together get
    the canonical order, and taking one element from each in turn gives it back in order: the
    global order of count trainer ranks with a constant global batch. Restore sharded readers
    from sluice.merge_positions of every shard's state_dict() at one step, not from one
    shard's own. Each reads the whole epoch, so the service produces it once per reader
    (docs/reading.md "Sharded deterministic reads").

    Returns an iterable Dataset; every iteration opens a reader.
    """
    _text(dataset_id, "dataset_id", allow_none=False)
    conn = _Connection(service, plugins, timeout,
                       _security(auth_token_file, tls_cert, tls_key, tls_ca), tls_worker_name)
    return Dataset(conn, processing_mode, dataset_id=dataset_id, job_name=job_name,
                   consumer_index=consumer_index, num_consumers=num_consumers,
                   max_outstanding_requests=max_outstanding_requests, local=local,
                   element_timeout=element_timeout, deterministic=deterministic,
                   reorder_bytes=reorder_bytes, cross_trainer_cache=cross_trainer_cache,
                   target_workers=target_workers, whole_copies=whole_copies,
                   worker_selector=worker_selector, weight=weight, min_workers=min_workers,
                   max_workers=max_workers, hedge=hedge, shm=shm, shm_bytes=shm_bytes,
                   shard=shard)


def distribute(pipeline, processing_mode, service, job_name=None, consumer_index=None,
               num_consumers=None, max_outstanding_requests=None, local=None, plugins=None,
               timeout=None, element_timeout=None, split_size=None, auth_token_file=None,
               tls_cert=None, tls_key=None, tls_ca=None, deterministic=False, reorder_bytes=None,
               tls_worker_name=None, cross_trainer_cache=None, target_workers=None,
               whole_copies=False, worker_selector=None, weight=None, min_workers=None,
               max_workers=None, hedge=None, shm=True, shm_bytes=None, shard=None):
    """Registers pipeline (its text or a sluice.Pipeline) and reads it from the service:
    register_dataset then from_dataset_id, with the same arguments (split_size as in register_dataset). The pipeline is checked here first (a malformed one raises
    InvalidArgumentError with the column) before the dispatcher hears of it."""
    pipeline = _pipeline(pipeline)
    conn = _Connection(service, plugins, timeout,
                       _security(auth_token_file, tls_cert, tls_key, tls_ca), tls_worker_name)
    return Dataset(conn, processing_mode, pipeline=pipeline, job_name=job_name,
                   consumer_index=consumer_index, num_consumers=num_consumers,
                   max_outstanding_requests=max_outstanding_requests, local=local,
                   element_timeout=element_timeout, split_size=split_size,
                   deterministic=deterministic, reorder_bytes=reorder_bytes,
                   cross_trainer_cache=cross_trainer_cache, target_workers=target_workers,
                   whole_copies=whole_copies, worker_selector=worker_selector, weight=weight,
                   min_workers=min_workers, max_workers=max_workers, hedge=hedge, shm=shm,
                   shm_bytes=shm_bytes, shard=shard)


def merge_positions(states):
    """One state holding what several consumers of one shared job had together, from their
    iterators' state_dict()s: restored in every consumer of a new job (all under one new
    job_name), the epoch continues exactly once across them. states that is not a non-empty
    sequence of such dicts raises ValueError naming the entry at fault; positions of different
    reads, or damaged ones, raise InvalidArgumentError."""
    what = "a list of state_dict()s of sluice iterators (dicts with 'position' bytes)"
    if isinstance(states, (str, bytes, bytearray, dict)) or not hasattr(states, "__iter__"):
        raise ValueError(f"merge_positions(): states must be {what}, not "
                         f"{type(states).__name__}")
    positions = []
    for i, st in enumerate(states):
        pos = st.get("position") if isinstance(st, dict) else None
        if not isinstance(pos, bytes):
            got = ("a dict without 'position' bytes" if isinstance(st, dict)
                   else type(st).__name__)
            raise ValueError(f"merge_positions(): states[{i}] is not a state_dict() of a sluice "
                             f"iterator (a dict with 'position' bytes): it is {got}")
        positions.append(pos)
    if not positions:
        raise ValueError(f"merge_positions(): states is empty: it must be {what}, at least one")
    return {"position": _sluice.merge_positions(positions)}


def job_state(service, job_name, step=None, timeout=None, auth_token_file=None, tls_cert=None,
              tls_key=None, tls_ca=None):
    """The position of the shared job job_name, taken from the dispatcher: the merge of the
    positions its consumers kept with their state_dict() calls, each consumer's of the latest
    step at or below `step` (None: the latest step every consumer still reading has reached, for
    trainers that checkpoint in step; "latest": each consumer's latest, for consumers that do
    not; a consumer's steps count its state_dict() calls unless it passed state_dict(step=...)).
    Works after the consumers died. Returns {"position": bytes, "step": the step taken}: load_state_dict() of a
    Dataset read by any number of consumers of one new job continues the epoch exactly once
    across them. NotFoundError when nothing is kept for the job or a consumer kept no step at or
    below `step`."""
    name = _text(job_name, "job_name")
    if not name:
        raise ValueError("job_state(): job_name is required")
    if step is None:
        at = 0
    elif step == "latest":
        at = 1 << 62
    else:
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"job_state(): step must be an int, not {type(step).__name__}")
        if not 0 < step <= 1 << 62:
            raise ValueError(f"job_state(): step must be between 1 and 2**62, None or "
                             f"'latest', not {step}")
        at = step
    conn = _Connection(service, None, timeout, _security(auth_token_file, tls_cert, tls_key, tls_ca))
    pos, cut = conn.client().job_position(name, at)
    return {"position": pos, "step": cut}


def run(pipeline, plugins=None):
    """Runs a pipeline (its text or a sluice.Pipeline) in this process, without a service (what
    `sluice run` does), and returns an iterator over its elements. plugins: plugin shared
    objects whose functions the pipeline uses, loaded as the binaries' --plugin loads them."""
    pipeline = _pipeline(pipeline)
    return _sluice.Local(pipeline, _plugins(plugins))


def status(service, timeout=None, auth_token_file=None, tls_cert=None, tls_key=None, tls_ca=None,
           dataset_id=None):
    """The dispatcher's status (what `sluice status --json` prints) as a dict. Each dataset's
    "pipeline" is its text's first 256 bytes ("pipeline_bytes" and "pipeline_digest" name the
    whole); with dataset_id, only that dataset, with its whole text."""
    _text(dataset_id, "dataset_id")
    conn = _Connection(service, None, timeout, _security(auth_token_file, tls_cert, tls_key, tls_ca))
    return _json.loads(conn.client().status(dataset_id))


def why(service, job, timeout=None, auth_token_file=None, tls_cert=None, tls_key=None,
        tls_ca=None):
    """Why job `job` waits, as `sluice status --why JOB --json` prints it: a dict with "text"
    (the paragraph `sluice status --why` prints), "input_bound" and "wait_share" (None while the
    job's consumers have not reported), "slowest_consumer", "slowest_worker" with
    "worker_rate_vs_median", "dominant_stage" with "stage_share" (None when unknown) and
    "threshold". job is a job id (an int, or its digits) or a name (its newest job).
    NotFoundError when no job matches."""
    if isinstance(job, bool) or not isinstance(job, (int, str)):
        raise TypeError(f"why(): job must be a job id or name, not {type(job).__name__}")
    key = str(job)
    if not key:
        raise ValueError("why(): job must not be empty")
    by_id = key.isascii() and key.isdigit() and len(key) <= 19
    found = None
    for j in status(service, timeout, auth_token_file, tls_cert, tls_key, tls_ca).get("jobs", []):
        # A name matches its newest job (the status lists jobs by increasing id).
        if (by_id and j.get("id") == int(key)) or j.get("name") == key:
            found = j
    if found is None:
        raise NotFoundError(f"no job '{key}'")
    attribution = found.get("why")
    if not isinstance(attribution, dict) or "text" not in attribution:
        raise RuntimeError(f"the dispatcher's status has no attribution for job '{key}'")
    return attribution


def save_snapshot(service, dataset_id, path, wait=True, timeout=None, auth_token_file=None,
                  tls_cert=None, tls_key=None, tls_ca=None):
    """Saves registered dataset dataset_id into the snapshot directory path (docs/snapshots.md):
    the workers write its elements once, in chunk files under path, with a manifest. path must be
    absolute and the same directory for the dispatcher, the workers and the readers. With wait
    (the default) returns once the save finished; a failed save raises TaskFailedError with its
    reason. The same dataset and path again is the same save (a failed one is started again).
    Returns the save's state: a dict
    with state ("running", "finished" or "failed"), save_id, dataset_id, chunks,
    chunks_committed and error. Read the snapshot with the pipeline 'snapshot("PATH")'.

    timeout (seconds) bounds each request to the dispatcher and, with wait, the wait."""
    _text(dataset_id, "dataset_id", allow_none=False)
    path = _text(_os.fspath(path), "path", allow_none=False)
    conn = _Connection(service, None, timeout, _security(auth_token_file, tls_cert, tls_key, tls_ca))
    client = conn.client()
    state = client.save_snapshot(dataset_id, path)
    if not _flag(wait, "wait") or state["state"] == "finished":
        return state
    if state["state"] == "failed":
        raise TaskFailedError(state["error"] or "the save failed")
    return client.snapshot_wait(path, _timeout_ms(timeout))


def snapshot_status(service, path, timeout=None, auth_token_file=None, tls_cert=None,
                    tls_key=None, tls_ca=None):
    """Where the save into path stands: the dict save_snapshot returns. NotFoundError when the
    dispatcher knows no save there."""
    path = _text(_os.fspath(path), "path", allow_none=False)
    conn = _Connection(service, None, timeout, _security(auth_token_file, tls_cert, tls_key, tls_ca))
    return conn.client().snapshot_status(path)


def _weights(weights):
    """A mix's weights: a non-empty sequence of real numbers, finite, >= 0, not all 0."""
    if (isinstance(weights, (str, bytes, bytearray, dict)) or not hasattr(weights, "__len__")
            or not hasattr(weights, "__getitem__")):
        raise TypeError("weights must be a sequence of numbers (one per input of the mix), not "
                        f"{type(weights).__name__}")
    out = []
    for i, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, _numbers.Real):
            raise TypeError(f"weights[{i}] must be a real number, not {type(w).__name__}")
        v = float(w)
        if not _math.isfinite(v) or v < 0:
            raise ValueError(f"weights[{i}] must be a finite number >= 0, not {w!r}")
        out.append(v)
    if not out:
        raise ValueError("weights must not be empty: one weight per input of the mix")
    if not any(out):
        raise ValueError("weights must not all be 0")
    return out


def set_weights(service, job_name, weights, dataset_id=None, at=None, auth_token_file=None,
                tls_cert=None, tls_key=None, tls_ca=None, timeout=None):
    """Changes the weights of the sample_from_datasets mix read as the distributed_epoch job
    job_name, while the job runs (tf.data has no equivalent: its weights are fixed when the
    dataset is built). Returns the output position the change takes effect at.

    weights: one finite number >= 0 per input of the mix, not all 0 (they need not sum to 1).
    Every reader of the job draws with the new weights from the same output position on: at,
    when given (an int >= 1; refused when a reader may already have passed it), else the first
    position no reader may have passed. The change is journaled by the dispatcher, and a read
    resumed from a checkpoint replays it at the same position. dataset_id: the mix's dataset,
    needed only when job_name has read more than one mix.

    Refusals: NotFoundError when no mix is read as job_name; InvalidArgumentError (a ValueError)
    for a weight count other than the mix's inputs, a position already passed, or a job_name
    naming several mixes without dataset_id; sluice.Error when the job has had too many changes.
    timeout (seconds) bounds the request to the dispatcher."""
    job_name = _text(job_name, "job_name", allow_none=False)
    if not job_name:
        raise ValueError("job_name must not be empty")
    _text(dataset_id, "dataset_id")
    weights = _weights(weights)
    if at is not None:
        if isinstance(at, bool) or not isinstance(at, int):
            raise TypeError(f"at must be an int, not {type(at).__name__}")
        if at < 1 or at >= 1 << 64:
            raise ValueError(f"at must be an output position between 1 and {(1 << 64) - 1}, "
                             f"not {at}")
    conn = _Connection(service, None, timeout, _security(auth_token_file, tls_cert, tls_key, tls_ca))
    return conn.client().set_weights(job_name, dataset_id, weights, at or 0)


class _Progress:
    """What sluice.progress returns: the iterator's elements, reporting as they come."""

    def __init__(self, it, report, every):
        self._it = it
        self._every = float(every)
        self._t0 = self._last = _time.monotonic()
        self._ended = False
        self._bar = None
        if report is None:
            try:
                import tqdm as _tqdm  # optional
                self._bar = _tqdm.tqdm(unit=" elements", dynamic_ncols=True)
            except ImportError:
                report = _print_progress
        self._report = report
        self._shown = 0

    def __iter__(self):
        return self

    def _figures(self, done):
        p = self._it.progress()
        secs = _time.monotonic() - self._t0
        fraction = eta = None
        if p["splits_total"]:
            fraction = min(1.0, p["splits_done"] / p["splits_total"])
            if 0 < fraction < 1:
                eta = secs * (1 - fraction) / fraction
        return {"elements": p["elements"], "seconds": secs,
                "elements_per_second": p["elements"] / secs if secs > 0 else 0.0,
                "splits_done": p["splits_done"], "splits_total": p["splits_total"],
                "fraction": fraction, "eta_seconds": eta, "done": done}

    def _emit(self, done):
        f = self._figures(done)
        if self._bar is not None:
            self._bar.update(f["elements"] - self._shown)
            self._shown = f["elements"]
            if f["fraction"] is not None:
                self._bar.set_postfix_str(f"{100 * f['fraction']:.0f}% of the splits")
            if done:
                self._bar.close()
        else:
            self._report(f)

    def __next__(self):
        try:
            x = next(self._it)
        except StopIteration:
            if not self._ended:
                self._ended = True
                self._emit(True)
            raise
        now = _time.monotonic()
        if now - self._last >= self._every:
            self._last = now
            self._emit(False)
        return x

    def __getattr__(self, name):
        # close(), save(), state_dict(), load_state_dict(), progress() of the iterator.
        return getattr(self._it, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._it.close()


def _print_progress(f):
    line = (f"sluice: read {f['elements']} elements  {f['elements_per_second']:.0f}/s  "
            f"{f['seconds']:.1f} s")
    if f["fraction"] is not None:
        line += f"  {100 * f['fraction']:.0f}%"
        if f["eta_seconds"] is not None:
            line += f" ETA {f['eta_seconds']:.0f} s"
    print(line, file=_sys.stderr, flush=True)


def progress(iterable, report=None, every=1.0):
    """Wraps a sluice read (an iterator, or a Dataset to iterate) so that it reports its progress
    every `every` seconds and once at its end: to report(figures) when given, a callable taking a
    dict with elements, seconds, elements_per_second, splits_done, splits_total, fraction and
    eta_seconds (None when the epoch's size is not known: not distributed_epoch, or endless) and
    done; else to a tqdm bar when tqdm is installed, else as a line on standard error. The
    wrapper iterates like the iterator and passes its other methods through (close, state_dict,
    load_state_dict, ...)."""
    it = iterable if hasattr(iterable, "progress") else iter(iterable)
    if report is not None and not callable(report):
        raise TypeError("report must be callable (or None for tqdm or standard error)")
    if not every > 0:
        raise ValueError("every must be a positive number of seconds")
    return _Progress(it, report, every)
