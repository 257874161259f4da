"""sluice.Pipeline, the builder: the exact text of every method and of the README's and the
language documentation's pipelines, every text accepted by the parser, runs equal to the text's,
Python functions from a user module on in-process and out-of-process workers, the callables and
arguments refused at the call, python3 -m sluice --version, and plugins loaded from Python."""

import itertools
import os
import pathlib
import re
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sluice
from sluice import Pipeline as P

from conftest import BIN_DIR, Server, crc32c

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLUGIN_DIR = pathlib.Path(os.environ.get("SLUICE_PLUGIN_DIR", ROOT / "build" / "plugins"))


def _parse_error_code():
    try:
        sluice.run("range(")
    except sluice.InvalidArgumentError as e:
        return e.code


PARSE_ERROR = _parse_error_code()


def parses(text):
    """Whether the pipeline parser accepts text: sluice.run opens the pipeline and a parse error
    has a code of its own; a missing file is another error, raised after parsing."""
    try:
        it = sluice.run(text)
        next(it, None)
        del it
    except sluice.Error as e:
        assert e.code != PARSE_ERROR, f"{text!r}: {e}"
    return True


def values(it):
    """Elements as plain Python values, for comparisons."""
    def one(x):
        if isinstance(x, tuple):
            return tuple(one(c) for c in x)
        if isinstance(x, np.ndarray):
            return x.tolist()
        return x
    return [one(x) for x in it]


# ---- The text of every method ------------------------------------------------------------------

