"""Calling a partner through rb.httpx and rb.requests: a strict partner
written here (its own token bucket, not ratebound) on 127.0.0.1, real
clients, a real Redis for the fleet. The incident of the source material:
fifty instances calling a partner that allows 10/s with bursts of 20."""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterator, Optional

import httpx
import pytest
import redis
import requests

import ratebound as rb
import ratebound.httpx
import ratebound.requests
from partners import HttpPartner
from redis_servers import HOST, Server, fresh_key

CTX = multiprocessing.get_context("fork")

# As in test_redis: a leaked connection or any other warning fails the test.
pytestmark = pytest.mark.filterwarnings("error")


class Partner(HttpPartner):
    """A partner that allows `rate`/s with bursts of `burst` (its own
    bucket) and answers 429 with Retry-After beyond it; `script` answers
    given statuses first; `throttle(seconds)` refuses everything for that
    long from its next request on, with Retry-After."""

    def __init__(self, rate: float = 10, burst: float = 20) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.last = burst, time.monotonic()
        self.lock = threading.Lock()
        self.statuses: dict[int, int] = {}
        self.seen: list[tuple[float, int, str]] = []  # (time, status, method)
        self.script: list[tuple[int, dict[str, str]]] = []
        self.throttle_for: Optional[float] = None
        self.throttled_until = 0.0
        self.retry_after = "0"
        partner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                status, headers = partner.decide(self.command)
                body = b"ok" if status == 200 else b"no"
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = answer

        self.serve(Handler, "/v1/items")

    def decide(self, method: str) -> tuple[int, dict[str, str]]:
        with self.lock:
            now = time.monotonic()
            if self.script:
                status, headers = self.script.pop(0)
            elif self.throttle_for is not None:
                self.throttled_until = now + self.throttle_for
                self.retry_after = str(math.ceil(self.throttle_for))
                self.throttle_for = None
                status, headers = 429, {"Retry-After": self.retry_after}
            elif now < self.throttled_until:
                status, headers = 429, {"Retry-After": self.retry_after}
            else:
                self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
                self.last = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    status, headers = 200, {}
                else:
                    status, headers = 429, {"Retry-After": "1"}
            self.statuses[status] = self.statuses.get(status, 0) + 1
            self.seen.append((now, status, method))
            return status, headers

    def count(self, status: int) -> int:
        with self.lock:
            return self.statuses.get(status, 0)


@pytest.fixture
def partner() -> Iterator[Partner]:
    p = Partner()
    yield p
    p.close()


