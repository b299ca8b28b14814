"""Global limits in Redis from Python: decisions per second and latency per
decision (p50/p99) with 1, 16 and 64 callers in flight, in the same run as
the ceiling — redis-benchmark running the same EVALSHA with as many
connections — and `limits`' Redis storage (redis-py) with its fixed window
and sliding window counter. 10 000 keys.

Rows: ratebound with a redis-py client (threads, each its own limiter and
client); ratebound's native connection (a URL in place of a client:
threads, each its own limiter, all on the one connection; asyncio tasks on
one limiter), batched (the default) and with batch=False; then one hot key
with and without leasing (k = 100), redis-py. Starts and stops its own
redis-server. Median of ROUNDS rounds.

    python bindings/python/bench/redis_bench.py [seconds] [rounds]
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Awaitable, Callable

import redis
from limits import parse
from limits.storage import RedisStorage
from limits.strategies import FixedWindowRateLimiter, SlidingWindowCounterRateLimiter

import ratebound.redis as rbr
from ratebound._ratebound import _RedisCall, _RedisEngine

# The tests' redis-server starter (a free port, persistence off, pinged).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from redis_servers import Server  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
KEYS = 10_000

# A measurement: decisions/s, p50 and p99 seconds per decision.
Measure = tuple[float, float, float]


def _percentiles(samples: list[float]) -> tuple[float, float]:
    samples.sort()
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def rate(threads: int, make: Callable[[], Callable[[str], Any]], hot: bool) -> Measure:
    """`threads` threads, each with its own checker, for SECONDS."""
    checkers = [make() for _ in range(threads)]
    counts = [0] * threads
    took: list[list[float]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)
    end = [0.0]

    def run(i: int) -> None:
        check, k, n, mine = checkers[i], i * 7919, 0, took[i]
        clock = time.perf_counter
        barrier.wait()
        while (t := clock()) < end[0]:
            k = (k + 1) % KEYS
            check("hot" if hot else f"k{k}")
            mine.append(clock() - t)
            n += 1
        counts[i] = n

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    start = time.perf_counter()
    end[0] = start + SECONDS
    barrier.wait()
    for t in ts:
        t.join()
    p50, p99 = _percentiles([x for m in took for x in m])
    return sum(counts) / (time.perf_counter() - start), p50, p99


def arate(tasks: int, make: Callable[[], Any]) -> Measure:
    """`tasks` asyncio tasks on one limiter (made in the loop), for SECONDS."""

    async def main() -> Measure:
        lim = make()
        await lim.check("warm")
        counts = [0] * tasks
        took: list[float] = []
        end = time.perf_counter() + SECONDS

        async def run(i: int) -> None:
            check: Callable[[str], Awaitable[Any]] = lim.check
            k, n, clock = i * 7919, 0, time.perf_counter
            while (t := clock()) < end:
                k = (k + 1) % KEYS
                await check(f"k{k}")
                took.append(clock() - t)
                n += 1
            counts[i] = n

        start = time.perf_counter()
        await asyncio.gather(*(run(i) for i in range(tasks)))
        elapsed = time.perf_counter() - start
        await lim.aclose()
        p50, p99 = _percentiles(took)
        return sum(counts) / elapsed, p50, p99

    return asyncio.run(main())


def ceiling(port: int, clients: int, call: _RedisCall) -> Measure:
    out = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n", str(max(10_000, int(60_000 * SECONDS))),
         "-r", str(KEYS), "-q", "EVALSHA", call.sha, "1", "rb:bench:__rand_int__", *call.args],
        check=True, capture_output=True, text=True,
    ).stdout
    m = re.search(r"([\d.]+) requests per second(?:, p50=([\d.]+) msec)?", out)
    assert m, out
    p50 = float(m.group(2)) / 1000 if m.group(2) else float("nan")
    return float(m.group(1)), p50, float("nan")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        server = Server(pathlib.Path(d)).start()
        port = server.port
        try:
            admin = server.client()
            engine = _RedisEngine("token_bucket", rate=1_000_000, burst=1_000_000)
            call = engine.begin("x")
            assert isinstance(call, _RedisCall)
            admin.script_load(call.text)
            big = dict(rate=1_000_000, burst=1_000_000, timeout=1.0)
            url = f"redis://127.0.0.1:{port}/0"

            def ours(prefix: str = "rb:", lease: int = 0) -> Callable[[], Callable[[str], Any]]:
                return lambda: rbr.TokenBucket(redis.Redis(host="127.0.0.1", port=port), prefix=prefix, lease=lease, **big).check

            def native(batch: bool) -> Callable[[], Callable[[str], Any]]:
                return lambda: rbr.TokenBucket(url, batch=batch, **big).check

            def native_async(batch: bool) -> Callable[[], Any]:
                return lambda: rbr.AsyncTokenBucket(url, batch=batch, **big)

            item = parse("1000000/second")

            def peer(cls: Any) -> Callable[[], Callable[[str], Any]]:
                def make() -> Callable[[str], Any]:
                    limiter = cls(RedisStorage(f"redis://127.0.0.1:{port}"))
                    return lambda key: limiter.hit(item, key)
                return make

            rows: list[tuple[str, Callable[[int], Measure]]] = [
                ("redis-benchmark EVALSHA (the ceiling)", lambda n: ceiling(port, n, call)),
                ("ratebound, redis-py client, threads", lambda n: rate(n, ours(), False)),
                ("ratebound, URL (native), threads, batched", lambda n: rate(n, native(True), False)),
                ("ratebound, URL (native), threads, batch=False", lambda n: rate(n, native(False), False)),
                ("ratebound, URL (native), asyncio tasks, batched", lambda n: arate(n, native_async(True))),
                ("ratebound, URL (native), asyncio tasks, batch=False", lambda n: arate(n, native_async(False))),
                ("limits fixed window, threads", lambda n: rate(n, peer(FixedWindowRateLimiter), False)),
                ("limits sliding window counter, threads", lambda n: rate(n, peer(SlidingWindowCounterRateLimiter), False)),
                ("ratebound, redis-py, one hot key", lambda n: rate(n, ours("rb:hot:"), True)),
                ("ratebound, redis-py, one hot key, lease 100", lambda n: rate(n, ours("rb:hotl:", 100), True)),
            ]
            print(f"bindings/python/bench/redis_bench.py: {SECONDS} s per row, {ROUNDS} rounds, medians; "
                  "latency per decision (redis-benchmark's p50 is its own)")
            print("| in flight | what | decisions/s | of ceiling | p50 µs | p99 µs |")
            print("|---:|---|---:|---:|---:|---:|")
            for n in (1, 16, 64):
                got: dict[str, list[Measure]] = {name: [] for name, _ in rows}
                for _ in range(ROUNDS):
                    for name, measure in rows:
                        got[name].append(measure(n))
                ceil = statistics.median(m[0] for m in got[rows[0][0]])
                for name, _ in rows:
                    r = statistics.median(m[0] for m in got[name])
                    p50 = statistics.median(m[1] for m in got[name]) * 1e6
                    p99 = statistics.median(m[2] for m in got[name]) * 1e6
                    fmt = lambda x: "–" if x != x else f"{x:.0f}"  # noqa: E731 (NaN: not measured)
                    print(f"| {n} | {name} | {r:.0f} | {100 * r / ceil:.0f} % | {fmt(p50)} | {fmt(p99)} |")
        finally:
            server.kill()


if __name__ == "__main__":
    main()
