"""The Python API: construction and bad input, errors, threads, keys,
reservations and the decorator."""

from __future__ import annotations

import math
import pathlib
import pickle
import re
import threading

import pytest

import ratebound as rb

BAD_NUMBERS = [0, -1, math.nan, math.inf, -math.inf, 10**400, 2**70]


def constructors(value):
    """Each constructor with `value` in each numeric position."""
    c = rb.ManualClock()
    return [
        ("TokenBucket rate", lambda: rb.TokenBucket(value, clock=c)),
        ("TokenBucket burst", lambda: rb.TokenBucket(1, value, clock=c)),
        ("FixedWindow limit", lambda: rb.FixedWindow(value, 1, clock=c)),
        ("FixedWindow window", lambda: rb.FixedWindow(10, value, clock=c)),
        ("SlidingWindow limit", lambda: rb.SlidingWindow(value, 1, clock=c)),
        ("SlidingWindow window", lambda: rb.SlidingWindow(10, value, clock=c)),
        ("SlidingLog limit", lambda: rb.SlidingLog(value, 1, clock=c)),
        ("SlidingLog window", lambda: rb.SlidingLog(10, value, clock=c)),
        ("LeakyBucket rate", lambda: rb.LeakyBucket(value, 1, clock=c)),
        ("KeyedLimiter rate", lambda: rb.KeyedLimiter(value, clock=c)),
        ("KeyedLimiter burst", lambda: rb.KeyedLimiter(1, value, clock=c)),
        ("KeyedLimiter window", lambda: rb.KeyedLimiter(algorithm="fixed_window", limit=10, window=value)),
        ("KeyedLimiter max_keys", lambda: rb.KeyedLimiter(1, max_keys=value)),
    ]


@pytest.mark.parametrize("value", BAD_NUMBERS, ids=repr)
def test_bad_numbers_are_quota_errors(value) -> None:
    for where, make in constructors(value):
        try:
            made = make()
        except rb.QuotaError as e:
            assert isinstance(e, ValueError)
            assert e.code in {
                "invalid_rate", "rate_too_high", "period_too_long", "invalid_burst",
                "invalid_limit", "invalid_window", "invalid_number",
            }, (where, e.code)
            assert str(e), where
            continue
        # Every one of these values must be refused in every position.
        pytest.fail(f"{where}={value!r} was accepted: {made!r}")


@pytest.mark.parametrize("value", [None, "abc", [1], b"1", True])
def test_wrong_types(value) -> None:
    for where, make in constructors(value):
        if value is None and (where.endswith("burst") or where.endswith("max_keys")):
            make()  # None means "the default" there
            continue
        if value is None:
            # None where a value is required: a TypeError (issue 13), typed by
            # the core's kind, naming what is missing.
            with pytest.raises(TypeError) as missing:
                make()
            assert isinstance(missing.value, rb.MissingValue), f"{where}: {missing.value!r}"
            assert missing.value.code == "missing"
            # The message names the parameter ("TokenBucket rate": rate).
            name = where.split()[-1]
            assert re.search(rf"\b{name}\b", str(missing.value)), f"{where}: {missing.value}"
            continue
        with pytest.raises((TypeError, rb.QuotaError)) as info:
            make()
        if value == "abc" and where.endswith("rate"):
            assert info.value.code == "parse_error"
            assert "abc" in str(info.value)


def test_leaky_bucket_max_delay_and_negative_zero() -> None:
    with pytest.raises(rb.QuotaError, match="max_delay"):
        rb.LeakyBucket(1, -1)
    with pytest.raises(rb.QuotaError, match="max_delay"):
        rb.LeakyBucket(1, math.nan)
    with pytest.raises(rb.QuotaError, match="window"):
        rb.FixedWindow(10, 0)


def test_error_messages_name_the_value() -> None:
    with pytest.raises(rb.QuotaError, match="burst") as info:
        rb.TokenBucket(1, -1)
    assert "-1" in str(info.value)
    with pytest.raises(rb.QuotaError, match="10/fortnight"):
        rb.TokenBucket("10/fortnight")
    with pytest.raises(rb.QuotaError, match="1e\\+400|too large|10000"):
        rb.FixedWindow(10**400, 1)


def test_rates_as_numbers_and_strings() -> None:
    c = rb.ManualClock()
    assert rb.TokenBucket(2.5, clock=c).limit == 2
    assert rb.TokenBucket("100/minute", clock=c).limit == 100
    assert rb.TokenBucket("10/s burst 20", clock=c).limit == 20
    assert rb.TokenBucket("10/s", 3, clock=c).limit == 3
    assert rb.TokenBucket(0.5, clock=c).limit == 1


