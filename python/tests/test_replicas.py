"""Drills of a dispatcher group of 3 replicas on Raft, with the real binaries: the leader killed
(-9) again and again, stopped (SIGSTOP) past its election timeout, every replica restarted in
turn (SIGTERM: the leader hands over), a follower's work dir wiped (it joins again, catches up
from a snapshot or the log, and votes again), a new group that waits for its last member, and
the replicas' refusals at start (damaged Raft logs and snapshots among them). Reads go through the list of the three RPC
addresses during the drills, and each one must get every element exactly once; at the end the
three replicas hold the same state (state_digest and applied_index of `sluice status --json`).

Every replica listens on ports picked free here (RPC, Raft, metrics); every wait is bounded; the
replicas' and readers' logs stay in the test's tmp dir and are printed when a case fails."""

import collections
import functools
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import time
import urllib.error
import urllib.request

import pytest

import sluice
from conftest import BIN_DIR, free_ports

# The reads' elements wait 1 ms each (waits, not CPU, so the same on a machine of any size):
# with 3 workers of 2 threads about 5000 a second. Each drill reads as many as last through it
# with a margin (about twice its own length where it asserts the reads ran through it all).
WAIT_US = 1000
READ_S = 300  # the bound on one drill's reads
# The replicas' Raft election timeout (the flag's default is 600 ms): a kill or a stop is
# noticed sooner, so each drill round is shorter. Raft's heartbeats go out every tenth of it;
# 300 ms leaves a loaded machine's scheduling delays far behind (test_replica_options.py runs
# its group with it too).
ELECTION_MS = 300


def pipeline(n):
    return f"range({n}) | map(wait_us, {WAIT_US})"


def free_port():
    return free_ports(1)[0]