TEXTS = [
    # sources
    (P.range(10), "range(10)"),
    (P.range(2, 10), "range(2, 10)"),
    (P.range(10, 0, -3), "range(10, 0, -3)"),
    (P.range(np.int64(5)), "range(5)"),
    (P.from_list([1, 2, 3]), "list(1, 2, 3)"),
    (P.from_list([1.5, -2.0, 1e20]), "list(1.5, -2.0, 1e+20)"),
    (P.from_list(["a", b"b\x00"]), 'list("a", "b\\x00")'),
    (P.from_list([True, False]), "list(true, false)"),
    (P.from_list([[1, 2], [3, 4]]), "list([1, 2], [3, 4])"),
    (P.from_list(np.arange(4).reshape(2, 2)), "list([0, 1], [2, 3])"),
    (P.from_list([(1, "x"), (2, "y")]), 'list((1, "x"), (2, "y"))'),
    (P.from_list([(np.float32(0.5), np.array([1, 2]))]), "list((0.5, [1, 2]))"),
    (P.tfrecord("shards/train-*.tfrecord"), 'tfrecord("shards/train-*.tfrecord")'),
    (P.tfrecord(["a/*.tfrecord", "b/*.tfrecord"]), 'tfrecord("a/*.tfrecord", "b/*.tfrecord")'),
    (P.tfrecord(pathlib.Path("a.tfrecord"), "b.tfrecord"), 'tfrecord("a.tfrecord", "b.tfrecord")'),
    (P.lines("data/*.txt"), 'lines("data/*.txt")'),
    (P.lines(b"data/*.txt"), 'lines("data/*.txt")'),
    (P.tar("wds/shard-*.tar", "jpg", "cls"), 'tar("wds/shard-*.tar", "jpg", "cls")'),
    (P.tar(["a.tar", "b.tar"], "seg.png"), 'tar(["a.tar", "b.tar"], "seg.png")'),
    (P.parquet("hf/train-*.parquet"), 'parquet("hf/train-*.parquet")'),
    (P.parquet("hf/train-*.parquet", "input_ids", "label=-1"),
     'parquet("hf/train-*.parquet", "input_ids", "label=-1")'),
    (P.parquet(["a.parquet", "b.parquet"], "text"), 'parquet(["a.parquet", "b.parquet"], "text")'),
    (P.jsonl("web/*.jsonl.zst", "text", "id"), 'jsonl("web/*.jsonl.zst", "text", "id")'),
    (P.jsonl(["a.jsonl"], "text"), 'jsonl(["a.jsonl"], "text")'),
    (P.megatron("/data/c4_en_text_document"), 'megatron("/data/c4_en_text_document")'),
    (P.snapshot("/data/snap/train"), 'snapshot("/data/snap/train")'),
    (P.sample_from_datasets([P.range(3), P.range(10, 13)], [0.75, 0.25], 42),
     "sample_from_datasets([(range(3)), (range(10, 13))], [0.75, 0.25], 42)"),
    (P.sample_from_datasets([P.range(3), P.range(3)], seed=1, stop_on_empty_dataset=True),
     "sample_from_datasets([(range(3)), (range(3))], [1, 1], 1, stop_on_empty)"),
    (P.choose_from_datasets([P.range(3), P.range(10, 12)], P.from_list([0, 1, 1, 0])),
     "choose_from_datasets([(range(3)), (range(10, 12))], (list(0, 1, 1, 0)))"),
    (P.choose_from_datasets([P.range(3).map("add", 1)], P.range(1), stop_on_empty_dataset=False),
     "choose_from_datasets([(range(3) | map(add, 1))], (range(1)), false)"),
    (P.from_text("range(3) | map(square)").batch(2), "range(3) | map(square) | batch(2)"),
    # operations
    (P.range(4).map("square"), "range(4) | map(square)"),
    (P.range(4).map("add", 1), "range(4) | map(add, 1)"),
    (P.range(4).map("mul", 0.5), "range(4) | map(mul, 0.5)"),
    (P.range(4).map("mod", -3), "range(4) | map(mod, -3)"),
    (P.range(4).map("bytes", 1024), "range(4) | map(bytes, 1024)"),
    (P.range(4).map("aug:flip", 0), 'range(4) | map(py, "aug:flip", 0)'),
    (P.range(4).map("py", "aug:flip", 1.5, "s", True),
     'range(4) | map(py, "aug:flip", 1.5, "s", true)'),
    (P.range(4).map("negate", plugin=True), "range(4) | map(negate)"),
    (P.range(4).filter("even"), "range(4) | filter(even)"),
    (P.range(4).filter("lt", 3), "range(4) | filter(lt, 3)"),
    (P.range(4).filter("pkg.aug:Small.check", 15),
     'range(4) | filter(py, "pkg.aug:Small.check", 15)'),
    (P.range(4).shuffle(1000), "range(4) | shuffle(1000)"),
    (P.range(4).shuffle(1000, seed=7), "range(4) | shuffle(1000, 7)"),
    (P.range(4).shuffle(1000, -7), "range(4) | shuffle(1000, -7)"),
    (P.range(4).batch(32), "range(4) | batch(32)"),
    (P.range(4).batch(32, drop_remainder=True), "range(4) | batch(32, drop_remainder)"),
    (P.range(4).take(100), "range(4) | take(100)"),
    (P.range(4).take(-1), "range(4) | take(-1)"),
    (P.range(4).skip(1), "range(4) | skip(1)"),
    (P.range(4).repeat(), "range(4) | repeat()"),
    (P.range(4).repeat(-1), "range(4) | repeat()"),
    (P.range(4).repeat(2), "range(4) | repeat(2)"),
    (P.range(4).repeat(0), "range(4) | repeat(0)"),
    (P.range(4).shard(2, 1), "range(4) | shard(2, 1)"),
    (P.range(4).shard(sluice.SHARD_HINT, sluice.SHARD_HINT),
     "range(4) | shard(SHARD_HINT, SHARD_HINT)"),
    (P.range(4).shard(sluice.SHARD_HINT, 3), "range(4) | shard(SHARD_HINT, 3)"),
    (P.range(4).prefetch(8), "range(4) | prefetch(8)"),
    (P.range(4).global_shuffle(7), "range(4) | global_shuffle(7)"),
    (P.megatron("d").pack(2048), 'megatron("d") | pack(2048)'),
    (P.megatron("d").pack(2048, "first_fit"), 'megatron("d") | pack(2048, "first_fit")'),
    (P.megatron("d").pack(128, "best_fit", 64), 'megatron("d") | pack(128, "best_fit", 64)'),
    (P.range(4).apply(lambda p: p.batch(2)), "range(4) | batch(2)"),
]


