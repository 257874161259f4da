"""sluice.run: pipelines in this process, and the element conversion (dtypes, shapes, tuples,
bytes, copies)."""

import gc

import numpy as np
import pytest

import sluice


def test_scalars_are_0d_int64_arrays():
    got = list(sluice.run("range(5) | map(square)"))
    assert [int(x) for x in got] == [0, 1, 4, 9, 16]
    assert all(isinstance(x, np.ndarray) and x.shape == () and x.dtype == np.int64 for x in got)


@pytest.mark.parametrize("literal,dtype", [
    ("true", np.bool_),
    ("1.5", np.float64),
    ("7", np.int64),
])
def test_dtypes(literal, dtype):
    (x,) = list(sluice.run(f"list({literal})"))
    assert x.dtype == dtype


def test_batched_tuples_keep_dtypes_and_shapes():
    got = list(sluice.run('list((1, "ab", 0.5), (2, "cd", 1.5), (3, "e", 2.5)) | batch(2)'))
    assert len(got) == 2
    ints, strs, floats = got[0]
    assert ints.dtype == np.int64 and ints.shape == (2,) and ints.tolist() == [1, 2]
    assert strs.dtype == object and strs.tolist() == [b"ab", b"cd"]
    assert floats.dtype == np.float64 and floats.tolist() == [0.5, 1.5]
    assert got[1][0].tolist() == [3] and got[1][1].tolist() == [b"e"]


def test_bytes_scalars_are_bytes():
    got = list(sluice.run('list("x", "yz")'))
    assert got == [b"x", b"yz"]


def test_tensor_literals():
    (x,) = list(sluice.run("list([[1, 2, 3], [4, 5, 6]])"))
    assert x.shape == (2, 3) and x.dtype == np.int64
    assert x.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_large_arrays_outlive_the_run_and_are_independent():
    it = sluice.run("range(20000) | batch(10000)")
    a = next(it)
    b = next(it)
    # Handed over without a copy: the array's memory is the received element's.
    assert type(a.base).__name__ == "PyCapsule" and a.base is not b.base
    small = next(sluice.run("range(3) | batch(3)"))
    assert small.base is None  # small tensors are copied into arrays of their own
    del it
    gc.collect()
    assert a.tolist() == list(range(10000))
    assert b.tolist() == list(range(10000, 20000))
    # Each array owns its memory (no aliasing between elements); writable.
    a[0] = -1
    assert b[0] == 10000 and a[0] == -1


def test_errors_carry_the_message():
    with pytest.raises(sluice.InvalidArgumentError, match="column 12: unknown function 'nope'"):
        sluice.run("range(5) | map(nope)")
    with pytest.raises(sluice.InvalidArgumentError, match="column"):
        sluice.run("range(5) |")
    with pytest.raises(TypeError, match="pipeline must be a str"):
        sluice.run(5)
    with pytest.raises(sluice.NotFoundError):
        list(sluice.run('lines("/nonexistent-sluice-dir/*.txt")'))


def test_version():
    assert sluice.__version__.count(".") == 2


def test_readme_shows_the_example_as_it_is():
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    example = (root / "examples" / "train.py").read_text()
    assert "```python\n" + example + "```" in (root / "README.md").read_text()