class Group:
    """Three sluice-dispatcher replicas (ids 1 to 3) on 127.0.0.1, their work dirs and logs
    under tmp, with the workers and readers that use them."""

    def __init__(self, tmp, extra=(), n=3, later=(), election_ms=ELECTION_MS):
        self.tmp = str(tmp)
        self.ids = list(range(1, n + 1))
        ports = iter(free_ports(3 * n))
        self.rpc = {i: next(ports) for i in self.ids}
        self.raft = {i: next(ports) for i in self.ids}
        self.metrics = {i: next(ports) for i in self.ids}
        self.cluster = ",".join(f"{i}=127.0.0.1:{self.raft[i]}" for i in self.ids)
        self.target = ",".join(f"127.0.0.1:{self.rpc[i]}" for i in self.ids)
        self.election_ms = election_ms
        self.extra = ["--raft-election-timeout-ms", str(election_ms), *extra]
        self.procs = {}
        self.others = []  # workers and readers: (name, Popen)
        self.logs = []
        for i in self.ids:
            if i not in later:
                self.start(i)

    def work_dir(self, i):
        return os.path.join(self.tmp, f"d{i}")

    def argv(self, i, cluster=None):
        return [str(BIN_DIR / "sluice-dispatcher"), "--port", str(self.rpc[i]),
                "--work-dir", self.work_dir(i), "--raft-id", str(i),
                "--raft-address", f"127.0.0.1:{self.raft[i]}",
                "--raft-cluster", cluster or self.cluster,
                "--metrics-port", str(self.metrics[i]), *self.extra]

    def log(self, name):
        path = os.path.join(self.tmp, name + ".log")
        if path not in self.logs:
            self.logs.append(path)
        return open(path, "a")

    def start(self, i):
        with self.log(f"d{i}") as log:
            self.procs[i] = subprocess.Popen(self.argv(i), stdout=log, stderr=subprocess.STDOUT)

    def send(self, i, sig):
        self.procs[i].send_signal(sig)

    def kill(self, i, sig=signal.SIGKILL, wait_s=30):
        """Stops replica i with sig and waits (bounded) until it has exited."""
        p = self.procs[i]
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(wait_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(wait_s)
                raise AssertionError(f"replica {i} did not exit within {wait_s} s of {sig!r}")
        return p.returncode

    def readyz(self, i):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics[i]}/readyz",
                                        timeout=0.25) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (OSError, ValueError):
            return None

    def serving(self):
        return [i for i in self.ids if self.readyz(i) == 200]

    def wait_leader(self, timeout=30, exclude=()):
        """The id of the one serving replica (not among exclude), waiting at most timeout s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = [i for i in self.serving() if i not in exclude]
            if len(s) == 1:
                return s[0]
            time.sleep(0.02)
        raise AssertionError(f"no replica serves after {timeout} s (serving: {self.serving()})")

    def cli(self, *args, timeout=10):
        return subprocess.run([str(BIN_DIR / "sluice"), *args], capture_output=True, text=True,
                              timeout=timeout)

    def status(self, i):
        """Replica i's own view (the raft object of its status), or None when it does not
        answer."""
        try:
            r = self.cli("status", "--dispatcher", f"127.0.0.1:{self.rpc[i]}", "--json",
                         timeout=5)
        except subprocess.TimeoutExpired:
            return None
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)["raft"]
        except (ValueError, KeyError):
            return None

    def wait_converged(self, timeout=60):
        """Waits until every replica answers with the same state_digest and applied_index;
        returns their views."""
        deadline = time.monotonic() + timeout
        views = {}
        while time.monotonic() < deadline:
            views = {i: self.status(i) for i in self.ids}
            if all(views.values()):
                keys = {(v["state_digest"], v["applied_index"]) for v in views.values()}
                if len(keys) == 1:
                    return views
            time.sleep(0.2)
        raise AssertionError(f"replicas did not converge in {timeout} s: {views}")

    def add_workers(self, n=3):
        for w in range(n):
            with self.log(f"w{len(self.others)}") as log:
                p = subprocess.Popen([str(BIN_DIR / "sluice-worker"), "--dispatcher", self.target,
                                      "--port", "0", "--threads", "2"],
                                     stdout=log, stderr=subprocess.STDOUT)
            self.others.append(("worker", p))

    def readers(self, elements, n=2, job="j"):
        """Starts n `sluice read` processes sharing job in distributed_epoch, of range(elements);
        returns their (Popen, output path)."""
        out = []
        for r in range(n):
            path = os.path.join(self.tmp, f"{job}-out{r}.txt")
            with self.log(f"{job}-read{r}") as log:
                p = subprocess.Popen([str(BIN_DIR / "sluice"), "read", "--dispatcher", self.target,
                                      "--job-name", job, "--mode", "distributed_epoch",
                                      pipeline(elements), "--output", path],
                                     stdout=log, stderr=subprocess.STDOUT)
            self.others.append(("reader", p))
            out.append((p, path))
        return out

    def stop(self):
        for _, p in self.others:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for _, p in self.others:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(15)
        for i in self.ids:
            p = self.procs[i]
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait(15)

    def dump_logs(self):
        for path in self.logs:
            try:
                with open(path, errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            print(f"==== {path} (last 4000 chars) ====")
            print(text[-4000:])


def _varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def _field(num, wire, value):
    """A protobuf field: wire 0 a varint, wire 2 bytes."""
    key = _varint(num << 3 | wire)
    return key + (_varint(value) if wire == 0 else _varint(len(value)) + value)


def _frame(envelope):
    return struct.pack(">I", len(envelope)) + envelope


def ask_alone(port, wait_s=3):
    """What one replica alone answers a request (GetDataset id 1, after a client Hello; see
    proto/wire.proto), without following a NOT_LEADER answer as sluice's clients do: the bytes
    it sent back within wait_s."""
    hello = _field(1, 0, 1) + _field(2, 0, 3) + _field(3, 0, 12345)  # version 1, ROLE_CLIENT
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(_frame(_field(2, 2, hello)) + _frame(_field(1, 0, 1) + _field(12, 2, b"")))
        deadline = time.monotonic() + wait_s
        try:
            while time.monotonic() < deadline and b"not the leader" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
    return got


def check_reads(readers, n):
    """Waits for the readers (bounded) and asserts they exited 0 and got range(n) exactly."""
    deadline = time.monotonic() + READ_S
    for p, _ in readers:
        p.wait(max(1, deadline - time.monotonic()))
    assert [p.returncode for p, _ in readers] == [0] * len(readers)
    got = collections.Counter()
    for _, path in readers:
        with open(path) as f:
            got.update(int(line) for line in f if line.strip())
    lost = n - len(set(got) & set(range(n)))
    dup = sum(c - 1 for c in got.values() if c > 1)
    extra = sum(1 for e in got if not 0 <= e < n)
    assert (lost, dup, extra) == (0, 0, 0), f"lost {lost}, duplicated {dup}, foreign {extra}"
    return got


@pytest.fixture
def group_factory(tmp_path):
    made = []

    def make(**kw):
        g = Group(tmp_path, **kw)
        made.append(g)
        return g

    make.made = made
    yield make
    for g in made:
        g.stop()


def dumps_logs(test):
    """Prints the logs of the case's groups when it fails (in its captured output)."""

    @functools.wraps(test)
    def run(group_factory):
        try:
            test(group_factory)
        except BaseException:
            for g in group_factory.made:
                g.stop()
                g.dump_logs()
            raise

    return run


