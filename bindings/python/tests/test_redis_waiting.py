"""Waiting for a global token in Redis from Python (rb.redis): one call per
acquisition in one order for every instance, reservations and their
cancellation, a pause for everyone, asyncio cancellation, bad input —
against a real redis-server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Iterator

import pytest
import redis
import redis.asyncio

import ratebound as rb
import ratebound.redis as rbr
from redis.crc import key_slot
from test_redis import HOST, Cluster, Server, cluster, fresh_key  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("redis-wait")).start()
    yield s
    s.stop()


def script_calls(server: Server) -> int:
    stats = server.admin("INFO", "commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


def test_twenty_instances_wait_in_one_order_with_one_call_each(server: Server) -> None:
    """Twenty instances (threads, each its own limiter and connections)
    acquire 3 tokens each at 50/s burst 10: completions never run ahead of
    burst + rate·t, the last comes about (60 − 10)/50 = 1 s after the
    start, and Redis served about one script call per acquisition."""
    key = fresh_key("twenty")
    limiters = [rbr.TokenBucket(server.client(), "50/s burst 10", on_error="closed", timeout=1.0) for _ in range(20)]
    before = script_calls(server)
    done: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = time.monotonic()

    def run(lim: rbr.TokenBucket) -> None:
        try:
            for _ in range(3):
                lim.acquire_blocking(key, timeout=10)
                with lock:
                    done.append(time.monotonic() - start)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(lim,)) for lim in limiters]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    calls = script_calls(server) - before
    done.sort()
    assert len(done) == 60
    for i, t in enumerate(done):
        assert t >= max(i + 1 - 10, 0) / 50 - 0.002, (i, t)
    assert 1.0 <= done[-1] < 1.6, done[-1]
    # One EVALSHA per acquisition; each new connection's first meets
    # NOSCRIPT once (then EVAL).
    assert 60 <= calls <= 60 + 2 * 20, calls
    for lim in limiters:
        lim.close()


def test_reservations_share_one_order_and_cancel_gives_the_slot_back(server: Server) -> None:
    key = fresh_key("reserve")
    a = rbr.TokenBucket(server.client(), "10/s burst 1", on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(server.client(), "10/s burst 1", on_error="closed", timeout=1.0)
    rs = [lim.reserve(key, max_wait=5) for lim in (a, b, a, b)]
    delays = [r.delay for r in rs]
    assert delays[0] == 0.0 and rs[0].source == "redis"
    for i, d in enumerate(delays[1:], 1):
        assert 0.1 * i - 0.03 <= d <= 0.1 * i, delays
    # Beyond max_wait: raised, nothing taken.
    with pytest.raises(rb.RateLimitExceeded) as e:
        a.reserve(key, max_wait=0.25)
    assert e.value.code == "deadline_exceeded"
    nxt = b.reserve(key, max_wait=5)
    assert 0.37 <= nxt.delay <= 0.4, nxt.delay
    # Cancelled: the next reservation takes the slot; a second cancel does nothing.
    assert nxt.cancel() is True
    assert nxt.cancel() is False
    again = a.reserve(key, max_wait=5)
    assert 0.37 <= again.delay <= 0.4, again.delay
    a.close()
    b.close()


def test_a_pause_is_for_everyone_and_once(server: Server) -> None:
    key = fresh_key("pause")
    a = rbr.TokenBucket(server.client(), "100/s burst 10", timeout=1.0)
    b = rbr.TokenBucket(server.client(), "100/s burst 10", timeout=1.0)
    assert b.check(key).allowed
    shift = a.pause(key, 0.4)
    assert shift is not None and shift >= 0.399
    assert b.pause(key, 0.1) == 0.0, "inside a pause already on: nothing moves"
    d = b.check(key)
    assert not d.allowed and d.retry_after > 0.3
    t = time.monotonic()
    b.acquire_blocking(key, timeout=5)
    assert time.monotonic() - t > 0.3
    # A wait that cannot end within its timeout raises at once.
    a.pause(key, 10)
    t = time.monotonic()
    with pytest.raises(rb.RateLimitExceeded):
        b.acquire_blocking(key, timeout=0.5)
    assert time.monotonic() - t < 0.4
    a.close()
    b.close()


async def test_asyncio_a_cancelled_acquire_gives_its_slot_back(server: Server) -> None:
    key = fresh_key("cancel")
    a = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), "5/s burst 1", timeout=1.0)
    await a.acquire(key)  # the burst
    first = await a.reserve(key, max_wait=5)  # due in 0.2 s
    assert 0.15 <= first.delay <= 0.2
    waiting = asyncio.create_task(a.acquire(key))  # due in 0.4 s
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    # Its slot (0.4 s) was given back: the next reservation gets it.
    nxt = await a.reserve(key, max_wait=5)
    assert 0.3 <= nxt.delay <= 0.4, nxt.delay
    with pytest.raises(TypeError, match="acancel"):
        nxt.cancel()
    assert await nxt.acancel() is True
    t = time.monotonic()
    await a.acquire(key, timeout=5)
    assert time.monotonic() - t >= 0.25
    assert await a.pause(key, 0.2) is not None
    await a.aclose()


def _sleeping_waiters(lim: rbr.TokenBucket, key: str, count: int, start: float) -> tuple[list[threading.Thread], list[float]]:
    """``count`` threads acquiring one token of ``key``, started 10 ms apart
    (each reserves well before the next starts): their completion times
    from ``start``, in the order they reserved."""
    done = [math.nan] * count

    def run(i: int) -> None:
        time.sleep(max(start + 0.01 * i - time.monotonic(), 0))
        lim.acquire_blocking(key, timeout=10)
        done[i] = time.monotonic() - start

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    return threads, done


def _check_moved(done: list[float], paused_at: float, end: float) -> None:
    assert done[0] < paused_at, f"the burst went at once: {done}"
    for i in range(1, len(done)):
        assert done[i] >= end, f"waiter {i} at {done[i]:.3f} s, inside the pause (ends {end:.3f}): {done}"
        # Its old time (100 ms after the previous one's), 600 ms later.
        want = 0.1 * i + 0.6
        assert want - 0.03 <= done[i] <= want + 0.15, (i, done)
        assert done[i - 1] <= done[i], f"out of order: {done}"


def test_waiters_already_asleep_move_past_another_instances_pause(server: Server) -> None:
    """Instance A holds reservations up to 400 ms ahead (10/s burst 1, five
    waiting threads); instance B, its own connections, pauses the key 600 ms.
    A hears of it on the pause channel: its waiters complete only after the
    pause's end, in their order, each 600 ms after its old time, with one
    script call per acquisition (and one for the pause)."""
    key = fresh_key("asleep")
    a = rbr.TokenBucket(server.client(), "10/s burst 1", on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(server.client(), "10/s burst 1", on_error="closed", timeout=1.0)
    assert not a.listening
    a.acquire_blocking(fresh_key("warm"))  # A listens from its first wait on (and the script is loaded)
    assert a.listening
    before = script_calls(server)
    start = time.monotonic()
    threads, done = _sleeping_waiters(a, key, 5, start)
    time.sleep(max(start + 0.06 - time.monotonic(), 0))
    paused_at = time.monotonic() - start
    shift = b.pause(key, 0.6)
    assert shift is not None and shift >= 0.599
    for t in threads:
        t.join(timeout=10)
    _check_moved(done, paused_at, paused_at + 0.6)
    assert script_calls(server) - before == 5 + 1
    a.close()
    assert not a.listening
    b.close()


async def test_asyncio_waiters_already_asleep_move_past_another_instances_pause(server: Server) -> None:
    key = fresh_key("asleep-async")
    a = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), "10/s burst 1", on_error="closed", timeout=1.0)
    b = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), "10/s burst 1", on_error="closed", timeout=1.0)
    await a.acquire(fresh_key("warm"))
    assert a.listening
    before = script_calls(server)
    start = time.monotonic()

    async def waiter(i: int) -> float:
        await asyncio.sleep(0.01 * i)
        await a.acquire(key, timeout=10)
        return time.monotonic() - start

    tasks = [asyncio.create_task(waiter(i)) for i in range(5)]
    await asyncio.sleep(max(start + 0.06 - time.monotonic(), 0))
    paused_at = time.monotonic() - start
    shift = await b.pause(key, 0.6)
    assert shift is not None and shift >= 0.599
    done = list(await asyncio.gather(*tasks))
    _check_moved(done, paused_at, paused_at + 0.6)
    assert script_calls(server) - before == 5 + 1
    await a.aclose()
    assert not a.listening
    await b.aclose()


def _elsewhere(cluster: Cluster, what: str) -> str:
    """A key whose master is not the node the listeners subscribe to (the
    first startup node): the news crosses the cluster bus."""
    while True:
        key = fresh_key(what)
        if cluster.owner(key_slot(f"rb:tb:{key}".encode())) != cluster.nodes[0].port:
            return key


def test_cluster_waiters_move_past_a_pause_on_another_master(cluster: Cluster) -> None:
    key = _elsewhere(cluster, "cluster-asleep")
    a = rbr.TokenBucket(cluster.client(), "10/s burst 1", on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(cluster.client(), "10/s burst 1", on_error="closed", timeout=1.0)
    a.acquire_blocking(fresh_key("warm"))
    assert a.listening
    start = time.monotonic()
    threads, done = _sleeping_waiters(a, key, 3, start)
    time.sleep(max(start + 0.06 - time.monotonic(), 0))
    paused_at = time.monotonic() - start
    assert b.pause(key, 0.6) is not None
    for t in threads:
        t.join(timeout=10)
    _check_moved(done, paused_at, paused_at + 0.6)
    a.close()
    b.close()


async def test_cluster_asyncio_waiters_move_past_a_pause_on_another_master(cluster: Cluster) -> None:
    key = _elsewhere(cluster, "cluster-asleep-async")
    a = rbr.AsyncTokenBucket(cluster.async_client(), "10/s burst 1", on_error="closed", timeout=1.0)
    b = rbr.AsyncTokenBucket(cluster.async_client(), "10/s burst 1", on_error="closed", timeout=1.0)
    async with a, b:
        await a.acquire(fresh_key("warm"))
        assert a.listening
        start = time.monotonic()

        async def waiter(i: int) -> float:
            await asyncio.sleep(0.01 * i)
            await a.acquire(key, timeout=10)
            return time.monotonic() - start

        tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
        await asyncio.sleep(max(start + 0.06 - time.monotonic(), 0))
        paused_at = time.monotonic() - start
        assert await b.pause(key, 0.6) is not None
        done = list(await asyncio.gather(*tasks))
        _check_moved(done, paused_at, paused_at + 0.6)


class _Plain:
    """A client used as given that cannot subscribe (no ``pubsub``)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def evalsha(self, *args: object) -> object:
        return self._client.evalsha(*args)  # type: ignore[arg-type]

    def eval(self, *args: object) -> object:
        return self._client.eval(*args)  # type: ignore[arg-type]

    def publish(self, *args: object) -> object:
        return self._client.publish(*args)  # type: ignore[arg-type]


