"""The native Redis connection's targets (rb.redis limiters given a URL):
bad URLs as typed errors naming the value, unreachable hosts answered by
the fail policy within the deadline, auth, db numbers, TLS with a
self-signed CA, the password never shown, a forked child's own
connection — against real redis-servers on 127.0.0.1 that the tests
start (see test_redis_native.py)."""


from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import time
import warnings
from typing import Any, Optional

import pytest
import redis

import ratebound as rb
import ratebound.redis as rbr
from redis_support import (
    FAIL_SOURCE,
    SLACK,
    url,
)
from redis_servers import HOST, Server, free_port, fresh_key

pytestmark = pytest.mark.filterwarnings("error")


# -------------------------------------------------------------- bad input


def test_bad_targets_are_typed_errors_naming_the_value(server: Server) -> None:
    bad: list[tuple[Any, type, str]] = [
        ("http://x", rb.ConfigError, "http://x"),
        ("redis://:99999", rb.ConfigError, "redis://:99999"),
        ("garbage", rb.ConfigError, "garbage"),
        ("", rb.ConfigError, '""'),
        ("redis://", rb.ConfigError, "redis://"),
        ("redis://u:hunter2@127.0.0.1:99999", rb.ConfigError, "u:***@"),
        (["redis://127.0.0.1:7000", "http://y"], rb.ConfigError, "http://y"),
        ([], rb.ConfigError, "[]"),
        (b"redis://127.0.0.1", TypeError, "bytes"),
        (5, TypeError, "int"),
    ]
    for target, cls, word in bad:
        with pytest.raises(cls) as info:
            rbr.TokenBucket(target, rate=1)
        assert word in str(info.value), (target, str(info.value))
        assert "hunter2" not in str(info.value)
        with pytest.raises(cls):
            rbr.AsyncFixedWindow(target, limit=1, window=1)
    with pytest.raises(rb.ConfigError, match=r"batch.*yes"):
        rbr.TokenBucket(url(server), rate=1, batch="yes")  # type: ignore[typeddict-item]
    with pytest.raises(rb.ConfigError, match="batch"):
        rbr.TokenBucket(server.client(), rate=1, batch=1)  # type: ignore[typeddict-item]
    with pytest.raises(rb.ConfigError, match="rediss"):
        rbr.TokenBucket(url(server), rate=1, ssl_ca_certs="/nonexistent.pem")
    with pytest.raises(rb.ConfigError, match="rediss"):
        rbr.TokenBucket(server.client(), rate=1, ssl_ca_certs="/nonexistent.pem")
    with pytest.raises(rb.ConfigError, match="nonexistent"):
        rbr.TokenBucket(f"rediss://{HOST}:1", rate=1, ssl_ca_certs="/nonexistent.pem")
    # The engine's own errors are the same as on the redis-py path.
    with pytest.raises(rb.QuotaError, match="timeout"):
        rbr.TokenBucket(url(server), rate=10, timeout=0)
    lim = rbr.TokenBucket(url(server), rate=10, burst=20)
    with pytest.raises(rb.InsufficientCapacity):
        lim.check("k", 21)
    with pytest.raises(TypeError):
        lim.check(1.5)  # type: ignore[arg-type]
    lim.close()


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_unreachable_hosts_answer_by_policy_within_the_deadline(policy: str) -> None:
    """A closed port and a host that accepts but never answers: each check
    is the fail policy's within the deadline, never a hang."""
    with socket.socket() as silent:
        silent.bind((HOST, 0))
        silent.listen(64)
        for port in (free_port(), silent.getsockname()[1]):
            t = time.monotonic()
            lim = rbr.TokenBucket(f"redis://{HOST}:{port}", rate=10, on_error=policy, timeout=0.05)
            # No I/O waited for at construction: a connect waited for would
            # take the native connect timeout (1 s) on the silent host; the
            # bound is generous for a loaded machine (it was the 50 ms deadline).
            assert time.monotonic() - t < 0.5
            for _ in range(5):
                t = time.monotonic()
                d = lim.check("k")
                assert time.monotonic() - t < 0.05 + SLACK
                assert d.source == FAIL_SOURCE[policy]
            assert lim.breaker_open
            lim.close()


async def test_unreachable_host_asyncio() -> None:
    lim = rbr.AsyncFixedWindow(f"redis://{HOST}:{free_port()}", limit=5, window=1, on_error="closed", timeout=0.05)
    t = time.monotonic()
    d = await lim.check("k")
    assert time.monotonic() - t < 0.05 + SLACK
    assert (d.source, d.allowed) == ("fail_closed", False)
    await lim.aclose()


