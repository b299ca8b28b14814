"""``resume``: the local token bucket and keyed limiter on a ManualClock, the
shared-memory limiters, and the Redis limiters (sync and asyncio) against a
real redis-server — the engine's call at explicit Redis times, then the
limiters' one call on Redis' clock with long pauses."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import redis
import redis.asyncio

import ratebound as rb
import ratebound.redis as rbr
from redis_servers import HOST, Server, fresh_key, run_script as run

S = 1_000_000  # µs


def _next_token_in(c: rb.ManualClock, tb: rb.TokenBucket, seconds: float) -> None:
    """The next token comes `seconds` from now: told so, not there 1 ms
    before, there then."""
    assert tb.check().retry_after == pytest.approx(seconds)
    c.advance(round(seconds - 0.001, 9))
    assert not tb.try_acquire()
    c.advance(0.001)
    assert tb.try_acquire()


def test_a_lifted_pause_leaves_the_bucket_as_if_it_had_ended_then() -> None:
    c = rb.ManualClock()
    tb = rb.TokenBucket("2/s", 3, clock=c)
    assert tb.resume() == "not_paused"
    tb.pause(10)
    c.advance(1)
    assert not tb.try_acquire()
    assert tb.resume() == "lifted"
    # Empty now, one token every 0.5 s from now on.
    _next_token_in(c, tb, 0.5)
    assert tb.resume() == "not_paused"
    # Paused again, lifted again.
    tb.pause(20)
    c.advance(1)
    assert tb.resume() == "lifted"
    c.advance(0.5)
    assert tb.try_acquire()


def test_a_reservation_behind_the_pause_keeps_it_queued() -> None:
    c = rb.ManualClock()
    tb = rb.TokenBucket("2/s", 3, clock=c)
    tb.pause(10)
    c.advance(1)
    r = tb.reserve(1, max_wait=60)
    assert r.delay == pytest.approx(9.5)
    c.advance(1)
    assert tb.resume() == "queued"
    _next_token_in(c, tb, 9.0)


def test_keyed_resume_and_bad_input() -> None:
    c = rb.ManualClock()
    k = rb.KeyedLimiter(rate="2/s", burst=3, clock=c)
    assert k.resume("alice") == "not_paused"
    k.pause("alice", 10)
    k.pause("bob", 10)
    c.advance(1)
    assert k.resume("alice") == "lifted"
    c.advance(0.5)
    assert k.try_acquire("alice")
    assert not k.try_acquire("bob")
    with pytest.raises(TypeError):
        k.resume(1.5)  # type: ignore[arg-type]
    with pytest.raises(rb.Unsupported):
        rb.FixedWindow(10, 1, clock=c).resume()
    with pytest.raises(rb.Unsupported):
        rb.KeyedLimiter(algorithm="fixed_window", limit=3, window=1, clock=c).resume("k")


def test_shared_resume(tmp_path: pathlib.Path) -> None:
    a = rb.SharedTokenBucket(tmp_path / "p.limit", "2/s", 3)
    b = rb.SharedTokenBucket(tmp_path / "p.limit", "2/s", 3)
    assert b.resume() == "not_paused"
    a.pause(30)
    assert not b.try_acquire()
    assert b.resume() == "lifted"
    # Empty at the resume, one token 0.5 s later: the wait is at most that.
    assert 0 < a.check().retry_after <= 0.5
    assert a.resume() == "not_paused"
    # Queued behind a reservation.
    a.pause(30)
    r = b.reserve(1, max_wait=60)
    assert r.delay > 29
    assert a.resume() == "queued"
    assert a.check().retry_after > 29
    k = rb.SharedKeyedLimiter(tmp_path / "k.limit", "2/s", 3, max_keys=8)
    assert k.resume("alice") == "not_paused"
    k.pause("alice", 30)
    assert k.resume("alice") == "lifted"
    assert 0 < k.check("alice").retry_after <= 0.5
    with pytest.raises(TypeError):
        k.resume(object())  # type: ignore[arg-type]


def test_the_redis_engine_resumes_at_explicit_times(server: Server) -> None:
    client = server.client()
    e = rb._ratebound._RedisEngine("token_bucket", rate=2, burst=3, prefix=fresh_key("resume") + ":", timeout=2.0)
    t0 = 1_000_000 * S

    def resume(at: int) -> Any:
        return e.finish_resume(run(client, e.begin_resume("k").at(at)))

    def retry_us(at: int) -> int:
        d = e.finish(call := e.begin("k", 1).at(at), run(client, call))
        return 0 if d.allowed else d.retry_after_ns // 1000

    assert resume(t0) == "not_paused"
    e.finish_pause(run(client, e.begin_pause("k", 10).at(t0)))
    assert retry_us(t0 + S) == 9_500_000
    assert resume(t0 + S) == "lifted"
    assert retry_us(t0 + S) == 500_000
    assert retry_us(t0 + S + 500_000) == 0
    assert resume(t0 + 2 * S) == "not_paused"
    # A reservation behind a pause keeps it queued.
    e.finish_pause(run(client, e.begin_pause("k", 10).at(t0 + 3 * S)))
    call = e.begin_reserve("k", 1, 60).at(t0 + 4 * S)
    delay, _, _ = e.finish_reserve(call, run(client, call))
    assert delay == pytest.approx(9.5)
    assert resume(t0 + 5 * S) == "queued"
    assert retry_us(t0 + 5 * S) == 9_000_000
    with pytest.raises(rb.Unsupported):
        rb._ratebound._RedisEngine("fixed_window", limit=3, window=1).begin_resume("k")
    with pytest.raises(TypeError):
        e.begin_resume(1.5)  # type: ignore[arg-type]


def test_the_sync_redis_limiter_resumes_in_one_call(server: Server) -> None:
    tb = rbr.TokenBucket(server.client(), rate="10/s", burst=1, prefix=fresh_key("sync") + ":")
    key = "partner"
    assert tb.resume(key) == "not_paused"
    tb.pause(key, 30)
    assert tb.check(key).retry_after > 29
    assert tb.resume(key) == "lifted"
    assert tb.check(key).retry_after <= 0.1
    assert tb.resume(key) == "not_paused"
    with pytest.raises(TypeError):
        tb.resume(None)  # type: ignore[arg-type]
    with pytest.raises(rb.Unsupported):
        rbr.FixedWindow(server.client(), limit=3, window=1).resume(key)


async def test_the_async_redis_limiter_resumes_in_one_call(server: Server) -> None:
    tb = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), rate="10/s", burst=1, prefix=fresh_key("async") + ":")
    key = "partner"
    assert await tb.resume(key) == "not_paused"
    await tb.pause(key, 30)
    r = await tb.reserve(key, max_wait=60)
    assert await tb.resume(key) == "queued"
    assert await r.acancel()
    assert await tb.resume(key) == "lifted"
    assert (await tb.check(key)).retry_after <= 0.1
    await tb.aclose()