def test_decision_fields() -> None:
    c = rb.ManualClock()
    tb = rb.TokenBucket(rate=2, burst=3, clock=c)
    d = tb.check()
    assert (d.allowed, d.limit, d.remaining, d.retry_after, d.reset_after) == (True, 3, 2, 0.0, 0.5)
    assert bool(d) is True
    assert tb.check(n=2).remaining == 0
    d = tb.check()
    assert not d and d.retry_after == 0.5 and d.retry_after_ns == 500_000_000
    assert "allowed=False" in repr(d)
    assert tb.try_acquire() is False
    c.advance(0.5)
    assert tb.try_acquire() is True
    assert tb.peek().allowed is False  # peek takes nothing, and nothing is there


def test_insufficient_capacity_and_n() -> None:
    tb = rb.TokenBucket(1, 3, clock=rb.ManualClock())
    with pytest.raises(rb.InsufficientCapacity) as info:
        tb.check(4)
    assert info.value.code == "insufficient_capacity"
    assert isinstance(info.value, ValueError)
    for bad in (-1, 1.5, math.nan):
        with pytest.raises(rb.QuotaError, match="n"):
            tb.check(bad)
    with pytest.raises(TypeError):
        tb.check("2")
    assert tb.check(0).allowed


def test_reservations() -> None:
    c = rb.ManualClock()
    tb = rb.TokenBucket(2, 1, clock=c)
    assert tb.reserve().delay == 0.0
    r = tb.reserve(1, max_wait=1.0)
    assert r.delay == 0.5 and r.tokens == 1
    with pytest.raises(rb.RateLimitExceeded) as info:
        tb.reserve(1, max_wait=0.5)
    assert info.value.retry_after == 1.0
    r.cancel()
    r.cancel()  # a second cancel gives nothing back twice
    c.advance(0.5)
    assert tb.try_acquire()
    assert not tb.try_acquire()
    with pytest.raises(rb.Unsupported):
        rb.FixedWindow(1, 1).reserve()
    with pytest.raises(rb.Unsupported):
        rb.FixedWindow(1, 1).set_quota("1/s")


def test_set_quota() -> None:
    c = rb.ManualClock()
    tb = rb.TokenBucket("1/s", clock=c)
    tb.set_quota("10/s burst 10")
    assert tb.limit == 10


def test_all_of() -> None:
    c = rb.ManualClock()
    fast = rb.TokenBucket("10/s burst 2", clock=c)
    slow = rb.FixedWindow(3, 60, clock=c)
    both = rb.AllOf([fast, slow])
    assert [both.try_acquire() for _ in range(3)] == [True, True, False]
    c.advance(1)
    assert [both.try_acquire() for _ in range(2)] == [True, False]
    assert slow.available() == 0 and fast.available() == 1
    with pytest.raises(rb.QuotaError):
        rb.AllOf([])
    with pytest.raises(TypeError):
        rb.AllOf([1])


@pytest.mark.parametrize(
    "make",
    [
        lambda c: rb.TokenBucket(1, 100, clock=c),
        lambda c: rb.FixedWindow(100, 60, clock=c),
        lambda c: rb.SlidingWindow(100, 60, clock=c),
        lambda c: rb.SlidingLog(100, 60, clock=c),
        lambda c: rb.LeakyBucket(1, 99, clock=c),
    ],
    ids=["token_bucket", "fixed_window", "sliding_window", "sliding_log", "leaky_bucket"],
)
def test_eight_threads_frozen_clock_admit_exactly_the_limit(make) -> None:
    c = rb.ManualClock()
    limiter = make(c)
    counts = [0] * 8
    start = threading.Barrier(8)

    def take() -> bool:
        if isinstance(limiter, rb.LeakyBucket):
            # A queue: check() admits only who leaves now; reserve() queues
            # up to max_delay (99 s at 1/s: 100 places).
            try:
                limiter.reserve(1)
                return True
            except rb.RateLimitExceeded:
                return False
        return limiter.try_acquire()

    def run(i: int) -> None:
        start.wait()
        for _ in range(1000):
            if take():
                counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 100


def test_busy_limiter_never_falsely_denies() -> None:
    # pyrate-limiter answers "denied" under contention; a limit never reached
    # must admit every call, whatever the threads do.
    limiter = rb.TokenBucket(1, 40_000)
    denied = []

    def run() -> None:
        denied.append(sum(1 for _ in range(10_000) if not limiter.try_acquire()))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert denied == [0, 0, 0, 0]


