"""Hostile partners of a learning fleet (issue 39), over real sockets: a
partner written here on 127.0.0.1 that answers 200 or 429 at random, one
whose quota headers are nonsense, one that is down (503 to everything)
and comes back. A smaller fleet than the fifty of
test_outbound_learning_fleet.py, to keep the run short: ten instances in
this process — five threads (requests through rb.requests), five asyncio
tasks on one loop (httpx.AsyncClient through rb.httpx) — configured at
30/s burst 30, retries=0, each sending as fast as its adapter lets it.
Over Redis (each instance its own rb.redis.TokenBucket and connection,
one limit), as a fleet is; the headers case also over one in-process
rb.TokenBucket shared by the ten, where the learned word is the local
bucket's (the headers are read by the core either way; Redis adds its
script's bounds on the word). The learned rate is sampled every 100 ms
(a query: takes nothing) and must stay within [floor, ceiling], finite.
The virtual-time model of the same partners:
crates/ratebound/tests/learn_fleet.rs."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from typing import Any, Callable

import httpx
import pytest
import redis
import redis.asyncio
import requests

import ratebound as rb
import ratebound.httpx
import ratebound.requests
from partners import Answer, Bucket, FleetPartner, counts
from redis_servers import HOST, Server, fresh_key

pytestmark = pytest.mark.filterwarnings("error")

CEILING = 30.0  # the fleet's configured rate (burst 30)
# The default floor: 1/20 of the ceiling. The word keeps the fraction in
# 65536ths, rounded: one unit of slack each way.
FLOOR = CEILING / 20
SLACK = CEILING / 65536
EACH = 5  # threads, and as many asyncio tasks
KEY = "partner"


class Fleet:
    """Ten instances against `partner` for `run` seconds from `start`;
    each call's status (or the exception it raised), and the learned rate
    every 100 ms from `gauge`."""

    def __init__(self, partner: FleetPartner, make: Callable[[bool], Any], gauge: Callable[[], float]) -> None:
        self.partner, self.make, self.gauge = partner, make, gauge
        self.answers: list[int] = []
        self.failed: list[str] = []
        self.rates: list[tuple[float, float]] = []  # (seconds since the start, learned rate)
        self.cuts: dict[int, int] = {}  # "adapted" events to a lower rate, by status

    def on_decision(self, e: rb.httpx.OutboundEvent) -> None:
        if e.outcome == "adapted" and e.from_rate is not None and e.to_rate is not None and e.to_rate < e.from_rate:
            self.cuts[e.status or 0] = self.cuts.get(e.status or 0, 0) + 1

    def note(self, call: Callable[[], int]) -> None:
        try:
            self.answers.append(call())
        except Exception as e:  # the test's point: there must be none
            self.failed.append(repr(e))

    def thread(self, end: float, most: int) -> None:
        limiter = self.make(False)
        with requests.Session() as session:
            session.mount("http://", rb.requests.RateLimitAdapter(limiter, key=KEY, retries=0, on_decision=self.on_decision))

            def call() -> int:
                with session.get(self.partner.url, timeout=10) as r:
                    return r.status_code

            for _ in range(most):
                if time.time() >= end:
                    break
                self.note(call)
        if isinstance(limiter, rb.redis.TokenBucket):
            limiter.close()

    async def task(self, end: float, most: int) -> None:
        limiter = self.make(True)
        transport = rb.httpx.AsyncRateLimitTransport(limiter, key=KEY, retries=0, on_decision=self.on_decision)
        async with httpx.AsyncClient(transport=transport, timeout=10) as client:
            for _ in range(most):
                if time.time() >= end:
                    break
                try:
                    self.answers.append((await client.get(self.partner.url)).status_code)
                except Exception as e:
                    self.failed.append(repr(e))
        if isinstance(limiter, rb.redis.AsyncTokenBucket):
            await limiter.aclose()

    def run(self, run: int) -> list[tuple[int, int]]:
        """The partner's (200s, refusals) per second; the partner closed."""
        start = time.time() + 0.5
        self.partner.start = start
        end = start + run
        most = int(CEILING * run)  # bounded: the run at the fleet's ceiling
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.1):
                self.rates.append((round(time.time() - start, 2), self.gauge()))

        async def tasks() -> None:
            await asyncio.sleep(max(0.0, start - time.time()))
            await asyncio.gather(*(self.task(end, most) for _ in range(EACH)))

        def paced() -> None:
            time.sleep(max(0.0, start - time.time()))
            self.thread(end, most)

        threads = [threading.Thread(target=paced) for _ in range(EACH)]
        threads.append(threading.Thread(target=asyncio.run, args=(tasks(),)))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=run + 30)
            assert not any(t.is_alive() for t in threads), "an instance is still calling"
        finally:
            done.set()
            sampler.join()
            self.partner.close()
        return self.partner.per_second(run)

    def per_second_rates(self) -> list[float]:
        """The learned rate sampled last in each whole second."""
        out: dict[int, float] = {}
        for at, rate in self.rates:
            if at >= 0:
                out[int(at)] = round(rate, 2)
        return [out[s] for s in sorted(out)]

    def check_bounds(self, label: str) -> None:
        values = [r for _, r in self.rates]
        low, high = min(values), max(values)
        print(f"{label}: {len(values)} samples of the learned rate within [{low:.3f}, {high:.3f}]")
        assert all(math.isfinite(r) for r in values), values
        assert FLOOR - SLACK <= low and high <= CEILING, (low, high)