# ----------------------------------------------------- auth, db, TLS


def test_auth_and_db_numbers(tmp_path: pathlib.Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
         "--requirepass", "s3cret"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    admin = redis.Redis(host=HOST, port=port, password="s3cret", socket_timeout=1)
    try:
        for _ in range(200):
            try:
                admin.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        prefix = fresh_key("auth") + ":"
        lim = rbr.TokenBucket(f"redis://:s3cret@{HOST}:{port}/3", rate=1, burst=2, prefix=prefix, timeout=1.0)
        assert lim.check("k").source == "redis"
        assert admin.execute_command("SELECT", 3) and admin.exists(f"{prefix}tb:k") == 1
        assert admin.execute_command("SELECT", 0) and admin.exists(f"{prefix}tb:k") == 0  # db 0 untouched
        lim.close()
        user = rbr.TokenBucket(f"redis://default:s3cret@{HOST}:{port}", rate=1, burst=2, prefix=prefix, timeout=1.0)
        assert user.check("k").source == "redis"
        user.close()
        # A wrong password is an error naming the cause, not the fail
        # policy's (issue 36), and the password is not in it.
        wrong = rbr.TokenBucket(f"redis://:nope@{HOST}:{port}", rate=1, on_error="closed", timeout=0.5)
        with pytest.raises(rb.StoreMisconfigured, match="authentication failed") as e:
            wrong.check("k")
        assert "nope" not in str(e.value) and wrong.stats.fail_closed == 0
        wrong.close()
    finally:
        admin.close()
        proc.kill()
        proc.wait()


def _certs(d: pathlib.Path) -> Optional[tuple[pathlib.Path, pathlib.Path, pathlib.Path]]:
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    ca_key, ca, key, csr, cert = (d / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ext = d / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run = lambda *a: subprocess.run([openssl, *a], check=True, capture_output=True, timeout=60)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
        "-subj", "/CN=ratebound test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-out", str(cert),
        "-days", "2", "-extfile", str(ext))
    return ca, cert, key


def test_tls_with_a_self_signed_ca(tmp_path: pathlib.Path) -> None:
    certs = _certs(tmp_path)
    if certs is None:
        pytest.fail("openssl is needed for the TLS test (Debian: apt-get install openssl)", pytrace=False)
    ca, cert, key = certs
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
         "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        target = f"rediss://{HOST}:{port}"
        lim = rbr.TokenBucket(target, rate=1, burst=2, timeout=1.0, ssl_ca_certs=str(ca), on_error="closed")
        stop, d = time.monotonic() + 10, None
        while time.monotonic() < stop:
            d = lim.check(fresh_key("tls"))
            if d.source == "redis":
                break
            time.sleep(0.05)
        assert d is not None and d.source == "redis", d
        lim.close()
        # The system's roots do not trust this CA: every call fails (closed).
        untrusted = rbr.TokenBucket(target, rate=1, timeout=0.5, on_error="closed")
        assert untrusted.check("k").source == "fail_closed"
        untrusted.close()
        # A plain connection to a TLS port is a failure too, never a hang.
        plain = rbr.TokenBucket(f"redis://{HOST}:{port}", rate=1, timeout=0.2, on_error="closed")
        assert plain.check("k").source == "fail_closed"
        plain.close()
    finally:
        proc.kill()
        proc.wait()


def test_a_forked_child_makes_its_own_connection(server: Server) -> None:
    """After a fork the child's calls go out on a connection (and runtime)
    of its own; the parent's keeps working."""
    if not hasattr(os, "fork"):
        pytest.fail("no fork here", pytrace=False)
    lim = rbr.TokenBucket(url(server), rate=1, burst=100, timeout=1.0)
    key = fresh_key("fork")
    assert lim.check(key).remaining == 99
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            got = [lim.check(key) for _ in range(3)]
            os.write(w, ",".join(f"{d.source}:{d.remaining}" for d in got).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        child = f.read()
    os.waitpid(pid, 0)
    assert child == "redis:98,redis:97,redis:96", child
    assert lim.check(key).remaining == 95
    lim.close()


def test_repr_hides_the_password() -> None:
    lim = rbr.TokenBucket(f"redis://user:hunter2@{HOST}:{free_port()}/2", rate=1)
    assert "hunter2" not in repr(lim) and "user:***@" in repr(lim), repr(lim)
    lim.close()
