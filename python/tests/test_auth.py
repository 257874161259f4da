"""Authentication from Python: the token keywords of the servers and of the reading functions."""

import os
import tempfile
import urllib.error
import urllib.request

import pytest

import sluice


def token_file(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text + "\n")
    return path


@pytest.fixture()
def tokens():
    with tempfile.TemporaryDirectory() as d:
        yield (token_file(d, "right", "right-token-0123456789abcdef"),
               token_file(d, "wrong", "wrong-token-0123456789abcdef"))


def test_right_token_reads_wrong_token_raises(tokens):
    right, wrong = tokens
    with sluice.DispatchServer(auth_token_file=right) as d, \
            sluice.WorkerServer(d, auth_token_file=right):
        got = sorted(int(x) for x in sluice.distribute("range(200)", "distributed_epoch", d,
                                                       auth_token_file=right))
        assert got == list(range(200))

        with pytest.raises(sluice.AuthenticationError) as e:
            list(sluice.distribute("range(10)", "distributed_epoch", d, auth_token_file=wrong,
                                   timeout=10))
        assert "authentication failed: wrong token" in str(e.value)
        assert isinstance(e.value, sluice.Error)
        assert isinstance(e.value, PermissionError)

        with pytest.raises(sluice.AuthenticationError) as e:
            sluice.status(d, timeout=10)
        assert "authentication failed: the server requires a token" in str(e.value)


def test_client_with_token_refuses_server_without(tokens):
    right, _ = tokens
    with sluice.DispatchServer() as d:
        with pytest.raises(sluice.AuthenticationError) as e:
            sluice.status(d, timeout=10, auth_token_file=right)
        assert "authentication failed: the server has no token" in str(e.value)


def test_metrics_need_the_bearer_token(tokens):
    right, _ = tokens
    with sluice.DispatchServer(auth_token_file=right, metrics_port=0) as d:
        url = f"http://{d.metrics_address}/metrics"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url, timeout=10)
        assert e.value.code == 401
        req = urllib.request.Request(
            url, headers={"Authorization": "Bearer right-token-0123456789abcdef"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read().decode()
        assert "sluice_auth_failures_total 0" in body


def test_security_keywords_are_checked():
    with pytest.raises(ValueError):
        sluice.DispatchServer(auth_token_file="")
    with tempfile.TemporaryDirectory() as d:
        short = token_file(d, "short", "too-short")
        with pytest.raises(sluice.InvalidArgumentError) as e:
            sluice.DispatchServer(auth_token_file=short)
        assert "at least 16" in str(e.value)


MAKE_CERTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                          "integration", "make_certs.sh")


def test_tls_worker_name():
    """One worker certificate for any address: readers verify it against tls_worker_name."""
    import subprocess
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["bash", MAKE_CERTS, d], check=True, capture_output=True, timeout=60)
        node = dict(tls_cert=f"{d}/node.pem", tls_key=f"{d}/node.key", tls_ca=f"{d}/ca.pem")
        # Names only elsewhere.example, not the 127.0.0.1 the worker advertises.
        other = dict(tls_cert=f"{d}/wronghost.pem", tls_key=f"{d}/wronghost.key",
                     tls_ca=f"{d}/ca.pem")
        with sluice.DispatchServer(**node) as disp, sluice.WorkerServer(disp, **other):
            got = sorted(int(x) for x in sluice.distribute(
                "range(50)", "distributed_epoch", disp, tls_worker_name="elsewhere.example",
                element_timeout=30, **node))
            assert got == list(range(50))
            with pytest.raises(sluice.Error) as e:
                list(sluice.distribute("range(5)", "distributed_epoch", disp, element_timeout=3,
                                       **node))
            assert "IP address mismatch" in str(e.value)
        with pytest.raises(sluice.InvalidArgumentError) as e:
            list(sluice.distribute("range(5)", "distributed_epoch", "127.0.0.1:1",
                                   tls_worker_name="w.example"))
        assert "tls-worker-name w.example: needs TLS (--tls-ca)" in str(e.value)
