"""asyncio waiting on the real clock, and each timing rule exactly on
virtual time: the limiter on a ``ManualClock`` that is also the event loop's
clock (virtual_time.py's ``virtual``: a wait for a timer moves the
clock to it instead of sleeping). The real-clock versions keep a lower bound
(never early) and a generous upper one (liveness)."""

from __future__ import annotations

import asyncio
import time

import pytest

import ratebound as rb
from virtual_time import virtual


async def test_fifty_tasks_are_paced() -> None:
    tb = rb.TokenBucket(100, 1)
    stamps: list = []

    async def one() -> None:
        await tb.acquire()
        stamps.append(time.monotonic())

    start = time.monotonic()
    await asyncio.gather(*(one() for _ in range(50)))
    total = time.monotonic() - start
    stamps.sort()
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    # 49 waits of 10 ms after the first token: about 0.49 s. The upper bound
    # is liveness only (4.5 s of slack); the schedule is checked exactly by
    # test_fifty_tasks_are_admitted_exactly_10ms_apart_on_virtual_time.
    assert 0.48 <= total < 5.0, total
    # Reservations are 10 ms apart; a sleep never ends early, but the loop may
    # wake two tasks in one pass, so spacing is checked on the average and on
    # the total span from the first admission.
    assert stamps[-1] - stamps[0] >= 0.49 - 0.005, stamps[-1] - stamps[0]
    assert sum(gaps) / len(gaps) >= 0.0099


def test_fifty_tasks_are_admitted_exactly_10ms_apart_on_virtual_time() -> None:
    # The k-th admission (from 0) at exactly k × 10 ms: a waiter on a
    # ManualClock looks at it every millisecond, so a wake a millisecond
    # late (or early) shows.
    async def main(c: rb.ManualClock) -> None:
        tb = rb.TokenBucket(100, 1, clock=c)
        stamps: list = []

        async def one() -> None:
            await tb.acquire()
            stamps.append(c.now())

        await asyncio.gather(*(one() for _ in range(50)))
        assert sorted(stamps) == pytest.approx([k * 0.01 for k in range(50)], abs=1e-6)

    virtual(main)


async def test_admissions_never_run_ahead_of_10ms_slots() -> None:
    # The k-th admission (from 0) never comes before k × 10 ms after the
    # start. Two consecutive admissions may be closer than 10 ms when the
    # earlier one woke late (its slot was still at the scheduled time; seen:
    # 10.5 ms then 8.5 ms), but never ahead of the schedule.
    tb = rb.TokenBucket(100, 1)
    start = time.monotonic()
    stamps: list = []

    async def one() -> None:
        await tb.acquire()
        stamps.append(time.monotonic())

    await asyncio.gather(*(one() for _ in range(20)))
    stamps.sort()
    early = [(k, t - start) for k, t in enumerate(stamps) if t - start < k * 0.01 - 0.0005]
    assert not early, early


async def test_unmeetable_timeout_raises_at_once() -> None:
    """At once, exactly: the coroutine raises on its very first step,
    before it awaits anything (no timer, no turn of the loop), where one
    that waited would yield to the loop first. On a ManualClock, so the
    figures are exact too. (It was ``elapsed < 0.1`` of wall time.)"""
    c = rb.ManualClock()
    tb = rb.TokenBucket(1, 1, clock=c)
    assert tb.try_acquire()
    first_step = tb.acquire(1, timeout=0.5)
    with pytest.raises(rb.RateLimitExceeded) as info:
        first_step.send(None)
    assert info.value.retry_after == 1.0
    # Nothing was taken: the next token is still due in exactly 1 s (a
    # reserved one would put it 2 s away).
    assert tb.peek().retry_after == 1.0
    # The contrast: a timeout it can meet waits (its first step yields the
    # sleep's future to the loop).
    waits = tb.acquire(1, timeout=2)
    assert isinstance(waits.send(None), asyncio.Future)
    waits.close()


async def test_cancelled_acquire_gives_tokens_back() -> None:
    c = rb.ManualClock()
    tb = rb.TokenBucket(10, 1, clock=c)
    assert tb.try_acquire()
    # The clock is manual: the waiter's reservation (due in 0.1 s of clock
    # time) waits for the clock to be moved, and is cancelled before.
    task = asyncio.ensure_future(tb.acquire())
    await asyncio.sleep(0.01)
    assert tb.peek().retry_after == pytest.approx(0.2)  # the reservation holds the slot
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tb.peek().retry_after == pytest.approx(0.1)  # given back
    c.advance(0.1)
    assert tb.try_acquire()


