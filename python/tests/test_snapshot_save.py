"""sluice.save_snapshot and sluice.snapshot_status against a real dispatcher and workers: a save
reads back as exactly the dataset through snapshot("DIR"), the same save again changes nothing,
and the refusals raise the matching errors with their messages."""

import json
import os

import pytest

import sluice


def test_save_and_read_back(cluster2, tmp_path):
    t = cluster2.target
    ds = sluice.register_dataset(t, "range(500) | map(square)", dataset_id="squares")
    path = str(tmp_path / "snap")
    state = sluice.save_snapshot(t, ds, path, timeout=60)
    assert state["state"] == "finished"
    assert state["chunks"] > 1
    assert state["chunks_committed"] == state["chunks"]
    assert state["error"] == ""
    with open(os.path.join(path, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["chunk_count"] == state["chunks"]
    assert manifest["elements"] == 500
    # The same sequence locally, the same multiset through the service.
    src = f'snapshot("{path}")'
    assert [int(x) for x in sluice.run(src)] == [i * i for i in range(500)]
    got = sorted(int(x) for x in sluice.from_dataset_id(
        "distributed_epoch", t, sluice.register_dataset(t, src)))
    assert got == [i * i for i in range(500)]
    # The same save again: its state, nothing rewritten.
    again = sluice.save_snapshot(t, ds, tmp_path / "snap")
    assert again["save_id"] == state["save_id"]
    assert again["state"] == "finished"
    status = sluice.snapshot_status(t, path)
    assert status["dataset_id"] == "squares"
    assert status["chunks_committed"] == state["chunks"]
    saves = sluice.status(t)["saves"]
    assert [(s["path"], s["state"]) for s in saves] == [(path, "finished")]


def test_save_without_waiting(cluster2, tmp_path):
    t = cluster2.target
    ds = sluice.register_dataset(t, "range(2000) | map(wait_us, 1000)")
    path = str(tmp_path / "slow")
    state = sluice.save_snapshot(t, ds, path, wait=False)
    assert state["state"] == "running"
    assert os.path.exists(os.path.join(path, "snapshot.json"))
    # Reading while it runs gets every element once.
    got = sorted(int(x) for x in sluice.from_dataset_id(
        "distributed_epoch", t, sluice.register_dataset(t, f'snapshot("{path}")')))
    assert got == list(range(2000))
    final = sluice.save_snapshot(t, ds, path, timeout=60)
    assert final["state"] == "finished"


def test_refusals(cluster2, tmp_path):
    t = cluster2.target
    a = sluice.register_dataset(t, "range(10)", dataset_id="a")
    sluice.register_dataset(t, "range(20)", dataset_id="b")
    sluice.register_dataset(t, "range(3) | repeat()", dataset_id="forever")
    path = str(tmp_path / "snap")
    sluice.save_snapshot(t, a, path, timeout=60)
    with pytest.raises(sluice.NotFoundError, match="dataset 'nope' not found"):
        sluice.save_snapshot(t, "nope", str(tmp_path / "x"))
    with pytest.raises(sluice.AlreadyExistsError) as e:
        sluice.save_snapshot(t, "b", path)
    assert str(e.value) == f"snapshot path '{path}' holds a save of dataset 'a', not 'b'"
    with pytest.raises(sluice.InvalidArgumentError, match="is not absolute"):
        sluice.save_snapshot(t, "a", "relative/dir")
    with pytest.raises(sluice.Error) as e:
        sluice.save_snapshot(t, "forever", str(tmp_path / "y"))
    assert str(e.value) == "cannot save dataset 'forever': its pipeline 'range(3) | repeat()' never ends"
    with pytest.raises(sluice.NotFoundError, match="no save into snapshot path"):
        sluice.snapshot_status(t, str(tmp_path / "none"))
    with pytest.raises(TypeError):
        sluice.save_snapshot(t, 7, path)
