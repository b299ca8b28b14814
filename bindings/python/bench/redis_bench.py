"""Global limits in Redis from Python: decisions per second with 1, 16 and
64 threads (each its own connection), in the same run as the ceiling —
redis-benchmark running the same EVALSHA with as many connections — and
`limits`' Redis storage (redis-py) with its fixed window and sliding window
counter. 10 000 keys; then one hot key with and without leasing (k = 100).
Starts and stops its own redis-server. Median of ROUNDS rounds.

    python bindings/python/bench/redis_bench.py [seconds] [rounds]
"""

from __future__ import annotations

import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

import redis
from limits import parse
from limits.storage import RedisStorage
from limits.strategies import FixedWindowRateLimiter, SlidingWindowCounterRateLimiter

import ratebound.redis as rbr
from ratebound._ratebound import _RedisEngine

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
KEYS = 10_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rate(threads: int, make: Callable[[], Callable[[str], Any]], hot: bool) -> float:
    """`threads` threads, each with its own checker, for SECONDS."""
    checkers = [make() for _ in range(threads)]
    counts = [0] * threads
    end = time.perf_counter() + SECONDS

    def run(i: int) -> None:
        check, k, n = checkers[i], i * 7919, 0
        while time.perf_counter() < end:
            k = (k + 1) % KEYS
            check("hot" if hot else f"k{k}")
            n += 1
        counts[i] = n

    start = time.perf_counter()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def ceiling(port: int, clients: int, sha: str) -> float:
    out = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n", str(max(10_000, int(60_000 * SECONDS))),
         "-r", str(KEYS), "-q", "EVALSHA", sha, "1", "rb:bench:__rand_int__", "", "1", "1000000000000", "1", "check", "1"],
        check=True, capture_output=True, text=True,
    ).stdout
    m = re.search(r"([\d.]+) requests per second", out)
    assert m, out
    return float(m.group(1))


def main() -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
            stdout=subprocess.DEVNULL,
        )
        try:
            admin = redis.Redis(host="127.0.0.1", port=port)
            for _ in range(200):
                try:
                    admin.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            engine = _RedisEngine("token_bucket", rate=1_000_000, burst=1_000_000)
            sha = engine.begin("x").sha
            admin.script_load(engine.begin("x").text)
            big = dict(rate=1_000_000, burst=1_000_000, timeout=1.0)

            def ours(prefix: str = "rb:", lease: int = 0) -> Callable[[], Callable[[str], Any]]:
                return lambda: rbr.TokenBucket(redis.Redis(host="127.0.0.1", port=port), prefix=prefix, lease=lease, **big).check

            item = parse("1000000/second")

            def peer(cls: Any) -> Callable[[], Callable[[str], Any]]:
                def make() -> Callable[[str], Any]:
                    limiter = cls(RedisStorage(f"redis://127.0.0.1:{port}"))
                    return lambda key: limiter.hit(item, key)
                return make

            print(f"bindings/python/bench/redis_bench.py: {SECONDS} s per row, {ROUNDS} rounds, median decisions/s")
            print("| threads | redis-benchmark EVALSHA | ratebound | share of ceiling | limits fixed window | limits sliding window counter | hot key | hot key, lease 100 | lease speed-up |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for threads in (1, 16, 64):
                rows: dict[str, list[float]] = {k: [] for k in ("ceil", "rb", "fixed", "sliding", "hot", "leased")}
                for _ in range(ROUNDS):
                    rows["ceil"].append(ceiling(port, threads, sha))
                    rows["rb"].append(rate(threads, ours(), False))
                    rows["fixed"].append(rate(threads, peer(FixedWindowRateLimiter), False))
                    rows["sliding"].append(rate(threads, peer(SlidingWindowCounterRateLimiter), False))
                    rows["hot"].append(rate(threads, ours("rb:hot:"), True))
                    rows["leased"].append(rate(threads, ours("rb:hotl:", 100), True))
                m = {k: statistics.median(v) for k, v in rows.items()}
                print(f"| {threads} | {m['ceil']:.0f} | {m['rb']:.0f} | {100 * m['rb'] / m['ceil']:.0f} % | {m['fixed']:.0f} | "
                      f"{m['sliding']:.0f} | {m['hot']:.0f} | {m['leased']:.0f} | {m['leased'] / m['hot']:.1f} |")
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
