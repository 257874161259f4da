"""sluice.Pipeline: pipelines built from Python calls, with tf.data's names.

A Pipeline is an immutable value holding the text of a pipeline in sluice's pipeline language
(docs/pipelines.md); every method returns a new Pipeline with one more step, and str(p) is the
text, steps joined by " | ". Arguments are checked when the method is called, so a bad one
raises ValueError or TypeError at the line that wrote it, before any server is contacted.
"""

import difflib as _difflib
import functools as _functools
import math as _math
import numbers as _numbers
import os as _os
import re as _re
import sys as _sys
import types as _types

__all__ = ["Pipeline", "SHARD_HINT"]

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


class _ShardHint:
    """tf.data's SHARD_HINT: in shard(), a count or index the hint sharding mode fills in."""

    __slots__ = ()

    def __repr__(self):
        return "sluice.SHARD_HINT"

    def __reduce__(self):
        return "SHARD_HINT"


SHARD_HINT = _ShardHint()

# The built-in functions (docs/pipelines.md, "Functions"): name -> (min args, max args).
_MAP_BUILTINS = {
    "square": (0, 0), "add": (1, 1), "mul": (1, 1), "mod": (1, 1), "identity": (0, 0),
    "sleep_us": (1, 1), "wait_us": (1, 1), "bytes": (1, 1), "parse_example": (1, 64),
    "decode_jpeg": (0, 1), "resize": (2, 2), "center_crop": (2, 2), "random_crop": (2, 3),
    "normalize": (2, 2), "tokenize": (1, 4), "py": (1, 17),
}
_FILTER_BUILTINS = {"even": (0, 0), "odd": (0, 0), "lt": (1, 1), "ge": (1, 1), "py": (1, 17)}
_BUILTINS = {"map": _MAP_BUILTINS, "filter": _FILTER_BUILTINS}
_PY_MAX_ARGS = 16

_IDENT = _re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_PY_TARGET = _re.compile(_DOTTED + ":" + _DOTTED + r"\Z")


# ---- Literals ---------------------------------------------------------------------------------

def _quote(value, what):
    """A string literal of the pipeline language holding value (str, bytes or path-like): \\\\,
    \\", \\n and \\t escaped, other control bytes (and bytes that are not UTF-8) as \\xNN, the
    rest as it is."""
    if isinstance(value, _os.PathLike):
        value = _os.fspath(value)
    if isinstance(value, (bytes, bytearray)):
        text = bytes(value).decode("utf-8", "surrogateescape")
    elif isinstance(value, str):
        # Undecodable bytes of file names (os.fsdecode) are lone surrogates: back to bytes.
        text = value.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")
    else:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    out = ['"']
    for ch in text:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _path(value, what):
    """A file pattern, directory or prefix: a non-empty str or path-like without NUL bytes."""
    if isinstance(value, _os.PathLike):
        value = _os.fspath(value)
    if isinstance(value, bytes):
        value = _os.fsdecode(value)
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str or a path-like object, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if "\0" in value:
        raise ValueError(f"{what} must not contain a NUL byte")
    return _quote(value, what)


def _int(value, what, minimum=_I64_MIN, maximum=_I64_MAX, hint=None):
    """An int argument (numpy integers too; not bool) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, _numbers.Integral):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    value = int(value)
    if not minimum <= value <= maximum:
        if hint is None:
            hint = (f"at least {minimum}" if maximum == _I64_MAX and minimum != _I64_MIN
                    else f"between {minimum} and {maximum}")
        raise ValueError(f"{what} must be {hint}, not {value}")
    return value


def _number(value, what):
    """An int or a finite float, as the pipeline language writes it."""
    if isinstance(value, bool) or not isinstance(value, _numbers.Real):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if isinstance(value, _numbers.Integral):
        return str(_int(value, what))
    f = float(value)
    if not _math.isfinite(f):
        raise ValueError(f"{what} must be a finite number, not {f!r}")
    return repr(f)  # always with a '.' or an exponent, so it stays a float


def _value(value, what, tuple_ok=False, depth=0):
    """A literal value: bool, int, float, str, bytes, a list (a tensor: [a, b]), a numpy array or
    scalar, and where tuple_ok a tuple (an element of several components: (a, b))."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy arrays, scalars
        value = value.tolist()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _numbers.Real):
        return _number(value, what)
    if isinstance(value, (str, bytes, bytearray)):
        return _quote(value, what)
    if isinstance(value, list):
        if not value:
            raise ValueError(f"{what}: a list must hold at least one value")
        if depth >= 8:
            raise ValueError(f"{what}: lists nest at most 8 deep")
        return "[" + ", ".join(_value(v, what, False, depth + 1) for v in value) + "]"
    if isinstance(value, tuple):
        if not tuple_ok:
            raise TypeError(f"{what}: a tuple is only allowed as a whole element of from_list()")
        if not 2 <= len(value) <= 64:
            raise ValueError(f"{what}: a tuple has 2 to 64 components, not {len(value)}")
        return "(" + ", ".join(_value(v, what, False, depth) for v in value) + ")"
    raise TypeError(f"{what} must be a bool, int, float, str, bytes, list or numpy array, "
                    f"not {type(value).__name__}")