def over_redis(server: Server) -> tuple[Callable[[bool], Any], Callable[[], float], Callable[[], object]]:
    """Each instance its own Redis bucket and connection under one prefix;
    the gauge a probe of its own (a query: takes nothing, hears the word);
    and the probe's close."""
    prefix = fresh_key("hostile") + ":"
    limit: dict[str, Any] = dict(prefix=prefix, on_error="closed", timeout=1.0)

    def make(asynchronous: bool) -> Any:
        if asynchronous:
            return rb.redis.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), CEILING, 30, **limit)
        return rb.redis.TokenBucket(redis.Redis(host=HOST, port=server.port), CEILING, 30, **limit)

    probe = rb.redis.TokenBucket(server.client(), CEILING, 30, **limit)

    def gauge() -> float:
        probe.check(KEY, 0)
        return probe.learned_rate(KEY)

    return make, gauge, probe.close


# a. A partner that answers 200 or 429 at random, a coin per request (a
# fixed seed), for 20 s: its refusals say nothing of a rate. The rate
# stays within [floor, ceiling] and the fleet keeps calling.
COIN_RUN = 20


def test_a_partner_refusing_at_random_keeps_the_learned_rate_within_bounds(server: Server) -> None:
    coin = random.Random(39)
    partner = FleetPartner(lambda t: (200 if coin.random() < 0.5 else 429, []))
    make, gauge, close = over_redis(server)
    fleet = Fleet(partner, make, gauge)
    seconds = fleet.run(COIN_RUN)
    close()
    print(f"coin partner: 200s/429s per second {seconds}")
    print(f"coin partner: learned rate each second {fleet.per_second_rates()}")
    ok, refused = counts(seconds, COIN_RUN - 10, COIN_RUN)
    print(f"coin partner, last 10 s: 200 x {ok}, 429 x {refused}; failed calls {fleet.failed[:3]}")
    assert fleet.failed == []
    fleet.check_bounds("coin partner")
    assert ok > 0 and refused > 0, seconds


# b. Hostile quota headers on every answer, cycled, on 200s and on 429s (a
# 429 every third answer; eleven header sets, so each set comes with both).
YEAR = 365 * 24 * 3600


def hostile_fields() -> list[list[tuple[str, str]]]:
    now = int(time.time())
    return [
        [("RateLimit-Remaining", "-1"), ("RateLimit-Reset", "5")],
        [("RateLimit-Remaining", "999999999999"), ("RateLimit-Reset", "5")],
        [("RateLimit-Remaining", "0"), ("RateLimit-Reset", "-5")],
        [("RateLimit-Remaining", "0"), ("RateLimit-Reset", "0")],
        [("RateLimit-Remaining", "3"), ("RateLimit-Reset", str(YEAR))],
        [("X-RateLimit-Remaining", "3"), ("X-RateLimit-Reset", str(now + YEAR))],
        [("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", str(now - 3600))],
        [("RateLimit-Remaining", "abc"), ("RateLimit-Reset", "abc")],
        [("RateLimit-Remaining", ""), ("RateLimit-Reset", "")],
        [("RateLimit-Remaining", "1e309"), ("RateLimit-Reset", "1e309")],
        [("RateLimit", '"default";r=-1;t=0')],
    ]


HEADERS_RUN = 10


@pytest.mark.parametrize("kind", ["redis", "local"])
def test_hostile_quota_headers_change_nothing_but_the_learned_rate_within_bounds(server: Server, kind: str) -> None:
    fields = hostile_fields()
    answered = [0]

    def decide(t: float) -> Answer:
        i = answered[0]
        answered[0] += 1
        return (429 if i % 3 == 0 else 200), fields[i % len(fields)]

    partner = FleetPartner(decide)
    close: Callable[[], object] = lambda: None  # noqa: E731
    if kind == "redis":
        make, gauge, close = over_redis(server)
    else:
        bucket = rb.TokenBucket(CEILING, 30)
        make, gauge = (lambda asynchronous: bucket), bucket.learned_rate
    fleet = Fleet(partner, make, gauge)
    seconds = fleet.run(HEADERS_RUN)
    close()
    print(f"hostile headers ({kind}): 200s/429s per second {seconds}")
    print(f"hostile headers ({kind}): learned rate each second {fleet.per_second_rates()}")
    print(f"hostile headers ({kind}): {len(fleet.answers)} answers, {answered[0]} sent; failed {fleet.failed[:3]}")
    assert fleet.failed == []
    # Every call returned the partner's answer: as many as it gave.
    assert len(fleet.answers) == answered[0] == sum(ok + no for ok, no in seconds)
    assert {200, 429} <= set(fleet.answers)
    fleet.check_bounds(f"hostile headers ({kind})")


# c. A partner that is down: 503 to everything for 30 s, then 10/s burst
# 20 (a bare 429 beyond) for 15 s. 503 is one of the adapters' default
# statuses (429 and 503): a refusal, evidence that the rate is too high.
DOWN, BACK = 30, 15


def test_a_fleet_recovers_from_a_partner_that_was_down(server: Server) -> None:
    bucket = Bucket(10, 20)

    def decide(t: float) -> Answer:
        if t < DOWN:
            return 503, []
        return (200 if bucket.take() else 429), []

    make, gauge, close = over_redis(server)
    fleet = Fleet(FleetPartner(decide), make, gauge)
    seconds = fleet.run(DOWN + BACK)
    close()
    rates = fleet.per_second_rates()
    print(f"partner down: 200s/refusals per second {seconds}")
    print(f"partner down: learned rate each second {rates}")
    assert fleet.failed == []
    fleet.check_bounds("partner down")
    # The default statuses count a 503 as a refusal: the storm cut the rate.
    storm = [r for at, r in fleet.rates if at < DOWN]
    print(f"partner down: cuts by status {fleet.cuts}; lowest in the storm {min(storm):.3f}/s")
    assert fleet.cuts.get(503, 0) > 0 and min(storm) < CEILING / 2, fleet.cuts
    # Back at 8/s within 10 s of the partner (the probing time; virtual
    # time: 8 s).
    back = next((at for at, r in fleet.rates if at >= DOWN and r >= 8.0), None)
    print(f"partner down: learned rate back at 8/s at {back} s (the partner back at {DOWN} s)")
    ok, refused = counts(seconds, DOWN + BACK - 5, DOWN + BACK)
    print(f"partner down, last 5 s: 200 x {ok} ({ok / 50:.0%} of capacity), 429 x {refused}")
    assert back is not None and back <= DOWN + 10, rates
    assert ok >= 0.8 * 50, seconds