async def test_windows_and_keyed_wait_by_retrying() -> None:
    # Each wait is timed from below (never done before the limit allows; a
    # sleep never ends early, 1 ms of timer granularity allowed) and, for a
    # loaded machine, from above by liveness bounds only (≥ 2.5 s of slack):
    # test_windows_and_keyed_waits_end_exactly_when_due_on_virtual_time
    # checks when each is done exactly.
    fw = rb.FixedWindow(1, 0.05)
    await fw.acquire()
    await fw.acquire()  # waits for the next window: the one just begun
    start = time.monotonic()
    due = fw.peek().retry_after  # about a whole window: 50 ms
    assert due > 0, due
    await fw.acquire()
    elapsed = time.monotonic() - start
    assert due - 0.001 <= elapsed < due + 3.0, (due, elapsed)
    k = rb.KeyedLimiter(50, 1)
    start = time.monotonic()
    await k.acquire("a")
    await k.acquire("a", 1, timeout=1)  # its token comes 20 ms after the first
    elapsed = time.monotonic() - start
    assert 0.02 - 0.001 <= elapsed < 3.0, elapsed
    with pytest.raises(rb.RateLimitExceeded):
        await k.acquire("a", 1, timeout=0.001)


def test_windows_and_keyed_waits_end_exactly_when_due_on_virtual_time() -> None:
    async def main(c: rb.ManualClock) -> None:
        # A window of 50 ms, one a window: the second acquire is done when
        # the next window begins (50 ms), the third when the one after does.
        fw = rb.FixedWindow(1, 0.05, clock=c)
        await fw.acquire()
        assert c.now() == 0
        await fw.acquire()
        assert c.now() == pytest.approx(0.05, abs=1e-6)
        await fw.acquire()
        assert c.now() == pytest.approx(0.1, abs=1e-6)
        # A keyed bucket of 50/s, burst 1: the key's second token at 20 ms
        # after the first; a 1 ms timeout is refused at once.
        k = rb.KeyedLimiter(50, 1, clock=c)
        start = c.now()
        await k.acquire("a")
        assert c.now() == start
        await k.acquire("a", 1, timeout=1)
        assert c.now() - start == pytest.approx(0.02, abs=1e-6)
        before = c.now()
        with pytest.raises(rb.RateLimitExceeded):
            await k.acquire("a", 1, timeout=0.001)
        assert c.now() == before, "refused at once"

    virtual(main)


async def test_async_decorator_waits() -> None:
    tb = rb.TokenBucket(100, 1)

    @rb.limit(tb, wait=True, timeout=1)
    async def work() -> int:
        return 1

    start = time.monotonic()
    assert sum([await work() for _ in range(3)]) == 3
    assert time.monotonic() - start >= 0.019


async def test_a_thirty_day_wait_on_a_manual_clock_is_never_done_early() -> None:
    # Issue 13: the core's waiter says when a wait is over, on the limiter's
    # clock; the binding only sleeps what it says.
    c = rb.ManualClock()
    monthly = rb.TokenBucket(1 / (30 * 86400), 1, clock=c)
    assert monthly.try_acquire()
    task = asyncio.ensure_future(monthly.acquire())
    await asyncio.sleep(0.01)
    assert not task.done()
    c.advance(30 * 86400 - 0.001)
    await asyncio.sleep(0.01)
    assert not task.done(), "done 1 ms before the token is due"
    c.advance(0.002)
    await asyncio.wait_for(task, 1)
    assert not monthly.try_acquire(), "the reserved token was used"


def test_a_blocking_thirty_day_wait_is_never_done_early() -> None:
    import threading

    c = rb.ManualClock()
    monthly = rb.TokenBucket(1 / (30 * 86400), 1, clock=c)
    assert monthly.try_acquire()
    done = threading.Event()

    def wait() -> None:
        monthly.acquire_blocking()
        done.set()

    t = threading.Thread(target=wait)
    t.start()
    assert not done.wait(0.05)
    c.advance(30 * 86400 - 0.001)
    assert not done.wait(0.05), "done 1 ms before the token is due"
    c.advance(0.002)
    assert done.wait(2)
    t.join()
