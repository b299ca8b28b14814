"""What a limit shared by the host's processes costs per call, against an
in-process limiter and pyrate-limiter's multiprocess bucket (a manager
process and a lock), in one run: wall nanoseconds per call (the manager's
work happens in another process, so CPU time of this thread would flatter
it), median of 5 runs; then 4 forked processes on one SharedTokenBucket.

    target/venv/bin/python bindings/python/bench/shared_bench.py   # ci/bench runs it

Time: ~30 s.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import tempfile
import time

import ratebound as rb

RUNS = 5


def measure(name: str, fn, n: int) -> float:
    per_call = []
    for _ in range(RUNS):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        per_call.append((time.perf_counter_ns() - start) / n)
    median = statistics.median(per_call)
    print(f"| {name} | {median:,.0f} | {min(per_call):,.0f}–{max(per_call):,.0f} |")
    return median


def _hammer(path: str, n: int, out: "multiprocessing.Queue[float]") -> None:
    tb = rb.SharedTokenBucket(path, rate=1e9, burst=1_000_000_000)
    start = time.perf_counter_ns()
    for _ in range(n):
        tb.try_acquire()
    out.put((time.perf_counter_ns() - start) / n)


def main() -> None:
    d = tempfile.mkdtemp(prefix="rb-shm-bench-")
    big = dict(rate=1e9, burst=1_000_000_000)
    print(f"python {sys.version.split()[0]}, ratebound {rb.__version__}, {os.cpu_count()} CPUs")
    print()
    print("| call (admitted) | median ns per call | range of 5 runs |")
    print("| --- | ---: | ---: |")
    local = rb.TokenBucket(**big)
    shared = rb.SharedTokenBucket(os.path.join(d, "one.limit"), **big)
    a = measure("rb.TokenBucket.try_acquire() — in-process", local.try_acquire, 200_000)
    b = measure("rb.SharedTokenBucket.try_acquire() — shared memory", shared.try_acquire, 200_000)
    keys = [f"client-{i}" for i in range(1000)]
    klocal = rb.KeyedLimiter(**big)
    kshared = rb.SharedKeyedLimiter(os.path.join(d, "keyed.limit"), **big, max_keys=10_000)
    it = iter(range(10**9))
    measure("rb.KeyedLimiter.try_acquire(key), 1000 keys", lambda: klocal.try_acquire(keys[next(it) % 1000]), 200_000)
    measure("rb.SharedKeyedLimiter.try_acquire(key), 1000 keys", lambda: kshared.try_acquire(keys[next(it) % 1000]), 200_000)
    peer = None
    try:
        from pyrate_limiter import Duration, Limiter, MultiprocessBucket, Rate

        bucket = MultiprocessBucket.init([Rate(1_000_000_000, Duration.SECOND)])
        limiter = Limiter(bucket)
        peer = measure(
            "pyrate-limiter MultiprocessBucket try_acquire — manager process + lock",
            lambda: limiter.try_acquire("k", blocking=False),
            2_000,
        )
    except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
        print(f"pyrate-limiter multiprocess skipped: {exc!r}", file=sys.stderr)
    print()
    print(f"shared / in-process: {b / a:.2f}x")
    if peer is not None:
        print(f"pyrate multiprocess / shared: {peer / b:,.0f}x")
    ctx = multiprocessing.get_context("fork")
    out: "multiprocessing.Queue[float]" = ctx.Queue()
    path = os.path.join(d, "four.limit")
    procs = [ctx.Process(target=_hammer, args=(path, 500_000, out)) for _ in range(4)]
    for p in procs:
        p.start()
    each = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    print(f"4 processes on one SharedTokenBucket: {statistics.median(each):,.0f} ns per call in each "
          f"({os.cpu_count()} CPUs; per-process medians {', '.join(f'{x:,.0f}' for x in each)})")


if __name__ == "__main__":
    main()
