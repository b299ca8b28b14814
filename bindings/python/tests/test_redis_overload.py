"""Issue 36: a global limit never silently stops limiting (Python, Redis).

- The client's own overload is never "Redis is down": more concurrent calls
  than the redis-py client's ``max_connections`` (100 by default) wait for a
  connection within their deadline, and a call that could not even be sent
  before it is refused as ``busy`` — never the fail policy's answer, never a
  step towards opening the breaker.
- A typo is an error: a wrong password, an unknown user, a database that
  does not exist, TLS to a plain server, a missing Unix socket, a host that
  does not resolve raise :class:`ratebound.StoreMisconfigured` naming the
  cause (never the password) instead of ``fail_open`` forever.
- Never silent: ``stats`` counts every decision's source, and the breaker
  logs one warning when it opens and one when it closes.

Real Redis servers on 127.0.0.1 (test_redis' fixtures), a real HTTP partner,
real clients. Bounds are ``burst + rate·t`` with a few tokens' slack for a
loaded 2-core machine, never a tight wall-clock slack."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, Sequence

import httpx
import pytest
import redis
import redis.asyncio

import ratebound as rb
import ratebound.httpx
import ratebound.redis as rbr
from partners import HttpPartner
from redis_servers import HOST, Server, fresh_key

pytestmark = pytest.mark.filterwarnings("error")

# Tokens of slack on a bound `burst + rate·t`: a reservation is due on
# Redis' clock, its admission is stamped on this process' clock a little
# later; the slack only absorbs the stamps' order, not a leak.
SLACK = 3


def within_bound(times: list[float], burst: int, rate: float, late: float = 0.0) -> tuple[bool, str]:
    """Whether every window of the stamps `times` holds at most
    ``burst + rate·(t + late) + SLACK`` (t: the window's span; ``late``: how
    late a stamp may be taken on a loaded event loop, which shortens the
    windows it opens); the first window found beyond it."""
    times = sorted(times)
    n = len(times)
    for i in range(n):
        t0 = times[i]
        for j in range(i + burst + SLACK, n):
            if j - i + 1 > burst + rate * (times[j] - t0 + late) + SLACK:
                return False, f"{j - i + 1} in {times[j] - t0:.3f} s from stamp {i}"
    return True, ""


def within_bound_from(start: float, times: list[float], burst: int, rate: float) -> tuple[bool, str]:
    """Whether at most ``burst + rate·t + SLACK`` stamps fall in the first
    t seconds from `start` (taken before the first call), for every t: a
    late stamp only helps here."""
    for k, at in enumerate(sorted(times), 1):
        if k > burst + rate * (at - start) + SLACK:
            return False, f"{k} in the first {at - start:.3f} s"
    return True, ""


# ------------------------------------------------------------ the partner


class Partner(HttpPartner):
    """An HTTP partner on 127.0.0.1 that answers 200 to everything and
    notes when each request arrived."""

    def __init__(self) -> None:
        self.seen: list[float] = []
        self.lock = threading.Lock()
        partner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with partner.lock:
                    partner.seen.append(time.monotonic())
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        class Server_(ThreadingHTTPServer):
            request_queue_size = 512  # 200 clients connect at once

        self.serve(Handler, "/v1/items", Server_)


@pytest.fixture
def partner() -> Iterator[Partner]:
    p = Partner()
    yield p
    p.close()


# ---------------------------------------------- the client's own overload


async def test_readme_outbound_recipe_keeps_the_bound_with_200_concurrent_requests(
    server: Server, partner: Partner
) -> None:
    """The README's outbound recipe (an ``AsyncRateLimitTransport`` over
    ``rb.redis.AsyncTokenBucket(redis.asyncio.Redis(), rate=10, burst=20)``)
    with 200 requests at once: the partner sees at most ``20 + 10·t``.
    Before: 200 of 200 in 1 s (the 101st concurrent call met redis-py's full
    pool, and ``on_error="open"`` admitted it)."""
    client = redis.asyncio.Redis(host=HOST, port=server.port)
    limiter = rbr.AsyncTokenBucket(client, rate=10, burst=20)
    key = fresh_key("recipe")
    # The recipe as the issue measured it, with the default fail policy
    # "open" (the README now builds it with on_error="local"): its warning
    # about "open" in front of a partner is expected here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="an outbound limiter that fails open", category=RuntimeWarning)
        transport = rb.httpx.AsyncRateLimitTransport(limiter, key=key, timeout=1.0)
    async with httpx.AsyncClient(transport=transport, timeout=30) as http:

        async def one() -> str:
            try:
                r = await http.get(partner.url)
                return str(r.status_code)
            except rb.RateLimitExceeded:
                return "refused"

        results = await asyncio.gather(*(one() for _ in range(200)))
    await limiter.aclose()
    await client.aclose()
    sent = len(partner.seen)
    ok, worst = within_bound(partner.seen, burst=20, rate=10)
    assert sent == results.count("200"), (sent, results.count("200"))
    assert ok and sent <= 20 + 10 * 1.5 + SLACK, (sent, worst)
    stats = limiter.stats
    assert stats.fail_open == 0 and not stats.breaker_open, stats


def assert_redis_answered_within_the_bound(out: Sequence[tuple[Any, float]], n: int) -> None:
    """All `n` answers (decision, when) came from Redis, and what they
    admitted stays within burst 10 + 10/s."""
    sources: dict[str, int] = {}
    for d, _ in out:
        sources[d.source] = sources.get(d.source, 0) + 1
    allowed = [at for d, at in out if d.allowed]
    assert sources == {"redis": n}, sources
    ok, worst = within_bound(allowed, burst=10, rate=10)
    assert ok, (len(allowed), worst)


def test_1000_concurrent_checks_on_a_redis_py_client_threads(server: Server) -> None:
    """1 000 threads check at once on a ``redis.Redis`` (100 connections):
    every one is answered by Redis, and at most ``10 + 10·t`` are allowed.
    Before: 100 answered by Redis, 900 ``fail_open``, 910 allowed."""
    client = redis.Redis(host=HOST, port=server.port)
    # A deadline that 1 000 calls on 100 connections can meet on a loaded
    # machine: what is measured is that they queue, not how fast.
    limiter = rbr.TokenBucket(client, rate=10, burst=10, timeout=5.0)
    key = fresh_key("threads")
    n = 1000
    barrier = threading.Barrier(n)
    out: list[Any] = [None] * n

    def one(i: int) -> None:
        barrier.wait()
        out[i] = (limiter.check(key), time.monotonic())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    # Redis stalls for a moment (a fork, a slow command) as the calls come:
    # they pile up, as they do under load.
    server.admin("CLIENT", "PAUSE", 300, "ALL")
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    limiter.close()
    client.close()
    assert_redis_answered_within_the_bound(out, n)
    stats = limiter.stats
    assert (stats.redis, stats.fail_open, stats.busy, stats.breaker_open) == (n, 0, 0, False), stats


async def test_1000_concurrent_checks_on_a_redis_py_client_asyncio(server: Server) -> None:
    """The same with 1 000 asyncio tasks on a ``redis.asyncio.Redis``."""
    client = redis.asyncio.Redis(host=HOST, port=server.port)
    limiter = rbr.AsyncTokenBucket(client, rate=10, burst=10, timeout=5.0)
    key = fresh_key("tasks")
    n = 1000

    async def one() -> tuple[Any, float]:
        d = await limiter.check(key)
        return d, time.monotonic()

    out = await asyncio.gather(*(one() for _ in range(n)))
    await limiter.aclose()
    await client.aclose()
    assert_redis_answered_within_the_bound(out, n)
    stats = limiter.stats
    assert (stats.redis, stats.fail_open, stats.breaker_open) == (n, 0, False), stats


async def test_1500_concurrent_waiters_stay_within_the_bound(server: Server) -> None:
    """1 500 tasks ``acquire`` at once at 300/s burst 10 (the default 50 ms
    deadline per call): admitted within ``10 + 300·t``, and the breaker
    never opens. Before: all 1 500 admitted in 0.12 s, the breaker open."""
    client = redis.asyncio.Redis(host=HOST, port=server.port)
    limiter = rbr.AsyncTokenBucket(client, rate=300, burst=10)
    key = fresh_key("waiters")
    admitted: list[float] = []
    breaker_seen = False

    async def one() -> None:
        await limiter.acquire(key)
        admitted.append(time.monotonic())

    async def watch() -> None:
        nonlocal breaker_seen
        while True:
            breaker_seen = breaker_seen or limiter.breaker_open
            await asyncio.sleep(0.005)

    watcher = asyncio.ensure_future(watch())
    start = time.monotonic()
    await asyncio.gather(*(one() for _ in range(1500)))
    took = time.monotonic() - start
    watcher.cancel()
    await limiter.aclose()
    await client.aclose()
    ok, worst = within_bound_from(start, admitted, burst=10, rate=300)
    assert ok, (len(admitted), took, worst, limiter.stats)
    # Any window: an admission stamped late (the loop runs 1 500 tasks, and
    # stalls for ~0.15 s on this 2-core machine alone, longer when other
    # work shares it) shortens the window it opens by as much; 1 s of
    # allowance is 300 tokens — a burst of the breaker opening (1 500 in
    # 0.35 s before) still fails it.
    ok, worst = within_bound(admitted, burst=10, rate=300, late=1.0)
    assert ok, (len(admitted), took, worst)
    assert not breaker_seen
    stats = limiter.stats
    assert not stats.breaker_open, stats
    assert stats.fail_open == 0 and stats.fail_closed == 0, stats


def test_a_full_pool_queues_within_the_deadline(own_server: Server) -> None:
    """One connection (``max_connections=1``) held by a call that Redis
    answers late (``CLIENT PAUSE``): a second call waits for it and Redis
    answers it; with a deadline too short to wait, it is refused as
    ``busy`` — not the fail policy's answer, and the breaker is not told."""
    pool = redis.ConnectionPool(host=HOST, port=own_server.port, max_connections=1)
    client = redis.Redis(connection_pool=pool)
    key = fresh_key("full")
    lim = rbr.TokenBucket(client, rate=1000, burst=1000, on_error="open", timeout=2.0, breaker_threshold=1)
    assert lim.check(key).source == "redis"
    own_server.admin("CLIENT", "PAUSE", 300, "ALL")
    slow: list[Any] = []
    t = threading.Thread(target=lambda: slow.append(lim.check(key)))
    t.start()
    time.sleep(0.1)  # the first call holds the one connection, paused
    queued = lim.check(key)
    t.join()
    assert slow[0].source == "redis" and queued.source == "redis", (slow, queued)
    lim.close()

    # A deadline too short to wait: the one connection is held by a call
    # Redis answers late (it times out: Redis' trouble, the fail policy's),
    # then by the next; the others' deadlines pass while they queue.
    short = rbr.TokenBucket(client, rate=1000, burst=1000, on_error="open", timeout=0.3, breaker_threshold=100)
    assert short.check(key).source == "redis"
    own_server.admin("CLIENT", "PAUSE", 1500, "ALL")
    out: list[Any] = []
    holder = threading.Thread(target=lambda: out.append(("holder", short.check(key))))
    holder.start()
    time.sleep(0.1)  # the holder has the one connection, paused
    waiters = [threading.Thread(target=lambda: out.append(("queued", short.check(key)))) for _ in range(4)]
    for t in waiters:
        t.start()
    for t in [holder, *waiters]:
        t.join()
    busy = [d for who, d in out if d.source == "busy"]
    assert [d.source for who, d in out if who == "holder"] == ["fail_open"], out  # Redis itself was slow
    assert {d.source for who, d in out if who == "queued"} <= {"busy", "fail_open"}, out
    assert len(busy) >= 3 and not any(d.allowed for d in busy), out
    assert all(d.retry_after == pytest.approx(0.3) for d in busy), busy
    stats = short.stats
    assert stats.busy == len(busy) and not stats.breaker_open, stats
    time.sleep(1.5)  # the pause ends
    assert short.check(key).source == "redis"
    short.close()
    client.close()