@pytest.mark.parametrize("pipeline,text", TEXTS, ids=[t for _, t in TEXTS])
def test_text_of_every_method(pipeline, text):
    assert str(pipeline) == text
    assert pipeline == P.from_text(text) and hash(pipeline) == hash(P.from_text(text))
    assert repr(pipeline) == f"sluice.Pipeline({text!r})"
    if "negate" not in text:  # a plugin's function: parsed in test_plugins_from_python
        assert parses(text)


# The README's pipelines and docs/pipelines.md's examples, built.
DOCUMENTED = [
    (P.range(4096).map("mul", 2).shuffle(512, seed=7).batch(64),
     "range(4096) | map(mul, 2) | shuffle(512, 7) | batch(64)"),
    (P.jsonl("/data/web/*.jsonl.zst", "text")
     .map("tokenize", "/data/tok/cl100k_base.tiktoken", "eos").pack(2048),
     'jsonl("/data/web/*.jsonl.zst", "text") | map(tokenize, "/data/tok/cl100k_base.tiktoken", '
     '"eos") | pack(2048)'),
    (P.range(10).map("square").filter("even").batch(2),
     "range(10) | map(square) | filter(even) | batch(2)"),
    (P.lines("data/*.txt").shuffle(1000, 7).take(100),
     'lines("data/*.txt") | shuffle(1000, 7) | take(100)'),
    (P.tfrecord("shards/train-*.tfrecord").map("bytes", 1024).batch(32, drop_remainder=True),
     'tfrecord("shards/train-*.tfrecord") | map(bytes, 1024) | batch(32, drop_remainder)'),
    (P.tar("wds/shard-*.tar", "jpg", "cls").shuffle(1000).batch(64),
     'tar("wds/shard-*.tar", "jpg", "cls") | shuffle(1000) | batch(64)'),
    (P.snapshot("/data/snap/train").shuffle(1000).batch(64),
     'snapshot("/data/snap/train") | shuffle(1000) | batch(64)'),
    (P.parquet("hf/train-*.parquet", "input_ids", "label=-1").shuffle(1000).batch(32),
     'parquet("hf/train-*.parquet", "input_ids", "label=-1") | shuffle(1000) | batch(32)'),
    (P.jsonl("web/*.jsonl.zst", "text", "id").shuffle(1000),
     'jsonl("web/*.jsonl.zst", "text", "id") | shuffle(1000)'),
    (P.megatron("/data/c4_en_text_document").global_shuffle(7),
     'megatron("/data/c4_en_text_document") | global_shuffle(7)'),
    (P.from_list([1, 2, 3]).repeat(2), "list(1, 2, 3) | repeat(2)"),
    (P.sample_from_datasets([P.jsonl("web/*.zst", "text").map("tokenize", "t.json"),
                             P.jsonl("code/*.zst", "text").map("tokenize", "t.json")],
                            [0.6, 0.4], 42).pack(2048),
     'sample_from_datasets([(jsonl("web/*.zst", "text") | map(tokenize, "t.json")), '
     '(jsonl("code/*.zst", "text") | map(tokenize, "t.json"))], [0.6, 0.4], 42) | pack(2048)'),
    (P.tfrecord("train-*.tfrecord").map("parse_example", "image:bytes", "label:int64")
     .map("decode_jpeg").map("random_crop", 224, 224)
     .map("normalize", [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]).batch(64),
     'tfrecord("train-*.tfrecord") | map(parse_example, "image:bytes", "label:int64") | '
     "map(decode_jpeg) | map(random_crop, 224, 224) | "
     "map(normalize, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]) | batch(64)"),
]


@pytest.mark.parametrize("pipeline,text", DOCUMENTED, ids=[t[:60] for _, t in DOCUMENTED])
def test_documented_pipelines(pipeline, text):
    assert str(pipeline) == text
    assert parses(text)


