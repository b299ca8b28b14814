"""Type-checked by `mypy --strict` in ci/test against the package's stubs
and inline types; also run by pytest (test_typed_usage) so it must work."""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Optional

import httpx
import redis
import redis.asyncio
import requests

import ratebound as rb
import ratebound.httpx
import ratebound.requests


def use() -> list[object]:
    clock = rb.ManualClock()
    clock.advance(0.25)
    now: float = clock.now()
    tb = rb.TokenBucket(rate=1000, burst=3)
    d: rb.Decision = tb.check()
    d2 = tb.check(n=2)
    ok: bool = tb.try_acquire()
    resumed: str = tb.resume()
    fields: tuple[bool, int, int, float, float] = (d.allowed, d.limit, d.remaining, d.retry_after, d.reset_after)
    fw = rb.FixedWindow(limit=100, window=60, clock=clock)
    sw = rb.SlidingWindow(limit=100, window=60.0)
    sl = rb.SlidingLog(limit=10, window=1)
    lb = rb.LeakyBucket(rate="10/s", max_delay=0.5)
    both = rb.AllOf([tb, fw])
    k = rb.KeyedLimiter(rate=1, burst=2, max_keys=100_000, clock=clock)
    kd: rb.Decision = k.check("alice")
    removed: int = k.cleanup() + k.cleanup_idle(300) + len(k)
    r: rb.Reservation = lb.reserve(1, max_wait=1.0)
    delay: float = r.delay
    r.cancel()
    tb.acquire_blocking(1, timeout=None)

    @rb.limit(rb.TokenBucket(100))
    def f(x: int) -> int:
        return x

    @rb.limit("10/s", key=lambda user, *a, **kw: user)
    async def g(user: str) -> str:
        return user

    async def waiting() -> None:
        await tb.acquire(n=1, timeout=None)
        await k.acquire("bob")

    asyncio.run(waiting())

    async def asgi_app(scope: object, receive: object, send: object) -> None:
        return None

    mw = rb.asgi.RateLimitMiddleware(asgi_app, rate="10/s", key_header="x-api-key", headers="legacy")
    wmw = rb.wsgi.RateLimitMiddleware(lambda environ, start: [b""], policies={"a": "1/s"}, max_keys=10)
    # A remote policy whose check raises: 503 with this Retry-After.
    smw = rb.wsgi.RateLimitMiddleware(lambda environ, start: [b""], rate=5, store_error_retry_after=5)
    # Adaptive load shedding: the limit learned from latency, priorities, a gauge.
    amw = rb.asgi.RateLimitMiddleware(
        asgi_app, rate="1000/s", concurrency_limit="auto", concurrency_max=200, concurrency_tolerance=2.0,
        background_fraction=0.25, priority=lambda scope: "background" if scope["path"] == "/export" else "normal",
    )
    fixed = rb.wsgi.RateLimitMiddleware(lambda environ, start: [b""], rate=10, concurrency_limit=8, priority="critical")
    gauge: Optional[rb.Concurrency] = amw.concurrency
    if gauge is not None:
        limit_now: int = gauge.limit
        in_flight: int = gauge.in_flight
        learned: bool = gauge.adaptive
        baseline: Optional[float] = gauge.baseline_ms
        recent: Optional[float] = gauge.recent_ms
        windows: int = gauge.windows
    shed_priority: Optional[str] = rb.RateLimitEvent("shed", None, ("default",), None, "background").priority
    assert fixed.concurrency is not None
    try:
        tb.check(100)
    except rb.InsufficientCapacity as e:
        code: str = e.code
    try:
        rb.TokenBucket("abc")
    except rb.QuotaError as e:
        assert isinstance(e, ValueError)
    try:
        raise rb.RateLimitExceeded(retry_after=1.5)
    except rb.RateLimitExceeded as e:
        retry: float = e.retry_after
    # Global limits in Redis; nothing listens on port 1: the fail policy answers.
    client = redis.Redis(host="127.0.0.1", port=1)
    with rb.redis.TokenBucket(client, rate=10, burst=20, on_error="closed", timeout=0.05) as gtb:
        gd: rb.Decision = gtb.check("partner-api", n=1)
        source: Optional[str] = gd.source
        gok: bool = gtb.try_acquire(b"raw-key")
        is_open: bool = gtb.breaker_open
    gfw = rb.redis.FixedWindow(client, limit=100, window=60, lease=10, lease_ttl=0.5, breaker_cooldown=0.2)
    returned: int = gfw.close()
    rb.redis.SlidingWindow(client, 100, 60.0, on_error="local", local_rate=1).close()
    # Waiting for a global token (the fail policy "open" answers at once).
    with rb.redis.TokenBucket(client, rate=10, burst=20, on_error="open", timeout=0.05) as wtb:
        wtb.acquire_blocking("partner-api", n=1, timeout=1.0)
        res: rb.redis.RedisReservation = wtb.reserve("partner-api", max_wait=1.0)
        waited: float = res.delay
        shifted: Optional[float] = wtb.pause("partner-api", 1.0)
        lifted: Optional[str] = wtb.resume("partner-api")
    client.close()

    async def global_async() -> bool:
        ac = redis.asyncio.Redis(host="127.0.0.1", port=1)
        async with rb.redis.AsyncTokenBucket(ac, "10/s burst 20", prefix="app:") as lim:
            ad = await lim.check(42)
            aok: bool = await lim.try_acquire("k", 2)
        await ac.aclose()
        return ad.source == "fail_open" and aok

    async_ok = asyncio.run(global_async())
    return [now, d2, ok, fields, sw, sl, both, kd, removed, delay, f(1), g, code, retry, mw, wmw, smw,
            source, gok, is_open, returned, async_ok, waited, shifted]


