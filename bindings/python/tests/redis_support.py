"""What the Redis test files share (test_redis.py, test_redis_inputs.py,
test_redis_native.py): the spec replay, the fault runs and their verdicts,
the cluster runs, the lease checks, and the bounds they hold to."""


from __future__ import annotations

import asyncio
import collections
import json
import pathlib
import threading
import time
import uuid
from typing import Any, Awaitable, Callable, Iterable

import pytest
import redis
import redis.asyncio
from redis.crc import key_slot

import ratebound as rb
import ratebound.redis as rbr

from redis_servers import HOST, Cluster, Server, free_port, fresh_key

SPEC = pathlib.Path(__file__).resolve().parents[3] / "spec" / "redis.json"
# How far past its deadline a call may return against a real server: a
# generous bound for a loaded 2-core machine, well below what it tells
# apart (a pause of CLIENT_PAUSE_MS, redis-py's retries: seconds). The
# deadline's exact instant is checked in virtual time where a driver's
# timers can be driven (Node: redis_deadline.test.js; Rust: tokio's paused
# time).
SLACK = 0.5
# The fault tests' CLIENT PAUSE: longer than any deadline + SLACK, so that a
# call that waited for Redis' answer instead of its deadline fails.
CLIENT_PAUSE_MS = 2000
# How long the fault tests wait for Redis' answers to come back after a
# restart or the pause's end. Only that they come back, on the same client,
# is checked here; the breaker's probe instant (its cool-down) is checked in
# virtual time (ratebound-redis engine/breaker.rs). A loop of 10 ms checks
# that ends at the first Redis answer: a generous bound costs nothing when
# the machine is quiet, and a breaker that never closes again (a probe that
# came back busy after CLIENT PAUSE held it open for good) still fails.
RECOVERY = 20.0
# What the tests of a dead or silent server tell apart: one deadline
# (50 ms) from redis-py's own seconds of retries (3.8 s) or its 5 s default
# timeout. A bound well between the two holds on a loaded 2-core machine
# (a call once took 0.19 s there in CI) and still fails on the retries.
NOT_RETRIES = 1.0


CLASSES: dict[str, Callable[..., Any]] = {
    "token_bucket": lambda client, c, **kw: rbr.TokenBucket(client, c["rate"], c.get("burst"), lease=c.get("lease", 0), **kw),
    "fixed_window": lambda client, c, **kw: rbr.FixedWindow(client, c["limit"], c["window"], lease=c.get("lease", 0), **kw),
    "sliding_window": lambda client, c, **kw: rbr.SlidingWindow(client, c["limit"], c["window"], **kw),
}


def fields(d: rb.Decision) -> dict:
    return {
        "allowed": d.allowed,
        "remaining": d.remaining,
        "retry_after_us": d.retry_after_ns // 1000,
        "reset_after_us": d.reset_after_ns // 1000,
        "source": d.source,
    }


def replay(target: Any, vector: dict[str, Any], failures: list[str], **kw: Any) -> int:
    """One vector's steps in order on a limiter for `target` (a client, or
    a URL with test_redis_native.py); how many."""
    # A fresh random key per vector; a generous deadline, so that a slow
    # moment of the machine cannot turn an answer into the fail policy's.
    prefix = fresh_key("spec") + ":"
    limiter = CLASSES[vector["config"]["algorithm"]](target, vector["config"], prefix=prefix, timeout=2.0, **kw)
    steps = 0
    for i, step in enumerate(vector["steps"]):
        if "config" in step:
            # A redeploy: the same key under new settings from here on.
            limiter.close()
            limiter = CLASSES[step["config"]["algorithm"]](target, step["config"], prefix=prefix, timeout=2.0, **kw)
        steps += 1
        got = fields(limiter._check_at(vector["id"], step["n"], step["at_us"]))
        for field, want in step["expect"].items():
            if got[field] != want:
                failures.append(f"{vector['id']} step {i}: {field} = {got[field]!r}, want {want!r}")
    limiter.close()
    return steps


def in_threads(instance: Callable[[int], None], count: int) -> None:
    """Runs instance(0) … instance(count - 1) at once, a thread each, and
    fails with what any of them raised."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            instance(i)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


async def gather_then_close(runs: Iterable[Awaitable[None]], limiters: list[Any], clients: list[Any]) -> float:
    """Awaits the `runs` together, then closes the `limiters` and their
    `clients`; when the runs had ended (``time.monotonic()``)."""
    await asyncio.gather(*runs)
    ended = time.monotonic()
    for lim, c in zip(limiters, clients):
        await lim.aclose()
        await c.aclose()
    return ended


# ----------------------------------------------------------------- faults


class Timed:
    """Runs checks, recording each one's duration, source and answer."""

    def __init__(self, limiter: Any, key: str) -> None:
        self.limiter = limiter
        self.key = key
        self.longest = 0.0
        self.log: list[tuple[str, bool]] = []

    def check(self) -> rb.Decision:
        t = time.monotonic()
        d = self.limiter.check(self.key)
        self.longest = max(self.longest, time.monotonic() - t)
        self.log.append((d.source, d.allowed))
        return d

    def until(self, source: str, within: float) -> list[rb.Decision]:
        """Checks every 10 ms until one answers from `source` (at most `within` s)."""
        out = []
        stop = time.monotonic() + within
        while time.monotonic() < stop:
            d = self.check()
            out.append(d)
            if d.source == source:
                return out
            time.sleep(0.01)
        raise AssertionError(f"no answer from {source} within {within} s: {[x.source for x in out][-10:]}")

    def run(self, seconds: float) -> list[rb.Decision]:
        out = []
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            out.append(self.check())
            time.sleep(0.01)
        return out


