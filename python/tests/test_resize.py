"""Resuming a shared distributed_epoch job on another number of readers: N reader processes
share a job, each stops at a step of its own and takes its position, and is killed (-9); the
merge of the N positions (the job's position) is restored by M reader processes of a new job,
which together get exactly the elements no reader had before, each once. For (N, M) in
{(1,2), (2,1), (2,3), (3,2), (4,8), (8,3)}, plain and deterministic, and with a worker killed
during the resumed read; and with deterministic shards, the global order kept across the
resume."""

import collections
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import tempfile
import time
import warnings

import pytest

import sluice

from conftest import BIN_DIR, Cluster, crc32c

N = 20000
PIPELINE = f"range({N}) | map(wait_us, 10)"
WAIT_S = 180

# One reader: takes `take` elements (all when take < 0) of the shared job, writes them and
# (when it stops early) its position, then dies as a killed trainer does. Elements the other
# readers received before they died are theirs (their positions say they did not hand them
# out, so the resumed job reads them again): a reader may meet the epoch's end first.
READER = r"""
import json, os, pickle, signal, sys
import sluice
target, ds_id, job, take, det, restore, out = sys.argv[1:8]
take = int(take)
# A shard "I/N" of the canonical order reads a job of its own.
shard = tuple(int(v) for v in sys.argv[8].split("/")) if len(sys.argv) > 8 else None
ds = sluice.from_dataset_id("distributed_epoch", target, ds_id,
                            job_name=None if shard else job, shard=shard,
                            deterministic=det == "1", element_timeout=120)
if restore != "-":
    with open(restore, "rb") as f:
        ds.load_state_dict(pickle.load(f))
it = iter(ds)
got = []
if take < 0:
    got = [int(x) for x in it]
    with open(out + ".state", "wb") as f:
        pickle.dump(it.state_dict(), f)
else:
    # The others' reads may take the rest of the epoch first: stop at its end then.
    for x in it:
        got.append(int(x))
        if len(got) == take:
            break
    with open(out + ".state", "wb") as f:
        pickle.dump(it.state_dict(), f)
with open(out + ".json", "w") as f:
    json.dump(got, f)
if take >= 0:
    os.kill(os.getpid(), signal.SIGKILL)
"""


# The readers here die (-9) holding elements they received and did not hand out, and the
# others wait for them: a dead reader is released two client heartbeats after its connection
# closed (the least --disconnect-grace-ms; 5 s by default), and splits produced and fetched but
# not reported received are leased again after the re-issue grace, three heartbeats and a
# second. Clients heartbeat at a fifth of --client-timeout-ms (1 s by default): a 3 s timeout
# makes it every 600 ms, those waits 1.2 s and 2.8 s instead of 5 s and 4 s, and a live reader
# is still released only after five heartbeats missed.
FAST_RELEASE = ["--client-timeout-ms", "3000", "--disconnect-grace-ms", "1200"]


@pytest.fixture(scope="module")
def cluster():
    with tempfile.TemporaryDirectory(prefix="sluice-resize-") as log_dir:
        c = Cluster(log_dir, FAST_RELEASE)
        try:
            for _ in range(3):
                c.add_worker()
            yield c
        finally:
            c.stop()


def reader_script(tmp):
    """READER, written into tmp: its path."""
    script = os.path.join(tmp, "reader.py")
    with open(script, "w") as f:
        f.write(READER)
    return script