def _instance(port: int, key: str, url: str, threads: int, start: float, run_for: float, local: bool, out: Any) -> None:
    """One instance of the fleet (a process): `threads` callers, each with
    its own Redis connection, limiter and httpx client, calling from
    `start` (the system's monotonic clock, shared by the processes) for
    `run_for` seconds; puts how many requests it sent and what went wrong
    (a refusal other than "the next token is due after the run": a Redis
    failure under on_error="closed" is one, never a quiet end)."""
    sent = [0] * threads
    errors: list[str] = []

    def caller(i: int) -> None:
        if local:
            limiter: Any = rb.TokenBucket(9, 15)
        else:
            limiter = rb.redis.TokenBucket(redis.Redis(host=HOST, port=port), rate=9, burst=15, on_error="closed", timeout=1.0)
        try:
            with httpx.Client(transport=rb.httpx.RateLimitTransport(limiter, key=key)) as client:
                time.sleep(max(0.0, start - time.monotonic()))
                while True:
                    left = start + run_for - time.monotonic()
                    if left <= 0:
                        return
                    try:
                        client.get(url, extensions={"ratebound": {"timeout": left}})
                    except rb.RateLimitExceeded as e:
                        if e.code != "deadline_exceeded":
                            raise
                        return  # the next token is due after the run
                    sent[i] += 1
        except BaseException as e:
            errors.append(f"{type(e).__name__} ({getattr(e, 'code', None)}): {e}")

    ts = [threading.Thread(target=caller, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((sum(sent), errors))


def _fleet(server: Server, partner: Partner, key: str, run_for: float, local: bool = False, processes: int = 5, threads: int = 10) -> int:
    out: "multiprocessing.Queue[tuple[int, list[str]]]" = CTX.Queue()
    # Every caller starts at once, a second from now (time to fork and
    # connect), so the run is at most `run_for` long for all.
    start = time.monotonic() + 1.0
    procs = [
        CTX.Process(target=_instance, args=(server.port, key, partner.url, threads, start, run_for, local, out))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=run_for + 60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    errors = [e for _, es in results for e in es]
    assert errors == [], errors
    return sum(sent for sent, _ in results)


def test_incident_a_fleet_of_fifty_through_one_redis_limit_never_trips_the_partner(server: Server, partner: Partner) -> None:
    """Fifty instances (5 processes × 10 threads, each its own Redis
    connection and client) call the partner (10/s, burst 20) for at most
    5 s over a Redis limit of 9/s burst 15: no 429 at all, every grant a
    200, never more than 15 + 9·5 (+1 of rounding), and at least 90 % of
    what the limit earned between the first and the last request the
    partner saw (measured, not the nominal start: the fork and the first
    connections may start the run late). Fifty local buckets of the same
    limit are the contrast: the partner refuses most of what they send."""
    sent = _fleet(server, partner, fresh_key("partner"), 5.0)
    ok, refused = partner.count(200), partner.count(429)
    times = [t for t, s, _ in partner.seen if s == 200]
    earned = 15 + 9 * (times[-1] - times[0])
    print(f"redis fleet: sent {sent}, partner 200: {ok}, 429: {refused}, over {times[-1] - times[0]:.2f} s, earned {earned:.1f}")
    assert refused == 0
    assert ok == sent == len(partner.seen), (ok, sent, len(partner.seen))
    assert 0.9 * earned <= ok <= 15 + 9 * 5 + 1, (ok, earned)

    contrast = Partner()
    try:
        sent = _fleet(server, contrast, "unused", 2.0, local=True)
        print(f"fifty local buckets: sent {sent}, partner 200: {contrast.count(200)}, 429: {contrast.count(429)}")
        # Each bucket obeys the 429s it hears (pausing itself), but each
        # starts with its own burst of 15 against the partner's 20: the
        # partner refuses several per instance.
        assert contrast.count(429) >= 30, contrast.statuses
    finally:
        contrast.close()


def test_a_throttling_partner_quiets_the_whole_fleet_once(server: Server, partner: Partner) -> None:
    """The partner refuses everything for 3 s with Retry-After: 3 from its
    first request after 1.5 s. The first 429 pauses the Redis limit for the
    fleet: only the requests already in flight hear 429 (a handful, not one
    per instance); the rest wait, then resume at the rate with no further
    429s."""
    key = fresh_key("throttled")
    timer = threading.Timer(1.5, lambda: setattr(partner, "throttle_for", 3.0))
    timer.start()
    try:
        _fleet(server, partner, key, 5.0, processes=3, threads=10)
    finally:
        timer.cancel()
    with partner.lock:
        seen = list(partner.seen)
        until = partner.throttled_until
    refused = [t for t, s, _ in seen if s == 429]
    print(f"throttled: {len(refused)} × 429 over {refused[-1] - refused[0]:.3f} s, {partner.count(200)} × 200 of {len(seen)}")
    # The requests sent before the first 429 had paused the limit (the
    # client hears it, tells Redis, and the other processes' waiters hear
    # the news: up to about 0.5 s seen on a loaded machine): a handful,
    # within half the throttle. A fleet that did not share the pause would
    # be refused at its 9/s all 3 s long (about 27, and their retries).
    assert 1 <= len(refused) <= 15, [t - refused[0] for t in refused]
    first, last = refused[0], refused[-1]
    assert last - first < 1.5, [t - first for t in refused]
    # Then it resumed, within the partner's limit.
    after = [s for t, s, _ in seen if t >= until]
    assert after and all(s == 200 for s in after), after


def test_threads_through_a_local_bucket_wait_instead_of_failing() -> None:
    partner = Partner(25, 10)
    limiter = rb.TokenBucket(20, 5)
    events: list[rb.httpx.OutboundEvent] = []
    transport = rb.httpx.RateLimitTransport(limiter, on_decision=events.append)
    start = time.monotonic()
    with httpx.Client(transport=transport) as client:
        def call() -> None:
            for _ in range(3):
                assert client.get(partner.url).status_code == 200

        ts = [threading.Thread(target=call) for _ in range(10)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    elapsed = time.monotonic() - start
    assert partner.count(200) == 30 and partner.count(429) == 0
    assert elapsed >= (30 - 5) / 20 - 0.05, elapsed
    partner.close()
    waited = [e for e in events if e.outcome == "waited"]
    assert len(waited) >= 20 and all(e.key == partner.url.split("/")[2] for e in waited)


async def _async_calls(url: str, limiter: Any, calls: int, key: str = "partner") -> list[int]:
    async with httpx.AsyncClient(transport=rb.httpx.AsyncRateLimitTransport(limiter, key=key)) as client:
        responses = await asyncio.gather(*(client.get(url) for _ in range(calls)))
    return [r.status_code for r in responses]


def test_asyncio_calls_wait_on_a_local_bucket_and_on_the_fleets(server: Server, partner: Partner) -> None:
    fast = Partner(25, 10)
    try:
        start = time.monotonic()
        statuses = asyncio.run(_async_calls(fast.url, rb.TokenBucket(20, 5), 25))
        assert statuses == [200] * 25 and fast.count(429) == 0
        assert time.monotonic() - start >= (25 - 5) / 20 - 0.05
    finally:
        fast.close()

    async def fleet() -> list[int]:
        key = fresh_key("async-partner")
        clients = [redis.asyncio.Redis(host=HOST, port=server.port) for _ in range(5)]
        limiters = [rb.redis.AsyncTokenBucket(c, rate=9, burst=5, on_error="closed", timeout=1.0) for c in clients]
        try:
            results = await asyncio.gather(*(_async_calls(partner.url, lim, 4, key) for lim in limiters))
        finally:
            # A limiter that waited listens for pauses: closed, it stops.
            for lim, c in zip(limiters, clients):
                await lim.aclose()
                await c.aclose()
        return [s for r in results for s in r]

    # Five instances share "partner" in Redis: 20 calls at 9/s, burst 5.
    partner.tokens, partner.last = partner.burst, time.monotonic()
    before = partner.count(200)
    start = time.monotonic()
    statuses = asyncio.run(fleet())
    assert statuses == [200] * 20 and partner.count(429) == 0
    assert partner.count(200) - before == 20
    assert time.monotonic() - start >= (20 - 5) / 9 - 0.05


def test_retries_go_through_the_limiter_and_obey_the_policy(partner: Partner) -> None:
    events: list[Any] = []
    limiter = rb.TokenBucket(100, 10)
    # Not learning (the rate cut on a refusal: test_outbound_learning.py).
    transport = rb.httpx.RateLimitTransport(
        limiter, key="p", max_pause=1, backoff=0.05, adaptive=False, on_decision=events.append
    )
    with httpx.Client(transport=transport) as client:
        # A 503 then a 200: exactly one retry, after the backoff.
        partner.script = [(503, {})]
        assert client.get(partner.url).status_code == 200
        assert partner.count(503) == 1 and partner.count(200) == 1
        assert [e.outcome for e in events] == ["paused", "retried", "waited"]
        # A POST is not retried: the caller gets the 503.
        partner.script = [(503, {})]
        assert client.post(partner.url, content=b"x").status_code == 503
        assert partner.count(503) == 2 and events[-1].outcome == "gave_up"
        # Retries spent: the caller gets the last 429 (three sendings).
        partner.script = [(429, {})] * 3
        assert client.get(partner.url).status_code == 429
        assert partner.count(429) == 3
        # A year's Retry-After pauses for max_pause (1 s), not a year.
        events.clear()
        partner.script = [(429, {"Retry-After": "31536000"})]
        start = time.monotonic()
        assert client.get(partner.url).status_code == 200
        elapsed = time.monotonic() - start
        # Never early; the upper bound is liveness only (4 s of slack). The
        # retry's instant (exactly 1 s + 1/rate) is checked on a ManualClock
        # by test_outbound_virtual.py::test_sync_a_year_of_retry_after_pauses_
        # exactly_max_pause_on_a_manual_clock (and its asyncio twin).
        assert 0.95 <= elapsed <= 5.0, elapsed
        paused = [e for e in events if e.outcome == "paused"]
        assert len(paused) == 1 and paused[0].seconds == 1.0 and paused[0].capped
    # any_method: the POST is retried.
    partner.script = [(503, {})]
    with httpx.Client(transport=rb.httpx.RateLimitTransport(rb.TokenBucket(100, 10), any_method=True)) as client:
        assert client.post(partner.url, content=b"x").status_code == 200


def test_a_wait_beyond_the_timeout_sends_nothing(partner: Partner) -> None:
    """A token due in an hour with a timeout of 30 minutes: refused, not
    waited for (a liveness bound of 10 s; "at once", with no time passed,
    is checked on a ManualClock by test_outbound_virtual.py::test_sync_a_
    wait_beyond_the_timeout_is_refused_at_once_on_a_manual_clock), nothing
    sent. A token due in 2 s: the per-request timeout of 5 s waits for it."""
    hourly = rb.TokenBucket(1 / 3600, 1)
    assert hourly.try_acquire()
    with httpx.Client(transport=rb.httpx.RateLimitTransport(hourly, timeout=1800)) as client:
        t = time.monotonic()
        with pytest.raises(rb.RateLimitExceeded) as e:
            client.get(partner.url)
        assert time.monotonic() - t < 10
        assert e.value.code == "deadline_exceeded" and 1800 < e.value.retry_after <= 3600
        assert partner.seen == []
    limiter = rb.TokenBucket(0.5, 1)
    start = time.monotonic()
    assert limiter.try_acquire()
    with httpx.Client(transport=rb.httpx.RateLimitTransport(limiter, timeout=1.5)) as client:
        with pytest.raises(rb.RateLimitExceeded):
            client.get(partner.url)
        assert partner.seen == []
        # The per-request override waits.
        assert client.get(partner.url, extensions={"ratebound": {"timeout": 5}}).status_code == 200
        assert time.monotonic() - start >= 2.0 - 0.005
    assert len(partner.seen) == 1


def test_keys_per_partner_on_one_keyed_limiter() -> None:
    a, b = Partner(), Partner()
    try:
        limiter = rb.KeyedLimiter(1, 1)
        with httpx.Client(transport=rb.httpx.RateLimitTransport(limiter, timeout=0)) as client:
            # The default key is host:port: each partner has its own token.
            assert client.get(a.url).status_code == 200
            assert client.get(b.url).status_code == 200
            with pytest.raises(rb.RateLimitExceeded):
                client.get(a.url)
            # A function of the request, and a per-request key.
            assert client.get(a.url, extensions={"ratebound": {"key": "other"}}).status_code == 200
        with httpx.Client(transport=rb.httpx.RateLimitTransport(limiter, key=lambda r: r.url.path, timeout=0)) as client:
            assert client.get(a.url).status_code == 200
            with pytest.raises(rb.RateLimitExceeded):
                client.get(b.url)  # the same path: the same key
    finally:
        a.close()
        b.close()


def test_requests_adapter_waits_retries_and_keeps_posts() -> None:
    partner = Partner(25, 10)
    events: list[Any] = []
    session = requests.Session()
    # Not learning (the rate cut on a refusal: test_outbound_learning.py).
    session.mount(
        "http://",
        rb.requests.RateLimitAdapter(
            rb.TokenBucket(20, 5), key="p", backoff=0.05, adaptive=False, on_decision=events.append
        ),
    )
    start = time.monotonic()

    def call() -> None:
        for _ in range(3):
            assert session.get(partner.url, timeout=10).status_code == 200

    ts = [threading.Thread(target=call) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert partner.count(200) == 24 and partner.count(429) == 0
    assert time.monotonic() - start >= (24 - 5) / 20 - 0.05
    # Retry-After: 0 asks for no pause, but no retry goes without one: the
    # backoff.
    partner.script = [(503, {"Retry-After": "0"})]
    events.clear()
    assert session.get(partner.url).status_code == 200
    assert partner.count(503) == 1
    assert [(e.outcome, e.seconds) for e in events if e.outcome != "waited"] == [("paused", 0.05), ("retried", None)]
    partner.script = [(429, {"Retry-After": "1"})]
    events.clear()
    assert session.post(partner.url, data=b"x").status_code == 429
    assert [e.outcome for e in events if e.outcome != "waited"] == ["paused", "gave_up"]
    session.close()
    partner.close()


def test_bad_input_is_a_clear_error_at_construction(tmp_path: Any) -> None:
    with pytest.raises(rb.ConfigError, match="limiter is required"):
        rb.httpx.RateLimitTransport(None)
    for window in (rb.FixedWindow(1, 1), rb.KeyedLimiter(algorithm="fixed_window", limit=1, window=1)):
        with pytest.raises(rb.ConfigError, match="cannot be paused"):
            rb.httpx.RateLimitTransport(window)
    with pytest.raises(rb.ConfigError, match="cannot be paused"):
        rb.requests.RateLimitAdapter(rb.SharedKeyedLimiter(str(tmp_path / "w"), algorithm="fixed_window", limit=1, window=1, max_keys=8))
    with pytest.raises(rb.ConfigError, match="not a ratebound limiter"):
        rb.httpx.RateLimitTransport(object())
    # The numbers are the core's rules (Outbound::from_loose,
    # Sending::from_loose; spec/outbound.json "options"): a QuotaError
    # (invalid_number), as Node's RangeError — these were ConfigErrors of
    # this adapter's own; a string is a TypeError, as for every number.
    for bad in (-1, float("nan"), float("inf"), 1e300):
        with pytest.raises(rb.QuotaError, match="invalid timeout"):
            rb.httpx.RateLimitTransport(rb.TokenBucket(1, 1), timeout=bad)
    with pytest.raises(TypeError, match="timeout"):
        rb.httpx.RateLimitTransport(rb.TokenBucket(1, 1), timeout="1")  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError, match="invalid retries -1"):
        rb.httpx.RateLimitTransport(rb.TokenBucket(1, 1), retries=-1)
    with pytest.raises(rb.QuotaError, match="invalid n 0"):
        rb.requests.RateLimitAdapter(rb.TokenBucket(1, 1), n=0)
    with pytest.raises(rb.QuotaError, match="max_pause"):
        rb.httpx.RateLimitTransport(rb.TokenBucket(1, 1), max_pause=0)
    with pytest.raises(rb.QuotaError, match="invalid backoff 0"):
        rb.requests.RateLimitAdapter(rb.TokenBucket(1, 1), backoff=0)
    with pytest.raises(rb.ConfigError, match="AsyncTokenBucket"):
        rb.httpx.AsyncRateLimitTransport(rb.redis.TokenBucket(redis.Redis(host=HOST, port=1), rate=1, burst=1, on_error="closed"))
    with pytest.raises(rb.ConfigError, match="async adapter"):
        rb.httpx.RateLimitTransport(
            rb.redis.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=1), rate=1, burst=1, on_error="closed")
        )


# ------------------------------------------------- refusals and outages

ADAPTERS = ["httpx", "httpx-async", "requests"]


def _call(adapter: str, limiter: Any, url: str, **options: Any) -> int:
    """One GET through `adapter` over `limiter`; the final status."""
    if adapter == "httpx":
        with httpx.Client(transport=rb.httpx.RateLimitTransport(limiter, **options)) as client:
            return client.get(url).status_code
    if adapter == "httpx-async":

        async def call() -> int:
            async with httpx.AsyncClient(transport=rb.httpx.AsyncRateLimitTransport(limiter, **options)) as client:
                return (await client.get(url)).status_code

        return asyncio.run(call())
    session = requests.Session()
    session.mount("http://", rb.requests.RateLimitAdapter(limiter, **options))
    try:
        return session.get(url, timeout=10).status_code
    finally:
        session.close()


def _gaps(partner: Partner) -> list[float]:
    with partner.lock:
        times = [t for t, _, _ in partner.seen]
    return [b - a for a, b in zip(times, times[1:])]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_bare_429_is_retried_only_after_the_backoff_doubling_up_to_max_pause(adapter: str, partner: Partner) -> None:
    """A reverse proxy's limiter answers 429 with no Retry-After and no
    RateLimit fields, three times: each retry reaches the partner no
    sooner than the backoff (200 ms, doubled to 400 ms, doubled to 800 ms
    and cut to max_pause 500 ms) — lower bounds: the pause starts when the
    refusal is read, after the partner sent it. Before: all four sendings
    within a few milliseconds."""
    events: list[Any] = []
    partner.script = [(429, {})] * 3
    status = _call(
        adapter, rb.TokenBucket(100, 10), partner.url, retries=3, backoff=0.2, max_pause=0.5, on_decision=events.append
    )
    assert status == 200
    gaps = _gaps(partner)
    print(f"{adapter}: bare 429 x 3, gaps {[round(g, 3) for g in gaps]}")
    assert len(gaps) == 3
    for gap, pause in zip(gaps, (0.2, 0.4, 0.5)):
        assert gap >= pause - 0.005, gaps
    paused = [(e.seconds, e.attempt, e.capped, e.local) for e in events if e.outcome == "paused"]
    assert paused == [(0.2, 0, False, False), (0.4, 1, False, False), (0.5, 2, True, False)]


def _redis_limiter(adapter: str, port: int, on_error: str) -> Any:
    options: dict[str, Any] = {"rate": 100, "burst": 10, "on_error": on_error, "timeout": 0.2}
    if on_error == "local":
        options["local_rate"] = 50
    if adapter == "httpx-async":
        return rb.redis.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=port), **options)
    return rb.redis.TokenBucket(redis.Redis(host=HOST, port=port), **options)


