"""Python functions in pipelines (map(py, "module:function"), filter(py, ...)) run by workers
inside this interpreter (sluice.WorkerServer), by local runs and by local tails: the conversion
rules both ways, extra arguments, exact errors, functions that modify their input, and a
program that exits while its worker runs Python."""

import itertools
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sluice

MODULE = textwrap.dedent("""\
    import numpy as np

    def square(x):
        return int(x) * int(x)

    def bad(x):
        if int(x) == 3:
            raise ValueError("bad pixel")
        return x

    def pair(x):
        return (np.int32(x), np.array([x, -x], dtype=np.int16), b"p%d" % int(x))

    def scaled(x, k, offset, name, flag):
        return (int(x) * k + offset, name.encode() if flag else b"")

    def odd(x):
        return int(x) % 2 == 1

    def bump(x):
        x += 100
        return x

    def bump_all(x):
        for a in x:
            a += 100
        return x

    def shape(x):
        return (x, str(x.dtype).encode(), np.array(x.shape), x.flags.writeable)

    def ident(x):
        return x

    def make(x, kind):
        return MAKERS[kind](int(x))

    MAKERS = {
        "bool": lambda i: i % 2 == 0,
        "int": lambda i: i - 2,
        "float": lambda i: i / 4,
        "bytes": lambda i: b"b" * i,
        "uint8": lambda i: np.arange(i, dtype=np.uint8),
        "float32": lambda i: np.float32(i / 2),
        "bigendian": lambda i: np.arange(i, dtype=">i4"),
        "strided": lambda i: np.arange(4 * i, dtype=np.int64).reshape(i, 4)[:, ::2],
        "objects": lambda i: np.array([b"x" * i, b"y"], dtype=object),
        "fixed": lambda i: np.array([b"ab", b"c"]),
        "none": lambda i: None,
        "str": lambda i: "s",
        "float16": lambda i: np.zeros(2, dtype=np.float16),
        "huge": lambda i: 2 ** 70,
        "nested": lambda i: (1, (2, 3)),
        "empty": lambda i: (),
        "strobjects": lambda i: np.array(["a"], dtype=object),
    }
""")

