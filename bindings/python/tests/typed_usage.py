"""Type-checked by `mypy --strict` in ci/test against the package's stubs
and inline types; also run by pytest (test_typed_usage) so it must work."""

from __future__ import annotations

import asyncio

import ratebound as rb


def use() -> list[object]:
    clock = rb.ManualClock()
    clock.advance(0.25)
    now: float = clock.now()
    tb = rb.TokenBucket(rate=1000, burst=3)
    d: rb.Decision = tb.check()
    d2 = tb.check(n=2)
    ok: bool = tb.try_acquire()
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
    return [now, d2, ok, fields, sw, sl, both, kd, removed, delay, f(1), g, code, retry, mw, wmw]


def test_typed_usage() -> None:
    assert len(use()) == 16