def test_immutable():
    p = P.range(10)
    q = p.map("square")
    r = p.batch(2)
    assert (str(p), str(q), str(r)) == \
        ("range(10)", "range(10) | map(square)", "range(10) | batch(2)")
    assert q.steps == ("range(10)", "map(square)")
    with pytest.raises(AttributeError, match="immutable"):
        p._steps = ()
    with pytest.raises(AttributeError, match="immutable"):
        p.anything = 1
    with pytest.raises(TypeError, match="Pipeline.range"):
        sluice.Pipeline()
    import pickle
    assert pickle.loads(pickle.dumps(q)) == q


# ---- Runs --------------------------------------------------------------------------------------

RUNS = [
    P.range(10).map("square").filter("even").batch(2),
    P.range(100).global_shuffle(3).take(10),
    P.range(20).shuffle(8, seed=1).skip(2).shard(3, 1),
    P.from_list([(1, [1.5, 2.0]), (2, [3.0, 4.5])]).repeat(2),
    P.from_list(["a\"b\\c\n\x01\u00e9", b"\xff\x00"]),
    P.range(7).batch(3, drop_remainder=True).prefetch(2),
    P.sample_from_datasets([P.range(30), P.range(100, 130)], [0.75, 0.25], 42).take(20),
    P.choose_from_datasets([P.range(3), P.range(10, 12)], P.from_list([0, 1, 1, 0])),
    P.range(5).map("mul", 0.5).map("add", -1),
]


@pytest.mark.parametrize("pipeline", RUNS, ids=[str(p)[:60] for p in RUNS])
def test_run_equals_text(pipeline):
    assert values(pipeline.run()) == values(sluice.run(str(pipeline)))
    assert values(sluice.run(pipeline)) == values(sluice.run(str(pipeline)))


def test_run_values():
    assert values(P.range(10).map("square").filter("even").batch(2).run()) == \
        [[0, 4], [16, 36], [64]]
    assert values(P.from_list(["a\"b\\c\n\x01\u00e9", b"\xff\x00"]).run()) == \
        ["a\"b\\c\n\x01\u00e9".encode(), b"\xff\x00"]


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecord(path, records):
    with open(path, "wb") as f:
        for r in records:
            n = struct.pack("<Q", len(r))
            f.write(n + struct.pack("<I", masked(n)) + r + struct.pack("<I", masked(r)))


def glob_escape(path):
    """A file pattern matching exactly path: glob(3)'s special characters, the backslash
    included, escaped with a backslash."""
    return re.sub(r"([\\*?\[])", r"\\\1", str(path))


def test_file_sources_with_awkward_paths(tmp_path):
    """Paths with quotes, backslashes, spaces and non-ASCII letters reach the files: file
    patterns as globs (backslash escaped for glob), a megatron prefix and a snapshot directory
    as they are."""
    import json
    d = tmp_path / 'we"ird\\dir \u00e9 [1]'
    d.mkdir()
    (d / "a.txt").write_text("x\ny\n")
    assert values(P.lines(glob_escape(d / "a.txt")).run()) == [b"x", b"y"]
    assert values(P.lines(glob_escape(d) + "/*.txt").map("bytes", 2).run()) == \
        values(sluice.run(str(P.lines(glob_escape(d) + "/*.txt").map("bytes", 2))))
    write_tfrecord(d / "r.tfrecord", [b"one", b"", b"three"])
    assert values(P.tfrecord(glob_escape(d / "r.tfrecord")).run()) == [b"one", b"", b"three"]
    with open(d / "a.jsonl", "w") as f:
        for k in range(3):
            f.write(json.dumps({"text": f"t{k}", "id": k}) + "\n")
    assert values(P.jsonl(glob_escape(d / "a.jsonl"), "text", "id").run()) == \
        [(b"t0", 0), (b"t1", 1), (b"t2", 2)]
    from test_formats import sample, write_shard
    write_shard(d / "s.tar", [m for k in range(3) for m in sample(k)])
    assert values(P.tar([glob_escape(d / "s.tar")], "cls").run()) == [b"0", b"1", b"2"]
    from test_formats import load_megatron_writer
    w = load_megatron_writer()
    docs = w.documents(np.random.default_rng(5), "int32", 5)
    w.write(str(d / "ds"), "int32", docs)
    assert len(values(P.megatron(d / "ds").run())) == len(docs)
    with pytest.raises(sluice.Error, match="not a snapshot"):
        list(P.snapshot(d).run())


