"""``rb.httpx.AsyncRateLimitTransport`` on virtual time: the limiter decides
on a ``ManualClock``, the event loop's clock is that ``ManualClock`` (a wait
for a timer moves it there instead of sleeping), the adapter measures its
waits on the loop's clock (ratebound/_outbound.py ``send``), and the partner
is an ``httpx.MockTransport`` with its own bucket on the same clock. Every
sending is asserted at its exact virtual instant: the limiter's schedule,
the capped pause, the refusal at once. The real-HTTP versions
(test_outbound.py) keep generous bounds."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any, Callable, Optional

import httpx
import pytest

import ratebound as rb
from virtual_time import virtual

pytestmark = pytest.mark.filterwarnings("error")

URL = "http://partner.test/items"


class Partner:
    """An in-process partner: ``handle(path)`` gives (status, headers); it
    records when (virtual seconds) each request came."""

    def __init__(self, clock: rb.ManualClock, handle: Callable[[str], tuple[int, dict[str, str]]]) -> None:
        self.clock = clock
        self.handle = handle
        self.seen: list[tuple[str, float]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.path, self.clock.now()))
        status, headers = self.handle(request.url.path)
        return httpx.Response(status, headers=headers, text="ok" if status == 200 else f"status {status}")

    def at(self, path: Optional[str] = None) -> list[float]:
        return [round(t, 9) for p, t in self.seen if path is None or p == path]


def strict(clock: rb.ManualClock, rate: float, burst: float) -> Callable[[str], tuple[int, dict[str, str]]]:
    """A partner's own bucket: 429 with the whole seconds to wait."""
    state = {"tokens": burst, "at": clock.now()}

    def handle(path: str) -> tuple[int, dict[str, str]]:
        t = clock.now()
        state["tokens"] = min(burst, state["tokens"] + (t - state["at"]) * rate)
        state["at"] = t
        if state["tokens"] >= 1 - 1e-9:
            state["tokens"] -= 1
            return 200, {}
        return 429, {"Retry-After": str(math.ceil((1 - state["tokens"]) / rate))}

    return handle


def scripted(scripts: dict[str, list[tuple[int, dict[str, str]]]]) -> Callable[[str], tuple[int, dict[str, str]]]:
    turns: dict[str, int] = {}

    def handle(path: str) -> tuple[int, dict[str, str]]:
        i = turns.get(path, 0)
        turns[path] = i + 1
        script = scripts[path]
        return script[min(i, len(script) - 1)]

    return handle


def test_thirty_concurrent_requests_are_sent_exactly_on_the_limiters_schedule() -> None:
    """TokenBucket 40/s, burst 5, below a partner of 50/s burst 10: five at
    0, then one every 25 ms (a waiter on a ManualClock looks at it every
    millisecond: a wake a millisecond late shows); zero 429s."""

    async def main(c: rb.ManualClock) -> None:
        partner = Partner(c, strict(c, 50, 10))
        limiter = rb.TokenBucket(40, 5, clock=c)
        transport = rb.httpx.AsyncRateLimitTransport(limiter, transport=httpx.MockTransport(partner))
        async with httpx.AsyncClient(transport=transport) as client:
            responses = await asyncio.gather(*(client.get(URL) for _ in range(30)))
        assert [r.status_code for r in responses] == [200] * 30
        assert partner.at() == pytest.approx([max(0, i - 4) * 0.025 for i in range(30)], abs=1e-9)
        assert c.now() == pytest.approx(0.625, abs=1e-9)

    virtual(main)


def _a_year_of_retry_after(c: rb.ManualClock, transport_class: Any) -> tuple[Partner, list[rb.httpx.OutboundEvent], Any]:
    """A partner whose /items answers 429 with a year's Retry-After, then
    200; a `transport_class` to it over 100/s burst 10 on `c`, pausing at
    most 1 s, recording its events (returned too). Not learning: the
    bucket keeps its rate (a refusal cutting it: tests/test_outbound_learning.py)."""
    partner = Partner(c, scripted({"/items": [(429, {"Retry-After": "31536000"}), (200, {})]}))
    events: list[rb.httpx.OutboundEvent] = []
    transport = transport_class(
        rb.TokenBucket(100, 10, clock=c),
        transport=httpx.MockTransport(partner),
        max_pause=1,
        backoff=0.05,
        adaptive=False,
        on_decision=events.append,
    )
    return partner, events, transport


def test_a_year_of_retry_after_pauses_exactly_max_pause_and_the_wait_is_told_exactly() -> None:
    """A 429 with a year's Retry-After: the pause is capped to max_pause
    (1 s); the bucket is empty until its end and refills at its rate, so
    the retry goes exactly 1 s + 1/rate (10 ms) later, and its ``waited``
    event says exactly that."""

    async def main(c: rb.ManualClock) -> None:
        partner, events, transport = _a_year_of_retry_after(c, rb.httpx.AsyncRateLimitTransport)
        async with httpx.AsyncClient(transport=transport) as client:
            assert (await client.get(URL)).status_code == 200
        assert partner.at() == pytest.approx([0.0, 1.01], abs=1e-9)
        assert [(e.outcome, e.attempt) for e in events] == [("paused", 0), ("retried", 0), ("waited", 1)]
        assert events[0].seconds == 1.0 and events[0].capped
        assert events[2].seconds == pytest.approx(1.01, abs=1e-9)

    virtual(main)


