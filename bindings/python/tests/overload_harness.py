"""The overload scenario's parts, shared by tests/test_overload.py (its
behaviour, wide bounds) and bench/overload.py (its figures, run by
ci/bench): tests/overload_app.py (a handler that runs 4 requests at a time
for 20 ms: 200 requests/s) under uvicorn on 127.0.0.1, in a process of its
own, driven by an open-loop asyncio client — requests sent on a fixed
schedule whatever the answers, each on a keep-alive connection of its own
while it is out, a bounded total.

- Unloaded: 20 requests one after the other.
- No shedding (the contrast): 500 requests/s for 4 s.
- ``concurrency_limit="auto"``, no number given: the same load.
- Half the load background (and 1 in 20 requests critical).
- After the overload: half the capacity for 2 s.
- A slowdown: the handler's time doubles for 3 s of 8 s, then is 20 ms again.
- The service's capacity comes back 4x (16 at a time)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

HERE = Path(__file__).parent
RATE = 500  # requests/s offered
SECONDS = 4.0
WARMUP = 1.0
CAPACITY = 200  # 4 at a time, 20 ms each


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(mode: str) -> Iterator[int]:
    """overload_app under uvicorn in its own process (its own interpreter
    and GIL: the client's work does not slow the server's); the port."""
    port = free_port()
    env = {**os.environ, "RB_OVERLOAD": mode}
    cmd = [
        sys.executable, "-m", "uvicorn", "--factory", "overload_app:make_app", "--host", "127.0.0.1",
        "--port", str(port), "--log-level", "warning", "--no-access-log", "--timeout-keep-alive", "60",
        "--backlog", "4096", "--lifespan", "off",
    ]
    server = subprocess.Popen(cmd, cwd=HERE, env=env)
    try:
        deadline = time.monotonic() + 15
        while True:
            assert server.poll() is None, "the server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.05)
        yield port
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


@dataclass
class Result:
    """One request: when it was due (s from the run's start), its
    priority, its status (0: no answer by the end), its latency (s, from
    the moment it was written)."""

    due: float
    priority: str
    status: int = 0
    latency: float = 0.0
    lag: float = 0.0  # how late it was written


@dataclass
class Client:
    """Keep-alive connections to the server: an idle one is reused, else a
    new one is opened (each request out holds one)."""

    port: int
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(default_factory=list)
    opened: int = 0

    async def connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.idle:
            return self.idle.pop()
        self.opened += 1
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def get(self, path: str, priority: str = "normal") -> tuple[int, bytes, float]:
        """Status, body and latency (from the write to the whole answer)."""
        reader, writer = await self.connection()
        extra = b"" if priority == "normal" else b"x-priority: " + priority.encode() + b"\r\n"
        start = time.perf_counter()
        writer.write(b"GET " + path.encode() + b" HTTP/1.1\r\nhost: 127.0.0.1\r\n" + extra + b"\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await reader.readexactly(length)
        latency = time.perf_counter() - start
        self.idle.append((reader, writer))
        return status, body, latency

    async def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()

    async def warm(self, n: int) -> None:
        """Opens n connections ahead (a connection opened during the run
        costs the client a round trip and a few hundred µs)."""
        made = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", self.port) for _ in range(n)))
        self.opened += n
        self.idle.extend(made)


async def open_loop(client: Client, rate: float, seconds: float, priority_of: Any, wait: float) -> list[Result]:
    """``rate`` requests/s for ``seconds``, each sent when due whatever the
    others' fate; then up to ``wait`` s for the answers still out (those
    left have status 0 and their latency so far)."""
    n = int(rate * seconds)
    results = [Result(i / rate, priority_of(i)) for i in range(n)]
    tasks: list[asyncio.Task[None]] = []
    t0 = time.perf_counter()

    async def one(r: Result) -> None:
        r.lag = time.perf_counter() - t0 - r.due
        sent = time.perf_counter()
        try:
            r.status, _, r.latency = await client.get("/work", r.priority)
        except asyncio.CancelledError:
            r.latency = time.perf_counter() - sent
            raise

    i = 0
    while i < n:
        now = time.perf_counter() - t0
        while i < n and results[i].due <= now:
            tasks.append(asyncio.create_task(one(results[i])))
            i += 1
        if i < n:
            await asyncio.sleep(max(0.0, results[i].due - (time.perf_counter() - t0)))
    done, pending = await asyncio.wait(tasks, timeout=wait)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if pending:  # their connections are mid-answer: not reusable
        client.idle.clear()
    return results


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Summary:
    p50_ms: float
    p99_ms: float
    goodput: float  # 2xx/s among the requests due in the measured period
    ok_share: dict[str, float]  # by priority: 2xx / sent
    unanswered: int
    lag_p99_ms: float


def summarize(results: list[Result], start: float, end: float) -> Summary:
    measured = [r for r in results if start <= r.due < end]
    ok = [r for r in measured if 200 <= r.status < 300]
    # Unanswered requests are counted at their latency so far: a lower bound.
    latencies = [r.latency for r in ok] + [r.latency for r in measured if r.status == 0]
    shares = {}
    for p in ("normal", "background", "critical"):
        of = [r for r in measured if r.priority == p]
        if of:
            shares[p] = sum(200 <= r.status < 300 for r in of) / len(of)
    return Summary(
        p50_ms=quantile(latencies, 0.5) * 1000,
        p99_ms=quantile(latencies, 0.99) * 1000,
        goodput=len(ok) / (end - start),
        ok_share=shares,
        unanswered=sum(r.status == 0 for r in measured),
        lag_p99_ms=quantile([r.lag for r in measured], 0.99) * 1000,
    )


def show(name: str, s: Summary) -> str:
    shares = ", ".join(f"{p} {v:.0%}" for p, v in s.ok_share.items())
    return (f"{name:<22} p50 {s.p50_ms:7.1f} ms  p99 {s.p99_ms:7.1f} ms  goodput {s.goodput:5.0f}/s  "
            f"2xx: {shares}  unanswered {s.unanswered}  client lag p99 {s.lag_p99_ms:.1f} ms")


async def unloaded(client: Client) -> float:
    """The median of 20 sequential requests' latencies, after 5 to warm up."""
    for _ in range(5):
        await client.get("/work")
    latencies = []
    for _ in range(20):
        status, _, latency = await client.get("/work")
        assert status == 200
        latencies.append(latency)
    return quantile(latencies, 0.5)