def test_parquet_source(tmp_path):
    import shutil
    if not shutil.which("node"):
        pytest.skip("node (the tests' Parquet writer) is not installed")
    from test_formats import write_parquet
    write_parquet(tmp_path, 1, 1, 5)
    p = P.parquet(tmp_path / "part-00.parquet", "id", "score=-1")
    assert values(p.run()) == values(sluice.run(str(p)))
    assert [int(i) for i, _ in p.run()] == list(range(5))


# ---- Python functions --------------------------------------------------------------------------

MODULE = textwrap.dedent("""\
    def triple(x, k=3):
        return int(x) * k

    def odd(x):
        return int(x) % 2 == 1

    class Ops:
        @staticmethod
        def neg(x):
            return -int(x)

        def method(self, x):
            return x
""")

_names = itertools.count()


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module of the user's, in a directory of its own on sys.path (a new name each time)."""
    import importlib
    name = f"builder_user_mod_{os.getpid()}_{next(_names)}"
    d = tmp_path / "transforms"
    d.mkdir()
    (d / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(d))
    module = importlib.import_module(name)
    yield module, d
    sys.modules.pop(name, None)


def test_python_function_text(user_module):
    mod, _ = user_module
    n = mod.__name__
    assert str(P.range(4).map(mod.triple)) == f'range(4) | map(py, "{n}:triple")'
    assert str(P.range(4).map(mod.triple, 5)) == f'range(4) | map(py, "{n}:triple", 5)'
    assert str(P.range(4).filter(mod.odd)) == f'range(4) | filter(py, "{n}:odd")'
    assert str(P.range(4).map(mod.Ops.neg)) == f'range(4) | map(py, "{n}:Ops.neg")'


def test_python_function_runs_in_process(user_module):
    mod, _ = user_module
    p = P.range(10).filter(mod.odd).map(mod.triple, 2).map(mod.Ops.neg)
    assert [int(x) for x in p.run()] == [-2, -6, -10, -14, -18]


def test_python_function_on_in_process_workers(user_module):
    mod, d = user_module
    p = P.range(50).filter(mod.odd).map(mod.triple)
    with sluice.DispatchServer() as disp, \
            sluice.WorkerServer(disp, threads=2, python_path=d), \
            sluice.WorkerServer(disp, threads=2, python_path=d):
        got = sorted(int(x) for x in p.distribute("distributed_epoch", disp))
        assert got == [3 * k for k in range(1, 50, 2)]
        ds_id = p.register(disp)
        again = sorted(int(x) for x in sluice.from_dataset_id("distributed_epoch", disp, ds_id))
        assert again == got


def test_python_function_on_worker_processes(user_module, tmp_path):
    mod, d = user_module
    p = P.range(40).map(mod.triple, 2).filter("ge", 20)
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    dispatcher = Server([str(BIN_DIR / "sluice-dispatcher"), "--port", "0"], str(log_dir))
    workers = []
    try:
        for _ in range(2):
            workers.append(Server([str(BIN_DIR / "sluice-worker"), "--dispatcher",
                                   dispatcher.address, "--port", "0", "--python-path", str(d)],
                                  str(log_dir)))
        service = "sluice://" + dispatcher.address
        got = sorted(int(x) for x in p.distribute("distributed_epoch", service, timeout=15,
                                                  element_timeout=60))
        assert got == [2 * k for k in range(10, 40)]
    finally:
        for w in workers:
            w.stop()
        dispatcher.stop()


def _closure():
    k = 3

    def inner(x):
        return x * k
    return inner


def _nested():
    def inner(x):
        return x
    return inner


