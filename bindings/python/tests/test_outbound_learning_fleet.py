"""A fleet learns a partner's real limit over real sockets (issue 39):
fifty instances in five processes, each its own rb.redis.TokenBucket (its
own Redis connection) and its own HTTP client and adapter, configured at
30/s burst 30 — one limit in Redis — call a partner written here on
127.0.0.1, every instance sending as fast as its adapter lets it. Three
processes run ten asyncio tasks (redis.asyncio, httpx.AsyncClient through
rb.httpx), two run ten threads (redis.Redis, requests through
rb.requests). retries=0: the partner sees the fleet's own pace. The
partner is the test's: a bare 429 beyond 10/s burst 20; the same with its
limit changing; a quota of 100 per 10 s announced on every answer. The
bars are the issue's, as ratios of the partner's counts over whole seconds
(the Rust twins: crates/ratebound-client/tests/learn.rs; the virtual-time
model: crates/ratebound/tests/learn_fleet.rs)."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest

import ratebound as rb
from partners import Answer, FleetPartner, counts, phases
from redis_servers import Server, fresh_key

pytestmark = pytest.mark.filterwarnings("error")

FLEET_PROCESSES, FLEET_EACH = 5, 10
FLEET_START = 4.0  # seconds for the processes to start and connect
CEILING = 30.0  # the fleet's configured rate (burst 30)

_FLEET_WORKER = """
import asyncio, sys, threading, time
import httpx, redis, redis.asyncio, requests
import ratebound as rb
import ratebound.httpx, ratebound.requests

url, port, prefix, mode, each, start, run, adaptive = sys.argv[1:9]
# port "shm": the limit is the shared-memory file `prefix` names.
shm = port == "shm"
port = 0 if shm else int(port)
each, start, run, adaptive = int(each), float(start), float(run), adaptive == "1"
end = start + run
options = dict(key="partner", retries=0, adaptive=adaptive)
limit = dict(prefix=prefix, on_error="closed", timeout=1.0)
failed = []

def pace():
    time.sleep(max(0.0, start - time.time()))

async def task():
    if shm:
        limiter = rb.SharedTokenBucket(prefix, 30, 30)
    else:
        limiter = rb.redis.AsyncTokenBucket(redis.asyncio.Redis(host="127.0.0.1", port=port), 30, 30, **limit)
    transport = rb.httpx.AsyncRateLimitTransport(limiter, **options)
    async with httpx.AsyncClient(transport=transport, timeout=10) as client:
        await asyncio.sleep(max(0.0, start - time.time()))
        for _ in range(int(30 * run)):  # bounded: the run at the fleet's ceiling
            if time.time() >= end:
                break
            try:
                await client.get(url)
            except Exception as e:
                failed.append(repr(e))
    if not shm:
        await limiter.aclose()

def thread():
    if shm:
        limiter = rb.SharedTokenBucket(prefix, 30, 30)
    else:
        limiter = rb.redis.TokenBucket(redis.Redis(host="127.0.0.1", port=port), 30, 30, **limit)
    with requests.Session() as session:
        session.mount("http://", rb.requests.RateLimitAdapter(limiter, **options))
        pace()
        for _ in range(int(30 * run)):
            if time.time() >= end:
                break
            try:
                session.get(url, timeout=10).close()
            except Exception as e:
                failed.append(repr(e))
    if not shm:
        limiter.close()

if mode == "async":
    async def main():
        await asyncio.gather(*(task() for _ in range(each)))
    asyncio.run(main())
