"""The package as users get it: typed (mypy --strict accepts the examples and a typed program,
and refuses a wrong call), and pip-installable (pip install --no-build-isolation . into a
virtual environment, imported from outside the source tree, the README's first Python example,
python -m sluice --version, the installed stubs checked against the package by mypy.stubtest,
pip uninstall).

The install builds the extension with CMake (setup.py, into build-pip/test of the clone, kept
between runs, as Debug, which compiles in a third of the time of the default build and installs
the same files): seconds on two cores from nothing.

mypy over the PyTorch example reads torch's annotations. Of torch's 600 modules it follows the
200 that `import torch`, torch.nn, torch.optim and torch.utils.data need (the tensor, the
modules, the optimizers, the loader classes that sluice.torch subclasses, torch._C's stubs); the
rest (onnx, fx, distributed, jit, quantization, the reference decompositions, ...) is skipped
(TORCH_SKIPPED): their types are Any, which nothing here uses. About 8 seconds without a cache
rather than 55, and the same errors: a wrong argument to torch.nn.Linear or torch.optim.SGD, an
unknown Tensor attribute, a DataLoader subclass that does not match torch's."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TYPED_USAGE = pathlib.Path(__file__).resolve().parent / "typed_usage.py"
EXAMPLE = ROOT / "examples" / "train.py"

# Deliberately wrong calls: an int as the pipeline, a str as a batch size. Line numbers matter.
WRONG = """import sluice
sluice.run(42)
sluice.Pipeline.range(10).batch("2")
ok = sluice.Pipeline.range(10).batch(2)
"""
# The same calls, right.
RIGHT = """import sluice
print([int(x) for x in sluice.run("range(3)")])
p: sluice.Pipeline = sluice.Pipeline.range(10).batch(2)
"""


# torch's subpackages that neither the examples nor sluice's stubs use (see the docstring).
TORCH_SKIPPED = (
    "onnx.*", "fx.*", "distributed.*", "testing.*", "_refs.*", "_prims.*", "_prims_common.*",
    "_decomp.*", "_meta_registrations", "ao.*", "quantization.*", "jit.*", "distributions.*",
    "package.*", "profiler.*", "_subclasses.*", "masked.*", "nested.*", "special.*", "fft.*",
    "sparse.*", "cuda.*", "backends.*", "_dispatch.*", "hub", "library", "futures.*",
    "multiprocessing.*", "amp.*", "cpu.*", "_lobpcg", "_lowrank", "_linalg_utils", "linalg.*")
MYPY_CONFIG = ("[mypy]\n[mypy-" + ",".join("torch." + m for m in TORCH_SKIPPED) + "]\n"
               "follow_imports = skip\n")


def _have_mypy(python):
    return subprocess.run([python, "-c", "import mypy.api"], capture_output=True).returncode == 0


def _clean_env(**extra):
    """The environment without what would let Python find the package elsewhere."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "MYPYPATH", "PYTHONHOME")}
    env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


@pytest.fixture(scope="module")
def mypy(tmp_path_factory):
    """mypy --strict with the package's sources (python/sluice, stubs and py.typed) first on
    its path, run outside the tree, one cache for the module's runs."""
    if not _have_mypy(sys.executable):
        pytest.skip(f"mypy is not installed for {sys.executable} (Debian: python3-mypy, which "
                    "scripts/deps.sh installs)")
    cache = tmp_path_factory.mktemp("mypy-cache")
    work = tmp_path_factory.mktemp("mypy-work")
    config = work / "mypy.ini"
    config.write_text(MYPY_CONFIG)

    def run(*files):
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--config-file",
             str(config), "--cache-dir", str(cache), *map(str, files)],
            cwd=work, env=_clean_env(MYPYPATH=str(ROOT / "python")), capture_output=True,
            text=True, timeout=600)

    run.work = work
    return run


def test_stub_files_present():
    pkg = ROOT / "python" / "sluice"
    assert (pkg / "py.typed").exists()
    for name in ("__init__.pyi", "_sluice.pyi", "_builder.pyi", "torch.pyi"):
        assert (pkg / name).exists(), name


def test_mypy_strict_accepts_the_examples(mypy):
    out = mypy(EXAMPLE, TYPED_USAGE)
    assert out.returncode == 0, out.stdout + out.stderr


def _assert_mypy_errors(mypy, name, text, want):
    """mypy --strict on text (saved as name) fails with exactly the errors of want (a pattern for
    each, after "NAME:"), in order."""
    path = mypy.work / name
    path.write_text(text)
    out = mypy(path)
    assert out.returncode == 1, out.stdout + out.stderr
    errors = [line for line in out.stdout.splitlines() if ": error: " in line]
    assert len(errors) == len(want), out.stdout
    for line, pattern in zip(errors, want):
        assert re.search(re.escape(name) + pattern, line), line


def test_mypy_strict_refuses_a_wrong_call(mypy):
    _assert_mypy_errors(mypy, "wrong_call.py", WRONG, [
        r':2: error: Argument 1 to "run" has incompatible type "int"',
        r':3: error: Argument 1 to "batch" of "Pipeline" has incompatible type "str"; expected '
        r'"int"'])