def readers(tmp, script, target, ds_id, job, takes, det, restore, sharded=False):
    """One reader process per take; sharded: reader i of n is shard i/n of the canonical order."""
    procs = []
    for i, take in enumerate(takes):
        out = os.path.join(tmp, f"{job}-{i}")
        shard = [f"{i}/{len(takes)}"] if sharded else []
        procs.append((out, subprocess.Popen(
            [sys.executable, script, target, ds_id, job, str(take), "1" if det else "0",
             restore, out] + shard, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    return procs


def finish(procs, killed):
    got, states = [], []
    deadline = time.monotonic() + WAIT_S
    for out, p in procs:
        try:
            _, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for _, q in procs:
                q.kill()
            raise
        assert p.returncode == (-signal.SIGKILL if killed else 0), err[-3000:]
        with open(out + ".json") as f:
            got.append(json.load(f))
        with open(out + ".state", "rb") as f:
            states.append(pickle.load(f))
    return got, states


CASES = [(1, 2), (2, 1), (2, 3), (3, 2), (4, 8), (8, 3)]


@pytest.mark.parametrize("det", [False, True], ids=["plain", "deterministic"])
@pytest.mark.parametrize("before,after", CASES, ids=[f"{n}to{m}" for n, m in CASES])
def test_resume_on_another_number_of_readers(cluster, before, after, det):
    rng = random.Random(before * 100 + after * 10 + det)
    ds_id = sluice.register_dataset(cluster.target, PIPELINE, split_size=100)
    with tempfile.TemporaryDirectory(prefix="sluice-resize-") as tmp:
        script = reader_script(tmp)
        tag = f"{before}to{after}{'d' if det else ''}"
        takes = [rng.randrange(100, 1500) for _ in range(before)]
        pre, states = finish(readers(tmp, script, cluster.target, ds_id, f"a{tag}", takes, det,
                                     "-"), killed=True)
        # The job's position from the dispatcher (each reader kept its own at step 1 and died)
        # is the merge of what the readers saved.
        kept = sluice.job_state(cluster.target, f"a{tag}")
        assert kept["step"] == 1
        assert kept["position"] == sluice.merge_positions(states)["position"]
        with open(os.path.join(tmp, "job.state"), "wb") as f:
            pickle.dump({"position": kept["position"]}, f)
        post, _ = finish(readers(tmp, script, cluster.target, ds_id, f"b{tag}", [-1] * after,
                                 det, os.path.join(tmp, "job.state")), killed=False)
        check(pre, post)


GLOBAL_N = 3000


@pytest.mark.parametrize("before,after", CASES, ids=[f"{n}to{m}" for n, m in CASES])
def test_resume_keeps_the_global_order(cluster, before, after):
    """Deterministic shards (one per reader, a constant batch of one element): N readers each
    take the same number of elements (one training step each), checkpoint and are killed; the
    merge of their positions restored into M shards continues the canonical order, so the
    readers' elements step by step in reader order are the uninterrupted sequence, before and
    after the resume."""
    ds_id = sluice.register_dataset(cluster.target, f"range({GLOBAL_N}) | map(wait_us, 10)",
                                    split_size=100, deterministic=True)
    take = random.Random(before * 10 + after).randrange(50, GLOBAL_N // (2 * before))
    with tempfile.TemporaryDirectory(prefix="sluice-resize-") as tmp:
        script = reader_script(tmp)
        tag = f"g{before}to{after}"
        pre, states = finish(readers(tmp, script, cluster.target, ds_id, f"{tag}a",
                                     [take] * before, True, "-", sharded=True), killed=True)
        assert interleaved(pre) == list(range(take * before))
        with open(os.path.join(tmp, "job.state"), "wb") as f:
            pickle.dump(sluice.merge_positions(states), f)
        post, _ = finish(readers(tmp, script, cluster.target, ds_id, f"{tag}b", [-1] * after,
                                 True, os.path.join(tmp, "job.state"), sharded=True),
                         killed=False)
        got = interleaved(post)
        assert got == list(range(take * before, GLOBAL_N)), (
            f"{len(got)} elements after the resume; first out of place: "
            f"{[(i, x) for i, x in enumerate(got, take * before) if i != x][:5]}")


def interleaved(shards):
    """One element of each reader in turn, in reader order."""
    return [r[j] for j in range(max(map(len, shards))) for r in shards if j < len(r)]


def check(pre, post):
    flat = [x for r in pre + post for x in r]
    seen = collections.Counter(flat)
    missing = N - len(seen)
    dups = sorted(x for x, c in seen.items() if c > 1)
    where = {x: [f"{phase}{i}" for phase, rs in (("pre", pre), ("post", post))
                 for i, r in enumerate(rs) for _ in range(r.count(x))] for x in dups[:5]}
    assert sorted(seen) == list(range(N)) and not dups, (
        f"{len(flat)} elements: {missing} missing, {len(dups)} duplicated {dups[:20]} "
        f"(received by {where})")


def resume_through(target, ds_id, tag, takes, det, delay, fault, n=N):
    """Readers of job {tag}-a stop at takes and are killed; 3 readers restore their merged
    position in job {tag}-b, and fault() runs delay seconds into that read: every element of
    range(n) once. det "global": the readers are deterministic shards (equal takes), and the
    order is the canonical one before and after."""
    sharded = det == "global"
    with tempfile.TemporaryDirectory(prefix="sluice-resize-") as tmp:
        script = reader_script(tmp)
        pre, states = finish(readers(tmp, script, target, ds_id, f"{tag}-a", takes, bool(det),
                                     "-", sharded), killed=True)
        with open(os.path.join(tmp, "job.state"), "wb") as f:
            pickle.dump(sluice.merge_positions(states), f)
        procs = readers(tmp, script, target, ds_id, f"{tag}-b", [-1] * 3, bool(det),
                        os.path.join(tmp, "job.state"), sharded)
        time.sleep(delay)
        assert all(p.poll() is None for _, p in procs), "the read ended before the fault"
        fault()
        post, _ = finish(procs, killed=False)
    if sharded:
        assert interleaved(pre) == list(range(sum(takes)))
        got = interleaved(post)
        assert got == list(range(sum(takes), n)), (
            f"{len(got)} elements after the resume; first out of place: "
            f"{[(i, x) for i, x in enumerate(got, sum(takes)) if i != x][:5]}")
    else:
        check(pre, post)


def test_resume_through_a_worker_kill(cluster):
    """The resumed read loses a worker in its middle: still every element once."""
    ds_id = sluice.register_dataset(cluster.target, f"range({N}) | map(wait_us, 250)",
                                    split_size=100)
    spare = cluster.add_worker()

    def kill():
        spare.stop(signal.SIGKILL)
        cluster.workers.remove(spare)

    resume_through(cluster.target, ds_id, "kill", [700, 400], False, 0.5, kill)


def test_resume_merges_a_split_two_readers_shared(cluster):
    """Deterministic: a reader dies in the middle of a split it had only part of; the job's
    other reader gets the rest of that split later, without what the first one received. The
    merge of their positions then has a gap inside the split (what the first received and never
    handed out), and a reader restored from it takes exactly the gap."""
    ds_id = sluice.register_dataset(cluster.target, "range(1000) | map(wait_us, 1000)",
                                    split_size=100, deterministic=True)
    with tempfile.TemporaryDirectory(prefix="sluice-resize-") as tmp:
        script = reader_script(tmp)
        procs = readers(tmp, script, cluster.target, ds_id, "gap-a", [150], True, "-")
        first, states = finish(procs, killed=True)
        rest, more = finish(readers(tmp, script, cluster.target, ds_id, "gap-a", [-1], True,
                                    "-"), killed=False)
        with open(os.path.join(tmp, "job.state"), "wb") as f:
            pickle.dump(sluice.merge_positions(states + more), f)
        post, _ = finish(readers(tmp, script, cluster.target, ds_id, "gap-b", [-1], True,
                                 os.path.join(tmp, "job.state")), killed=False)
        flat = [x for r in first + rest + post for x in r]
        seen = collections.Counter(flat)
        dups = sorted(x for x, c in seen.items() if c > 1)
        assert sorted(seen) == list(range(1000)) and not dups, (
            f"{len(flat)} elements: {1000 - len(seen)} missing, {len(dups)} duplicated "
            f"{dups[:20]}")


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _read_varint(p, i):
    v = shift = 0
    while True:
        b = p[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def _position_with(pos, delivered, done, partial):
    """A position (the documented format, src/client/checkpoint.h) with the header of pos (its
    dataset, job and plan) and the given content: done, [(begin, end)] of split numbers;
    partial, {seq: [(begin, end)]} of positions handed out of splits had in part, or
    {seq: (total, [(begin, end)])} for a split whose end (its count) the reader had seen."""
    assert pos[:8] == b"SLUICECK"
    i = 8
    for _ in range(2):  # version, flags
        _, i = _read_varint(pos, i)
    for _ in range(2):  # dataset id, job name
        n, i = _read_varint(pos, i)
        i += n
    i += 16  # def_hash, plan_hash
    _, i = _read_varint(pos, i)  # split_total
    out = bytearray(pos[:i]) + _varint(delivered)

    def ranges(rs):
        b = bytearray(_varint(len(rs)))
        prev = 0
        for lo, hi in rs:
            b += _varint(lo - prev) + _varint(hi - lo)
            prev = hi
        return b

    out += ranges(done) + _varint(len(partial))
    nxt = 0
    for seq in sorted(partial):
        part = partial[seq]
        ended = _varint(1) + _varint(part[0]) if isinstance(part, tuple) else _varint(0)
        out += _varint(seq - nxt) + ended + ranges(part[1] if isinstance(part, tuple) else part)
        nxt = seq + 1
    return bytes(out + crc32c(bytes(out)).to_bytes(4, "little"))


def test_restore_parts_inside_splits(cluster):
    """Deterministic: the position holds positions from the middle of splits (a reader took a
    split over from one that died, handed out a few and died too). When such a split is produced
    again (here: the restored reader, with room for one split only, drops splits that come early
    and asks for them again), its worker leaves those positions out, so the reader receives the
    records on either side of them back to back. What it reports received must be exactly those
    (a range running over the positions left out would make the dispatcher wait for positions
    nobody reports, then lease the split again to whoever asks: duplicates in a shared job, and
    here a read that never ends, as its iteration never finishes). Every element once."""
    c = Cluster(tempfile.mkdtemp(prefix="sluice-island-", dir=cluster.log_dir))
    try:
        c.add_worker()
        ds_id = sluice.register_dataset(c.target, "range(20000) | map(wait_us, 100)",
                                        split_size=100, deterministic=True)
        with tempfile.TemporaryDirectory(prefix="sluice-resize-") as tmp:
            script = reader_script(tmp)
            # A read of the whole job gives a position with the dataset's header.
            _, states = finish(readers(tmp, script, c.target, ds_id, "island-a", [-1], True, "-"),
                               killed=False)
        islands = range(101, 200, 7)
        pos = _position_with(states[0]["position"], 100 + 3 * len(islands), [(0, 1)],
                             {s: [(47, 50)] for s in islands})
        ds = sluice.from_dataset_id("distributed_epoch", c.target, ds_id, job_name="island-b",
                                    deterministic=True, reorder_bytes=1, element_timeout=60)
        ds.load_state_dict({"position": pos})
        got = [int(x) for x in ds]
        had = {s * 100 + p for s in islands for p in range(47, 50)}
        want = [x for x in range(100, 20000) if x not in had]
        assert sorted(got) == want, (
            f"{len(got)} elements, {len(set(got))} distinct, expected {len(want)}")
    finally:
        c.stop()


def test_restore_the_ends_of_splits_had(cluster):
    """Deterministic: the position holds the end of each split (a reader that took splits over
    from one that died had their ends and their counts) and not its start. The restored reader
    takes each split's start; that completes the split, which the dispatcher then confirms, and
    the ends must still be stepped over when the worker's later replies bring them (they were
    handed out once the confirmation came first: duplicates). Elements are slow here so that it
    does, for nearly every split."""
    ds_id = sluice.register_dataset(cluster.target, "range(40) | map(wait_us, 150000)",
                                    split_size=4, deterministic=True)
    with tempfile.TemporaryDirectory(prefix="sluice-resize-") as tmp:
        script = reader_script(tmp)
        _, states = finish(readers(tmp, script, cluster.target, ds_id, "ends-a", [-1], True,
                                   "-"), killed=False)
    pos = _position_with(states[0]["position"], 30, [], {s: (4, [(1, 4)]) for s in range(10)})
    for det in (True, False):
        ds = sluice.from_dataset_id("distributed_epoch", cluster.target, ds_id,
                                    job_name=f"ends-b{int(det)}", deterministic=det,
                                    element_timeout=60)
        ds.load_state_dict({"position": pos})
        it = iter(ds)
        got = [int(x) for x in it]
        assert got == list(range(0, 40, 4)) if det else sorted(got) == list(range(0, 40, 4)), got
        # The position after it holds the whole epoch: a reader restored from it gets nothing.
        again = sluice.from_dataset_id("distributed_epoch", cluster.target, ds_id,
                                       job_name=f"ends-c{int(det)}", deterministic=det,
                                       element_timeout=60)
        again.load_state_dict(it.state_dict())
        assert [int(x) for x in again] == []


@pytest.mark.parametrize("det", [False, True, "global"], ids=["plain", "deterministic", "global"])
def test_resume_through_a_dispatcher_restart(cluster, det):
    """The resumed read of a shared job (2 readers killed, their merged position restored into 3)
    loses its fault-tolerant dispatcher and a worker (kill -9) in its middle; the dispatcher
    restarts from its journal on the same port: still every element once. "global": 2 shards
    resumed into 3 keep the canonical order through it."""
    log_dir = tempfile.mkdtemp(prefix="sluice-restart-", dir=cluster.log_dir)
    c = Cluster(log_dir, ["--fault-tolerant", "--work-dir", os.path.join(log_dir, "work")])
    try:
        for _ in range(3):
            c.add_worker()
        # Each shard reads the whole epoch: its elements are slower, so that the read is still
        # under way when the fault comes.
        n, us = (GLOBAL_N, 3000) if det == "global" else (N, 300)
        ds_id = sluice.register_dataset(c.target, f"range({n}) | map(wait_us, {us})",
                                        split_size=100)

        def restart():
            # A worker dies with it: its splits go back to the pool once the restarted
            # dispatcher removes it, which may be before the readers' first heartbeats to it.
            c.workers.pop(0).stop(signal.SIGKILL)
            c.restart_dispatcher()

        takes = [300, 300] if det == "global" else [900, 500]
        resume_through(c.target, ds_id, "restart", takes, det, 1.0, restart, n)
    finally:
        c.stop()


def test_state_dict_warns_when_the_dispatcher_does_not_confirm(cluster):
    """state_dict() of a reader of a shared job first reports what the reader received; when the
    dispatcher does not confirm it within 5 s (here: stopped), the position still comes back,
    with a RuntimeWarning saying what is at stake. With the dispatcher answering, no warning."""
    c = Cluster(tempfile.mkdtemp(prefix="sluice-warn-", dir=cluster.log_dir))
    try:
        c.add_worker()
        ds_id = sluice.register_dataset(c.target, "range(100000) | map(wait_us, 10)",
                                        split_size=100)
        ds = sluice.from_dataset_id("distributed_epoch", c.target, ds_id, job_name="warn-j",
                                    element_timeout=60)
        it = iter(ds)
        got = [int(next(it)) for _ in range(10)]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert set(it.state_dict()) == {"position"}
        c.dispatcher.proc.send_signal(signal.SIGSTOP)
        try:
            # Stopped for sure (state T) before the report is asked for: one answered in the
            # meantime is answered indeed.
            deadline = time.monotonic() + 10
            while (open(f"/proc/{c.dispatcher.proc.pid}/stat").read().rsplit(")", 1)[1].split()[0]
                   != "T"):
                assert time.monotonic() < deadline, "the dispatcher did not stop"
                time.sleep(0.01)
            t0 = time.monotonic()
            with pytest.warns(RuntimeWarning, match="did not confirm within 5 s what this reader"):
                state = it.state_dict()
            assert time.monotonic() - t0 < 30
        finally:
            c.dispatcher.proc.send_signal(signal.SIGCONT)
        assert isinstance(state["position"], bytes)
        got.append(int(next(it)))
        assert len(set(got)) == len(got)
        it.close()
    finally:
        c.stop()


def _cli(*args):
    return [str(BIN_DIR / "sluice"), *args]


def _cut_to_checkpoint(out, ckpt):
    """What a `sluice read --output OUT --checkpoint CKPT` killed -9 handed out for good: its
    output up to the bytes its last checkpoint covers (a resumed read cuts the rest)."""
    with open(ckpt, "rb") as f:
        head = f.read(20)
    assert head[:8] == b"SLREADCK"
    covered = int.from_bytes(head[12:20], "little")
    with open(out, "rb") as f:
        return [int(x) for x in f.read()[:covered].split()]


def test_cli_job_checkpoint_after_a_dispatcher_restart(cluster):
    """Two `sluice read --job-name J --checkpoint` readers keep their positions with a
    fault-tolerant dispatcher as they checkpoint; both are stopped (SIGTERM: a last checkpoint),
    and the dispatcher is killed (-9) and restarts from its journal. `sluice job checkpoint` then takes the job's
    position (kept through the restart), and three readers of a new job continue from copies of
    it: with what the first two had covered, every element once."""
    log_dir = tempfile.mkdtemp(prefix="sluice-jobckpt-", dir=cluster.log_dir)
    c = Cluster(log_dir, ["--fault-tolerant", "--work-dir", os.path.join(log_dir, "work")])
    try:
        c.add_worker()
        c.add_worker()
        n = 6000
        ds_id = sluice.register_dataset(c.target, f"range({n}) | map(wait_us, 400)",
                                        split_size=50)
        addr = c.target[len("sluice://"):]
        with tempfile.TemporaryDirectory(prefix="sluice-jobckpt-") as tmp:
            pre = []
            for i in range(2):
                out, ck = os.path.join(tmp, f"a{i}.out"), os.path.join(tmp, f"a{i}.ck")
                pre.append((out, ck, subprocess.Popen(
                    _cli("read", "--dispatcher", addr, "--dataset-id", ds_id, "--job-name",
                         "cli-a", "--output", out, "--checkpoint", ck, "--checkpoint-every",
                         "150", "--quiet"), stderr=subprocess.PIPE, text=True)))
            # Both have checkpointed a few times (3 or more steps kept each).
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                st = sluice.status(c.target)
                done = sum(os.path.exists(ck) for _, ck, _ in pre)
                if done == 2 and all(os.path.getsize(o) > 0 for o, _, _ in pre):
                    sizes = [os.path.getsize(o) for o, _, _ in pre]
                    if min(sizes) > 4 * 150 * 5:
                        break
                time.sleep(0.2)
            for _, _, p in pre:
                p.terminate()
                p.wait(timeout=30)
            c.restart_dispatcher()
            had = [x for out, ck, _ in pre for x in _cut_to_checkpoint(out, ck)]
            job = os.path.join(tmp, "job.ck")
            r = subprocess.run(_cli("job", "checkpoint", "--dispatcher", addr, "--job", "cli-a",
                                    "--step", "latest", "--output", job),
                               capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0, r.stderr
            assert r.stdout.startswith("job cli-a: position at step "), r.stdout
            post = []
            for i in range(3):
                ck = os.path.join(tmp, f"b{i}.ck")
                with open(job, "rb") as f, open(ck, "wb") as g:
                    g.write(f.read())
                out = os.path.join(tmp, f"b{i}.out")
                post.append((out, subprocess.Popen(
                    _cli("read", "--dispatcher", addr, "--job-name", "cli-b", "--output", out,
                         "--checkpoint", ck, "--quiet"), stderr=subprocess.PIPE, text=True)))
            for out, p in post:
                _, err = p.communicate(timeout=120)
                assert p.returncode == 0, err
            got = had + [int(x) for out, _ in post for x in open(out).read().split()]
            seen = collections.Counter(got)
            dups = sorted(x for x, k in seen.items() if k > 1)
            assert sorted(seen) == list(range(n)) and not dups, (
                f"{len(got)} elements: {n - len(seen)} missing, {len(dups)} duplicated "
                f"{dups[:20]}")
    finally:
        c.stop()


def test_job_state_steps(cluster):
    """Steps: each state_dict() keeps the reader's position at its next step (or the step
    given); job_state() takes the latest step every reader still reading has reached, or the
    one asked for, merging each reader's latest at or below it; a reader that left stops
    holding the cut back; errors name what is kept."""
    ds_id = sluice.register_dataset(cluster.target, "range(5000) | map(wait_us, 20)",
                                    split_size=50)
    mk = lambda: iter(sluice.from_dataset_id("distributed_epoch", cluster.target, ds_id,  # noqa
                                             job_name="steps-j", element_timeout=60))
    a, b = mk(), mk()
    sa, sb = {}, {}
    for step in range(1, 7):
        for _ in range(20):
            next(a)
            next(b)
        sa[step] = a.state_dict()
        if step <= 4:
            sb[step] = b.state_dict()
    # b is at step 4: the cut is 4, a's position of step 4 with b's.
    kept = sluice.job_state(cluster.target, "steps-j")
    assert kept["step"] == 4
    assert kept["position"] == sluice.merge_positions([sa[4], sb[4]])["position"]
    assert sluice.job_state(cluster.target, "steps-j", step=3)["position"] == \
        sluice.merge_positions([sa[3], sb[3]])["position"]
    # Steps 1 and 2 of a are no longer kept (its last 4 are 3 to 6).
    with pytest.raises(sluice.NotFoundError, match=r"steps 3 to 6"):
        sluice.job_state(cluster.target, "steps-j", step=2)
    # An explicit step: b jumps to 10; a step older than every step kept is refused.
    sb[10] = b.state_dict(step=10)
    with pytest.raises(sluice.InvalidArgumentError, match=r"older than every step"):
        a.state_dict(step=1)
    assert sluice.job_state(cluster.target, "steps-j")["step"] == 6
    assert sluice.job_state(cluster.target, "steps-j", step=8)["position"] == \
        sluice.merge_positions([sa[6], sb[4]])["position"]
    # Each one's latest.
    assert sluice.job_state(cluster.target, "steps-j", step="latest")["position"] == \
        sluice.merge_positions([sa[6], sb[10]])["position"]
    # a leaves: the cut is b's latest.
    a.close()
    deadline = time.monotonic() + WAIT_S
    while sluice.job_state(cluster.target, "steps-j")["step"] != 10:
        assert time.monotonic() < deadline, "a's leaving never moved the cut"
        time.sleep(0.1)
    assert sluice.job_state(cluster.target, "steps-j")["position"] == \
        sluice.merge_positions([sa[6], sb[10]])["position"]
    b.close()
    with pytest.raises(sluice.NotFoundError, match=r"no position is kept for job 'nope'"):
        sluice.job_state(cluster.target, "nope")
    with pytest.raises(ValueError):
        sluice.job_state(cluster.target, "steps-j", step=0)
    # A job of its own keeps nothing, and state_dict() does not complain.
    it = iter(sluice.from_dataset_id("distributed_epoch", cluster.target, ds_id))
    next(it)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        it.state_dict()
    it.close()
