"""A child forked from a process running in-process servers (and reading from them) treats them
as its parent's: it exits at once, whether it stops them itself or just exits (atexit stops live
workers), and the parent's servers and read carry on."""

import subprocess
import sys
import textwrap

import pytest

# The parent starts a dispatcher and a worker, forks, and waits for the child at most WAIT_S;
# it prints the child's fate and stops its own servers (which must still work).
SCRIPT = textwrap.dedent("""
    import os, sys, time
    import sluice
    WAIT_S = 30
    d = sluice.DispatchServer()
    w = sluice.WorkerServer(d)
    if sys.argv[2] == "reading":
        # A read before the fork (the dispatcher's work pool ran), and one open across it: the
        # child inherits a client and an iterator too.
        assert sorted(int(x) for x in sluice.distribute("range(5)", "distributed_epoch", d)) \
            == list(range(5))
        it = iter(sluice.distribute("range(10)", "distributed_epoch", d))
        first = [int(next(it))]
    pid = os.fork()
    if pid == 0:
        if sys.argv[1] == "stop":
            w.stop()
            d.stop()
        sys.exit(0)
    deadline = time.monotonic() + WAIT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print("child exited", os.waitstatus_to_exitcode(status), flush=True)
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("child hung", flush=True)
            break
        time.sleep(0.05)
    if sys.argv[2] == "reading":
        got = sorted(first + [int(x) for x in it])
    else:
        got = sorted(int(x) for x in sluice.distribute("range(10)", "distributed_epoch", d))
    print("parent read", got == list(range(10)), flush=True)
    w.stop()
    d.stop()
""")


@pytest.mark.parametrize("how", ["exit", "stop"])
@pytest.mark.parametrize("before", ["idle", "reading"])
def test_forked_child_exits_at_once(how, before):
    r = subprocess.run([sys.executable, "-c", SCRIPT, how, before], capture_output=True,
                       text=True, timeout=120)
    assert r.stdout == "child exited 0\nparent read True\n", r.stderr
    assert r.returncode == 0, r.stderr