@pytest.mark.parametrize("on_error", ["local", "open"])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_partners_pause_outlives_a_redis_outage(adapter: str, on_error: str, partner: Partner, tmp_path: Any) -> None:
    """Redis is killed, then the partner answers 429 Retry-After: 1: the
    pause cannot reach Redis, so the adapter keeps it in this process (and
    a limiter failing "local" pauses its local share): the retry reaches
    the partner no sooner than a second after the refusal, and the event
    says the pause was local. Before: the retry went out at once, admitted
    by the fail policy (the issue measured three sendings in 0.33 s)."""
    server = Server(tmp_path).start()
    limiter = _redis_limiter(adapter, server.port, on_error)
    server.kill()
    events: list[Any] = []
    probes: list[bool] = []

    def hook(e: Any) -> None:
        events.append(e)
        # While the pause holds, the local share refuses (sync limiters:
        # the hook runs on the calling thread).
        if e.outcome == "paused" and on_error == "local" and adapter != "httpx-async":
            probes.append(limiter.check("partner").allowed)

    partner.script = [(429, {"Retry-After": "1"})]
    if on_error == "open":
        # The outbound default: a limiter failing open is warned about.
        with pytest.warns(RuntimeWarning, match="fails open"):
            status = _call(adapter, limiter, partner.url, key="partner", on_decision=hook)
    else:
        status = _call(adapter, limiter, partner.url, key="partner", on_decision=hook)
    assert status == 200
    gaps = _gaps(partner)
    print(f"{adapter}, on_error={on_error}, Redis down: retry {gaps[0]:.3f} s after the 429")
    assert len(gaps) == 1 and gaps[0] >= 1.0 - 0.005, gaps
    paused = [e for e in events if e.outcome == "paused"]
    assert len(paused) == 1 and paused[0].seconds == 1.0 and paused[0].local, paused
    assert probes == ([False] if on_error == "local" and adapter != "httpx-async" else [])
    if adapter == "httpx-async":
        asyncio.run(limiter.aclose())
    else:
        limiter.close()