def outbound_usage() -> list[object]:
    """The client adapters, typed: a transport, an async one, an adapter."""
    seen: list[rb.httpx.OutboundEvent] = []
    tb = rb.TokenBucket(10, 5)
    t = rb.httpx.RateLimitTransport(tb, key=lambda r: r.url.host, timeout=1.5, on_decision=seen.append)
    client = httpx.Client(transport=t)
    at = rb.httpx.AsyncRateLimitTransport(tb, key="partner", retries=1, max_pause=60, adaptive=True)
    ac = httpx.AsyncClient(transport=at)
    session = requests.Session()
    session.mount("https://", rb.requests.RateLimitAdapter(tb, statuses=[429], any_method=True, adaptive=False))
    client.close()
    session.close()
    learned: float = tb.learned_rate()
    drops: list[float] = [e.from_rate - e.to_rate for e in seen if e.from_rate is not None and e.to_rate is not None]
    # The shared-memory buckets learn too, for every process on the host.
    files = tempfile.mkdtemp()
    shared = rb.SharedTokenBucket(os.path.join(files, "partner.limit"), 10, 5)
    per_host = rb.SharedKeyedLimiter(os.path.join(files, "partners.limit"), 10, 5, max_keys=100)
    rb.httpx.RateLimitTransport(shared, adaptive=True)
    rb.requests.RateLimitAdapter(per_host)
    shared_rate: float = shared.learned_rate()
    host_rate: float = per_host.learned_rate("api.partner.example")
    return [client, ac, session, seen, learned, drops, shared_rate, host_rate]


def test_outbound_usage() -> None:
    got = outbound_usage()
    assert len(got) == 8 and got[3] == [] and got[4] == 10.0 and got[5] == []
    assert got[6:] == [10.0, 10.0], "nothing learned yet: the configured rate"


def test_typed_usage() -> None:
    got = use()
    assert len(got) == 24
    assert got[-2:] == [0.0, None], "fail open: at once; a pause Redis was not told of"
    assert got[17:22] == ["fail_closed", False, False, 0, True]  # two failures: the breaker opens at 3
