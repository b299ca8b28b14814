"""Global limits in Redis (ratebound.redis), the inputs and the edges:
odd keys and bad numbers as the core's typed errors, an unreachable or
silent server, the engine without I/O, the stats, and the middleware's
Redis policies — against real Redis servers the tests start themselves
(see test_redis.py)."""


from __future__ import annotations

import asyncio
import select
import socket
import time
from typing import Any, Callable

import pytest
import redis
import redis.asyncio

import ratebound as rb
import ratebound.redis as rbr
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient  # warns (httpx) at import, outside the tests

from redis_servers import HOST, Server, fresh_key
from redis_support import (
    closed_port,
    FAIL_SOURCE,
    NOT_RETRIES,
)

# Any warning (an unclosed socket or client, a deprecation) fails these tests.
pytestmark = pytest.mark.filterwarnings("error")


# -------------------------------------------------------------- bad input


def test_odd_keys_are_stored_raw(server: Server) -> None:
    client = server.client()
    prefix = fresh_key("odd") + ":"
    lim = rbr.TokenBucket(client, rate=1, burst=2, prefix=prefix)
    keys: list[Any] = ["a key with spaces", "ключ 🔑", "k" * 10240, b"\x00\xff raw", 42, ""]
    for k in keys:
        d = lim.check(k)
        assert (d.source, d.allowed, d.remaining) == ("redis", True, 1), (k, d)
        raw = k if isinstance(k, bytes) else str(k).encode()
        assert server.admin("EXISTS", prefix.encode() + b"tb:" + raw) == 1, k
    # Each key is its own limit.
    assert [lim.check(k).remaining for k in keys] == [0] * len(keys)
    assert not any(lim.check(k).allowed for k in keys)
    # 42 and "42" name the same Redis key.
    assert not lim.check("42").allowed
    with pytest.raises(TypeError):
        lim.check(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lim.check(True)
    lim.close()
    client.close()


def test_bad_numbers_are_the_cores_typed_errors(server: Server) -> None:
    client = server.client()
    lim = rbr.TokenBucket(client, rate=10, burst=20)
    # n = 0 is a query, as for every local limiter.
    q = lim.check("k", 0)
    assert (q.allowed, q.remaining, q.source) == (True, 20, "redis")
    with pytest.raises(rb.InsufficientCapacity):
        lim.check("k", 21)
    with pytest.raises(rb.QuotaError):
        lim.check("k", -1)
    with pytest.raises(rb.InsufficientCapacity):
        rbr.FixedWindow(client, limit=5, window=1).check("k", 6)
    lim.close()
    bad: list[tuple[type, Callable[[], Any], str]] = [
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=-1), "-1"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate="abc"), "abc"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, burst=0), "burst"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=2_000_000), "2000000"),
        (rb.QuotaError, lambda: rbr.FixedWindow(client, limit=0, window=1), "limit"),
        (rb.QuotaError, lambda: rbr.FixedWindow(client, limit=5, window=1e-7), "window"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, timeout=-1), "timeout"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, lease=-1), "lease"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, lease=1.5), "lease"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, breaker_threshold=0), "breaker_threshold"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, breaker_cooldown=float("nan")), "breaker_cooldown"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, lease_ttl=-2), "lease_ttl"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, timeout=0), "timeout 0"),
        (rb.ConfigError, lambda: rbr.TokenBucket(client, rate=10, on_error="maybe"), "maybe"),
        (rb.ConfigError, lambda: rbr.TokenBucket(client, rate=10, on_error="local"), "local_rate"),
        (rb.ConfigError, lambda: rbr.TokenBucket(client, rate=10, on_error="local", local_rate=0), "local_rate"),
        (TypeError, lambda: rbr.TokenBucket(client, rate=True), "rate"),
        (TypeError, lambda: rbr.TokenBucket(client, rate=10, timeout="1"), "timeout"),
        (TypeError, lambda: rbr.TokenBucket(object(), rate=10), "client"),
        (TypeError, lambda: rbr.TokenBucket(redis.asyncio.Redis(), rate=10), "asyncio"),
        (TypeError, lambda: rbr.AsyncTokenBucket(client, rate=10), "sync"),
    ]
    for cls, make, word in bad:
        with pytest.raises(cls) as info:
            make()
        assert word in str(info.value), (word, str(info.value))
        assert "Panic" not in type(info.value).__name__
    with pytest.raises(rb.Unsupported):
        rb._ratebound._RedisEngine("sliding_window", limit=5, window=1, lease=2)
    with pytest.raises(rb.QuotaError):
        rb._ratebound._RedisEngine("leaky_bucket", rate=1)
    client.close()