class _Callable:
    def __call__(self, x):
        return x


def test_refused_callables(user_module):
    import functools
    mod, _ = user_module
    cases = [
        (lambda x: x, ValueError, "a lambda has no name workers can import"),
        (_closure(), ValueError, "is a nested function or a closure"),
        (_nested(), ValueError, "is a nested function or a closure"),
        (mod.Ops().method, ValueError, "is a bound method"),
        ([].append, ValueError, "is a bound method"),
        (functools.partial(mod.triple, k=2), TypeError, "functools.partial"),
        (_Callable(), TypeError, "not a callable _Callable object"),
        (3, TypeError, "takes a built-in's name"),
        (None, TypeError, "takes a built-in's name"),
    ]
    for fn, exc, message in cases:
        for op in ("map", "filter"):
            with pytest.raises(exc, match=re.escape(message)):
                getattr(P.range(3), op)(fn)


def test_function_of_main_refused():
    """A function defined in the script being run (__main__) is refused with what to do."""
    script = textwrap.dedent("""\
        import sluice

        def f(x):
            return x

        try:
            sluice.Pipeline.range(3).map(f)
        except ValueError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env=dict(os.environ)).stdout
    assert "map(): 'f' is defined in __main__ (the script or notebook being run)" in out
    assert "Move it into a module" in out and "python_path" in out


def test_replaced_function_refused(user_module):
    mod, _ = user_module

    def triple(x):
        return x
    triple.__module__, triple.__qualname__ = mod.__name__, "Ops.gone"
    with pytest.raises(ValueError, match="does not name this function"):
        P.range(3).map(triple)


def test_unknown_builtin():
    with pytest.raises(ValueError, match=r"unknown built-in function 'squre' \(did you mean "
                                         r"'square'\?\).*plugin=True"):
        P.range(3).map("squre")
    with pytest.raises(ValueError, match=r"'even' is a function for filter\(\)"):
        P.range(3).map("even")
    with pytest.raises(ValueError, match=r"'square' is a function for map\(\)"):
        P.range(3).filter("square")
    with pytest.raises(TypeError, match="add takes 1 argument after the function, not 0"):
        P.range(3).map("add")
    with pytest.raises(TypeError, match="square takes 0 arguments after the function, not 1"):
        P.range(3).map("square", 2)
    with pytest.raises(ValueError, match="is not a function name"):
        P.range(3).map("no such")
    with pytest.raises(ValueError, match="is not 'module:function'"):
        P.range(3).map("aug:")
    with pytest.raises(TypeError, match="at most 16 extra arguments"):
        P.range(3).map("aug:f", *range(17))


# ---- Bad arguments -----------------------------------------------------------------------------

BAD = [
    (lambda: P.range(3).batch(0), ValueError, r"batch\(\) batch_size must be at least 1, not 0"),
    (lambda: P.range(3).batch(-2), ValueError, "batch_size must be at least 1"),
    (lambda: P.range(3).batch("2"), TypeError, r"batch\(\) batch_size must be an int, not str"),
    (lambda: P.range(3).batch(2.0), TypeError, "must be an int, not float"),
    (lambda: P.range(3).batch(True), TypeError, "must be an int, not bool"),
    (lambda: P.range(3).batch(2, drop_remainder=1), TypeError, "drop_remainder must be a bool"),
    (lambda: P.range(3).shuffle(-1), ValueError,
     r"shuffle\(\) buffer_size must be at least 1, not -1"),
    (lambda: P.range(3).shuffle(0), ValueError, "buffer_size must be at least 1"),
    (lambda: P.range(3).shuffle(10, seed="7"), TypeError, "seed must be an int"),
    (lambda: P.range(3).take(-2), ValueError,
     r"take\(\) count must be >= 0 \(or -1 for all\), not -2"),
    (lambda: P.range(3).skip(-5), ValueError, r"skip\(\) count must be >= 0 \(or -1 for all\)"),
    (lambda: P.range(3).repeat(-2), ValueError, r"repeat\(\) count must be >= 0"),
    (lambda: P.range(3).shard(0, 0), ValueError, "num_shards must be at least 1"),
    (lambda: P.range(3).shard(2, 2), ValueError, r"shard\(\) index must be in \[0, 2\), not 2"),
    (lambda: P.range(3).shard(2, -1), ValueError, r"index must be in \[0, 2\)"),
    (lambda: P.range(3).prefetch(0), ValueError, "prefetch.. buffer_size must be at least 1"),
    (lambda: P.range(3).pack(0), ValueError, r"pack\(\) sequence_length must be between 1"),
    (lambda: P.range(3).pack(16, "worst_fit"), ValueError, "'best_fit' or 'first_fit'"),
    (lambda: P.range(3).pack(16, "best_fit", 5000), ValueError,
     "window must be between 1 and 4096"),
    (lambda: P.range(3).pack(1 << 24), ValueError, "give a smaller window"),
    (lambda: P.range(3).map("square").global_shuffle(1), ValueError,
     "must come right after the source"),
    (lambda: P.range(3).global_shuffle(1).global_shuffle(2), ValueError,
     "must come right after the source"),
    (lambda: P.sample_from_datasets([P.range(2)], [1], 1).global_shuffle(1), ValueError,
     "a mix has none"),
    (lambda: P.range(3).global_shuffle(None), TypeError, "needs a seed"),
    (lambda: P.range(), TypeError, r"range\(\) takes 1 to 3 arguments"),
    (lambda: P.range(1, 2, 0), ValueError, "step must not be zero"),
    (lambda: P.range(1 << 63), ValueError, "stop must be between"),
    (lambda: P.range("3"), TypeError, "stop must be an int"),
    (lambda: P.from_list([]), ValueError, "at least one value"),
    (lambda: P.from_list("abc"), TypeError, "takes a list of values"),
    (lambda: P.from_list({1, 2}), TypeError, "takes a list of values, not set"),
    (lambda: P.from_list([[]]), ValueError, "a list must hold at least one value"),
    (lambda: P.from_list([{1: 2}]), TypeError, "not dict"),
    (lambda: P.from_list([(1,)]), ValueError, "2 to 64 components"),
    (lambda: P.range(3).map("mul", float("nan")), ValueError, "must be a finite number"),
    (lambda: P.range(3).map("add", (1, 2)), TypeError, "a tuple is only allowed"),
    (lambda: P.range(3).map("square", plugin="yes"), TypeError, "plugin must be a bool"),
    (lambda: P.lines(3), TypeError, r"lines\(\) must be a str or a path-like object, not int"),
    (lambda: P.lines(""), ValueError, "must not be empty"),
    (lambda: P.lines([]), ValueError, "at least one file pattern"),
    (lambda: P.lines("a\0b"), ValueError, "NUL"),
    (lambda: P.tfrecord(None), TypeError, "path-like"),
    (lambda: P.tar("a.tar"), ValueError, "at least one member extension"),
    (lambda: P.tar("a.tar", ".jpg"), ValueError, "without its dot: 'jpg'"),
    (lambda: P.tar("a.tar", "jpg", "jpg"), ValueError, "named once"),
    (lambda: P.tar("a.tar", 3), TypeError, "extension must be a str"),
    (lambda: P.jsonl("a.jsonl"), ValueError, "at least one field"),
    (lambda: P.parquet("a.parquet", None), TypeError, "column must be a str"),
    (lambda: P.snapshot(""), ValueError, "directory must not be empty"),
    (lambda: P.megatron(None), TypeError, "prefix must be a str"),
    (lambda: P.sample_from_datasets([P.range(2), P.range(3)], [1], 7), ValueError,
     "1 weights for 2 datasets"),
    (lambda: P.sample_from_datasets([P.range(2)], [-1], 7), ValueError, "negative"),
    (lambda: P.sample_from_datasets([P.range(2)], [0], 7), ValueError, "all 0"),
    (lambda: P.sample_from_datasets([P.range(2)], [1]), TypeError, "needs a seed"),
    (lambda: P.sample_from_datasets(["range(2)"], [1], 1), TypeError,
     r"datasets\[0\] must be a Pipeline, not str"),
    (lambda: P.sample_from_datasets([], [], 1), ValueError, "1 to 64 datasets"),
    (lambda: P.choose_from_datasets([P.range(2)], "range(1)"), TypeError,
     "choice_dataset must be a Pipeline"),
    (lambda: P.choose_from_datasets([P.range(2)], P.range(1), stop_on_empty_dataset=None),
     TypeError, "stop_on_empty_dataset must be a bool"),
    (lambda: P.range(3).apply(lambda p: "x"), TypeError, "returned str, not a Pipeline"),
    (lambda: P.from_text(3), TypeError, "text must be a str"),
    (lambda: sluice.run(3), TypeError, "pipeline must be a str or a sluice.Pipeline"),
]


@pytest.mark.parametrize("make,exc,message", BAD, ids=[m[:50] for _, _, m in BAD])
def test_bad_arguments(make, exc, message):
    with pytest.raises(exc, match=message):
        make()


def test_torch_dataset_takes_a_pipeline():
    pytest.importorskip("torch")
    import sluice.torch
    p = P.range(8).batch(4)
    with sluice.DispatchServer() as d, sluice.WorkerServer(d):
        ds = sluice.torch.IterableDataset(d, pipeline=p)
        assert ds.pipeline == "range(8) | batch(4)"
        assert sorted(b.tolist() for b in ds) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_errors_before_any_server():
    """A builder error is raised before the service is looked at: nothing listens there."""
    with pytest.raises(ValueError, match="batch_size"):
        P.range(3).batch(0).distribute("distributed_epoch", "sluice://127.0.0.1:1", timeout=0.1)


def test_readme_first_python_example():
    """The README's first Python example (the builder's) runs as printed."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## From Python\n", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "sluice.Pipeline." in code
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["range(10) | map(square) | filter(even) | batch(2)",
                                       "[[0, 4], [16, 36], [64]]", "[[0, 4], [16, 36], [64]]"]


