"""sluice.why(): the attribution `sluice status --why JOB --json` prints, for a job named or
numbered, from Python; refusals for no such job and for a job that is not an id or a name."""

import json
import subprocess

import pytest

import sluice

from conftest import BIN_DIR

KEYS = {"input_bound", "wait_share", "threshold", "slowest_consumer", "slowest_worker",
        "worker_rate_vs_median", "dominant_stage", "stage_share", "text"}


@pytest.fixture
def service():
    d = sluice.DispatchServer(log_level="warn")
    w = sluice.WorkerServer(d.target, heartbeat_ms=100)
    try:
        yield d
    finally:
        w.stop()
        d.stop()


def cli_why(d, job):
    out = subprocess.run([str(BIN_DIR / "sluice"), "status", "--dispatcher", d.target, "--why",
                          job, "--json"], capture_output=True, text=True, timeout=30, check=True)
    return json.loads(out.stdout)


def test_why_by_name_and_id(service):
    d = service
    it = iter(sluice.distribute("range(1000)", "distributed_epoch", d, job_name="train"))
    got = [next(it) for _ in range(10)]
    assert len(got) == 10
    by_name = sluice.why(d, "train")
    assert set(by_name) == KEYS
    job_id = [j["id"] for j in sluice.status(d)["jobs"] if j["name"] == "train"][0]
    assert by_name["text"].startswith(f"job {job_id} (train)")
    assert by_name["text"].endswith(".")
    # The same attribution by id (an int or its digits), and as the command prints it.
    for key in (job_id, str(job_id)):
        assert sluice.why(d, key)["text"].startswith(f"job {job_id} (train)")
    assert set(cli_why(d, "train")) == KEYS
    assert cli_why(d, str(job_id))["text"].startswith(f"job {job_id} (train)")
    rest = list(it)
    assert sorted(int(x) for x in got + rest) == list(range(1000))


def test_why_newest_job_of_a_name(service):
    d = service
    # A job is named within its dataset: two datasets' jobs of one name, the newer wins.
    a = iter(sluice.distribute("range(100)", "distributed_epoch", d, job_name="eval"))
    b = iter(sluice.distribute("range(200)", "distributed_epoch", d, job_name="eval"))
    next(a)
    next(b)
    ids = sorted(j["id"] for j in sluice.status(d)["jobs"] if j["name"] == "eval")
    assert len(ids) == 2
    assert sluice.why(d, "eval")["text"].startswith(f"job {ids[1]} (eval)")
    assert sluice.why(d, ids[0])["text"].startswith(f"job {ids[0]} (eval)")
    assert cli_why(d, "eval")["text"].startswith(f"job {ids[1]} (eval)")
    assert len(list(a)) == 99 and len(list(b)) == 199


def test_why_refusals(service):
    d = service
    with pytest.raises(sluice.NotFoundError, match="^no job 'nope'$"):
        sluice.why(d, "nope")
    with pytest.raises(sluice.NotFoundError, match="^no job '12345'$"):
        sluice.why(d, 12345)
    with pytest.raises(TypeError, match="job must be a job id or name, not float"):
        sluice.why(d, 1.5)
    with pytest.raises(TypeError, match="not bool"):
        sluice.why(d, True)
    with pytest.raises(ValueError, match="must not be empty"):
        sluice.why(d, "")
