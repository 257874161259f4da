"""Fixtures: a local cluster of the real sluice-dispatcher and sluice-worker binaries on
127.0.0.1, port 0. SLUICE_BIN_DIR names the directory of the binaries (CTest sets it)."""

import contextlib
import os
import pathlib
import signal
import subprocess
import tempfile
import time

import pytest

import sluice

BIN_DIR = pathlib.Path(os.environ.get(
    "SLUICE_BIN_DIR", pathlib.Path(__file__).resolve().parents[2] / "build" / "bin"))
WAIT_S = 15


def free_ports(n):
    """n distinct TCP ports free a moment ago on 127.0.0.1, for addresses that must be known
    before their servers start (Raft's cluster list): taken below the kernel's ephemeral range,
    where no outgoing connection of another process can take one before the server binds it (as
    it can take a port that bind(0) handed out and released). As tests/lib/net.h."""
    import random
    import socket
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        high = 32768
    low = 10000 if high - 10000 >= 1000 else 1024
    held = []
    try:
        for _ in range(1000):
            if len(held) == n:
                break
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", random.randrange(low, high)))
            except OSError:
                s.close()
                continue
            held.append(s)
        if len(held) != n:
            raise RuntimeError(f"no {n} free ports below {high}")
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long case of a matrix (-m 'not slow' skips it)")


def wait_listed(dispatcher, listed, what):
    """Waits (WAIT_S at most) until listed(workers) is true of the workers the dispatcher (a
    target or a DispatchServer) lists; fails naming what did not happen."""
    deadline = time.monotonic() + WAIT_S
    while not listed(sluice.status(dispatcher)["workers"]):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {WAIT_S} s")
        time.sleep(0.02)


def wait_workers(dispatcher, n):
    """Waits until the dispatcher lists at least n workers."""
    wait_listed(dispatcher, lambda ws: len(ws) >= n, f"{n} workers did not register")


class Server:
    """A server process and the address from its 'listening on' line."""

    def __init__(self, argv, log_dir):
        self.log = open(os.path.join(log_dir, f"{os.path.basename(argv[0])}-{time.monotonic_ns()}.log"), "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True)
        deadline = time.monotonic() + WAIT_S
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if " listening on " in line or not line:
                break
        if " listening on " not in line:
            self.stop(signal.SIGKILL)
            raise RuntimeError(f"{argv[0]} did not start: {line!r}")
        self.address = line.rsplit(" ", 1)[1].strip()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT_S)
        self.proc.stdout.close()
        self.log.close()
        return self.proc.returncode


class Cluster:
    def __init__(self, log_dir, dispatcher_args=()):
        self.log_dir = log_dir
        self.dispatcher_argv = [str(BIN_DIR / "sluice-dispatcher"), "--worker-timeout-ms", "2000",
                                *dispatcher_args]
        self.dispatcher = Server(self.dispatcher_argv + ["--port", "0"], log_dir)
        self.target = "sluice://" + self.dispatcher.address
        self.workers = []

    def restart_dispatcher(self, sig=signal.SIGKILL):
        """Stops the dispatcher with sig and starts it again on the same port (with
        --fault-tolerant and --work-dir among dispatcher_args, from its journal)."""
        port = self.dispatcher.address.rsplit(":", 1)[1]
        self.dispatcher.stop(sig)
        self.dispatcher = Server(self.dispatcher_argv + ["--port", port], self.log_dir)

    def add_worker(self):
        """Starts a worker and waits until the dispatcher lists it: a worker says it listens
        before its first heartbeat is answered, and a job made meanwhile (a parallel_epochs read
        of a few elements) would not count it."""
        w = Server([str(BIN_DIR / "sluice-worker"), "--dispatcher", self.dispatcher.address,
                    "--port", "0"], log_dir=self.log_dir)
        self.workers.append(w)
        port = w.address.rsplit(":", 1)[1]
        wait_listed(self.target,
                    lambda ws: any(x["address"].rsplit(":", 1)[1] == port for x in ws),
                    f"worker {w.address} did not register")
        return w

    def stop(self):
        for w in self.workers:
            w.stop(signal.SIGINT)
        self.dispatcher.stop()


@contextlib.contextmanager
def running_cluster(dispatcher_args=()):
    """A Cluster (dispatcher started with dispatcher_args) in a temporary log directory, stopped
    at the end."""
    with tempfile.TemporaryDirectory(prefix="sluice-py-") as d:
        c = Cluster(d, dispatcher_args=dispatcher_args)
        try:
            yield c
        finally:
            c.stop()


@pytest.fixture
def cluster():
    with running_cluster() as c:
        yield c


@pytest.fixture
def cluster2(cluster):
    """A cluster with two workers."""
    cluster.add_worker()
    cluster.add_worker()
    return cluster


def crc32c(data):
    """CRC-32C (Castagnoli) of data, bit by bit: TFRecord framing and sluice's positions."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF
