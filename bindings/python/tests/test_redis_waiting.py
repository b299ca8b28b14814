"""Waiting for a global token in Redis from Python (rb.redis): one call per
acquisition in one order for every instance, reservations and their
cancellation, a pause for everyone, asyncio cancellation, bad input —
against a real redis-server on 127.0.0.1.

The waits' exact rules (the moves of a pause, the give-backs) are engine
steps at explicit times in spec/redis_wait.json (test_redis_wait_spec.py).
Here real threads, tasks and sockets run them: the order of the
reservations is read from Redis (MONITOR, the bucket's TAT), the times are
measured from before what they follow, the periods are 500 ms, and an
upper bound on a real wait keeps ``LATE`` (500 ms) for a loaded machine."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any, Awaitable, Callable, Optional

import pytest
import redis
import redis.asyncio

import ratebound as rb
import ratebound.redis as rbr
from redis.crc import key_slot
from redis_servers import HOST, Cluster, Server, fresh_key

# One slot each 500 ms ("2/s burst 1"): no check below depends on a call
# taking less than tens of ms.
RATE = "2/s burst 1"
PERIOD = 0.5
PAUSE = 1.0
# How late past its due time a real wait may end on a loaded 2-core machine.
LATE = 0.5
# How early: the wait sleeps a delay in µs read from Redis' clock.
EARLY = 0.005


def script_calls(server: Server) -> int:
    stats = server.admin("INFO", "commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


def served(*servers: Server) -> int:
    """Script calls the servers ran to their end (a NOSCRIPT refusal left out)."""
    total = 0
    for s in servers:
        stats = s.admin("INFO", "commandstats")
        for c in ("evalsha", "eval"):
            st = stats.get(f"cmdstat_{c}", {})
            total += int(st.get("calls", 0)) - int(st.get("failed_calls", 0))
    return total


def tat(server: Server, key: str) -> Optional[int]:
    """The bucket's theoretical arrival time in Redis (µs of its clock; a
    pause's end after ":" left out), None without a key."""
    raw = server.admin("GET", f"rb:tb:{key}")
    return None if raw is None else int(raw.split(b":")[0])


def until(what: Callable[[], bool], within: float = 10.0) -> None:
    """Polls ``what`` (a bounded loop)."""
    stop = time.monotonic() + within
    while not what():
        assert time.monotonic() < stop, "not within the bound"
        time.sleep(0.002)


async def until_async(what: Callable[[], bool], within: float = 10.0) -> None:
    stop = time.monotonic() + within
    while not what():
        assert time.monotonic() < stop, "not within the bound"
        await asyncio.sleep(0.002)


def test_twenty_instances_wait_in_one_order_with_one_call_each(server: Server) -> None:
    """Twenty instances (threads, each its own limiter and connection)
    acquire 3 tokens each at 50/s burst 10. Redis' MONITOR gives the order
    the reservations reached it: the k-th completes no earlier than its
    slot, burst + rate·t (a reservation served ahead of an earlier one
    would come before its slot); the last comes about (60 − 10)/50 = 1 s
    after the start; and each acquisition is exactly one script call
    (every connection made and the script loaded before: no NOSCRIPT)."""
    key = fresh_key("twenty")
    limiters = [
        rbr.TokenBucket(server.client(client_name=f"twenty-{i}"), "50/s burst 10", on_error="closed", timeout=1.0)
        for i in range(20)
    ]
    for lim in limiters:
        lim.acquire_blocking(fresh_key("warm"))
    done: list[list[float]] = [[] for _ in limiters]
    errors: list[BaseException] = []
    watch = server.client()
    monitor = watch.monitor()
    monitor.__enter__()
    before = script_calls(server)
    start = time.monotonic()

    def run(i: int) -> None:
        try:
            for _ in range(3):
                limiters[i].acquire_blocking(key, timeout=10)
                done[i].append(time.monotonic() - start)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    calls = script_calls(server) - before
    # The reservations in the order they reached Redis, as (limiter, its nth).
    names = {}
    for line in server.admin("CLIENT", "LIST").decode().splitlines():
        fields = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
        if fields.get("name", "").startswith("twenty-"):
            names[fields["addr"].rsplit(":", 1)[1]] = int(fields["name"].split("-")[1])
    end = fresh_key("end")
    server.admin("ECHO", end)
    order: list[int] = []
    while True:
        c = monitor.next_command()
        if end in c["command"]:
            break
        if key in c["command"] and c["command"].split(" ")[0].upper() in ("EVALSHA", "EVAL"):
            order.append(names[c["client_port"]])
    monitor.__exit__()
    watch.close()
    assert calls == 60, f"{calls} script calls for 60 acquisitions"
    assert sorted(order) == sorted(list(range(20)) * 3), order
    nth = [0] * 20
    for k, i in enumerate(order):
        t = done[i][nth[i]]
        nth[i] += 1
        assert t >= max(k + 1 - 10, 0) / 50 - EARLY, f"reservation {k} (instance {i}) done at {t:.3f} s, before its slot"
    last = max(max(d) for d in done)
    assert 1.0 - EARLY <= last < 1.0 + LATE, last
    for lim in limiters:
        lim.close()


def test_reservations_share_one_order_and_cancel_gives_the_slot_back(server: Server) -> None:
    """Reservations of two instances take consecutive slots of one queue;
    beyond ``max_wait`` nothing is taken; a cancel of the last one moves
    the bucket's TAT in Redis back to where it was, and the next
    reservation takes that very slot."""
    key = fresh_key("reserve")
    a = rbr.TokenBucket(server.client(), RATE, on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(server.client(), RATE, on_error="closed", timeout=1.0)
    start = time.monotonic()
    rs = [lim.reserve(key, max_wait=5) for lim in (a, b, a, b)]
    elapsed = time.monotonic() - start
    assert rs[0].delay == 0.0 and rs[0].source == "redis"
    for i, r in enumerate(rs[1:], 1):
        # Slot i of the queue: i periods after the first, less the time
        # the calls since took.
        assert PERIOD * i - elapsed <= r.delay <= PERIOD * i, [r.delay for r in rs]
    queued = tat(server, key)
    # Beyond max_wait: raised, nothing taken.
    with pytest.raises(rb.RateLimitExceeded) as e:
        a.reserve(key, max_wait=PERIOD)
    assert e.value.code == "deadline_exceeded"
    assert tat(server, key) == queued
    nxt = b.reserve(key, max_wait=5)
    taken = tat(server, key)
    assert queued is not None and taken == queued + PERIOD * 1_000_000
    # Cancelled: the TAT is back, the next reservation takes the same slot;
    # a second cancel does nothing.
    assert nxt.cancel() is True
    assert tat(server, key) == queued
    assert nxt.cancel() is False
    assert tat(server, key) == queued
    again = a.reserve(key, max_wait=5)
    assert tat(server, key) == taken
    assert again.delay <= nxt.delay
    a.close()
    b.close()


def test_a_pause_is_for_everyone_and_once(server: Server) -> None:
    key = fresh_key("pause")
    a = rbr.TokenBucket(server.client(), "100/s burst 10", timeout=1.0)
    b = rbr.TokenBucket(server.client(), "100/s burst 10", timeout=1.0)
    assert b.check(key).allowed
    t = time.monotonic()
    shift = a.pause(key, PAUSE)
    assert shift is not None and shift >= PAUSE - 0.001
    assert b.pause(key, 0.1) == 0.0, "inside a pause already on: nothing moves"
    d = b.check(key)
    assert not d.allowed and d.retry_after >= PAUSE - (time.monotonic() - t)
    b.acquire_blocking(key, timeout=5)
    # The pause began after t: the wait ends after its end.
    assert time.monotonic() - t >= PAUSE - EARLY
    # A wait that cannot end within its timeout raises at once: well
    # before the timeout, which a wait of the timeout would reach.
    a.pause(key, 60)
    t = time.monotonic()
    with pytest.raises(rb.RateLimitExceeded):
        b.acquire_blocking(key, timeout=5)
    assert time.monotonic() - t < 5 - 2.5
    a.close()
    b.close()


async def test_asyncio_a_cancelled_acquire_gives_its_slot_back(server: Server) -> None:
    """A cancelled asyncio acquire gives its slot back: the bucket's TAT in
    Redis returns to where it was before the acquire reserved, and the
    next reservation takes that slot."""
    key = fresh_key("cancel")
    a = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), RATE, timeout=1.0)
    start = time.monotonic()
    await a.acquire(key)  # the burst
    first = await a.reserve(key, max_wait=5)
    assert PERIOD - (time.monotonic() - start) <= first.delay <= PERIOD
    queued = tat(server, key)
    waiting = asyncio.create_task(a.acquire(key))  # due a period after `first`
    await until_async(lambda: tat(server, key) != queued)
    taken = tat(server, key)
    assert queued is not None and taken == queued + PERIOD * 1_000_000
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    # Its slot was given back: the next reservation gets it. Cancelled
    # while its reservation's reply was still on its way, the give-back is
    # sent when that reply lands (the engine's `orphaned`), after the
    # cancellation: it is waited for (a slot never given back fails here).
    await until_async(lambda: tat(server, key) == queued)
    nxt = await a.reserve(key, max_wait=5)
    assert tat(server, key) == taken
    with pytest.raises(TypeError, match="acancel"):
        nxt.cancel()
    assert await nxt.acancel() is True
    assert tat(server, key) == queued
    # The next acquire waits for that slot, after `first`'s.
    await a.acquire(key, timeout=5)
    assert time.monotonic() - start >= 2 * PERIOD - EARLY
    assert await a.pause(key, 0.2) is not None
    await a.aclose()


def _waiters_in_order(lim: rbr.TokenBucket, key: str, count: int, servers: list[Server]) -> tuple[list[threading.Thread], list[float], float]:
    """``count`` threads acquiring one token of ``key``, each started once
    Redis has run the previous one's reservation (their order is known
    whatever the load): their completion times from the returned start, in
    the order they reserved."""
    done = [math.nan] * count
    start = time.monotonic()
    base = served(*servers)

    def run(i: int) -> None:
        lim.acquire_blocking(key, timeout=30)
        done[i] = time.monotonic() - start

    threads = []
    for i in range(count):
        threads.append(threading.Thread(target=run, args=(i,)))
        threads[-1].start()
        until(lambda: served(*servers) >= base + i + 1)
    return threads, done, start


async def _tasks_in_order(lim: Any, key: str, count: int, servers: list[Server]) -> tuple[list[asyncio.Task[float]], float]:
    """:func:`_waiters_in_order` for asyncio: tasks, each its completion time."""
    start = time.monotonic()
    base = served(*servers)

    async def waiter() -> float:
        await lim.acquire(key, timeout=30)
        return time.monotonic() - start

    tasks = []
    for i in range(count):
        tasks.append(asyncio.create_task(waiter()))
        await until_async(lambda: served(*servers) >= base + i + 1)
    return tasks, start


def _check_moved(done: list[float], paused_at: float, shift: float) -> None:
    """Waiter 0 took the burst before the pause; every other completes
    after the pause's end (it began after ``paused_at``), in order, at its
    old slot — i periods after the burst, taken between the start and
    ``done[0]`` — moved by ``shift``."""
    assert done[0] < paused_at, f"the burst went at once: {done}"
    assert shift >= PAUSE - 0.001, shift
    end = paused_at + PAUSE
    for i in range(1, len(done)):
        assert done[i] >= end, f"waiter {i} at {done[i]:.3f} s, inside the pause (ends {end:.3f}): {done}"
        lo, hi = PERIOD * i + shift, done[0] + PERIOD * i + shift
        assert lo - EARLY <= done[i] <= hi + LATE, (i, lo, hi, done)
        assert done[i - 1] < done[i], f"out of order: {done}"


