"""sluice.torch.DataLoader in a torch.distributed job (gloo, CPU): the ranks' loaders read one
job per epoch, state_dict() gathers every rank's position into the job's, and that position
restored in a job of another world size continues the epoch exactly once across the new ranks,
after the old ranks were killed (-9) right after their checkpoint. With global_order the ranks'
elements, step by step in rank order, are the canonical order, before and after the resume.
Each rank is a process of its own, as torchrun starts them."""

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

pytest.importorskip("torch")
import torch.distributed  # noqa: E402

from conftest import Cluster  # noqa: E402

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

N = 6000
# Slow enough that the epoch outlasts the ranks' start-up skew: at 20 us an element the first rank
# to read (its loader prefetching) drained the epoch before another had joined, about one run in
# three on a loaded machine (a rank with nothing, or StopIteration before its 300 elements). The
# ranks also meet at a barrier once each has its iterator, before reading.
PIPELINE = f"range({N}) | map(wait_us, 300)"
WAIT_S = 180

# One rank: reads `take` elements (all of them when take < 0), takes the collective state,
# writes what it received (rank 0 also the state), then dies as a killed trainer does.
RANK = r"""
import json, os, pickle, signal, sys
import torch.distributed as dist
import sluice, sluice.torch
rank, world, store, target, out, take, workers, det, restore = sys.argv[1:10]
rank, world, take, workers = int(rank), int(world), int(take), int(workers)
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
ds = sluice.torch.IterableDataset(target, pipeline=sys.argv[10], element_timeout=120,
                                  processing_mode="distributed_epoch", deterministic=det == "1")
loader = sluice.torch.DataLoader(ds, num_workers=workers, global_order=sys.argv[11] == "global")
if restore != "-":
    with open(restore, "rb") as f:
        loader.load_state_dict(pickle.load(f))
got = []
it = iter(loader)
# Every rank has its reader before any consumes: a rank slow to start (its imports, its loader's
# worker processes, on a loaded machine) must not find the epoch drained by the others.
dist.barrier()
if take < 0:
    got = [int(x) for x in it]
    dist.barrier()
else:
    for _ in range(take):
        got.append(int(next(it)))
    state = loader.state_dict()
    if rank == 0:
        with open(os.path.join(out, "state.pkl"), "wb") as f:
            pickle.dump(state, f)
with open(os.path.join(out, f"got-{rank}.json"), "w") as f:
    json.dump(got, f)
dist.barrier()
if take >= 0:
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture(scope="module")
def cluster():
    with tempfile.TemporaryDirectory(prefix="sluice-dist-") as log_dir:
        c = Cluster(log_dir)
        try:
            c.add_worker()
            c.add_worker()
            yield c
        finally:
            c.stop()


def run_ranks(tmp, name, world, target, take, workers, det, restore, order="shared"):
    out = os.path.join(tmp, name)
    os.makedirs(out)
    script = os.path.join(tmp, "rank.py")
    with open(script, "w") as f:
        f.write(RANK)
    store = os.path.join(out, "store")
    # Each rank leads a session of its own, with its DataLoader's worker processes in it: once
    # the rank has exited, what is left of its session is killed, as a scheduler ends a killed
    # trainer's pod or job step. (Left alone, the workers of a rank killed with -9 would notice
    # only at their next check of the parent, up to 5 s later.) The output goes to files, which
    # no leftover process holds open past the wait.
    procs, errs = [], []
    for r in range(world):
        err = open(os.path.join(out, f"stderr-{r}.txt"), "w+")
        errs.append(err)
        procs.append(subprocess.Popen(
            [sys.executable, script, str(r), str(world), store, target, out, str(take),
             str(workers), "1" if det else "0", restore, PIPELINE, order],
            stdout=err, stderr=subprocess.STDOUT, text=True, start_new_session=True))
    deadline = time.monotonic() + WAIT_S
    got = []
    try:
        for r, p in enumerate(procs):
            # Waited for without reaping it: until it is reaped its pid, the id of its
            # session's process group, cannot go to another process.
            while not os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                assert time.monotonic() < deadline, f"rank {r} still runs after {WAIT_S} s"
                time.sleep(0.02)
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            # A checkpointing rank kills itself after writing what it had. When one failed, the
            # others' ends say why (a rank that died first makes the others' collectives fail).
            if p.returncode != (-9 if take >= 0 else 0):
                ends = []
                for k, e in enumerate(errs):
                    e.seek(0)
                    ends.append(f"--- rank {k}:\n{e.read()[-2000:]}")
                pytest.fail(f"rank {r} exited with {p.returncode}\n" + "\n".join(ends))
            with open(os.path.join(out, f"got-{r}.json")) as f:
                got.append(json.load(f))
    finally:
        for p in procs:
            if p.returncode is None:  # not reaped yet: its process group is still its own
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for err in errs:
            err.close()
    return out, got


@pytest.mark.parametrize("before,after,workers,det", [
    (2, 3, 0, False),
    (3, 2, 2, False),
    (2, 3, 1, True),
])
def test_resume_on_another_world_size(cluster, before, after, workers, det):
    with tempfile.TemporaryDirectory(prefix="sluice-dist-") as tmp:
        out, pre = run_ranks(tmp, "before", before, cluster.target, 300, workers, det, "-")
        # The ranks read one job: nobody got an element twice before the checkpoint.
        flat = [x for rank in pre for x in rank]
        assert len(flat) == before * 300 and len(set(flat)) == len(flat)
        _, post = run_ranks(tmp, "after", after, cluster.target, -1, workers, det,
                            os.path.join(out, "state.pkl"))
        # The epoch is whole, each element once. (Not that every new rank got a share:
        # distributed_epoch hands elements to whoever asks first, and a rank slow to start can
        # find the rest fetched by the others.)
        print("after the resume, elements per rank:", [len(r) for r in post])
        seen = collections.Counter(flat + [x for rank in post for x in rank])
        assert sorted(seen) == list(range(N)), f"{len(seen)} distinct of {N}"
        dups = sorted(x for x, c in seen.items() if c > 1)
        assert not dups, f"{len(dups)} duplicates: {dups[:20]}"


@pytest.mark.parametrize("before,after,workers", [(2, 3, 2), (3, 2, 0)])
def test_global_order_on_another_world_size(cluster, before, after, workers):
    """Deterministic, global_order=True: step j of the ranks, in rank order, is places
    j*world .. j*world + world - 1 of the canonical order (range(N) here), with any num_workers;
    the state after 300 steps restored into another world size continues that order from place
    300 * before, each element once."""
    def interleaved(ranks):
        steps = max(len(r) for r in ranks)
        return [r[j] for j in range(steps) for r in ranks if j < len(r)]

    with tempfile.TemporaryDirectory(prefix="sluice-dist-") as tmp:
        out, pre = run_ranks(tmp, "before", before, cluster.target, 300, workers, True, "-",
                             "global")
        assert interleaved(pre) == list(range(300 * before))
        _, post = run_ranks(tmp, "after", after, cluster.target, -1, workers, True,
                            os.path.join(out, "state.pkl"), "global")
        got = interleaved(post)
        assert got == list(range(300 * before, N)), (
            f"{len(got)} elements; first places out of order: "
            f"{[(i, x) for i, x in enumerate(got, 300 * before) if i != x][:5]}")