@pytest.mark.parametrize("policy", ["open", "closed", "local"])
def test_unreachable_redis_answers_by_policy_at_once(policy: str) -> None:
    # No I/O at construction, checked by what reached the server, not by
    # time: a limiter built on a client of a port that listens (and never
    # accepts) leaves no connection in its backlog.
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(8)
        quiet = redis.Redis(host=HOST, port=listener.getsockname()[1], socket_timeout=2)
        rbr.TokenBucket(quiet, rate=10, burst=20, on_error=policy, local_rate=1 if policy == "local" else None)
        pending, _, _ = select.select([listener], [], [], 0)
        assert pending == [], "the constructor connected"
        quiet.close()
    client = redis.Redis(host=HOST, port=closed_port())  # defaults: retries with backoff
    lim = rbr.TokenBucket(client, rate=10, burst=20, on_error=policy, local_rate=1 if policy == "local" else None)
    answers = []
    for _ in range(5):
        t = time.monotonic()
        answers.append(lim.check("k"))
        took = time.monotonic() - t
        assert took < NOT_RETRIES, took  # a refused connection, not redis-py's 3.8 s of retries
    assert {d.source for d in answers} == {FAIL_SOURCE[policy]}
    want = {"open": [True] * 5, "closed": [False] * 5, "local": [True, True, False, False, False]}[policy]
    assert [d.allowed for d in answers] == want
    assert lim.breaker_open
    lim.close()
    client.close()


def test_silent_server_costs_one_deadline() -> None:
    """A host that accepts connections but never answers: the call gives up at
    its deadline (the handshake or the reply times out), not after redis-py's
    5 s default."""
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(64)
        client = redis.Redis(host=HOST, port=listener.getsockname()[1])
        lim = rbr.TokenBucket(client, rate=10, burst=20, timeout=0.05)
        for _ in range(3):
            t = time.monotonic()
            d = lim.check("k")
            took = time.monotonic() - t
            assert d.source == "fail_open"
            assert took < NOT_RETRIES, took
        lim.close()
        client.close()


async def test_unreachable_redis_asyncio() -> None:
    client = redis.asyncio.Redis(host=HOST, port=closed_port())
    lim = rbr.AsyncFixedWindow(client, limit=5, window=1, on_error="closed")
    t = time.monotonic()
    d = await lim.check("k")
    assert time.monotonic() - t < NOT_RETRIES
    assert (d.source, d.allowed) == ("fail_closed", False)
    await lim.aclose()
    await client.aclose()


# ------------------------------------------------------------ the engine


def test_engine_without_io() -> None:
    e = rb._ratebound._RedisEngine("token_bucket", rate="10/s burst 20", breaker_cooldown=0.05)
    call = e.begin("k")
    assert isinstance(call, rb._ratebound._RedisCall)
    assert call.key == b"rb:tb:k" and call.kind == "check" and call.n == 1 and call.script == "gcra"
    assert len(call.sha) == 40 and "redis.call" in call.text
    assert call.args[0] == "" and call.at(7).args[0] == "7"
    d = e.finish(call, [1, 19, 0, 100000, 1, 0, 7, 0, 0])
    assert (d.allowed, d.remaining, d.reset_after_ns, d.source) == (True, 19, 100_000_000, "redis")
    assert e.begin("k", scope="hourly").key == b"rb:tb@hourly:k"
    # A timeout within a deadline of Redis' last answer is the client's own
    # overload (busy), not a failure: let a deadline (50 ms) pass.
    assert e.finish(call, timed_out=True).source == "busy"
    time.sleep(0.06)
    # A reply of another shape is a failure; three open the breaker.
    assert e.finish(call, b"OK").source == "fail_open"
    assert e.finish(call, timed_out=True).source == "fail_open"
    assert e.finish(call, error="ConnectionError").source == "fail_open"
    assert e.breaker_open
    assert isinstance(e.begin("k"), rb.Decision)
    time.sleep(0.06)
    probe = e.begin("k")
    assert isinstance(probe, rb._ratebound._RedisCall)
    assert e.finish(probe, [1, 18, 0, 200000, 1, 0, 7, 0, 0]).source == "redis"
    assert not e.breaker_open
    # Nothing reported is a failure by the engine's rule (CallOutcome::
    # reported), as in Node; this binding raised TypeError of its own.
    assert e.finish(call).source == "fail_open"
    with pytest.raises(TypeError):
        call.at(True)  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError):
        call.at(-1)
    assert rb.TokenBucket(1).check().source is None
    assert "source='redis'" in repr(d)