def _move_past_a_pause(a: rbr.TokenBucket, b: rbr.TokenBucket, key: str, count: int, servers: list[Server]) -> None:
    """`count` threads wait on `a` for `key` in order (the first at once);
    `b` pauses the key: :func:`_check_moved`."""
    threads, done, start = _waiters_in_order(a, key, count, servers)
    paused_at = time.monotonic() - start
    shift = b.pause(key, PAUSE)
    assert shift is not None
    for t in threads:
        t.join(timeout=30)
    _check_moved(done, paused_at, shift)


def _first_wait_then_moved(a: rbr.TokenBucket, b: rbr.TokenBucket, key: str, count: int, servers: list[Server]) -> None:
    """`a`'s first wait (it listens from then on), then
    :func:`_move_past_a_pause`; both closed."""
    a.acquire_blocking(fresh_key("warm"))
    assert a.listening
    _move_past_a_pause(a, b, key, count, servers)
    a.close()
    b.close()


async def _tasks_move_past_a_pause(
    a: Any, pause: Callable[[str, float], Awaitable[Optional[float]]], key: str, count: int, servers: list[Server]
) -> None:
    """:func:`_move_past_a_pause` for asyncio: `count` tasks wait on `a`,
    then `pause` (another instance's) pauses the key."""
    tasks, start = await _tasks_in_order(a, key, count, servers)
    paused_at = time.monotonic() - start
    shift = await pause(key, PAUSE)
    assert shift is not None
    done = list(await asyncio.gather(*tasks))
    _check_moved(done, paused_at, shift)


