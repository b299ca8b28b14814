"""Per-call cost of ratebound's Python API against `limits`, pyrate-limiter,
`token-bucket`, a pure-Python locked bucket and the floor (an empty Python
method call), all in one process and one run; then bytes per key of the
keyed limiters. CPU nanoseconds per call (thread CPU time, so another
process on the machine costs us little), median of 7 runs of each row.

    target/venv/bin/python bindings/python/bench/bench.py   # ci/bench runs it

Time: ~1 min. Peers that fail to import are reported and skipped.
"""

from __future__ import annotations

import gc
import statistics
import sys
import threading
import time

import ratebound as rb

RUNS = 7
N = 200_000
KEYS = 100_000
rows: list = []


def measure(name: str, fn, n: int = N) -> float:
    """Median CPU ns per call of fn() over RUNS runs of n calls each."""
    per_call = []
    for _ in range(RUNS):
        gc.disable()
        start = time.thread_time_ns()
        for _ in range(n):
            fn()
        per_call.append((time.thread_time_ns() - start) / n)
        gc.enable()
    median = statistics.median(per_call)
    rows.append((name, median, min(per_call), max(per_call)))
    return median


def measure_keyed(name: str, fn, keys: list) -> float:
    per_call = []
    for _ in range(RUNS):
        gc.disable()
        start = time.thread_time_ns()
        for k in keys:
            fn(k)
        per_call.append((time.thread_time_ns() - start) / len(keys))
        gc.enable()
    median = statistics.median(per_call)
    rows.append((name, median, min(per_call), max(per_call)))
    return median


class Empty:
    def call(self) -> None:
        pass