_names = itertools.count()


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A fresh module on sys.path (a new name each time, so no test sees another's import)."""
    name = f"pyfn_mod_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture
def cluster(tmp_path):
    """Two in-process workers whose python_path is the directory of the test's module.
    A case may leave elements unread (a read that failed): the workers' drain at the end waits
    for no reader that is gone (test_drain_outage.py tests that wait)."""
    with sluice.DispatchServer() as d, \
            sluice.WorkerServer(d, threads=2, python_path=tmp_path, drain_timeout_ms=200), \
            sluice.WorkerServer(d, threads=2, python_path=tmp_path, drain_timeout_ms=200):
        yield d


def read(d, pipeline, mode, **kw):
    return list(sluice.distribute(pipeline, mode, d, **kw))


def test_in_process_workers_both_modes(module, cluster):
    p = f'range(200) | map(py, "{module}:square")'
    assert sorted(int(x) for x in read(cluster, p, "distributed_epoch")) == \
        [i * i for i in range(200)]
    assert sorted(int(x) for x in read(cluster, p, "parallel_epochs")) == \
        sorted([i * i for i in range(200)] * 2)

    got = read(cluster, f'range(4) | map(py, "{module}:pair")', "distributed_epoch")
    assert sorted((int(a), b.tolist(), c) for a, b, c in got) == \
        [(i, [i, -i], b"p%d" % i) for i in range(4)]
    assert all(a.dtype == np.int32 and b.dtype == np.int16 for a, b, _ in got)

    got = read(cluster, f'range(300) | filter(py, "{module}:odd") | map(py, "{module}:square")',
               "distributed_epoch")
    assert sorted(int(x) for x in got) == [i * i for i in range(1, 300, 2)]

    got = read(cluster, f'range(3) | map(py, "{module}:scaled", 3, 0.5, "ab", true)',
               "parallel_epochs")
    assert sorted((float(a), b) for a, b in got) == sorted([(0.5, b"ab"), (3.5, b"ab"),
                                                            (6.5, b"ab")] * 2)
    got = read(cluster, f'range(2) | map(py, "{module}:scaled", 1, 0, "ab", false)',
               "distributed_epoch")
    assert sorted((int(a), b) for a, b in got) == [(0, b""), (1, b"")]


def test_python_path(tmp_path):
    (tmp_path / "pyfn_path_mod.py").write_text("def neg(x):\n    return -int(x)\n")
    assert str(tmp_path) not in sys.path
    try:
        with sluice.DispatchServer() as d, sluice.WorkerServer(d, python_path=tmp_path):
            assert sys.path[0] == str(tmp_path)
            got = read(d, 'range(5) | map(py, "pyfn_path_mod:neg")', "distributed_epoch")
            assert sorted(int(x) for x in got) == [-4, -3, -2, -1, 0]
            # A directory already on sys.path stays where it is.
            with sluice.WorkerServer(d, python_path=[str(tmp_path)]):
                assert sys.path.count(str(tmp_path)) == 1
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.raises(TypeError, match="python_path must hold str or path-like objects"):
        sluice.WorkerServer("127.0.0.1:1", python_path=[3])


def test_errors_reach_the_reader(module, cluster):
    cases = [
        ('range(5) | map(py, "pyfn_nosuch:flip")',
         "map(py, \"pyfn_nosuch:flip\"): module 'pyfn_nosuch' is not in the worker's "
         "--python-path"),
        # Served pipelines reach only the workers' python_path, though this interpreter
        # imports the standard library, numpy and the test's own modules.
        ('range(1) | map(py, "os:system", "touch /tmp/sluice-pwned")',
         "map(py, \"os:system\"): module 'os' is not in the worker's --python-path"),
        ('range(1) | filter(py, "numpy:isnan")',
         "filter(py, \"numpy:isnan\"): module 'numpy' is not in the worker's --python-path"),
        ('range(1) | map(py, "sluice:run")',
         "map(py, \"sluice:run\"): module 'sluice' is not in the worker's --python-path"),
        (f'list("/etc/passwd") | map(py, "{module}:__loader__.get_data")',
         f'map(py, "{module}:__loader__.get_data"): {module}:__loader__.get_data is defined in '
         "module '_frozen_importlib_external', which is not in the worker's --python-path"),
        (f'range(1) | map(py, "{module}:np.load")',
         f"map(py, \"{module}:np.load\"): {module}:np.load leads into module 'numpy'; name a "
         f"function of module '{module}' itself"),
        (f'range(5) | filter(py, "{module}:flip")',
         f"filter(py, \"{module}:flip\"): AttributeError: module '{module}' has no attribute "
         "'flip'"),
        (f'range(5) | map(py, "{module}:bad")',
         f'map(py, "{module}:bad"): ValueError: bad pixel ({module}.py:8)'),
        (f'range(5) | map(py, "{module}:make", "none")',
         f'map(py, "{module}:make"): returned NoneType, expected a numpy array, a number, bytes '
         "or a tuple of them"),
        (f'range(5) | map(py, "{module}:MAKERS")',
         f'map(py, "{module}:MAKERS"): TypeError: {module}:MAKERS is dict, which is not callable'),
    ]
    for pipeline, message in cases:
        for mode in ("distributed_epoch", "parallel_epochs"):
            with pytest.raises(sluice.TaskFailedError) as e:
                read(cluster, pipeline, mode)
            assert str(e.value) == message, (pipeline, mode)
    with pytest.raises(sluice.InvalidArgumentError) as e:
        read(cluster, f'range(5) | map(py, "{module}.square")', "parallel_epochs")
    assert str(e.value) == \
        f'column 12: map(py): expected "module:function", got "{module}.square"'


def test_functions_may_modify_their_input(module, cluster):
    # The list() source's values are reused on every pass of the repeat: a function writing
    # into them would show 201, 301, ... on later passes.
    got = read(cluster, f'list([1, 2], [3, 4]) | repeat(3) | map(py, "{module}:bump") | '
                        f'map(py, "{module}:bump")', "distributed_epoch")
    assert sorted(x.tolist() for x in got) == [[201, 202]] * 3 + [[203, 204]] * 3
    got = read(cluster, f'list(([1, 2], [5]), ([3, 4], [6])) | map(py, "{module}:bump_all")',
               "parallel_epochs")
    assert sorted((a.tolist(), b.tolist()) for a, b in got) == \
        [([101, 102], [105])] * 2 + [([103, 104], [106])] * 2
    # What a function gets: writable arrays of the element's dtype and shape.
    (x, dtype, shape, writeable), = sluice.run(
        f'list([1.5, 2.5]) | map(py, "{module}:shape")')
    assert (x.tolist(), dtype, shape.tolist(), bool(writeable)) == \
        ([1.5, 2.5], b"float64", [2], True)


def test_conversion_of_results(module):
    def one(kind, i=2):
        out = list(sluice.run(f'list({i}) | map(py, "{module}:make", "{kind}")'))
        assert len(out) == 1
        return out[0]

    assert (one("bool").dtype, bool(one("bool"))) == (np.bool_, True)
    assert (one("int").dtype, int(one("int"))) == (np.int64, 0)
    assert (one("float").dtype, float(one("float"))) == (np.float64, 0.5)
    assert one("bytes") == b"bb"
    assert one("uint8", 3).dtype == np.uint8 and one("uint8", 3).tolist() == [0, 1, 2]
    assert (one("float32").dtype, float(one("float32"))) == (np.float32, 1.0)
    assert one("bigendian", 3).dtype == np.int32 and one("bigendian", 3).tolist() == [0, 1, 2]
    assert one("strided").tolist() == [[0, 2], [4, 6]]
    assert one("objects").tolist() == [b"xx", b"y"]
    assert one("fixed").tolist() == [b"ab", b"c"]

    # What a reader gets goes back unchanged: bytes tensors, bools, tuples of several dtypes.
    for literal in ('["a", "bc"]', '[[true], [false]]', '(7, [1.5, 2.5], "s", [["x"]])'):
        direct = list(sluice.run(f"list({literal})"))
        through = list(sluice.run(f'list({literal}) | map(py, "{module}:ident")'))
        assert repr(through) == repr(direct), literal

    errors = {
        "none": "returned NoneType, expected a numpy array, a number, bytes or a tuple of them",
        "str": "returned str, expected a numpy array, a number, bytes or a tuple of them",
        "float16": "returned a numpy array of dtype float16, which sluice cannot hold",
        "huge": "returned an int outside int64, expected a numpy array, a number or bytes",
        "nested": "returned a tuple whose item 1 is tuple, expected a numpy array, a number or "
                  "bytes",
        "empty": "returned an empty tuple, expected a numpy array, a number, bytes or a tuple "
                 "of them",
        "strobjects": "returned a numpy object array holding str, expected bytes",
    }
    for kind, message in errors.items():
        with pytest.raises(sluice.Error) as e:
            one(kind)
        assert str(e.value) == f'map(py, "{module}:make"): {message}', kind


def test_local_runs_and_tails(module, cluster):
    got = list(sluice.run(f'range(6) | filter(py, "{module}:odd") | map(py, "{module}:square")'))
    assert [int(x) for x in got] == [1, 9, 25]
    got = read(cluster, "range(4)", "distributed_epoch", local=f'map(py, "{module}:square")')
    assert sorted(int(x) for x in got) == [0, 1, 4, 9]
    # A prefetch runs the function on a thread of its own; closing early joins it.
    it = sluice.run(f'range(100000) | map(py, "{module}:square") | prefetch(8)')
    assert int(next(it)) == 0
    del it


def test_exit_while_a_worker_runs_python(module, tmp_path):
    script = textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import sluice
        d = sluice.DispatchServer()
        w = sluice.WorkerServer(d, threads=2, python_path={str(tmp_path)!r})
        it = iter(sluice.distribute('range(1000000000) | map(py, "{module}:square")',
                                    "parallel_epochs", d))
        print(int(next(it)), int(next(it)), flush=True)
        # Exits with the worker running Python and the reader open.
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (0, "0 1\n"), done.stderr


def test_endless_function_is_interrupted(tmp_path):
    """A function in an endless loop is interrupted at its next bytecode boundary when its task
    stops: the worker's stop (which drains first) returns, and the process exits, within a
    bounded time; the function sees SluiceCancelled, a BaseException."""
    (tmp_path / "pyfn_spin.py").write_text(textwrap.dedent("""\
        seen = []

        def spin(x):
            try:
                while True:
                    pass
            except Exception:
                seen.append("Exception")
                raise
            except BaseException as e:
                seen.append(type(e).__name__)
                raise
    """))
    script = textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {str(tmp_path)!r})
        import sluice, pyfn_spin
        d = sluice.DispatchServer()
        w = sluice.WorkerServer(d, threads=1, python_path={str(tmp_path)!r})
        it = iter(sluice.distribute('range(4) | map(py, "pyfn_spin:spin")', "parallel_epochs", d,
                                    element_timeout=1))
        try:
            next(it)
        except sluice.TimeoutError:
            pass
        t0 = time.monotonic()
        w.stop()
        print(round(time.monotonic() - t0) < 20, pyfn_spin.seen[:1], flush=True)
        d.stop()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout) == (0, "True ['SluiceCancelled']\n"), done.stderr