def _patterns(first, more, what):
    """One or more file patterns: (first, *more), first possibly a list of them."""
    if isinstance(first, (list, tuple)):
        items = list(first) + list(more)
    else:
        items = [first] + list(more)
    if not items:
        raise ValueError(f"{what} needs at least one file pattern")
    return [_path(p, what) for p in items]


def _pattern_arg(patterns, what):
    """tar/parquet/jsonl's first argument: one pattern, or a list of them written as a list."""
    if isinstance(patterns, (list, tuple)):
        if not patterns:
            raise ValueError(f"{what} needs at least one file pattern")
        return "[" + ", ".join(_path(p, what) for p in patterns) + "]"
    return _path(patterns, what)


def _names(values, what, name):
    out = []
    for v in values:
        if not isinstance(v, str):
            raise TypeError(f"{what}: each {name} must be a str, not {type(v).__name__}")
        if "\0" in v:
            raise ValueError(f"{what}: a {name} must not contain a NUL byte")
        out.append(v)
    return out


# ---- Functions --------------------------------------------------------------------------------

def _fn_problem(fn, op):
    """What makes fn unusable by workers, or None."""
    where = f"{op}(): {getattr(fn, '__qualname__', fn)!r}"
    if isinstance(fn, _types.MethodType) or (
            isinstance(fn, _types.BuiltinMethodType)
            and not isinstance(getattr(fn, "__self__", None), (_types.ModuleType, type(None)))):
        return ValueError(
            f"{where} is a bound method: workers call functions by their module and name and "
            f"cannot rebuild the object it is bound to. Use a module-level function (or a "
            f"staticmethod) and pass what it needs from the object as extra arguments: "
            f".{op}(fn, 0.5, \"mode\")")
    if getattr(fn, "__name__", None) == "<lambda>":
        return ValueError(
            f"{op}(): a lambda has no name workers can import. Define the function with def at "
            f"the top level of a module (in a directory the workers have on their python_path) "
            f"and pass it: .{op}(module.function)")
    qualname = getattr(fn, "__qualname__", "") or ""
    if "<locals>" in qualname or getattr(fn, "__closure__", None):
        return ValueError(
            f"{where} is a nested function or a closure, which workers cannot import by name. "
            f"Define it at the top level of a module and pass the values it captures as extra "
            f"arguments: .{op}(fn, 3)")
    module = getattr(fn, "__module__", None)
    if module == "__main__":
        return ValueError(
            f"{where} is defined in __main__ (the script or notebook being run), which workers "
            f"cannot import. Move it into a module (e.g. transforms.py) in a directory the "
            f"workers have on their python_path (WorkerServer(python_path=...), sluice-worker "
            f"--python-path), import it from there and pass that function")
    if not module or not qualname:
        return ValueError(f"{where} has no module or name that workers could import it by")
    obj = _sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn:
        return ValueError(
            f"{where}: {module}:{qualname} does not name this function (it was replaced, or is "
            f"not reachable by that name), so workers could not import it. Pass a function "
            f"defined with def at the top level of a module")
    return None