class LockedBucket:
    """The usual pure-Python token bucket: a lock, float tokens, monotonic."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.last = burst, time.monotonic()
        self.lock = threading.Lock()

    def try_acquire(self) -> bool:
        now = time.monotonic()
        with self.lock:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= 1:
                self.tokens -= 1
                return True
            return False


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def main() -> None:
    e = Empty()
    floor = measure("floor: empty Python method call", e.call)
    measure("floor: time.monotonic()", time.monotonic)

    huge = 10**8
    tb = rb.TokenBucket(huge, 10**9)
    measure("ratebound TokenBucket.try_acquire() allowed", tb.try_acquire)
    measure("ratebound TokenBucket.check() allowed", tb.check)
    spent = rb.TokenBucket(1e-6, 1)
    spent.try_acquire()
    measure("ratebound TokenBucket.try_acquire() denied", spent.try_acquire)
    measure("ratebound TokenBucket.check() denied", spent.check)
    fw = rb.FixedWindow(10**8, 3600)
    measure("ratebound FixedWindow.check() allowed", fw.check)
    sw = rb.SlidingWindow(10**6, 200)  # 7 runs × 100 000 calls stay under the limit
    measure("ratebound SlidingWindow.check() allowed", sw.check, 100_000)

    lb = LockedBucket(huge, 10**9)
    measure("pure-Python locked bucket allowed", lb.try_acquire)
    lbd = LockedBucket(1e-6, 1)
    lbd.try_acquire()
    measure("pure-Python locked bucket denied", lbd.try_acquire)

    peers: dict = {}
    try:
        from limits import parse
        from limits.storage import MemoryStorage
        from limits.strategies import (
            FixedWindowRateLimiter,
            MovingWindowRateLimiter,
            SlidingWindowCounterRateLimiter,
        )

        for label, cls in (
            ("fixed window", FixedWindowRateLimiter),
            ("moving window", MovingWindowRateLimiter),
            ("sliding counter", SlidingWindowCounterRateLimiter),
        ):
            lim = cls(MemoryStorage())
            allowed = parse("1000000000/hour")
            peers[f"limits {label} allowed"] = measure(
                f"limits {label} hit() allowed", lambda: lim.hit(allowed, "k"), 20_000
            )
            one = parse("1/hour")
            lim.hit(one, "d")
            peers[f"limits {label} denied"] = measure(
                f"limits {label} hit() denied", lambda: lim.hit(one, "d"), 20_000
            )
    except Exception as exc:  # noqa: BLE001
        print(f"limits skipped: {exc!r}", file=sys.stderr)
    try:
        from pyrate_limiter import Duration, Limiter, Rate

        big = Limiter(Rate(10**9, Duration.HOUR))
        peers["pyrate allowed"] = measure(
            "pyrate-limiter try_acquire() allowed", lambda: big.try_acquire("k", blocking=False), 20_000
        )
        small = Limiter(Rate(1, Duration.HOUR))
        small.try_acquire("d", blocking=False)
        peers["pyrate denied"] = measure(
            "pyrate-limiter try_acquire() denied", lambda: small.try_acquire("d", blocking=False), 20_000
        )
    except Exception as exc:  # noqa: BLE001
        print(f"pyrate-limiter skipped: {exc!r}", file=sys.stderr)
    try:
        import token_bucket

        tbl = token_bucket.Limiter(huge, 10**9, token_bucket.MemoryStorage())
        measure("token-bucket consume() allowed", lambda: tbl.consume(b"k"))
        tbd = token_bucket.Limiter(1e-6, 1, token_bucket.MemoryStorage())
        tbd.consume(b"d")
        measure("token-bucket consume() denied", lambda: tbd.consume(b"d"))
    except Exception as exc:  # noqa: BLE001
        print(f"token-bucket skipped: {exc!r}", file=sys.stderr)

    keys = [f"user-{i}" for i in range(KEYS)]
    before = rss_bytes()
    k = rb.KeyedLimiter(huge, 10**9, max_keys=1_000_000)
    for key in keys:
        k.try_acquire(key)
    keyed_bytes = (rss_bytes() - before) / KEYS
    measure_keyed("ratebound KeyedLimiter.check(key) 100k keys", k.check, keys)
    measure_keyed("ratebound KeyedLimiter.try_acquire(key) 100k keys", k.try_acquire, keys)
    try:
        from limits import parse
        from limits.storage import MemoryStorage
        from limits.strategies import FixedWindowRateLimiter

        storage = MemoryStorage()
        fl = FixedWindowRateLimiter(storage)
        item = parse("1000000000/hour")
        before = rss_bytes()
        for key in keys:
            fl.hit(item, key)
        limits_bytes = (rss_bytes() - before) / KEYS
        measure_keyed("limits fixed window hit() 100k keys", lambda key: fl.hit(item, key), keys[:20_000])
    except Exception as exc:  # noqa: BLE001
        limits_bytes = float("nan")
        print(f"limits keyed skipped: {exc!r}", file=sys.stderr)

    print(f"python {sys.version.split()[0]}, ratebound {rb.__version__}, clock {rb._ratebound.clock_source()}")
    print()
    print("| row | median ns/call | min | max | × floor |")
    print("|---|---:|---:|---:|---:|")
    for name, median, lo, hi in rows:
        print(f"| {name} | {median:.0f} | {lo:.0f} | {hi:.0f} | {median / floor:.1f} |")
    print()
    print(f"| bytes per key (RSS, {KEYS} keys) | |")
    print("|---|---:|")
    print(f"| ratebound KeyedLimiter (key stored as a 16-byte fingerprint) | {keyed_bytes:.0f} |")
    print(f"| limits MemoryStorage fixed window | {limits_bytes:.0f} |")
    by_name = {name: median for name, median, _, _ in rows}
    check_allowed = by_name["ratebound TokenBucket.check() allowed"]
    check_denied = by_name["ratebound TokenBucket.check() denied"]
    print()
    print("goals (same run):")
    print(f"- try_acquire() ≤ 2.5× floor: {by_name['ratebound TokenBucket.try_acquire() allowed'] / floor:.2f}×")
    print(f"- check() ≤ 120 ns: {check_allowed:.0f} allowed / {check_denied:.0f} denied")
    try_allowed = by_name["ratebound TokenBucket.try_acquire() allowed"]
    try_denied = by_name["ratebound TokenBucket.try_acquire() denied"]
    for peer, cost in peers.items():
        denied = peer.endswith("denied")
        ours = check_denied if denied else check_allowed
        ours_bool = try_denied if denied else try_allowed
        print(
            f"- {peer}: ratebound check() is {cost / ours:.0f}× faster, "
            f"try_acquire() (a bool, like the peer's answer) {cost / ours_bool:.0f}×"
        )
    print(f"- keyed 100k keys ≤ 200 ns: {by_name['ratebound KeyedLimiter.check(key) 100k keys']:.0f} ns; ≤ 120 B/key: {keyed_bytes:.0f}")


if __name__ == "__main__":
    main()