async def gauge(client: Client) -> dict[str, Any]:
    status, body, _ = await client.get("/gauge")
    assert status == 200
    state: dict[str, Any] = json.loads(body)
    return state


@dataclass
class Runs:
    """Every scenario's numbers, from one run of the servers."""

    base_none: float  # unloaded latency (s), no middleware
    base: float  # unloaded latency (s), behind the middleware
    none: Summary
    auto: Summary
    mixed: Summary
    after_overload: dict[str, Any]  # the gauge as the overload ended
    calm: list[float]  # share served per 0.25 s, half the capacity after the overload
    slowed: Summary  # 500/s, from 1 s after the handler's time doubled to its end
    recovered: Summary  # 500/s, from 2 s after the handler's time was 20 ms again
    slowed_results: list[Result]  # the slowdown run's requests (40 ms from 1 s to 4 s)
    slowed_seen: list[tuple[int, float]]  # (limit, baseline ms) per 0.25 s in it
    slowed_gauge: dict[str, Any]  # the gauge at the slowed run's end
    grown: list[tuple[int, float]]  # (limit, share served) per 0.25 s once the capacity is 4x
    lines: list[str]


def quarter_shares(results: list[Result], seconds: float) -> list[float]:
    shares = []
    for k in range(int(seconds * 4)):
        window = [r for r in results if k * 0.25 <= r.due < (k + 1) * 0.25]
        shares.append(sum(r.status == 200 for r in window) / max(1, len(window)))
    return shares


def mix(i: int) -> str:
    """Half background; of the rest, 1 in 10 critical."""
    return "background" if i % 2 else ("critical" if i % 20 == 0 else "normal")