def _py_target(fn, op):
    """'module:qualname' of a Python function workers can import, or an error saying why not."""
    if isinstance(fn, _functools.partial):
        raise TypeError(f"{op}(): a functools.partial cannot be sent to workers; pass the "
                        f"function and its extra arguments instead: .{op}(fn, 3, \"x\")")
    if not isinstance(fn, (_types.FunctionType, _types.MethodType, _types.BuiltinFunctionType)):
        if callable(fn):
            raise TypeError(
                f"{op}() takes a built-in's name or a module-level Python function, not a "
                f"callable {type(fn).__name__} object: workers call functions by their module "
                f"and name. Use a module-level function, passing the object's settings as extra "
                f"arguments")
        raise TypeError(f"{op}() takes a built-in's name (a str such as 'square'), "
                        f"'module:function', or a module-level Python function, not "
                        f"{type(fn).__name__}")
    problem = _fn_problem(fn, op)
    if problem is not None:
        raise problem
    target = f"{fn.__module__}:{fn.__qualname__}"
    if not _PY_TARGET.match(target):
        raise ValueError(f"{op}(): {target!r} is not a 'module:function' name workers can import")
    return target


def _fn_step(op, fn, args, plugin):
    """The text of map(...) or filter(...)."""
    if not isinstance(plugin, bool):
        raise TypeError(f"{op}(): plugin must be a bool, not {type(plugin).__name__}")
    if isinstance(fn, str) and ":" in fn:
        if not _PY_TARGET.match(fn):
            raise ValueError(f"{op}(): {fn!r} is not 'module:function' (dotted names on "
                             f"both sides, as 'pkg.aug:Flip.apply')")
        name, args = "py", (fn,) + tuple(args)
    elif isinstance(fn, str):
        name = fn
        if not _IDENT.match(name):
            raise ValueError(f"{op}(): {name!r} is not a function name")
        table = _BUILTINS[op]
        if name in table:
            lo, hi = table[name]
            if not lo <= len(args) <= hi:
                want = str(lo) if lo == hi else f"{lo} to {hi}"
                raise TypeError(f"{op}(): {name} takes {want} argument{'s' * (hi != 1)} after "
                                f"the function, not {len(args)}")
        elif not plugin:
            other = "filter" if op == "map" else "map"
            hint = ""
            if name in _BUILTINS[other]:
                hint = f" ({name!r} is a function for {other}())"
            else:
                close = _difflib.get_close_matches(name, table, 1)
                if close:
                    hint = f" (did you mean {close[0]!r}?)"
            raise ValueError(
                f"{op}(): unknown built-in function {name!r}{hint}. The built-ins for {op} are "
                f"{', '.join(n for n in sorted(table) if n != 'py')}; a Python function is "
                f"passed itself or as 'module:function'; a plugin's function is named with "
                f"plugin=True: .{op}({name!r}, plugin=True)")
    else:
        name, args = "py", (_py_target(fn, op),) + tuple(args)
    if name == "py" and len(args) - 1 > _PY_MAX_ARGS:
        raise TypeError(f"{op}(): a Python function takes at most {_PY_MAX_ARGS} extra "
                        f"arguments, not {len(args) - 1}")
    parts = [name] + [_value(a, f"{op}() argument {i + 1}") for i, a in enumerate(args)]
    return f"{op}({', '.join(parts)})"


# ---- The builder ------------------------------------------------------------------------------