def test_waiters_already_asleep_move_past_another_instances_pause(server: Server) -> None:
    """Instance A holds reservations up to 1.5 s ahead (2/s burst 1, four
    waiting threads); instance B, its own connections, pauses the key 1 s
    once all have reserved. A hears of it on the pause channel: its
    waiters complete only after the pause's end, in their order, each at
    its old slot moved by the shift, with one script call per acquisition
    (and one for the pause)."""
    key = fresh_key("asleep")
    a = rbr.TokenBucket(server.client(), RATE, on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(server.client(), RATE, on_error="closed", timeout=1.0)
    assert not a.listening
    a.acquire_blocking(fresh_key("warm"))  # A listens from its first wait on (and the script is loaded)
    assert a.listening
    before = script_calls(server)
    _move_past_a_pause(a, b, key, 4, [server])
    assert script_calls(server) - before == 4 + 1
    a.close()
    assert not a.listening
    b.close()


async def test_asyncio_waiters_already_asleep_move_past_another_instances_pause(server: Server) -> None:
    key = fresh_key("asleep-async")
    a = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), RATE, on_error="closed", timeout=1.0)
    b = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), RATE, on_error="closed", timeout=1.0)
    await a.acquire(fresh_key("warm"))
    assert a.listening
    before = script_calls(server)
    await _tasks_move_past_a_pause(a, b.pause, key, 4, [server])
    assert script_calls(server) - before == 4 + 1
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
    a = rbr.TokenBucket(cluster.client(), RATE, on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(cluster.client(), RATE, on_error="closed", timeout=1.0)
    _first_wait_then_moved(a, b, key, 3, cluster.nodes)


async def test_cluster_asyncio_waiters_move_past_a_pause_on_another_master(cluster: Cluster) -> None:
    key = _elsewhere(cluster, "cluster-asleep-async")
    a = rbr.AsyncTokenBucket(cluster.async_client(), RATE, on_error="closed", timeout=1.0)
    b = rbr.AsyncTokenBucket(cluster.async_client(), RATE, on_error="closed", timeout=1.0)
    async with a, b:
        await a.acquire(fresh_key("warm"))
        assert a.listening
        await _tasks_move_past_a_pause(a, b.pause, key, 3, cluster.nodes)


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
    c = rbr.TokenBucket(_Plain(plain), RATE, on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(server.client(), RATE, on_error="closed", timeout=1.0)
    threads, done, start = _waiters_in_order(c, key, 2, [server])
    paused_at = time.monotonic() - start
    assert b.pause(key, PAUSE) is not None
    end = paused_at + PAUSE
    for t in threads:
        t.join(timeout=30)
    assert not c.listening
    assert PERIOD - EARLY <= done[1] < end, f"it went at its old slot: {done} (the pause ends {end:.3f})"
    c.acquire_blocking(key, timeout=5)
    assert time.monotonic() - start >= end, "the next wait waits past the pause"
    # Its own pause: told at once.
    key = fresh_key("own")
    threads, done, start = _waiters_in_order(c, key, 2, [server])
    paused_at = time.monotonic() - start
    assert c.pause(key, PAUSE) is not None
    for t in threads:
        t.join(timeout=30)
    assert done[1] >= paused_at + PAUSE, (done, paused_at)
    c.close()
    b.close()
    plain.close()


def test_windows_wait_by_asking_again_and_cannot_reserve_or_pause(server: Server) -> None:
    """A full window's waiter is admitted in a later window: the counter in
    Redis ("<window index>:<count>") names the window of each admission."""
    fw = rbr.FixedWindow(server.client(), limit=2, window=1.0, timeout=1.0)
    for _ in range(5):  # bounded
        key = fresh_key("window")
        fw.acquire_blocking(key, 2)
        # None: the window ended (its key expired) before the read; again.
        raw = server.admin("GET", f"rb:fw:{key}")
        if raw is not None:
            break
    full = raw.split(b":")
    assert int(full[1]) == 2, full
    # Admitted at the start of the next window: read well within it.
    fw.acquire_blocking(key, timeout=3)
    later = server.admin("GET", f"rb:fw:{key}").split(b":")
    assert int(later[0]) > int(full[0]) and int(later[1]) == 1, (full, later)
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
    # A pause of 0 is no error and changes nothing, as on a local limiter.
    tb.pause("k", 0)
    assert tb.check("k").allowed
    with pytest.raises(rb.InsufficientCapacity):
        tb.acquire_blocking("k", 3)
    with pytest.raises(rb.InsufficientCapacity):
        tb.reserve("k", 3)
    with pytest.raises(TypeError):
        tb.pause("k", "soon")  # type: ignore[arg-type]
    tb.close()


def test_fail_policies_while_waiting(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Redis down: "open" admits and "closed" refuses at once — well
    before the acquire's timeout, which a wait would reach — and "local"
    waits on its local share."""
    s = Server(tmp_path_factory.mktemp("redis-dead")).start()
    opened = rbr.TokenBucket(s.client(), "10/s burst 1", on_error="open", timeout=0.2)
    closed = rbr.TokenBucket(s.client(), "10/s burst 1", on_error="closed", timeout=0.2)
    local = rbr.TokenBucket(s.client(), "10/s burst 1", on_error="local", local_rate=10, timeout=0.2)
    s.kill()
    t = time.monotonic()
    opened.acquire_blocking("k", timeout=10)
    with pytest.raises(rb.RateLimitExceeded) as e:
        closed.acquire_blocking("k", timeout=10)
    assert e.value.code == "store_unavailable"
    assert time.monotonic() - t < 10 - 5
    # The local share's first token at once (after t), the next 0.1 s later.
    t = time.monotonic()
    local.acquire_blocking("k", timeout=2)
    local.acquire_blocking("k", timeout=2)
    assert time.monotonic() - t >= 0.1 - EARLY
    for lim in (opened, closed, local):
        lim.close()