def figures(name, values):
    values = sorted(values)
    p50 = statistics.median(values)
    print(f"{name}: " + " ".join(f"{v:.3f}" for v in values)
          + f" s; p50 {p50:.3f} s, max {values[-1]:.3f} s")


def wait_answers(g, i, timeout=30):
    """Waits (bounded) until replica i, just started, answers a status request."""
    deadline = time.monotonic() + timeout
    while g.status(i) is None:
        assert time.monotonic() < deadline, f"replica {i} does not answer {timeout} s after start"
        time.sleep(0.05)


def drill_done(readers, t0):
    print(f"the drill took {time.monotonic() - t0:.1f} s; "
          f"reads still running: {sum(p.poll() is None for p, _ in readers)}")


@dumps_logs
def test_leader_killed_ten_times(group_factory):
    g = group_factory()
    g.wait_leader()
    g.add_workers(3)
    # The drill takes about 15 s (more on a loaded machine).
    readers = g.readers(100000)
    times = []
    during = 0
    t_drill = time.monotonic()
    restarted = None
    for k in range(10):
        if restarted is not None:
            # The replica killed last is back before the next kill, so that the kill-to-reply
            # figures measure an election among two live replicas, not a restart.
            wait_answers(g, restarted)
        # The reads go on under this leader for a while.
        time.sleep(0.3)
        leader = g.wait_leader()
        during += all(p.poll() is None for p, _ in readers)
        t0 = time.monotonic()
        g.kill(leader)
        g.wait_leader(exclude=(leader,))
        times.append(time.monotonic() - t0)
        # The two others serve alone for a while.
        time.sleep(0.7)
        g.start(leader)
        restarted = leader
    drill_done(readers, t_drill)
    check_reads(readers, 100000)
    print(f"{during} of the 10 kills while both reads ran")
    assert during >= 5, "the reads ended too early for the drill"
    figures("kill -9 of the leader to the next leader's first reply", times)
    views = g.wait_converged()
    print("converged:", {i: (v["applied_index"], v["state_digest"]) for i, v in views.items()})