def test_stats_and_bad_instants_as_python_reads_them() -> None:
    """RedisStats' counters as attributes, as a dict and in its repr (one
    list of names in the binding); a bad instant for a call, and a bad
    nanosecond count for a ManualClock, are typed errors naming the value."""
    e = rb._ratebound._RedisEngine("token_bucket", rate="10/s burst 20", on_error="closed")
    call = e.begin("k")
    assert isinstance(call, rb._ratebound._RedisCall)
    assert e.finish(call, [1, 19, 0, 100000, 1, 0, 7, 0, 0]).source == "redis"
    assert e.finish(call, error="ConnectionError").source == "fail_closed"
    s = e.stats
    want = {"redis": 1, "lease": 0, "damaged": 0, "fail_open": 0, "fail_closed": 1, "fail_local": 0, "busy": 0}
    assert {name: getattr(s, name) for name in want} == want
    assert s.breaker_open is False
    assert s._asdict() == {**want, "breaker_open": False}
    assert repr(s) == (
        "RedisStats(redis=1, lease=0, damaged=0, fail_open=0, fail_closed=1, fail_local=0, busy=0, breaker_open=False)"
    )
    with pytest.raises(TypeError, match="^now_us must be an int, got bool$"):
        call.at(True)  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError, match="now_us") as info:
        call.at(-1)
    assert "-1" in str(info.value) and "microseconds" in str(info.value), info.value
    c = rb.ManualClock()
    with pytest.raises(TypeError, match="^nanos must be an int, got float$"):
        c.advance_ns(1.5)  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError, match="nanos") as info:
        c.set_ns(2**64)
    assert str(2**64) in str(info.value) and "nanoseconds" in str(info.value), info.value
    with pytest.raises(TypeError, match="^seconds must be a number, got str$"):
        c.advance("1")  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError, match="seconds"):
        c.set(-1)
    assert c.now() == 0.0


# ---------------------------------------------------------------- middleware


def test_two_redis_policies_of_one_middleware_never_share_a_key(server: Server) -> None:
    """10/hour burst 20 and 100/hour, both Redis limiters on one prefix: 60
    requests let 20 through (the burst). When both wrote rb:<key> they
    shared one state and let through far more."""
    flask = Flask(__name__)
    flask.get("/")(lambda: "ok")
    prefix = f"{fresh_key('two')}:"
    burst = rbr.TokenBucket(server.client(), "10/hour burst 20", prefix=prefix, timeout=2.0)
    hourly = rbr.TokenBucket(server.client(), "100/hour", prefix=prefix, timeout=2.0)
    flask.wsgi_app = rb.wsgi.RateLimitMiddleware(  # type: ignore[method-assign]
        flask.wsgi_app, policies={"burst": burst, "hourly": hourly}, key_header="x-api-key"
    )
    client = flask.test_client()
    codes = [client.get("/", headers={"x-api-key": "alice"}).status_code for _ in range(60)]
    assert codes.count(200) == 20, codes
    assert set(codes) == {200, 429}
    # Each policy has its own key, named by it; the direct key is untouched.
    r = server.client()
    names = sorted(k.decode() for k in r.keys(f"{prefix}*"))
    assert names == [f"{prefix}tb@burst:key:alice", f"{prefix}tb@hourly:key:alice"], names
    assert burst.check(b"key:alice").allowed
    r.close()


def test_a_damaged_key_is_refused_alone_and_never_opens_the_breaker(server: Server) -> None:
    client = server.client()
    prefix = f"{fresh_key('damaged')}:"
    lim = rbr.TokenBucket(client, rate=1, burst=5, prefix=prefix, on_error="closed", timeout=2.0)
    r = server.client()
    for i, value in enumerate(["garbage", "", "1e300", "-5", "nan"]):
        r.set(f"{prefix}tb:k{i}", value)
        d = lim.check(f"k{i}")
        assert (d.allowed, d.source) == (False, "damaged"), value
    r.rpush(f"{prefix}tb:list", "x")
    assert lim.check("list").source == "damaged"
    assert not lim.breaker_open
    assert lim.check("someone-else").source == "redis"
    r.close()
    lim.close()
    client.close()


