"""sluice.DispatchServer's replica keywords (raft_id, raft_address, raft_cluster, raft_bind,
advertise, raft_election_timeout_ms): a group of three embedded dispatchers in this process
elects a leader and serves a read through the list of the three; bad combinations raise with the
dispatcher's own message."""

import json
import subprocess
import sys

import pytest

import sluice
from conftest import free_ports


# The group runs in a child interpreter: three embedded replicas, a leader found through each
# one's status, a read through the list of the three; the child prints what it saw as JSON and
# leaves with os._exit, without stopping the replicas (see test_last_replica_stops).
GROUP = r"""
import json, os, sys, time
import sluice
tmp, stop_all = sys.argv[1], sys.argv[2] == "stop"
ids = (1, 2, 3)
ports = [int(p) for p in sys.argv[3].split(",")]  # conftest.free_ports, from the test
rpc = {i: ports[i - 1] for i in ids}
raft = {i: ports[i + 2] for i in ids}
cluster = ",".join(f"{i}=127.0.0.1:{raft[i]}" for i in ids)
servers = [sluice.DispatchServer(
    port=rpc[i], work_dir=os.path.join(tmp, f"d{i}"), raft_id=i,
    raft_address=f"127.0.0.1:{raft[i]}", raft_cluster=cluster,
    raft_bind=f"127.0.0.1:{raft[i]}", advertise=f"127.0.0.1:{rpc[i]}",
    raft_election_timeout_ms=300) for i in ids]
views = {}
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    views = {i: sluice.status(f"127.0.0.1:{rpc[i]}")["raft"] for i in ids}
    if [v["serving"] for v in views.values()].count(True) == 1:
        break
    time.sleep(0.05)
target = "sluice://" + ",".join(f"127.0.0.1:{rpc[i]}" for i in ids)
with sluice.WorkerServer(target):
    got = sorted(int(x) for x in sluice.distribute("range(100)", "distributed_epoch", target,
                                                   job_name="j"))
print(json.dumps({"views": views, "rpc": rpc, "got": got}), flush=True)
if stop_all:
    for s in servers:
        s.stop()
    print("stopped", flush=True)
os._exit(0)
"""


def run_group(tmp_path, mode, timeout):
    ports = ",".join(str(p) for p in free_ports(6))
    return subprocess.run([sys.executable, "-c", GROUP, str(tmp_path), mode, ports],
                          capture_output=True, text=True, timeout=timeout)


def test_group_of_three_embedded(tmp_path):
    r = run_group(tmp_path, "keep", 120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[0])
    views = out["views"].values()
    assert sorted(v["role"] for v in views) == ["follower", "follower", "leader"], out["views"]
    leader = next(v for v in views if v["role"] == "leader")
    assert leader["serving"] and [v["serving"] for v in views].count(True) == 1
    # Every member is listed; the leader's RPC address is the advertised one (a replica learns
    # another's from the entries it writes as leader).
    members = {str(m["id"]): m for m in leader["members"]}
    assert sorted(members) == ["1", "2", "3"]
    own = str(leader["id"])
    assert members[own]["rpc_address"] == f"127.0.0.1:{out['rpc'][own]}"
    assert out["got"] == list(range(100))


def test_last_replica_stops(tmp_path):
    r = run_group(tmp_path, "stop", 60)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "stopped", r.stderr


@pytest.mark.parametrize("kw, message", [
    (dict(raft_id=1, raft_address="127.0.0.1:1", raft_cluster="1=127.0.0.1:1"),
     "raft_id needs work_dir"),
    (dict(raft_id=1, work_dir="W"), "raft_id needs raft_address and raft_cluster"),
    (dict(raft_address="127.0.0.1:1"),
     "raft_address, raft_cluster, raft_bind and raft_election_timeout_ms need raft_id"),
    (dict(raft_id=1, work_dir="W", raft_address="127.0.0.1:1", raft_cluster="1=127.0.0.1:1",
          raft_election_timeout_ms=50),
     "raft_election_timeout_ms: expected 100 to 60000, got 50"),
    (dict(raft_id=1, work_dir="W", raft_address="127.0.0.1:1", raft_cluster="1=127.0.0.1:1",
          journal_max_mb=5),
     "journal_max_mb, journal_per_update and recover_to_last_good are for a single "
     "dispatcher's journal, not a replica's Raft log"),
])
def test_bad_combinations(tmp_path, kw, message):
    if kw.get("work_dir") == "W":
        kw["work_dir"] = str(tmp_path / "w")
    with pytest.raises(sluice.InvalidArgumentError) as e:
        sluice.DispatchServer(**kw)
    assert str(e.value) == message


def test_keyword_types():
    with pytest.raises(TypeError, match="raft_cluster must be a str"):
        sluice.DispatchServer(raft_id=1, raft_cluster=1, start=False)
    with pytest.raises(ValueError, match="raft_id must be between 1"):
        sluice.DispatchServer(raft_id=0, start=False)