# ------------------------------------------------------- typos are errors


@pytest.fixture(scope="module")
def alice(server: Server) -> str:
    """A user ``alice`` (password ``right-pass``) on the module's server."""
    server.admin("ACL", "SETUSER", "alice", "on", ">right-pass", "~*", "&*", "+@all")
    return "alice"


SECRET = "Wr0ngS3cret"


def misconfigured_urls(server: Server, tmp_path: pathlib.Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(what, URL, words the message names)."""
    port = server.port
    return [
        ("wrong password", f"redis://alice:{SECRET}@{HOST}:{port}/0", ("authentication failed",)),
        ("unknown user", f"redis://nobody:{SECRET}@{HOST}:{port}/0", ("authentication failed",)),
        ("db 99999", f"redis://{HOST}:{port}/99999", ("no such database",)),
        ("db -1", f"redis://{HOST}:{port}/-1", ("no such database",)),
        ("TLS to a plain server", f"rediss://{HOST}:{port}/0", ("tls handshake failed",)),
        ("missing unix socket", f"unix://{tmp_path}/no-such.sock", ("no unix socket",)),
        ("unresolvable host", "redis://no-such-host.invalid:6379/0", ("does not resolve",)),
    ]


def check_raises(make: Any, what: str, words: tuple[str, ...]) -> None:
    try:
        lim = make()
    except rb.StoreMisconfigured as made:
        # Found out at construction (TLS to a plain server is asked then).
        message = str(made)
        assert SECRET not in message and all(w in message.lower() for w in words), (what, message)
        return
    try:
        for _ in range(5):  # every call, not once: never the fail policy's
            with pytest.raises(rb.StoreMisconfigured) as e:
                lim.check("k")
            message = str(e.value)
            assert e.value.code == "store_misconfigured", (what, message)
            assert SECRET not in message and SECRET not in repr(e.value), (what, message)
            assert all(w in message.lower() for w in words), (what, message, words)
        assert lim.stats.fail_open == 0, (what, lim.stats)
    finally:
        lim.close()


def test_misconfigured_urls_raise_naming_the_cause(server: Server, alice: str, tmp_path: pathlib.Path) -> None:
    """Each misconfigured URL raises ``StoreMisconfigured`` at its first
    call (and every later one), naming the cause and not the password.
    Before: every check ``fail_open``, no error, no log."""
    for what, url, words in misconfigured_urls(server, tmp_path):
        check_raises(lambda: rbr.TokenBucket(url, rate=10, burst=10, timeout=1.0), what, words)


async def test_misconfigured_urls_raise_asyncio(server: Server, alice: str, tmp_path: pathlib.Path) -> None:
    for what, url, words in misconfigured_urls(server, tmp_path):
        try:
            lim = rbr.AsyncTokenBucket(url, rate=10, burst=10, timeout=1.0)
        except rb.StoreMisconfigured as made:  # found out at construction
            assert SECRET not in str(made) and all(w in str(made).lower() for w in words), (what, str(made))
            continue
        try:
            with pytest.raises(rb.StoreMisconfigured) as e:
                await lim.check("k")
            assert SECRET not in str(e.value), (what, str(e.value))
            assert all(w in str(e.value).lower() for w in words), (what, str(e.value), words)
        finally:
            await lim.aclose()


def test_a_redis_py_client_with_a_wrong_password_raises(server: Server, alice: str) -> None:
    """The same for a user's redis-py client: its wrong password, unknown
    user or missing database is an error, not ``fail_open``."""
    cases = [
        ("wrong password", dict(username="alice", password=SECRET), ("authentication failed",)),
        ("unknown user", dict(username="nobody", password=SECRET), ("authentication failed",)),
        ("db 99999", dict(db=99999), ("no such database",)),
    ]
    for what, kw, words in cases:
        client = redis.Redis(host=HOST, port=server.port, **kw)  # type: ignore[arg-type]
        try:
            check_raises(lambda: rbr.TokenBucket(client, rate=10, burst=10, timeout=1.0), what, words)
        finally:
            client.close()


def test_unreachable_redis_stays_the_fail_policys(tmp_path: pathlib.Path) -> None:
    """Unreachable at the moment (connection refused) is not a typo: the
    fail policy answers, as before."""
    for client in ("redis://127.0.0.1:1/0", redis.Redis(host=HOST, port=1)):
        lim = rbr.TokenBucket(client, rate=10, burst=10)
        assert lim.check("k").source == "fail_open"
        lim.close()
        if not isinstance(client, str):
            client.close()


def test_a_wait_the_closed_policy_refuses_says_redis_is_unavailable() -> None:
    """Item 8 of issue 36: with Redis down and ``on_error="closed"`` a wait
    said "waiting 1s for tokens exceeds the maximum wait of 29.998s". It now
    raises ``StoreUnavailable`` (still a ``RateLimitExceeded``) naming the
    cause and the policy, sync and asyncio."""
    for client in ("redis://127.0.0.1:1/0", redis.Redis(host=HOST, port=1)):
        lim = rbr.TokenBucket(client, rate=10, burst=1, on_error="closed")
        with pytest.raises(rb.StoreUnavailable) as e:
            lim.acquire_blocking("k", timeout=30)
        assert isinstance(e.value, rb.RateLimitExceeded)
        assert e.value.code == "store_unavailable"
        text = str(e.value)
        assert "redis unavailable (" in text and "the fail policy 'closed' refused" in text, text
        assert "maximum wait" not in text, text
        lim.close()
        if not isinstance(client, str):
            client.close()

    async def waits() -> None:
        lim = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=1), rate=10, burst=1, on_error="closed")
        try:
            with pytest.raises(rb.StoreUnavailable, match="the fail policy 'closed' refused"):
                await lim.acquire("k", timeout=30)
        finally:
            await lim.aclose()

    asyncio.run(waits())


# ------------------------------------------------------------ never silent


@pytest.mark.parametrize("url", [False, True], ids=["redis-py", "url"])
def test_stats_and_one_warning_per_breaker_episode(
    own_server: Server, caplog: pytest.LogCaptureFixture, url: bool
) -> None:
    """Redis killed and restarted: ``stats`` counts Redis' answers and the
    fail policy's, and the ``ratebound.redis`` logger warns once when the
    breaker opens and once when it closes — not per call."""
    caplog.set_level(logging.WARNING, logger="ratebound.redis")
    client: Any = f"redis://{HOST}:{own_server.port}/0" if url else own_server.client()
    lim = rbr.TokenBucket(client, rate=1000, burst=1000, timeout=0.2, breaker_threshold=3, breaker_cooldown=0.3)
    key = fresh_key("episode")
    for _ in range(5):
        assert lim.check(key).source == "redis"
    own_server.kill()
    for _ in range(20):  # 3 failures open the breaker; the rest it answers
        assert lim.check(key).source == "fail_open"
    stats = lim.stats
    assert (stats.redis, stats.fail_open, stats.breaker_open) == (5, 20, True), stats
    opened = [r for r in caplog.records if r.name == "ratebound.redis"]
    assert len(opened) == 1 and opened[0].levelno == logging.WARNING, [r.getMessage() for r in opened]
    assert "open" in opened[0].getMessage(), opened[0].getMessage()
    own_server.start()
    deadline = time.monotonic() + 10
    while lim.check(key).source != "redis":
        assert time.monotonic() < deadline, lim.stats
        time.sleep(0.05)
    for _ in range(5):
        assert lim.check(key).source == "redis"
    stats = lim.stats
    assert not stats.breaker_open and stats.redis >= 11, stats
    logs = [r.getMessage() for r in caplog.records if r.name == "ratebound.redis"]
    assert len(logs) == 2 and "clos" in logs[1], logs
    assert stats._asdict()["fail_open"] == stats.fail_open, stats
    lim.close()
    if not url:
        client.close()