# ---- python3 -m sluice --------------------------------------------------------------------------

def test_module_version():
    out = subprocess.run([sys.executable, "-m", "sluice", "--version"], capture_output=True,
                         text=True, check=True)
    assert out.stdout == f"sluice {sluice.__version__}\n"
    assert re.fullmatch(r"sluice \d+\.\d+\.\d+\n", out.stdout)
    usage = subprocess.run([sys.executable, "-m", "sluice"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: python3 -m sluice" in usage.stderr


# ---- Plugins -----------------------------------------------------------------------------------

@pytest.fixture
def plugin():
    path = PLUGIN_DIR / "plugin_test.so"
    if not path.exists():
        pytest.skip(f"{path} is not built (SLUICE_PLUGIN_DIR)")
    return str(path)


def test_plugins_from_python(plugin):
    """A plugin's functions reach the sluice_* API from Python: each case in a fresh interpreter,
    so none is helped by an earlier load."""
    cases = {
        "run": f"""
            print([int(x) for x in sluice.run("range(-2, 3) | map(negate) | filter(positive)",
                                              plugins=[{plugin!r}])])""",
        "builder": f"""
            p = sluice.Pipeline.range(-2, 3).map("negate", plugin=True) \
                .filter("positive", plugin=True)
            print([int(x) for x in p.run(plugins=[{plugin!r}])])""",
        "worker": f"""
            with sluice.DispatchServer() as d, sluice.WorkerServer(d, plugins=[{plugin!r}]):
                print(sorted(int(x) for x in sluice.distribute(
                    "range(-2, 3) | map(negate) | filter(positive)", "distributed_epoch", d,
                    plugins=[{plugin!r}])))""",
    }
    for name, body in cases.items():
        script = "import sluice\n" + textwrap.dedent(body)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        assert out.returncode == 0, f"{name}: {out.stderr}"
        assert out.stdout.split("\n")[-2] in ("[2, 1]", "[1, 2]"), f"{name}: {out.stdout}"