else:
    threads = [threading.Thread(target=thread) for _ in range(each)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
print(len(failed), failed[:3], flush=True)
"""


def fleet(
    server: Optional[Server], adaptive: bool, partner: FleetPartner, run: int, shm: Optional[Path] = None
) -> tuple[list[tuple[int, int]], list[float]]:
    """Runs the fleet for `run` seconds against `partner` (closed after);
    the partner's (200s, refusals) in each second of the run — the last
    entry: answers to requests in flight at its end — and the learned rate
    at the end of each second, then once more after the run. The limit is
    in Redis (`server`), or with `shm` in that shared-memory file."""
    start = time.time() + FLEET_START
    partner.start = start
    probe: Any
    if shm is not None:
        prefix, port = str(shm), "shm"
        probe = rb.SharedTokenBucket(shm, CEILING, 30)

        def learned() -> float:
            return float(probe.learned_rate())
    else:
        assert server is not None
        prefix, port = fresh_key("fleet") + ":", str(server.port)
        # The learned rate in Redis (a query: takes nothing).
        probe = rb.redis.TokenBucket(server.client(), CEILING, 30, prefix=prefix, on_error="closed", timeout=1.0)

        def learned() -> float:
            probe.check("partner", 0)  # hears the word in force
            return float(probe.learned_rate("partner"))
    rates: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(max(0.0, start + len(rates) + 1 - time.time())) and len(rates) < run:
            rates.append(round(learned(), 2))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", _FLEET_WORKER, partner.url, port, prefix,
                 "async" if i < 3 else "threads", str(FLEET_EACH), repr(start), str(run),
                 "1" if adaptive else "0"],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(FLEET_PROCESSES)
        ]
        for w in workers:
            out, _ = w.communicate(timeout=FLEET_START + run + 60)
            assert w.returncode == 0, out
            print("worker: failed requests", out.strip())
    finally:
        done.set()
        sampler.join()
        partner.close()
    print("learned rate each second:", rates)
    rates.append(learned())
    if shm is None:
        probe.close()
    return partner.per_second(run), rates


# The bare-429 partner: 10/s burst 20, for 20 s.
BARE_RUN = 20


def last_ten(seconds: list[tuple[int, int]]) -> tuple[float, float]:
    """The last 10 s: the share refused, and the 200s against the partner's
    capacity (10/s)."""
    ok, refused = counts(seconds, BARE_RUN - 10, BARE_RUN)
    return refused / max(1, ok + refused), ok / 100.0


# The bars over Redis (2026-12-05: 1.9 % refused, 106 % served in
# the last 10 s). What it takes: an adapt that replaced the word publishes
# it on the prefix's channel, so that the waiters of every instance — whose
# reservations read the word seconds before, the fleet's queue fifty deep —
# see a fall when they wake and wait again at the new rate; and a fall
# drops the queue beyond an empty bucket in Redis' script, so that they do
# not stand behind the old pace's slots. Without them: 28-30 % refused.
def test_fifty_redis_instances_find_a_bare_429_partners_limit(server: Server) -> None:
    seconds, rates = fleet(server, True, FleetPartner(phases([(0, 10)], 20)), BARE_RUN)
    refused, goodput = last_ten(seconds)
    print(f"learning: 200s/429s per second {seconds}; learned rate {rates[-1]:.2f}/s")
    print(f"learning, last 10 s: {refused:.1%} refused, goodput {goodput:.0%} of capacity")
    assert refused <= 0.05, seconds
    assert goodput >= 0.85, seconds
    assert rates[-1] < CEILING, rates


# The same fleet on one shared-memory file instead of Redis: fifty
# instances in five processes, each its own rb.SharedTokenBucket handle on
# the file, whose slot keeps the learned word beside the bucket.
def test_fifty_instances_in_five_processes_on_one_shared_memory_file_find_a_bare_429_partners_limit(
    tmp_path: Path,
) -> None:
    seconds, rates = fleet(None, True, FleetPartner(phases([(0, 10)], 20)), BARE_RUN, shm=tmp_path / "fleet.limit")
    refused, goodput = last_ten(seconds)
    print(f"shared memory: 200s/429s per second {seconds}; learned rate {rates[-1]:.2f}/s")
    print(f"shared memory, last 10 s: {refused:.1%} refused, goodput {goodput:.0%} of capacity")
    assert refused <= 0.05, seconds
    assert goodput >= 0.85, seconds
    assert rates[-1] < CEILING, rates


def test_fifty_redis_instances_without_learning_are_refused_for_as_long_as_they_run(server: Server) -> None:
    seconds, rates = fleet(server, False, FleetPartner(phases([(0, 10)], 20)), BARE_RUN)
    refused, goodput = last_ten(seconds)
    print(f"fixed: 200s/429s per second {seconds}; learned rate {rates[-1]:.2f}/s")
    print(f"fixed, last 10 s: {refused:.1%} refused, goodput {goodput:.0%} of capacity")
    assert refused > 0.5, seconds
    assert rates[-1] == pytest.approx(CEILING), rates


# The partner changes its limit (bare 429s beyond it, burst 20): 10/s for
# 0-10 s, 5/s for 10-20 s, 10/s again for 20-30 s.
CHANGES = [(0.0, 10.0), (10.0, 5.0), (20.0, 10.0)]
CHANGING_RUN = 30


# The bars: in the second half of each phase (5-10, 15-20, 25-30 s)
# 429s <= 10 % of what reached the partner and 200s >= 80 % of the phase's
# capacity (rate x 5 s); the learned rate back at 8/s within 10 s of the
# rise (by 30 s). Measured on 2026-12-05, two runs: 1.9 / 1.8 % refused
# and 106 / 108 % served at 10/s, 7.4 / 7.4 % and 100 / 100 % at 5/s,
# 0.0 / 0.0 % and 114 / 112 % once the partner rose, back at 8/s by 24 s.
# The rise takes a sending that may not reserve its slot more than 1 s
# ahead (the call machine's line horizon): before it, the fleet's queue,
# fifty deep and reserved at the lower rate, held the fleet below the
# partner for seconds after the learned rate was back — 56-64 % served in
# 25-30 s, and 10.3-13.8 % refused at 5/s.
def test_fifty_redis_instances_follow_a_partner_that_changes_its_limit(server: Server) -> None:
    seconds, rates = fleet(server, True, FleetPartner(phases(CHANGES, 20)), CHANGING_RUN)
    print(f"changing partner: 200s/429s per second {seconds}")
    print(f"changing partner: learned rate each second {rates[:-1]}, at the end {rates[-1]:.2f}/s")
    halves = []
    for since, rate in CHANGES:
        half = int(since) + 5  # the second half of the phase
        ok, refused = counts(seconds, half, half + 5)
        halves.append((refused / max(1, ok + refused), ok / (rate * 5)))
        print(f"changing partner, {half}-{half + 5} s ({rate:g}/s): {halves[-1][0]:.1%} refused, "
              f"goodput {halves[-1][1]:.0%}")
    # rates[i] is the learned rate at the end of second i.
    back = next((i + 1 for i in range(20, CHANGING_RUN) if rates[i] >= 8.0), None)
    print(f"changing partner: learned rate back at 8/s by {back} s (the partner rose at 20 s)")
    for (share, goodput), (since, _) in zip(halves, CHANGES):
        assert share <= 0.10, (since, seconds)
        assert goodput >= 0.80, (since, seconds)
    assert back is not None and back <= 30, rates


# The announcing partner: a quota of 100 per 10 s window (windows from the
# fleet's start), told on every answer (200 and 429) as RateLimit-Remaining
# / RateLimit-Reset (seconds to the window's end, rounded up) or as the IETF
# field RateLimit: "default";r=R;t=T, and a 429 beyond. Each answer comes
# back 50 ms after the partner counted its request (as the Rust twin's):
# on loopback a fleet that only pauses when told 0 is left has nothing in
# flight by then and draws no 429 either, so the test could not fail.
WINDOW, QUOTA = 10, 100
ANNOUNCED_RUN = 40


def announcing(ietf: bool) -> FleetPartner:
    spent = {"window": 0, "spent": 0}

    def decide(t: float) -> Answer:
        window = max(0, int(t // WINDOW))
        if spent["window"] != window:
            spent.update(window=window, spent=0)
        ok = spent["spent"] < QUOTA
        spent["spent"] += ok
        left = str(QUOTA - spent["spent"])
        reset = str(max(0, math.ceil((window + 1) * WINDOW - t)))
        if ietf:
            fields = [("RateLimit", f'"default";r={left};t={reset}')]
        else:
            fields = [("RateLimit-Remaining", left), ("RateLimit-Reset", reset)]
        return (200 if ok else 429), fields

    return FleetPartner(decide, delay=0.05)


@pytest.mark.parametrize("style", ["fields", "ietf"])
def test_fifty_redis_instances_follow_an_announced_quota(server: Server, style: str) -> None:
    seconds, rates = fleet(server, True, announcing(style == "ietf"), ANNOUNCED_RUN)
    windows = [counts(seconds, w * WINDOW, (w + 1) * WINDOW) for w in range(ANNOUNCED_RUN // WINDOW)]
    late = sum(s[1] for s in seconds[WINDOW:])  # with the answers in flight at the end
    print(f"announced ({style}): 200s/429s per second {seconds}")
    print(f"announced ({style}): learned rate each second {rates[:-1]}, at the end {rates[-1]:.2f}/s")
    print(f"announced ({style}): (200s, 429s) per window {windows}; 429s after the first window: {late}")
    assert late == 0, seconds
    assert all(ok > 0 for ok, _ in windows[1:]), windows