@dumps_logs
def test_leader_stopped_past_election_timeout(group_factory):
    g = group_factory()
    timeout_ms = g.election_ms
    g.wait_leader()
    g.add_workers(3)
    # The drill takes about 5 s (more on a loaded machine); the reads must outlast it.
    readers = g.readers(55000)
    t_drill = time.monotonic()
    for cycle in range(3):
        time.sleep(0.5)
        old = g.wait_leader()
        g.send(old, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            time.sleep(3 * timeout_ms / 1000)
            new = g.wait_leader(timeout=10, exclude=(old,))
            print(f"SIGSTOP of {old}: {new} serves after {time.monotonic() - t0:.3f} s")
        finally:
            g.send(old, signal.SIGCONT)
        assert all(p.poll() is None for p, _ in readers), "the reads ended before the drill"
        # The old leader learns of the newer term and follows; it must not serve meanwhile.
        deadline = time.monotonic() + 15
        view = None
        while time.monotonic() < deadline:
            assert g.procs[old].poll() is None, \
                f"the old leader {old} exited ({g.procs[old].returncode})"
            view = g.status(old)
            if view and view["role"] == "follower" and view["leader_id"] == new:
                break
            time.sleep(0.1)
        assert view and view["role"] == "follower" and not view["serving"], view
        assert g.readyz(old) != 200
        answer = ask_alone(g.rpc[old])
        assert f"not the leader: the leader is 127.0.0.1:{g.rpc[new]}".encode() in answer, answer
    drill_done(readers, t_drill)
    check_reads(readers, 55000)
    g.wait_converged()


@dumps_logs
def test_rolling_restart(group_factory):
    g = group_factory()
    g.wait_leader()
    g.add_workers(3)
    # The drill takes about 2 s (more on a loaded machine); the reads must outlast it.
    readers = g.readers(30000)
    gaps = []
    t_drill = time.monotonic()
    for i in g.ids:
        time.sleep(0.5)
        assert all(p.poll() is None for p, _ in readers), "the reads ended before the drill"
        was_leader = g.readyz(i) == 200
        # The time without any serving replica, from SIGTERM until replica i is back and
        # some replica serves.
        t0 = time.monotonic()
        g.send(i, signal.SIGTERM)
        down = 0.0
        last = t0
        exited = False
        deadline = t0 + 60
        while time.monotonic() < deadline:
            now = time.monotonic()
            serving = g.serving()
            if not serving:
                down += now - last
            last = now
            if not exited and g.procs[i].poll() is not None:
                assert g.procs[i].returncode == 0, g.procs[i].returncode
                exited = True
                g.start(i)
            if exited and serving and g.status(i):
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"replica {i} did not stop and come back within 60 s")
        gaps.append(down)
        print(f"restart of replica {i} ({'leader' if was_leader else 'follower'}): "
              f"{down:.3f} s without a serving replica")
    drill_done(readers, t_drill)
    check_reads(readers, 30000)
    figures("unavailability per restart", gaps)
    g.wait_converged()


def log_lines(g, i, text):
    with open(os.path.join(g.tmp, f"d{i}.log"), errors="replace") as f:
        return [line for line in f if text in line]


def register_many(g, count):
    """Registers count datasets (a Raft entry each) through the list of replicas, from this
    process: the same requests as `sluice register`, without a process start for each (the
    command's own registration, following the leader, is checked in wipe_and_rejoin)."""
    for k in range(count):
        assert sluice.register_dataset("sluice://" + g.target, f"range({k + 1})", timeout=30)


def wipe_and_rejoin(g, registrations):
    """Stops a follower, empties its work dir and starts it again after registrations changes:
    it must join without bootstrapping, the leader must add it back, and it must reach the
    group's state and vote again. Returns the applied indexes it went through."""
    leader = g.wait_leader()
    follower = next(i for i in g.ids if i != leader)
    register_many(g, registrations)
    before = g.wait_converged()[leader]
    assert g.kill(follower, signal.SIGTERM) == 0
    shutil.rmtree(g.work_dir(follower))
    g.start(follower)
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        v = g.status(follower)
        if v:
            seen.append((v["applied_index"], v["membership"]))
            if v["applied_index"] >= before["applied_index"] and v["membership"] == "voter":
                break
        time.sleep(0.05)
    views = g.wait_converged(timeout=10)
    print(f"wiped replica {follower}: (applied_index, membership) seen {seen[:6]}... "
          f"{seen[-1:]} (the leader's applied_index was {before['applied_index']})")
    assert views[follower]["state_digest"] == before["state_digest"]
    assert views[follower]["membership"] == "voter", views[follower]
    # It asked the others, found a group with a log and joined it; it never bootstrapped.
    assert log_lines(g, follower, "it joins without bootstrapping"), "no join"
    assert len(log_lines(g, follower, "(bootstrapped)")) == 1, "bootstrapped again"
    assert log_lines(g, follower, "is a voter of the group again")
    # The leader removed it and added it back (which resets what it believed the replica holds).
    leader_now = g.wait_leader()
    changes = log_lines(g, leader_now, f"replica {follower} started from a new directory")
    assert any("removes it" in line for line in changes), changes
    assert any("adds it back" in line for line in changes), changes
    assert any("makes it a voter" in line for line in changes), changes
    # The group still serves, and the rejoined replica's state is in it.
    r = g.cli("register", "--dispatcher", g.target, "range(1000)")
    assert r.returncode == 0, r.stderr
    g.wait_converged()
    # It votes again: with the others' leader stopped, it and the third elect a leader.
    old = g.wait_leader()
    assert g.kill(old, signal.SIGKILL) == -signal.SIGKILL
    new = g.wait_leader(exclude=(old,))
    print(f"after the rejoin: leader {old} killed, {new} elected")
    g.start(old)
    g.wait_converged()
    return [a for a, _ in seen]