def test_keyed() -> None:
    c = rb.ManualClock()
    k = rb.KeyedLimiter(rate=1, burst=2, max_keys=100_000, clock=c)
    assert [k.check("alice").allowed for _ in range(3)] == [True, True, False]
    assert k.check("alice").retry_after == 1.0
    assert k.check("bob")
    assert k.try_acquire(b"alice") and k.try_acquire(7)
    assert len(k) == 4
    with pytest.raises(TypeError):
        k.check(("a", 1))
    with pytest.raises(TypeError):
        k.check(True)
    c.advance(600)
    assert k.cleanup() == 4
    assert len(k) == 0
    k.check("carol")
    assert k.cleanup_idle(300) == 0
    # Idle time is bounded from the state alone (the bucket refills at
    # 601 s): conservatively, carol counts as idle from then on.
    c.advance(301)
    assert k.cleanup_idle(300) == 1
    assert k.max_keys == 100_000


def test_keyed_reject_new_keys() -> None:
    k = rb.KeyedLimiter(1, max_keys=1, overflow="reject", clock=rb.ManualClock())
    assert k.check("a")
    with pytest.raises(rb.TooManyKeys) as info:
        k.check("b")
    assert info.value.code == "too_many_keys"
    with pytest.raises(rb.QuotaError):
        rb.KeyedLimiter(1, overflow="sometimes")


def test_keyed_windows() -> None:
    c = rb.ManualClock()
    k = rb.KeyedLimiter(algorithm="sliding_window", limit=2, window=10, clock=c)
    assert [k.try_acquire("x") for _ in range(3)] == [True, True, False]
    with pytest.raises(rb.MissingValue, match="missing window"):
        rb.KeyedLimiter(algorithm="fixed_window", limit=2)


def test_decorator_sync_and_keyed() -> None:
    c = rb.ManualClock()
    calls = []

    @rb.limit(rb.TokenBucket(1, 2, clock=c))
    def work(x: int) -> int:
        calls.append(x)
        return x * 2

    assert work(1) == 2 and work(2) == 4
    with pytest.raises(rb.RateLimitExceeded) as info:
        work(3)
    assert info.value.retry_after == 1.0
    # The core's DeadlineExceeded, as every refused wait says it (issue 38:
    # was "rate limit exceeded; retry in 1.000 s", code "rate_limited").
    assert info.value.code == "deadline_exceeded"
    assert str(info.value) == "waiting 1s for tokens exceeds the maximum wait of 0ns"
    assert calls == [1, 2]
    assert work.__name__ == "work"

    @rb.limit("1/minute", key=lambda user: user)
    def per_user(user: str) -> str:
        return user

    assert per_user("a") == "a" and per_user("b") == "b"
    with pytest.raises(rb.RateLimitExceeded):
        per_user("a")
    with pytest.raises(TypeError):
        rb.limit(rb.KeyedLimiter(1))


def test_acquire_blocking_and_timeout() -> None:
    tb = rb.TokenBucket(100, 1)
    assert tb.try_acquire()
    tb.acquire_blocking()  # ~10 ms
    with pytest.raises(rb.RateLimitExceeded) as info:
        tb.acquire_blocking(1, timeout=0.001)
    assert 0 < info.value.retry_after <= 0.01
    with pytest.raises(rb.QuotaError, match="timeout"):
        tb.acquire_blocking(1, timeout=-1)
    fw = rb.FixedWindow(1, 0.02)
    fw.acquire_blocking()
    fw.acquire_blocking()  # waits for the next window
    assert not fw.try_acquire()


def test_exceptions_pickle() -> None:
    e = rb.RateLimitExceeded("x", "deadline_exceeded", 1.5)
    f = pickle.loads(pickle.dumps(e))
    assert (f.code, f.retry_after, str(f)) == ("deadline_exceeded", 1.5, "x")


def test_http_helpers_and_middleware_numbers_are_checked() -> None:
    assert rb.ip_key("2001:db8::1:2:3:4:5") == "2001:db8:0:1::"
    assert rb.ip_key("2001:db8::1", 300) == "2001:db8::1"  # above 128 counts as 128
    # The argument's own name, as Node's rb.http.ipKey says it (issue 25).
    with pytest.raises(rb.QuotaError, match="invalid prefix -1"):
        rb.ip_key("2001:db8::1", -1)
    with pytest.raises(ValueError):
        rb.ip_key("not an address")
    with pytest.raises(rb.QuotaError, match="max_keys -5"):
        rb.asgi.RateLimitMiddleware(None, rate=1, max_keys=-5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ipv6_prefix"):
        rb.wsgi.RateLimitMiddleware(None, rate=1, ipv6_prefix="x")  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError, match="concurrency_limit"):
        rb.asgi.RateLimitMiddleware(None, rate=1, concurrency_limit=1.5)  # type: ignore[arg-type]


