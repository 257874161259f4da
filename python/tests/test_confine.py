"""data_roots on the in-process servers: file sources confined to directories, checked by the
dispatcher when a dataset is registered and by the worker before it opens anything."""

import os

import pytest

import sluice


@pytest.fixture
def tree(tmp_path):
    """ROOT with a.txt and link.txt (a link to a file beside ROOT), and that file."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("alpha\nbeta\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    (root / "link.txt").symlink_to(secret)
    return os.path.realpath(root), os.path.realpath(secret)


def read(d, pipeline, mode):
    return sorted(bytes(x) for x in sluice.distribute(pipeline, mode, d))


def outside(source, glob, resolved, root):
    return f'{source}("{glob}"): {resolved} is outside the data roots ({root})'


def test_both_confined(tree):
    root, secret = tree
    with sluice.DispatchServer(data_roots=[root]) as d, \
            sluice.WorkerServer(d, data_roots=root):
        for mode in ("distributed_epoch", "parallel_epochs"):
            assert read(d, f'lines("{root}/a.txt")', mode) == [b"alpha", b"beta"]
        cases = [(f"{root}/link.txt", secret), (f"{root}/../secret.txt", secret),
                 ("/etc/passwd", "/etc/passwd")]
        for glob, resolved in cases:
            with pytest.raises(sluice.Error) as e:
                read(d, f'lines("{glob}")', "parallel_epochs")
            assert str(e.value) == outside("lines", glob, resolved, root)


def test_the_workers_own_check(tree):
    root, secret = tree
    # The dispatcher has no roots and registers anything; the worker refuses to read it.
    with sluice.DispatchServer() as d, sluice.WorkerServer(d, data_roots=[root]):
        for mode in ("distributed_epoch", "parallel_epochs"):
            with pytest.raises(sluice.TaskFailedError) as e:
                read(d, f'lines("{root}/link.txt")', mode)
            assert str(e.value) == outside("lines", f"{root}/link.txt", secret, root)
        assert read(d, f'lines("{root}/a.txt")', "distributed_epoch") == [b"alpha", b"beta"]


def test_local_runs_are_not_confined(tree):
    root, secret = tree
    with sluice.DispatchServer(data_roots=root) as d, sluice.WorkerServer(d, data_roots=root):
        assert [bytes(x) for x in sluice.run(f'lines("{root}/link.txt")')] == [b"secret"]


def test_a_missing_root_is_a_start_error(tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(sluice.Error) as e:
        sluice.DispatchServer(data_roots=[missing])
    assert str(e.value) == f"data root {missing}: No such file or directory"
    with pytest.raises(sluice.Error) as e:
        sluice.WorkerServer("127.0.0.1:1", data_roots=missing)
    assert str(e.value) == f"data root {missing}: No such file or directory"
    with pytest.raises(TypeError, match="data_roots must hold str or path-like objects"):
        sluice.WorkerServer("127.0.0.1:1", data_roots=[3])