FAIL_SOURCE = {"open": "fail_open", "closed": "fail_closed", "local": "local"}


def assert_policy(policy: str, answers: list[rb.Decision], elapsed: float) -> None:
    # A call whose deadline timer this client ran late (a loaded machine:
    # `plan::ran_late`) is the client's own overload: refused as busy,
    # never admitted. Every other answer while Redis is down is the fail
    # policy's, and there is at least one.
    busy = [d for d in answers if d.source == "busy"]
    assert not any(d.allowed for d in busy), busy
    failed = [d for d in answers if d.source not in ("redis", "busy")]
    assert failed, "Redis was down but every answer came from it (or was busy)"
    assert {d.source for d in failed} == {FAIL_SOURCE[policy]}, {d.source for d in failed}
    allowed = sum(d.allowed for d in failed)
    if policy == "open":
        assert allowed == len(failed)
    elif policy == "closed":
        assert allowed == 0
        assert all(d.retry_after == pytest.approx(0.2) for d in failed)
    else:
        # The local share: 5/s, burst round(1000 × 5/1000) = 5.
        assert 1 <= allowed <= 5 + 5 * elapsed + 1, (allowed, elapsed)
        assert allowed < len(failed)


def fault_limiter(target: Any, policy: str, timeout: float) -> rbr.TokenBucket:
    """The fault tests' limiter: far below its limit, `policy` (a local
    share of 5/s for "local") while Redis fails."""
    return rbr.TokenBucket(
        target,
        rate=1000,
        burst=1000,
        on_error=policy,
        local_rate=5 if policy == "local" else None,
        timeout=timeout,
        breaker_cooldown=0.2,
    )


def kill_pause_flush(own_server: Server, t: Timed, policy: str, timeout: float) -> None:
    """The fault run of the sync limiters' fault tests (redis-py and the
    native connection): the fail policy answers within the deadline while
    the server is killed or paused, the breaker's probe finds it back after
    a restart on the same port (no new client), SCRIPT FLUSH is transparent."""
    # Killed mid-run, restarted on the same port.
    own_server.kill()
    start = time.monotonic()
    down = t.run(0.5)
    assert_policy(policy, down, time.monotonic() - start)
    assert t.limiter.breaker_open
    own_server.start()
    t.until("redis", within=RECOVERY)  # the breaker's probe finds it back: no new client
    assert all(d.source == "redis" for d in t.run(0.1))

    # Slow: every client paused for 500 ms.
    own_server.admin("CLIENT", "PAUSE", CLIENT_PAUSE_MS, "ALL")
    start = time.monotonic()
    slow = t.run(0.4)
    assert_policy(policy, slow, time.monotonic() - start)
    t.until("redis", within=RECOVERY)

    # SCRIPT FLUSH mid-run: transparent (EVALSHA fails, EVAL reloads).
    before = len(t.log)
    own_server.admin("SCRIPT", "FLUSH")
    assert all(d.source == "redis" and d.allowed for d in t.run(0.1))
    own_server.admin("SCRIPT", "FLUSH")
    assert all(d.source == "redis" and d.allowed for d in t.run(0.1))
    assert len(t.log) > before

    assert t.longest <= timeout + SLACK, f"a call took {t.longest * 1000:.1f} ms (deadline {timeout * 1000:.0f} ms)"


class AsyncTimed:
    """Timed's asyncio twin: checks every 10 ms, recording the longest call."""

    def __init__(self, limiter: Any, key: str) -> None:
        self.limiter = limiter
        self.key = key
        self.longest = 0.0

    async def run(self, seconds: float) -> list[rb.Decision]:
        out = []
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            t = time.monotonic()
            out.append(await self.limiter.check(self.key))
            self.longest = max(self.longest, time.monotonic() - t)
            await asyncio.sleep(0.01)
        return out

    async def back(self, within: float) -> None:
        stop = time.monotonic() + within
        while time.monotonic() < stop:
            if (await self.run(0.01))[-1].source == "redis":
                return
        raise AssertionError("no recovery")