def test_a_waiter_that_cannot_listen_goes_ahead_and_its_next_call_finds_the_pause(server: Server) -> None:
    """The limitation, documented: a waiter whose limiter does not hear the
    news (here its client cannot subscribe) wakes at its old time, inside
    another instance's pause; its next wait finds the pause in Redis. A
    limiter's own pause reaches its own waiters without listening."""
    key = fresh_key("deaf")
    plain = server.client()
    c = rbr.TokenBucket(_Plain(plain), "10/s burst 1", on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(server.client(), "10/s burst 1", on_error="closed", timeout=1.0)
    start = time.monotonic()
    threads, done = _sleeping_waiters(c, key, 2, start)
    time.sleep(max(start + 0.04 - time.monotonic(), 0))
    paused_at = time.monotonic() - start
    assert b.pause(key, 0.5) is not None
    end = paused_at + 0.5
    for t in threads:
        t.join(timeout=10)
    assert not c.listening
    assert 0.095 <= done[1] < end, f"it went at its old time, 0.1 s: {done} (the pause ends {end:.3f})"
    c.acquire_blocking(key, timeout=5)
    assert time.monotonic() - start >= end, "the next wait waits past the pause"
    # Its own pause: told at once.
    key = fresh_key("own")
    start = time.monotonic()
    threads, done = _sleeping_waiters(c, key, 2, start)
    time.sleep(max(start + 0.04 - time.monotonic(), 0))
    paused_at = time.monotonic() - start
    assert c.pause(key, 0.5) is not None
    for t in threads:
        t.join(timeout=10)
    assert done[1] >= paused_at + 0.5, (done, paused_at)
    c.close()
    b.close()
    plain.close()


def test_windows_wait_by_asking_again_and_cannot_reserve_or_pause(server: Server) -> None:
    key = fresh_key("window")
    fw = rbr.FixedWindow(server.client(), limit=2, window=0.5, timeout=1.0)
    fw.acquire_blocking(key, 2)
    t = time.monotonic()
    fw.acquire_blocking(key, timeout=2)
    assert time.monotonic() - t > 0.0
    with pytest.raises(rb.Unsupported):
        fw.reserve(key)
    with pytest.raises(rb.Unsupported):
        fw.pause(key, 1)
    fw.close()


def test_bad_input_is_a_typed_error_never_a_hang(server: Server) -> None:
    tb = rbr.TokenBucket(server.client(), "10/s burst 2", timeout=1.0)
    for bad in (-1, math.nan, math.inf):
        with pytest.raises(rb.QuotaError, match="timeout"):
            tb.acquire_blocking("k", timeout=bad)
        with pytest.raises(rb.QuotaError, match="seconds"):
            tb.pause("k", bad)
        with pytest.raises(rb.QuotaError, match="max_wait"):
            tb.reserve("k", max_wait=bad)
    with pytest.raises(rb.QuotaError):
        tb.pause("k", 0)
    with pytest.raises(rb.InsufficientCapacity):
        tb.acquire_blocking("k", 3)
    with pytest.raises(rb.InsufficientCapacity):
        tb.reserve("k", 3)
    with pytest.raises(TypeError):
        tb.pause("k", "soon")  # type: ignore[arg-type]
    tb.close()


def test_fail_policies_while_waiting(tmp_path_factory: pytest.TempPathFactory) -> None:
    s = Server(tmp_path_factory.mktemp("redis-dead")).start()
    opened = rbr.TokenBucket(s.client(), "10/s burst 1", on_error="open", timeout=0.2)
    closed = rbr.TokenBucket(s.client(), "10/s burst 1", on_error="closed", timeout=0.2)
    local = rbr.TokenBucket(s.client(), "10/s burst 1", on_error="local", local_rate=10, timeout=0.2)
    s.kill()
    t = time.monotonic()
    opened.acquire_blocking("k", timeout=2)
    with pytest.raises(rb.RateLimitExceeded):
        closed.acquire_blocking("k", timeout=2)
    assert time.monotonic() - t < 1.5
    local.acquire_blocking("k", timeout=2)
    t = time.monotonic()
    local.acquire_blocking("k", timeout=2)
    assert time.monotonic() - t >= 0.09
    for lim in (opened, closed, local):
        lim.close()
