"""sluice.run over files written by Python's own writers: WebDataset shards made with tarfile
(pax, as the webdataset package writes them), gzip files made with the gzip module."""

import gzip
import io
import tarfile

import pytest

import sluice


def write_shard(path, members, compress=False):
    """members: (name, bytes) in archive order."""
    with tarfile.open(path, "w:gz" if compress else "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def sample(k):
    return [(f"part/{k:06d}.jpg", bytes([0xFF, 0xD8, k])), (f"part/{k:06d}.cls", str(k % 3).encode()),
            (f"part/{k:06d}.meta.json", b'{"k": %d}' % k)]


def test_tar_tuples_in_extension_order(tmp_path):
    write_shard(tmp_path / "s-0.tar", [m for k in range(3) for m in sample(k)])
    write_shard(tmp_path / "s-1.tar.gz", [m for k in range(3, 5) for m in sample(k)], compress=True)
    got = list(sluice.run(f'tar("{tmp_path}/s-*", "cls", "jpg", "meta.json")'))
    want = [(str(k % 3).encode(), bytes([0xFF, 0xD8, k]), b'{"k": %d}' % k) for k in range(5)]
    assert got == want
    # One extension gives bytes scalars.
    assert list(sluice.run(f'tar("{tmp_path}/s-0.tar", "cls")')) == [b"0", b"1", b"2"]


def test_tar_missing_member_names_shard_and_sample(tmp_path):
    members = sample(0) + [m for m in sample(1) if not m[0].endswith(".jpg")]
    write_shard(tmp_path / "bad.tar", members)
    it = sluice.run(f'tar("{tmp_path}/bad.tar", "jpg", "cls")')
    assert next(it) == (bytes([0xFF, 0xD8, 0]), b"0")
    with pytest.raises(sluice.Error, match=f"{tmp_path}/bad.tar: sample part/000001: "
                                            "missing member .jpg"):
        next(it)


def test_gzip_lines_and_members(tmp_path):
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(b"x\ny\n") + gzip.compress(b"z"))
    assert list(sluice.run(f'lines("{tmp_path}/a.txt.gz")')) == [b"x", b"y", b"z"]


def write_parquet(tmp_path, files, groups, rows):
    """Parquet files from an independent writer (hyparquet-writer, run by Node.js with the tests'
    npm packages, which scripts/deps.sh installs): row k has id k, name "row-k" and score k / 4,
    null when k % 7 == 3."""
    import os
    import shutil
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "..", "..", "tests", "npm", "parquet_cluster_files.mjs")
    node = shutil.which("node")
    assert node, "node not found: scripts/deps.sh installs it"
    subprocess.run([node, script, str(tmp_path), str(files), str(groups), str(rows)], check=True)


def test_parquet_rows_as_tuples(tmp_path):
    write_parquet(tmp_path, 2, 2, 5)
    got = list(sluice.run(f'parquet("{tmp_path}/part-*.parquet", "name", "id", "score=-1")'))
    want = [(f"row-{k}".encode(), k, -1.0 if k % 7 == 3 else k / 4) for k in range(20)]
    assert [(n, int(i), float(s)) for n, i, s in got] == want
    # One column gives its values alone.
    assert [int(x) for x in sluice.run(f'parquet("{tmp_path}/part-00.parquet", "id")')] == \
        list(range(10))


def test_parquet_null_without_default_names_where(tmp_path):
    write_parquet(tmp_path, 1, 1, 10)
    it = sluice.run(f'parquet("{tmp_path}/part-00.parquet", "score")')
    assert [float(next(it)) for _ in range(3)] == [0.0, 0.25, 0.5]
    with pytest.raises(sluice.Error, match=f"{tmp_path}/part-00.parquet: row group 0: column "
                                            "score: row 3: null"):
        next(it)


def test_jsonl_from_python_json(tmp_path):
    import json
    docs = [{"text": "caf\u00e9 \U0001F600", "id": k, "ids": list(range(k)), "score": k / 3,
             "tags": ["a"] * (k % 3), "ok": k % 2 == 0} for k in range(6)]
    with open(tmp_path / "a.jsonl", "w") as f:
        for d in docs[:3]:
            f.write(json.dumps(d) + "\n")
    with gzip.open(tmp_path / "b.jsonl", "wt") as f:  # gzip, found by content
        for d in docs[3:]:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    got = list(sluice.run(f'jsonl("{tmp_path}/*.jsonl", "text", "id", "score", "ok")'))
    assert [(t.decode(), int(i), float(s), bool(o)) for t, i, s, o in got] == \
        [(d["text"], d["id"], d["score"], d["ok"]) for d in docs]
    ids = [list(x) for x in sluice.run(f'jsonl("{tmp_path}/a.jsonl", "ids")')]
    assert ids == [[], [0], [0, 1]]


def test_jsonl_missing_field_names_file_and_line(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"text": "a"}\n\n{"txt": "b"}\n')
    it = sluice.run(f'jsonl("{tmp_path}/c.jsonl", "text")')
    assert next(it) == b"a"
    with pytest.raises(sluice.Error, match=f'{tmp_path}/c.jsonl: line 3: field "text": missing'):
        next(it)


def load_megatron_writer():
    """The tests' independent Megatron writer (tests/megatron/write_megatron.py), as a module."""
    import importlib.util
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "tests", "megatron", "write_megatron.py")
    spec = importlib.util.spec_from_file_location("write_megatron", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", ["uint16", "int32"])
def test_megatron_documents_as_int32_arrays(tmp_path, dtype):
    import numpy as np
    w = load_megatron_writer()
    docs = w.documents(np.random.default_rng(5), dtype, 50)
    w.write(str(tmp_path / "ds"), dtype, docs)
    got = list(sluice.run(f'megatron("{tmp_path}/ds")'))
    assert len(got) == len(docs)
    for g, seqs in zip(got, docs):
        assert g.dtype == np.int32 and g.ndim == 1
        want = np.concatenate(seqs).astype(np.int64) if seqs else np.zeros(0, np.int64)
        assert g.astype(np.int64).tolist() == want.tolist()
    assert got[0].shape == (0,)  # the writer's first document has no sequence


def test_megatron_sizes_disagreeing_name_file_and_offset(tmp_path):
    import numpy as np
    w = load_megatron_writer()
    docs = w.documents(np.random.default_rng(6), "uint16", 5)
    w.write(str(tmp_path / "ds"), "uint16", docs)
    (tmp_path / "ds.bin").write_bytes((tmp_path / "ds.bin").read_bytes() + b"\0\0")
    with pytest.raises(sluice.Error, match=f"{tmp_path}/ds.idx: offset [0-9]+: the last sequence "
                                            r"\(.*\) does not end where .*ds.bin does"):
        list(sluice.run(f'megatron("{tmp_path}/ds")'))