async def async_kill_and_pause(own_server: Server, t: AsyncTimed, timeout: float) -> None:
    """The fault run of the asyncio fault tests (redis-py and the native
    connection), on_error="closed": killed, restarted, paused, SCRIPT FLUSH."""
    own_server.kill()
    assert_policy("closed", await t.run(0.4), 0.4)
    own_server.start()
    await t.back(RECOVERY)
    own_server.admin("CLIENT", "PAUSE", CLIENT_PAUSE_MS, "ALL")
    assert_policy("closed", await t.run(0.4), 0.4)
    await t.back(RECOVERY)
    own_server.admin("SCRIPT", "FLUSH")
    assert all(d.source == "redis" for d in await t.run(0.1))
    assert t.longest <= timeout + SLACK, f"a call took {t.longest * 1000:.1f} ms"


# ---------------------------------------------------------------- cluster


def keys_per_master(cluster: Cluster, prefix: str = "rb:tb:") -> dict[int, str]:
    """One key for each master (by the slot of the token bucket's Redis key,
    prefix + "tb:" + key)."""
    keys: dict[int, str] = {}
    base = uuid.uuid4().hex
    for i in range(10_000):
        k = f"{base}-{i}"
        owner = cluster.owner(key_slot(f"{prefix}{k}".encode())) if len(keys) < 3 else None
        if owner is not None and owner not in keys:
            keys[owner] = k
        if len(keys) == 3:
            return keys
    raise AssertionError("no key for every master")


def holds(node: Server, key: str) -> bool:
    """Whether `node` stores `key` (SCAN: no redirection)."""
    cursor = 0
    for _ in range(1000):
        cursor, found = node.admin("SCAN", cursor, "MATCH", key, "COUNT", 1000)
        if found:
            return True
        if int(cursor) == 0:
            return False
    raise AssertionError("SCAN did not finish")


class ClusterRun:
    """`instances` limiters checking one key on each master (`keys`, from
    keys_per_master) over and over for `run_for` s from a common start."""

    def __init__(self, cluster: Cluster, keys: dict[int, str], instances: int, run_for: float) -> None:
        self.cluster = cluster
        self.keys = keys
        self.run_for = run_for
        self.barrier = threading.Barrier(instances)
        self.admitted: list[dict[str, int]] = [{k: 0 for k in keys.values()} for _ in range(instances)]
        self.sources: collections.Counter[str] = collections.Counter()
        self.starts = [0.0] * instances
        self.sent = [0.0] * instances
        self.ends = [0.0] * instances
        self.checks = [0] * instances

    def instance(self, i: int, limiter: Any, pause: float = 0.0) -> None:
        """Instance `i`'s run (in its own thread), `pause` s between rounds."""
        self.barrier.wait()
        self.starts[i] = time.monotonic()
        while time.monotonic() < self.starts[i] + self.run_for:
            for k in self.keys.values():
                self.sent[i] = time.monotonic()
                d = limiter.check(k)
                self.checks[i] += 1
                self.admitted[i][k] += d.allowed
                self.sources[d.source or "?"] += 1
            if pause:
                time.sleep(pause)
        self.ends[i] = time.monotonic()

    def assert_bound_per_key(self) -> None:
        """Each key's bound holds (and 90 % of what was earned by the last
        request sent is admitted), and each key lives on its own master."""
        elapsed = max(self.ends) - min(self.starts)
        bound = 10 + 10 * elapsed + 1
        earned = 10 + 10 * (max(self.sent) - min(self.starts))
        for port, k in self.keys.items():
            total = sum(a[k] for a in self.admitted)
            assert 0.9 * earned <= total <= bound, f"key on :{port}: {total} admitted, bound {bound:.1f}, answers {dict(self.sources)}"
            # The key lives on its own master, and only there.
            assert [n.port for n in self.cluster.nodes if holds(n, f"rb:tb:{k}")] == [port], (k, port)


# ---------------------------------------------------------------- leasing


def round_trips(server: Server) -> int:
    """EVALSHA calls since the last CONFIG RESETSTAT."""
    stats = server.admin("INFO", "commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def assert_close_returns_leased_tokens(target: Any, key: str) -> None:
    """A lease of 10 at burst 20 (`target`: a client, or a URL with
    test_redis_native.py): two checks, the second the lease's, leave 8
    leased; close gives them back, one call."""
    lim = rbr.TokenBucket(target, rate=1, burst=20, lease=10)
    d = lim.check(key)
    assert (d.source, d.remaining) == ("redis", 9)
    assert lim.check(key).source == "lease"
    assert lim.leased() == 8
    assert lim.close() == 1
    assert lim.leased() == 0
    other = rbr.TokenBucket(target, rate=1, burst=20)
    # 20 - 2 spent = 18 (one more may have dripped in meanwhile).
    got = sum(other.check(key).allowed for _ in range(25))
    assert got in (18, 19), got
    other.close()


def closed_port() -> int:
    return free_port()


# ------------------------------------------------ the native connection


def url(server: Server, db: int = 0) -> str:
    return f"redis://{HOST}:{server.port}/{db}"


def script_calls(server: Server) -> int:
    stats = server.admin("INFO", "commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))