@dumps_logs
def test_wiped_follower_catches_up_by_snapshot(group_factory):
    g = group_factory(extra=["--snapshot-every", "16"])
    # C-Raft keeps 128 entries behind a snapshot: past 16 + 128 changes the log is compacted.
    seen = wipe_and_rejoin(g, 160)
    # The log was compacted every 16 entries: a copy of the state, not the log from entry 1,
    # brought the wiped replica's applied_index from nothing straight past the snapshot's index.
    assert all(a == 0 or a >= 16 for a in seen), seen


@dumps_logs
def test_wiped_follower_catches_up_by_entries(group_factory):
    # A log short enough to need no snapshot: the entries themselves, from the first.
    g = group_factory()
    wipe_and_rejoin(g, 5)


@dumps_logs
def test_new_group_waits_for_every_member(group_factory):
    # A new group forms once every member has answered (none of them past the bootstrap):
    # two of three wait, serve nothing and say what they wait for.
    g = group_factory(later=(3,))
    # They say so once they have waited 5 s (and every 5 s after).
    deadline = time.monotonic() + 30
    while not all(log_lines(g, i, "not heard from: 3 (") for i in (1, 2)):
        assert time.monotonic() < deadline, "replicas 1 and 2 did not say what they wait for"
        time.sleep(0.1)
    for i in (1, 2):
        v = g.status(i)
        assert v and v["membership"] == "new" and v["role"] == "unavailable", v
        assert log_lines(g, i, "not heard from: 3 ("), i
    assert not g.serving()
    g.start(3)
    g.wait_leader()
    views = g.wait_converged()
    assert all(v["membership"] == "voter" for v in views.values()), views
    for i in g.ids:
        assert log_lines(g, i, "(bootstrapped)"), i