# Wrong calls into torch beside sluice.torch: torch's own types are still checked with the
# subpackages of TORCH_SKIPPED skipped (they are not Any). Line numbers matter.
WRONG_TORCH = """import torch
import sluice.torch
m = torch.nn.Linear("a", 1)
o = torch.optim.SGD(m.parameters(), lr="x")
t: torch.Tensor = torch.zeros(3)
t.no_such_method()
def size(loader: sluice.torch.DataLoader) -> str:
    return loader.batch_size
"""


def test_mypy_strict_checks_torch_calls(mypy):
    _assert_mypy_errors(mypy, "wrong_torch.py", WRONG_TORCH, [
        r':3: error: Argument 1 to "Linear" has incompatible type "str"; expected "int"',
        r':4: error: Argument "lr" to "SGD" has incompatible type "str"; expected "float"',
        r':6: error: "Tensor" has no attribute "no_such_method"',
        r':8: error: Incompatible return value type \(got "Optional\[int\]", expected "str"\)'])


def test_typed_usage_runs():
    """typed_usage.py is a real program, not only something mypy reads."""
    out = subprocess.run([sys.executable, str(TYPED_USAGE)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:2] == ["[0, 4, 16]", "['position']"]


def _readme_first_python_example():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## From Python\n", 1)[1]
    first = section.split("```", 1)[1]
    assert first.startswith("sh\n") and "pip install --no-build-isolation ." in first, \
        "README's Python quickstart starts with the pip install line"
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "sluice.Pipeline." in code
    return code


def test_pip_install_into_a_venv(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    python = sys.executable
    if subprocess.run([python, "-c", "import ensurepip, venv"],
                      capture_output=True).returncode != 0:
        pytest.skip(f"{python} cannot make virtual environments (Debian: python3-venv)")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    vpy = str(venv / "bin" / "python")
    away = tmp_path / "elsewhere"  # outside the source tree, where nothing is named sluice
    away.mkdir()
    # A build directory of its own, as Debug (see the module's docstring).
    env = _clean_env(SLUICE_CMAKE_BUILD_DIR=str(ROOT / "build-pip" / "test"),
                     SLUICE_CMAKE_BUILD_TYPE="Debug")

    def run(*argv, check=True, timeout=120):
        out = subprocess.run(argv, cwd=away, env=env, capture_output=True, text=True,
                             timeout=timeout)
        if check:
            assert out.returncode == 0, (argv, out.stdout[-4000:], out.stderr[-4000:])
        return out

    # No network: --no-index, and the build backend as installed (--no-build-isolation).
    run(vpy, "-m", "pip", "install", "--no-build-isolation", "--no-index", str(ROOT),
        timeout=900)

    site = pathlib.Path(run(vpy, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                       "['purelib'])").stdout.strip())
    pkg = site / "sluice"
    where = run(vpy, "-c", "import sluice, sluice._sluice as s; print(sluice.__file__); "
                           "print(s.__file__)").stdout.split()
    assert [pathlib.Path(p).parent for p in where] == [pkg, pkg], where
    names = {p.name for p in pkg.iterdir()}
    ext = "_sluice" + sysconfig.get_config_var("EXT_SUFFIX")
    for name in ("__init__.py", "__main__.py", "_builder.py", "torch.py", "py.typed",
                 "__init__.pyi", "_sluice.pyi", "_builder.pyi", "torch.pyi", ext):
        assert name in names, (name, sorted(names))
    assert any(re.fullmatch(r"libsluice\.so\.\d+", n) for n in names), sorted(names)

    # The README's first Python example, as printed.
    out = run(vpy, "-c", _readme_first_python_example())
    assert out.stdout.splitlines() == ["range(10) | map(square) | filter(even) | batch(2)",
                                       "[[0, 4], [16, 36], [64]]", "[[0, 4], [16, 36], [64]]"]

    version = run(vpy, "-m", "sluice", "--version").stdout
    assert re.fullmatch(r"sluice \d+\.\d+\.\d+\n", version), version
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert version.split()[1] == re.search(r"project\(sluice VERSION ([0-9.]+)", cmake)[1]

    # The installed package is typed (py.typed and the stubs): mypy in the environment finds it.
    if _have_mypy(vpy):
        (away / "right.py").write_text(RIGHT)
        (away / "wrong_call.py").write_text(WRONG)
        ok = run(vpy, "-m", "mypy", "--strict", "--no-incremental", "right.py", check=False)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        bad = run(vpy, "-m", "mypy", "--strict", "--no-incremental", "wrong_call.py",
                  check=False)
        assert bad.returncode == 1 and 'has incompatible type "int"' in bad.stdout, bad.stdout
        # The stubs match what the package has at run time (names, arguments, defaults);
        # torch's own annotations are skipped (they take most of a minute to read).
        (away / "stubtest.ini").write_text("[mypy]\n[mypy-torch.*]\nfollow_imports = skip\n"
                                           "follow_imports_for_stubs = True\n")
        st = run(vpy, "-m", "mypy.stubtest", "--mypy-config-file", "stubtest.ini", "sluice",
                 check=False, timeout=300)
        assert st.returncode == 0, st.stdout[-4000:] + st.stderr[-4000:]

    run(vpy, "-m", "pip", "uninstall", "-y", "sluice")
    assert not pkg.exists(), sorted(p.name for p in pkg.rglob("*"))
    assert not [p.name for p in site.iterdir() if p.name.lower().startswith("sluice")]
    gone = run(vpy, "-c", "import sluice", check=False)
    assert gone.returncode != 0 and "No module named 'sluice'" in gone.stderr, gone.stderr