class Pipeline:
    """A pipeline built from Python calls, mirroring tf.data's names.

    Start with a source (a class method: Pipeline.range(10), Pipeline.tfrecord("train-*"),
    Pipeline.sample_from_datasets([...], ...)) and chain operations; each call returns a new
    Pipeline and leaves the one it was called on as it was::

        p = sluice.Pipeline.range(4096).map("mul", 2).shuffle(512, seed=7).batch(64)
        str(p)   # 'range(4096) | map(mul, 2) | shuffle(512, 7) | batch(64)'

    str(p) is the pipeline's text in sluice's pipeline language (docs/pipelines.md), the form
    the service, the command line and every sluice call take; sluice.run, distribute and
    register_dataset take a Pipeline wherever they take the text. Arguments are checked when
    a method is called (ValueError, TypeError); what only the data can tell (a file that does
    not exist, an element of the wrong dtype) fails when the pipeline runs.

    map() and filter() take a built-in function's name ("square", "add", ...) followed by its
    arguments, a module-level Python function (it becomes map(py, "module:function"), which
    workers import from their python_path), or "module:function" for a Python function that
    is not importable here.
    """

    __slots__ = ("_steps", "_mix", "_gshuffle_ok")

    def __init__(self, *args, **kwargs):
        raise TypeError("build a Pipeline from a source: sluice.Pipeline.range(10), "
                        ".tfrecord(...), .lines(...), ... (or sluice.Pipeline.from_text(text))")

    @classmethod
    def _new(cls, steps, mix=False, gshuffle_ok=True):
        p = object.__new__(cls)
        object.__setattr__(p, "_steps", tuple(steps))
        object.__setattr__(p, "_mix", mix)
        object.__setattr__(p, "_gshuffle_ok", gshuffle_ok)
        return p

    def _then(self, step):
        return type(self)._new(self._steps + (step,), self._mix, False)

    def __setattr__(self, name, value):
        raise AttributeError("a Pipeline is immutable: its methods return new Pipelines")

    def __delattr__(self, name):
        raise AttributeError("a Pipeline is immutable")

    def __str__(self):
        return " | ".join(self._steps)

    def __repr__(self):
        return f"sluice.Pipeline({str(self)!r})"

    def __eq__(self, other):
        if isinstance(other, Pipeline):
            return str(self) == str(other)
        return NotImplemented

    def __hash__(self):
        return hash(str(self))

    def __reduce__(self):
        return (_from_steps, (self._steps, self._mix, self._gshuffle_ok))

    @property
    def steps(self):
        """The steps' texts, the source first."""
        return self._steps

    # ---- sources -----------------------------------------------------------------------------

    @classmethod
    def from_text(cls, text):
        """A Pipeline holding text as it is (a whole pipeline, source first), to go on building
        from it. The text is not parsed here: a mistake in it shows when the pipeline is run or
        registered."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        if not text.strip():
            raise ValueError("text must hold a pipeline")
        return cls._new((text.strip(),))

    @classmethod
    def range(cls, *args):
        """range(stop), range(start, stop[, step]): int64 scalars, as Python's range (tf.data's
        Dataset.range)."""
        if not 1 <= len(args) <= 3:
            raise TypeError(f"range() takes 1 to 3 arguments (stop, or start, stop[, step]), "
                            f"not {len(args)}")
        names = ("stop",) if len(args) == 1 else ("start", "stop", "step")
        vals = [_int(a, f"range() {n}") for a, n in zip(args, names)]
        if len(vals) == 3 and vals[2] == 0:
            raise ValueError("range() step must not be zero")
        return cls._new([f"range({', '.join(map(str, vals))})"])

    @classmethod
    def from_list(cls, values):
        """list(...): the values, one element each (tf.data's Dataset.from_tensor_slices over a
        Python list): ints, floats, str/bytes, bools, lists (tensors) or numpy arrays, and tuples
        for elements of several components. All must have one structure."""
        if isinstance(values, (str, bytes, bytearray, dict, set, frozenset)) or \
                not hasattr(values, "__iter__"):
            raise TypeError(f"from_list() takes a list of values, not {type(values).__name__}")
        if hasattr(values, "tolist"):
            values = values.tolist()
        items = [_value(v, f"from_list() value {i}", tuple_ok=True)
                 for i, v in enumerate(values)]
        if not items:
            raise ValueError("from_list() needs at least one value")
        return cls._new([f"list({', '.join(items)})"])

    @classmethod
    def tfrecord(cls, patterns, *more):
        """tfrecord("GLOB", ...): the records of TFRecord files (scalar bytes), in file-name
        order; patterns is a glob, a path, or a list of them (tf.data's TFRecordDataset)."""
        return cls._new([f"tfrecord({', '.join(_patterns(patterns, more, 'tfrecord()'))})"])

    @classmethod
    def lines(cls, patterns, *more):
        """lines("GLOB", ...): the lines of text files (scalar bytes, without the newline)
        (tf.data's TextLineDataset)."""
        return cls._new([f"lines({', '.join(_patterns(patterns, more, 'lines()'))})"])

    @classmethod
    def tar(cls, patterns, *extensions):
        """tar("GLOB", "EXT", ...): the samples of WebDataset shards, a tuple of the members with
        these extensions (written without the dot). patterns: a glob, or a list of them."""
        exts = _names(extensions, "tar()", "extension")
        if not exts:
            raise ValueError("tar() needs at least one member extension: "
                             "Pipeline.tar(\"shards/*.tar\", \"jpg\", \"cls\")")
        for e in exts:
            if not e:
                raise ValueError("tar(): an extension must not be empty")
            if e.startswith("."):
                raise ValueError(f"tar(): write the extension without its dot: {e[1:]!r}, "
                                 f"not {e!r}")
            if "/" in e:
                raise ValueError(f"tar(): an extension cannot contain '/': {e!r}")
        if len(set(exts)) != len(exts):
            raise ValueError("tar(): each extension may be named once")
        args = [_pattern_arg(patterns, "tar()")] + [_quote(e, "extension") for e in exts]
        return cls._new([f"tar({', '.join(args)})"])

    @classmethod
    def parquet(cls, patterns, *columns):
        """parquet("GLOB", "COLUMN", ...): the rows of Parquet files, a tuple of the named
        columns (no column: every top-level one); "NAME=DEFAULT" replaces the column's nulls."""
        cols = _names(columns, "parquet()", "column")
        args = [_pattern_arg(patterns, "parquet()")] + [_quote(c, "column") for c in cols]
        return cls._new([f"parquet({', '.join(args)})"])

    @classmethod
    def jsonl(cls, patterns, *fields):
        """jsonl("GLOB", "FIELD", ...): one element per line of JSON Lines files, a tuple of the
        named fields."""
        names = _names(fields, "jsonl()", "field")
        if not names:
            raise ValueError("jsonl() needs at least one field: "
                             "Pipeline.jsonl(\"web/*.jsonl\", \"text\")")
        args = [_pattern_arg(patterns, "jsonl()")] + [_quote(f, "field") for f in names]
        return cls._new([f"jsonl({', '.join(args)})"])

    @classmethod
    def megatron(cls, prefix):
        """megatron("PREFIX"): the documents of a Megatron-LM indexed dataset (PREFIX.idx and
        PREFIX.bin) as 1-D int32 tensors of tokens."""
        return cls._new([f"megatron({_path(prefix, 'megatron() prefix')})"])

    @classmethod
    def snapshot(cls, path):
        """snapshot("DIR"): the elements of a distributed snapshot (sluice.save_snapshot), as its
        save wrote them."""
        return cls._new([f"snapshot({_path(path, 'snapshot() directory')})"])

    @staticmethod
    def _inputs(datasets, what):
        if isinstance(datasets, Pipeline) or not hasattr(datasets, "__iter__"):
            raise TypeError(f"{what}: datasets must be a list of Pipelines")
        inputs = list(datasets)
        if not 1 <= len(inputs) <= 64:
            raise ValueError(f"{what}: 1 to 64 datasets, not {len(inputs)}")
        for i, d in enumerate(inputs):
            if not isinstance(d, Pipeline):
                raise TypeError(f"{what}: datasets[{i}] must be a Pipeline, not "
                                f"{type(d).__name__}")
        return "[" + ", ".join(f"({d})" for d in inputs) + "]"

    @staticmethod
    def sample_from_datasets(datasets, weights=None, seed=None, stop_on_empty_dataset=False):
        """sample_from_datasets([(P1), ...], [W1, ...], SEED[, stop_on_empty]): each element
        drawn from one of the datasets, with probabilities in proportion to weights (None: the
        same for all), as tf.data's Dataset.sample_from_datasets. seed is required: the draw is
        a pure function of it. stop_on_empty_dataset: end at the first exhausted dataset drawn
        (else it drops out and the draw goes on over the rest)."""
        what = "sample_from_datasets()"
        inputs = Pipeline._inputs(datasets, what)
        n = len(datasets)
        if weights is None:
            weights = [1] * n
        if isinstance(weights, (str, bytes)) or not hasattr(weights, "__iter__"):
            raise TypeError(f"{what}: weights must be a list of numbers")
        weights = list(weights.tolist() if hasattr(weights, "tolist") else weights)
        if len(weights) != n:
            raise ValueError(f"{what}: {len(weights)} weights for {n} datasets (one per dataset)")
        ws = []
        for i, w in enumerate(weights):
            text = _number(w, f"{what} weights[{i}]")
            if w < 0:
                raise ValueError(f"{what}: weights[{i}] is negative ({w})")
            ws.append(text)
        if all(float(w) == 0 for w in weights):
            raise ValueError(f"{what}: the weights are all 0")
        if seed is None:
            raise TypeError(f"{what} needs a seed (an int): the draw is a pure function of it")
        seed = _int(seed, f"{what} seed")
        args = [inputs, "[" + ", ".join(ws) + "]", str(seed)]
        if _flag(stop_on_empty_dataset, "stop_on_empty_dataset"):
            args.append("stop_on_empty")
        return Pipeline._new([f"sample_from_datasets({', '.join(args)})"], mix=True,
                             gshuffle_ok=False)

    @staticmethod
    def choose_from_datasets(datasets, choice_dataset, stop_on_empty_dataset=True):
        """choose_from_datasets([(P1), ...], (CHOICE)[, false]): choice_dataset, a Pipeline of
        int64 scalars, names the dataset each element comes from, as tf.data's
        Dataset.choose_from_datasets. stop_on_empty_dataset (the default): end at the first
        exhausted dataset chosen; False: skip that choice."""
        what = "choose_from_datasets()"
        inputs = Pipeline._inputs(datasets, what)
        if not isinstance(choice_dataset, Pipeline):
            raise TypeError(f"{what}: choice_dataset must be a Pipeline, not "
                            f"{type(choice_dataset).__name__}")
        args = [inputs, f"({choice_dataset})"]
        if not _flag(stop_on_empty_dataset, "stop_on_empty_dataset"):
            args.append("false")
        return Pipeline._new([f"choose_from_datasets({', '.join(args)})"], mix=True,
                             gshuffle_ok=False)

    # ---- operations --------------------------------------------------------------------------

    def map(self, fn, *args, plugin=False):
        """map(FN, ARGS...): fn is a built-in's name ("square", "add", "tokenize", ...) with its
        arguments after it, a module-level Python function (called with the element and args;
        workers import it from their python_path), "module:function", or with plugin=True the
        name of a function a plugin adds. Lambdas, closures, bound methods and functions of
        __main__ are refused: workers import functions by their module and name."""
        return self._then(_fn_step("map", fn, args, plugin))

    def filter(self, fn, *args, plugin=False):
        """filter(FN, ARGS...): keeps the elements for which fn is true; fn as for map()
        ("even", "odd", "lt", "ge", a Python function, ...)."""
        return self._then(_fn_step("filter", fn, args, plugin))

    def shuffle(self, buffer_size, seed=None):
        """shuffle(BUFFER[, SEED]): a shuffle buffer of buffer_size elements (>= 1); without a
        seed the order differs from run to run."""
        n = _int(buffer_size, "shuffle() buffer_size", 1)
        if seed is None:
            return self._then(f"shuffle({n})")
        return self._then(f"shuffle({n}, {_int(seed, 'shuffle() seed')})")

    def batch(self, batch_size, drop_remainder=False):
        """batch(N[, drop_remainder]): stacks batch_size (>= 1) consecutive elements; with
        drop_remainder a last, smaller batch is dropped."""
        n = _int(batch_size, "batch() batch_size", 1)
        if _flag(drop_remainder, "drop_remainder"):
            return self._then(f"batch({n}, drop_remainder)")
        return self._then(f"batch({n})")

    def take(self, count):
        """take(N): the first count elements (-1: all of them)."""
        return self._then(f"take({_int(count, 'take() count', -1, hint='>= 0 (or -1 for all)')})")

    def skip(self, count):
        """skip(N): all but the first count elements (-1: skips them all)."""
        return self._then(f"skip({_int(count, 'skip() count', -1, hint='>= 0 (or -1 for all)')})")

    def repeat(self, count=None):
        """repeat([N]): the pipeline count times; None (or -1, as in tf.data): forever."""
        if count is None:
            return self._then("repeat()")
        n = _int(count, "repeat() count", -1, hint=">= 0 (or None or -1 for forever)")
        return self._then("repeat()" if n == -1 else f"repeat({n})")

    def shard(self, num_shards, index):
        """shard(N, INDEX): every num_shards-th element from the index-th; either may be
        sluice.SHARD_HINT, filled in by the hint sharding mode."""
        n = "SHARD_HINT" if num_shards is SHARD_HINT else \
            _int(num_shards, "shard() num_shards", 1)
        if index is SHARD_HINT:
            i = "SHARD_HINT"
        elif n == "SHARD_HINT":
            i = _int(index, "shard() index", 0)
        else:
            i = _int(index, "shard() index", 0, n - 1, hint=f"in [0, {n})")
        return self._then(f"shard({n}, {i})")

    def prefetch(self, buffer_size):
        """prefetch(N): elements produced ahead, on a thread of their own (buffer_size >= 1)."""
        return self._then(f"prefetch({_int(buffer_size, 'prefetch() buffer_size', 1)})")

    def global_shuffle(self, seed):
        """global_shuffle(SEED): the whole source in an order defined by the dataset, seed and
        the pass. It must come right after the source, and not after a mix."""
        if self._mix:
            raise ValueError("global_shuffle() permutes a source's positions, and a mix has none "
                             "of its own: global_shuffle its inputs, or shuffle(N) after it")
        if not self._gshuffle_ok:
            raise ValueError("global_shuffle() must come right after the source, before any "
                             "other operation")
        if seed is None:
            raise TypeError("global_shuffle() needs a seed (an int)")
        return self._then(f"global_shuffle({_int(seed, 'global_shuffle() seed')})")

    def pack(self, sequence_length, policy="best_fit", window=None):
        """pack(SEQ_LEN[, POLICY[, WINDOW]]): documents of tokens packed into (tokens,
        segment_ids, positions) sequences of exactly sequence_length int32 tokens; policy
        "best_fit" (the default) or "first_fit"; window: sequences open at once (None: 16)."""
        n = _int(sequence_length, "pack() sequence_length", 1, 1 << 24)
        if policy not in ("best_fit", "first_fit"):
            raise ValueError(f"pack() policy must be 'best_fit' or 'first_fit', not {policy!r}")
        if window is None:
            if n * 16 > 1 << 26:
                raise ValueError(f"pack(): the default window of 16 sequences of {n} tokens "
                                 f"would hold more than {1 << 26} tokens; give a smaller window")
            return self._then(f"pack({n})" if policy == "best_fit" else f'pack({n}, "{policy}")')
        w = _int(window, "pack() window", 1, 4096)
        if n * w > 1 << 26:
            raise ValueError(f"pack(): window x sequence_length ({w} x {n}) is over {1 << 26} "
                             f"tokens")
        return self._then(f'pack({n}, "{policy}", {w})')

    def apply(self, transformation):
        """transformation(self), which must return a Pipeline (tf.data's Dataset.apply)."""
        out = transformation(self)
        if not isinstance(out, Pipeline):
            raise TypeError(f"apply(): the transformation returned {type(out).__name__}, "
                            f"not a Pipeline")
        return out

    # ---- running -----------------------------------------------------------------------------

    def run(self, plugins=None):
        """Runs the pipeline in this process, without a service: sluice.run(str(self))."""
        from . import run
        return run(str(self), plugins=plugins)

    def register(self, service, **kwargs):
        """Registers the pipeline with the service and returns its dataset id:
        sluice.register_dataset(service, str(self), **kwargs)."""
        from . import register_dataset
        return register_dataset(service, str(self), **kwargs)

    def distribute(self, processing_mode, service, **kwargs):
        """Registers the pipeline and reads it from the service, as tf.data's
        Dataset.distribute: sluice.distribute(str(self), processing_mode, service, **kwargs)
        (job_name=, local=, deterministic=, ...)."""
        from . import distribute
        return distribute(str(self), processing_mode, service, **kwargs)


def _flag(value, name):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def _from_steps(steps, mix, gshuffle_ok):
    return Pipeline._new(steps, mix, gshuffle_ok)