@dumps_logs
def test_damaged_raft_directory_refused(group_factory):
    # A replica whose Raft log or snapshot was damaged while it was stopped does not start: it
    # says what is damaged, and never drops the damaged part to start from what is left.
    g = group_factory(extra=["--snapshot-every", "16"])
    leader = g.wait_leader()
    follower = next(i for i in g.ids if i != leader)
    register_many(g, 200)
    g.wait_converged()
    assert g.kill(follower, signal.SIGTERM) == 0
    raft = os.path.join(g.work_dir(follower), "raft")
    pristine = os.path.join(g.tmp, "pristine")
    shutil.copytree(raft, pristine)
    names = sorted(os.listdir(raft))
    segments = [n for n in names if n[0].isdigit() and "-" in n]
    snapshots = [n for n in names if n.startswith("snapshot-") and not n.endswith(".meta")]
    assert segments and snapshots, names

    def damaged(name, how):
        shutil.rmtree(raft)
        shutil.copytree(pristine, raft)
        path = os.path.join(raft, name)
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            if how == "flip":
                f.seek(size // 2)
                b = f.read(1)
                f.seek(size // 2)
                f.write(bytes([b[0] ^ 0xFF]))
            else:
                f.truncate(size // 2)
        rc, lines = start_refused(g.argv(follower), timeout=20)
        print(f"{name} ({how}): rc {rc}: {lines[-1:] if lines else lines}")
        assert rc not in (0, None), (name, how, rc, lines)
        assert lines and lines[-1].startswith("sluice-dispatcher: raft: starting from "), lines
        return lines[-1]

    # A flipped byte in a batch's data fails its checksum; one that lands in a batch's header
    # (where the segment's middle falls depends on the entries' sizes) is refused before that,
    # for the count it then holds. Either way the message names the segment.
    why = damaged(segments[-1], "flip")
    assert segments[-1] in why, why
    assert "checksum mismatch" in why or "in preamble is too high" in why, why
    assert "short read" in damaged(segments[-1], "truncate")
    assert "the snapshot does not restore: " in damaged(snapshots[-1], "flip")
    # Put back as it was, it starts and catches up.
    shutil.rmtree(raft)
    shutil.copytree(pristine, raft)
    g.start(follower)
    g.wait_converged()


def start_refused(argv, timeout=20):
    """Runs a start that must be refused: its exit status (None when it was still running
    after timeout s, then killed) and its stderr's non-empty lines."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        return None, [line for line in (err or "").splitlines() if line.strip()]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    return r.returncode, lines


def test_refused_other_cluster(tmp_path):
    d = str(BIN_DIR / "sluice-dispatcher")
    p = free_ports(5)
    cl = f"1=127.0.0.1:{p[0]},2=127.0.0.1:{p[1]},3=127.0.0.1:{p[2]}"
    base = [d, "--port", str(free_port()), "--work-dir", str(tmp_path / "w"), "--raft-id", "1",
            "--raft-address", f"127.0.0.1:{p[0]}"]
    # The first start bootstraps the raft dir for the group cl, with its two peers.
    first = [subprocess.Popen(base + ["--raft-cluster", cl], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    for i in (2, 3):
        first.append(subprocess.Popen(
            [d, "--port", str(free_port()), "--work-dir", str(tmp_path / f"w{i}"), "--raft-id",
             str(i), "--raft-address", f"127.0.0.1:{p[i - 1]}", "--raft-cluster", cl],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(tmp_path / "w" / "raft" / "sluice-cluster"):
            assert time.monotonic() < deadline, "the group did not form"
            time.sleep(0.05)
    finally:
        for proc in first:
            proc.terminate()
        for proc in first:
            proc.wait(30)
    assert first[0].returncode == 0
    other = f"1=127.0.0.1:{p[0]},2=127.0.0.1:{p[3]},3=127.0.0.1:{p[4]}"
    rc, lines = start_refused(base + ["--raft-cluster", other], timeout=10)
    print("other cluster:", rc, lines)
    assert rc not in (0, None) and len(lines) == 1, (rc, lines)
    assert lines[0].startswith("sluice-dispatcher: ") and "belongs to the cluster" in lines[0]


def test_refusals_at_start(tmp_path):
    d = str(BIN_DIR / "sluice-dispatcher")
    p = free_ports(3)
    cl = f"1=127.0.0.1:{p[0]},2=127.0.0.1:{p[1]},3=127.0.0.1:{p[2]}"
    cases = {
        "id not listed": (["--raft-id", "4", "--raft-address", f"127.0.0.1:{p[0]}",
                           "--raft-cluster", cl], "4"),
        "duplicate ids": (["--raft-id", "1", "--raft-address", f"127.0.0.1:{p[0]}",
                           "--raft-cluster",
                           f"1=127.0.0.1:{p[0]},1=127.0.0.1:{p[1]},2=127.0.0.1:{p[2]}"], "1"),
        "malformed list": (["--raft-id", "1", "--raft-address", f"127.0.0.1:{p[0]}",
                            "--raft-cluster", f"1=127.0.0.1:{p[0]},2=nowhere,3"], "cluster"),
    }
    for name, (args, word) in cases.items():
        rc, lines = start_refused([d, "--port", str(free_port()), "--work-dir",
                                   str(tmp_path / name.replace(" ", "-"))] + args)
        print(f"{name}: rc {rc}: {lines}")
        assert rc != 0 and len(lines) == 1 and word in lines[0], (name, rc, lines)
        assert lines[0].startswith("sluice-dispatcher: "), (name, lines)

    rc, lines = start_refused([d, "--port", str(free_port()), "--raft-id", "1", "--raft-address",
                               f"127.0.0.1:{p[0]}", "--raft-cluster", cl])
    print(f"no work dir: rc {rc}: {lines[:2]}")
    assert rc == 2 and lines and "work-dir" in lines[0], (rc, lines)