def run_all() -> Runs:
    """Every scenario, once; the numbers printed as they are known."""
    lines = [f"overload: {RATE} req/s for {SECONDS:.0f} s at a handler of {CAPACITY}/s "
             f"(4 at a time x 20 ms), open loop; measured after {WARMUP:.0f} s"]

    # The contrast: no shedding. Answers are waited for 1 s after the last
    # send; the server's queue outlives the run, its process goes with it.
    with serving("none") as port:

        async def none_run() -> tuple[float, Summary]:
            client = Client(port)
            base = await unloaded(client)
            await client.warm(400)
            results = await open_loop(client, RATE, SECONDS, lambda i: "normal", wait=1.0)
            await client.close()
            return base, summarize(results, WARMUP, SECONDS)

        base_none, none = asyncio.run(none_run())

    with serving("auto") as port:

        async def auto_runs() -> tuple[Any, ...]:
            client = Client(port)
            base = await unloaded(client)
            await client.warm(100)
            auto = summarize(await open_loop(client, RATE, SECONDS, lambda i: "normal", wait=2.0), WARMUP, SECONDS)
            after = await gauge(client)
            # The load falls to half the capacity.
            calm = quarter_shares(await open_loop(client, CAPACITY / 2, 2.0, lambda i: "normal", wait=2.0), 2.0)
            mixed = summarize(await open_loop(client, RATE, SECONDS, mix, wait=2.0), WARMUP, SECONDS)
            # A slowdown: 1 s into 8 s at 500/s the handler's time doubles
            # (40 ms: 100/s) for 3 s, then is 20 ms again.
            slowed_seen, slowed_results, _, _ = await asyncio.gather(
                watch(32), open_loop(client, RATE, 8.0, lambda i: "normal", wait=2.0),
                at(1.0, "/service/40"), at(4.0, "/service/20"),
            )
            slowed_gauge = await gauge(client)
            slowed = summarize(slowed_results, 2.0, 4.0)
            recovered = summarize(slowed_results, 6.0, 8.0)
            # The capacity comes back, 4x (16 at a time: 800/s), under the
            # same offered 500/s: the limit must climb (from where the
            # slowdown left it) to serve it.
            await client.get("/slots/16")
            seen, grown = await asyncio.gather(watch(16), open_loop(client, RATE, 4.0, lambda i: "normal", wait=2.0))
            await client.close()
            return (base, auto, mixed, after, calm, slowed, recovered, slowed_results, slowed_seen, slowed_gauge,
                    list(zip([limit for limit, _ in seen], quarter_shares(grown, 4.0))))

        async def watch(n: int) -> list[tuple[int, float]]:
            """The limit and the baseline (ms) every 0.25 s, n times."""
            watcher, seen = Client(port), []
            for _ in range(n):
                state = await gauge(watcher)
                seen.append((state["limit"], state["baseline_ms"] or 0.0))
                await asyncio.sleep(0.25)
            await watcher.close()
            return seen

        async def at(delay: float, path: str) -> None:
            await asyncio.sleep(delay)
            control = Client(port)
            await control.get(path)
            await control.close()

        (base, auto, mixed, after, calm, slowed, recovered, slowed_results, slowed_seen, slowed_gauge,
         grown) = asyncio.run(auto_runs())
    lines += [
        f"unloaded latency        {base_none * 1000:.1f} ms (median of 20, no middleware); "
        f"{base * 1000:.1f} ms behind the middleware; the bound 3x = {3 * base * 1000:.1f} ms",
        show("none", none) + " (unanswered: counted at 1 s+, a lower bound)",
        show("concurrency_limit=auto", auto),
        show("auto, half background", mixed),
        f"gauge as the overload ended: {after}",
        "the load falls to 100/s: share served per 0.25 s: " + " ".join(f"{v:.0%}" for v in calm),
        show("slowdown (40 ms), 1-3 s", slowed) + " (capacity now 100/s)",
        show("20 ms again, 2-4 s", recovered),
        "slowdown 1-4 s: limit per 0.25 s: " + " ".join(str(limit) for limit, _ in slowed_seen),
        "            baseline ms per 0.25 s: " + " ".join(f"{b:.0f}" for _, b in slowed_seen),
        f"gauge at the slowed run's end: {slowed_gauge}",
        "capacity 4x (800/s) under 500/s: limit per 0.25 s: " + " ".join(str(limit) for limit, _ in grown),
        "                                share served: " + " ".join(f"{v:.0%}" for _, v in grown),
    ]
    print("\n" + "\n".join(lines))
    return Runs(base_none, base, none, auto, mixed, after, calm, slowed, recovered, slowed_results, slowed_seen,
                slowed_gauge, grown, lines)