def test_nanosecond_arguments_are_checked() -> None:
    c = rb.ManualClock()
    c.advance_ns(5)
    c.set_ns(7)
    assert c.now_ns() == 7
    for bad in (-1, 2**64):
        with pytest.raises(rb.QuotaError, match="nanos"):
            c.advance_ns(bad)
        with pytest.raises(rb.QuotaError, match="nanos"):
            rb.retry_after_secs(bad)
    with pytest.raises(TypeError):
        c.set_ns(1.5)  # type: ignore[arg-type]
    assert rb.retry_after_secs(1) == 1


def test_pause_on_local_limiters() -> None:
    c = rb.ManualClock()
    tb = rb.TokenBucket(2, 3, clock=c)
    tb.pause(1)
    d = tb.check()
    # Empty until 1 s, then one token every 0.5 s.
    assert not d.allowed and d.retry_after == pytest.approx(1.5)
    tb.pause(0.5)  # ends earlier: changes nothing
    assert tb.peek().retry_after == pytest.approx(1.5)
    c.advance(1.5)
    assert tb.try_acquire()
    k = rb.KeyedLimiter(2, 3, clock=c)
    k.pause("alice", 2)
    assert k.check("alice").retry_after == pytest.approx(2.5)
    assert k.try_acquire("bob")
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(rb.QuotaError, match="seconds"):
            tb.pause(bad)
        with pytest.raises(rb.QuotaError, match="seconds"):
            k.pause("alice", bad)
    for window in (rb.FixedWindow(1, 1, clock=c), rb.SlidingWindow(1, 1, clock=c)):
        with pytest.raises(rb.Unsupported):
            window.pause(1)
    with pytest.raises(rb.Unsupported):
        rb.KeyedLimiter(algorithm="fixed_window", limit=1, window=1).pause("a", 1)


def test_defaults_are_the_cores(tmp_path: pathlib.Path) -> None:
    """Issue 25: the binding names no default of its own — an algorithm,
    overflow or n not given (or given as None) is the core's default, the
    same as Node's (api.test.js: 'defaults are the core's')."""
    import asyncio

    c = rb.ManualClock()
    for k in (rb.KeyedLimiter(rate=1, clock=c), rb.KeyedLimiter(rate=1, algorithm=None, overflow=None, clock=c)):
        assert k.algorithm == "token_bucket"
    assert rb.SharedKeyedLimiter(str(tmp_path / "k"), rate=1, max_keys=8).algorithm == "token_bucket"
    assert rb._ratebound._RedisEngine(rate=1).algorithm == "token_bucket"
    # overflow: evict — a new key at the cap forgets the least recent one.
    capped = rb.KeyedLimiter(rate=1, max_keys=1, clock=c)
    assert capped.try_acquire("a") and capped.try_acquire("b") and len(capped) == 1
    # n: one token, whether left out or None.
    tb = rb.TokenBucket(1, 6, clock=c)
    tb.check()
    tb.check(None)
    tb.acquire_blocking()
    asyncio.run(tb.acquire())
    asyncio.run(tb.acquire(None))
    assert tb.available() == 1
    keyed = rb.KeyedLimiter(rate=1, burst=3, clock=c)
    keyed.check("k", None)
    asyncio.run(keyed.acquire("k"))
    assert keyed.available("k") == 1


def test_limiters_by_name_are_the_cores() -> None:
    """The base Limiter's dispatch by algorithm name is the core's
    (AnyLimiter::from_options, issue 25): an unknown name is the core's
    parse error (a QuotaError, still a ValueError), a missing option its
    MissingValue."""
    c = rb.ManualClock()
    made = {
        name: rb._ratebound.Limiter(name, rate=2, burst=3, limit=5, window=1, max_delay=1, clock=c).algorithm
        for name in ("token_bucket", "fixed_window", "sliding_window", "sliding_log", "leaky_bucket")
    }
    assert made == {name: name for name in made}
    with pytest.raises(rb.QuotaError, match="an algorithm is token_bucket") as e:
        rb._ratebound.Limiter("gcra", rate=1)
    assert e.value.code == "parse_error" and isinstance(e.value, ValueError)
    with pytest.raises(rb.MissingValue, match="max_delay"):
        rb._ratebound.Limiter("leaky_bucket", rate=1)
    with pytest.raises(rb.MissingValue, match="window"):
        rb._ratebound.Limiter("sliding_log", limit=1)
    with pytest.raises(rb.RateboundError, match="at least one"):
        rb._ratebound.Limiter("all_of")