def test_middleware_global_limit_is_one_policy_away(server: Server) -> None:
    """A Redis limiter as a policy: two ASGI apps (two instances) share the
    global limit of 2 per key; the local burst policy and the quota fields
    show both; a WSGI app with a sync limiter shares it too."""
    async def hello(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("ok")

    prefix = f"{fresh_key('mw')}:"

    limiters: list[Any] = []

    def asgi_app() -> Any:
        limiter = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), rate=1, burst=2, prefix=prefix)
        limiters.append(limiter)
        return rb.asgi.RateLimitMiddleware(
            Starlette(routes=[Route("/", hello)]),
            policies={"burst": "100/s burst 100", "global": limiter},
            key_header="x-api-key",
        )

    flask = Flask(__name__)
    flask.get("/")(lambda: "ok")
    wsgi = rb.wsgi.RateLimitMiddleware(
        flask.wsgi_app,
        policies={"global": rbr.TokenBucket(server.client(), rate=1, burst=2, prefix=prefix)},
        key_header="x-api-key",
    )
    with TestClient(asgi_app()) as a, TestClient(asgi_app()) as b:
        first = a.get("/", headers={"x-api-key": "alice"})
        assert first.status_code == 200
        assert first.headers["ratelimit-policy"] == '"burst";q=100;w=1, "global";q=2;w=2'
        assert first.headers["ratelimit"] == '"burst";r=99;t=1, "global";r=1;t=1'
        assert b.get("/", headers={"x-api-key": "alice"}).status_code == 200
        third = a.get("/", headers={"x-api-key": "alice"})
        assert third.status_code == 429
        assert third.headers["retry-after"] == "1"
        assert third.headers["ratelimit"] == '"global";r=0;t=2'
        assert b.get("/", headers={"x-api-key": "bob"}).status_code == 200
        # Each app's limiter closes its connections in its app's loop (left
        # open, they would warn when collected, in whichever test runs then).
        a.portal.call(limiters[0].aclose)
        b.portal.call(limiters[1].aclose)
    flask_client = flask.test_client()
    flask.wsgi_app = wsgi  # type: ignore[method-assign]
    assert flask_client.get("/", headers={"x-api-key": "alice"}).status_code == 429
    assert flask_client.get("/", headers={"x-api-key": "carol"}).status_code == 200
    # The wrong kind of limiter for the protocol is a clear error.
    with pytest.raises(TypeError, match="asyncio limiter"):
        rb.asgi.RateLimitMiddleware(Starlette(), policies={"g": rbr.TokenBucket(server.client(), rate=1)})


def test_integer_keys_are_the_cores() -> None:
    """An int key is its decimal text in Redis: 2**53 gives the same key as
    Node's number 2 ** 53 (api.test.js: 'number keys: the core rule')."""
    e = rb._ratebound._RedisEngine(rate=1)
    assert e.begin(2**53).key == b"rb:tb:9007199254740992"
    assert e.begin(-7).key == b"rb:tb:-7"


def test_what_became_of_a_call_is_read_by_the_engines_rule() -> None:
    """A reply that is not a list of ints is the engine's Malformed, a
    failure for the fail policy, as Node's non-array replies
    (redis.test.js: 'what became of a call: the engine's rule'); a timeout
    is read before a reply, an error before a reply, nothing at all is a
    failure (it was a TypeError here; Node read the reply first)."""
    e = rb._ratebound._RedisEngine(rate=10, burst=20, on_error="closed", breaker_threshold=100)
    good = [1, 19, 0, 100_000, 1, 0, 7, 0, 0]
    for reply in ("garbage", b"garbage", [1, 2.5], [[1]], 5, [1, "2"]):
        assert e.finish(e.begin("k"), reply).source == "fail_closed", reply
    assert e.finish(e.begin("k"), good, timed_out=True).source == "fail_closed"
    assert e.finish(e.begin("k"), good, error="down").source == "fail_closed"
    assert e.finish(e.begin("k")).source == "fail_closed"
    assert e.finish(e.begin("k"), good).source == "redis"