def test_a_wait_beyond_the_timeout_is_refused_at_once_and_sends_nothing() -> None:
    """A token every 2 s: the second request, with a 1.5 s timeout, is
    refused with no virtual time passed (it was ``< 0.75 s`` of wall time);
    one with a 5 s timeout is sent exactly at 2 s."""

    async def main(c: rb.ManualClock) -> None:
        partner = Partner(c, scripted({"/items": [(200, {})]}))
        transport = rb.httpx.AsyncRateLimitTransport(
            rb.TokenBucket(0.5, 1, clock=c), transport=httpx.MockTransport(partner), timeout=1.5
        )
        async with httpx.AsyncClient(transport=transport) as client:
            assert (await client.get(URL)).status_code == 200
            with pytest.raises(rb.RateLimitExceeded) as e:
                await client.get(URL)
            assert e.value.code == "deadline_exceeded" and e.value.retry_after == 2.0
            assert c.now() == 0.0
            assert partner.at() == [0.0]
            assert (await client.get(URL, extensions={"ratebound": {"timeout": 5}})).status_code == 200
        assert partner.at() == pytest.approx([0.0, 2.0], abs=1e-9)

    virtual(main)


# The sync transport (``RateLimitTransport``) waits inside Rust
# (``acquire_blocking``), sleeping what the core's waiter says: on a
# ManualClock that is a look at the clock every millisecond of real time,
# so a test thread moving the clock drives it. Each rule is checked at
# explicit instants: nothing is sent 1 ms before the instant due (after
# 0.2 s of real time to act on it), and the sending at it is done (a
# liveness bound of 10 s).


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as e:  # handed to the test
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert done(), "not reached within 10 s"


def _sent_only_at(c: rb.ManualClock, partner: Partner, t: threading.Thread, out: list[Any], nanos: int, why: str) -> None:
    """The request of thread `t` (its result in `out`) goes out exactly
    `nanos` ns of `c` from now: not 1 ms before (the thread given 200 ms of
    real time to send it too early, `why`), then answered 200."""
    c.advance_ns(nanos - 1_000_000)
    time.sleep(0.2)
    assert partner.at() == [0.0], why
    c.advance_ns(1_000_000)
    t.join(10)
    assert not t.is_alive() and out == [200]


def test_sync_a_year_of_retry_after_pauses_exactly_max_pause_on_a_manual_clock() -> None:
    """As the asyncio test above, through ``RateLimitTransport``: the retry
    is sent exactly at 1 s (max_pause) + 1/rate (10 ms), not 1 ms before."""
    c = rb.ManualClock()
    partner, events, transport = _a_year_of_retry_after(c, rb.httpx.RateLimitTransport)
    with httpx.Client(transport=transport) as client:
        t, out = _in_thread(lambda: client.get(URL).status_code)
        _until(lambda: [e.outcome for e in events] == ["paused", "retried"])
        assert events[0].seconds == 1.0 and events[0].capped
        _sent_only_at(c, partner, t, out, 1_010_000_000, "sent before the pause's end + 1/rate")
    assert partner.at() == pytest.approx([0.0, 1.01], abs=1e-9)


def test_sync_a_wait_beyond_the_timeout_is_refused_at_once_on_a_manual_clock() -> None:
    """A token every 2 s: with a 1.5 s timeout the second request is refused
    with the clock where it was (a wait would never end: the clock does not
    move); with 5 s it is sent exactly at 2 s, not 1 ms before."""
    c = rb.ManualClock()
    partner = Partner(c, scripted({"/items": [(200, {})]}))
    transport = rb.httpx.RateLimitTransport(
        rb.TokenBucket(0.5, 1, clock=c), transport=httpx.MockTransport(partner), timeout=1.5
    )
    with httpx.Client(transport=transport) as client:
        assert client.get(URL).status_code == 200
        t, out = _in_thread(lambda: client.get(URL))
        t.join(10)
        assert not t.is_alive(), "the refusal waited"
        assert isinstance(out[0], rb.RateLimitExceeded), out
        assert out[0].code == "deadline_exceeded" and out[0].retry_after == 2.0
        assert c.now() == 0.0 and partner.at() == [0.0]
        t, out = _in_thread(lambda: client.get(URL, extensions={"ratebound": {"timeout": 5}}).status_code)
        _sent_only_at(c, partner, t, out, 2_000_000_000, "sent before the token")
    assert partner.at() == pytest.approx([0.0, 2.0], abs=1e-9)
