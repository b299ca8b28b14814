"""Global limits in Redis (ratebound.redis) against real Redis servers that
these tests start themselves: `redis-server` on free 127.0.0.1 ports with
persistence off, in a temporary directory, stopped at the end; and a
3-master Redis Cluster made with `redis-cli --cluster create`.

Without redis-server the tests fail (ci/test installs it) instead of
skipping: a global limit untested against Redis is not tested."""

from __future__ import annotations

import asyncio
import collections
import json
import math
import pathlib
import select
import socket
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
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient  # warns (httpx) at import, outside the tests

from redis_servers import HOST, Cluster, Server, free_port, fresh_key

# Any warning (an unclosed socket or client, a deprecation) fails these tests.
pytestmark = pytest.mark.filterwarnings("error")

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
# What the tests of a dead or silent server tell apart: one deadline
# (50 ms) from redis-py's own seconds of retries (3.8 s) or its 5 s default
# timeout. A bound well between the two holds on a loaded 2-core machine
# (a call once took 0.19 s there in CI) and still fails on the retries.
NOT_RETRIES = 1.0


# ------------------------------------------------------------ test vectors

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


def test_spec_vectors_replay_against_redis(server: Server) -> None:
    vectors = json.loads(SPEC.read_text())["vectors"]
    assert len(vectors) >= 12
    failures: list[str] = []
    client = server.client()
    steps = sum(replay(client, v, failures) for v in vectors)
    client.close()
    assert not failures, "\n".join(failures)
    assert steps == sum(len(v["steps"]) for v in vectors) and steps >= 50, steps


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


# -------------------------------------------------------------- incident


def test_incident_fifty_instances_share_one_limit(server: Server) -> None:
    """The incident: fifty instances, each with its own client, call a
    partner that allows 10/s with bursts of 20. Sharing one limit in Redis
    they stay within 20 + 10 × elapsed; fifty local buckets (the contrast,
    run alongside) admit about fifty times that."""
    key = fresh_key("partner-api")
    instances = 50
    run_for = 3.0
    barrier = threading.Barrier(instances)
    admitted = [0] * instances
    local_admitted = [0] * instances
    sources: list[dict[str, int]] = [{} for _ in range(instances)]
    starts = [0.0] * instances
    ends = [0.0] * instances
    # Each instance's last request sent and first answer.
    sent = [0.0] * instances
    answered = [math.inf] * instances

    def instance(i: int) -> None:
        client = server.client()
        # Fail closed with a generous deadline: a failure must not be
        # able to admit, and 50 threads on 2 cores are slow to wake.
        limiter = rbr.TokenBucket(client, rate=10, burst=20, on_error="closed", timeout=0.5)
        local = rb.TokenBucket(10, 20)
        barrier.wait()
        starts[i] = time.monotonic()
        stop = starts[i] + run_for
        while time.monotonic() < stop:
            sent[i] = time.monotonic()
            d = limiter.check(key)
            answered[i] = min(answered[i], time.monotonic())
            admitted[i] += d.allowed
            sources[i][d.source or "?"] = sources[i].get(d.source or "?", 0) + 1
            local_admitted[i] += local.try_acquire()
            time.sleep(0.005)
        ends[i] = time.monotonic()
        limiter.close()
        client.close()

    in_threads(instance, instances)
    elapsed = max(ends) - min(starts)
    bound = 20 + 10 * elapsed + 1
    total = sum(admitted)
    local_total = sum(local_admitted)
    failed = sum(s.get("fail_closed", 0) for s in sources)
    assert total <= bound, f"{total} admitted in {elapsed:.2f} s, bound {bound:.1f}"
    # At least 90 % of what was earned from the first answer (the first call
    # reached Redis before it: 50 threads connecting may start the run late)
    # to the last request sent.
    earned = 20 + 10 * (max(sent) - min(answered))
    assert total >= 0.9 * earned, f"{total} admitted, earned {earned:.1f}, bound {bound:.1f} ({failed} failures)"
    # The contrast: fifty local buckets are fifty limits.
    assert local_total > 10 * bound, f"local buckets admitted {local_total}, bound {bound:.1f}"
    print(f"\nincident: Redis admitted {total} in {elapsed:.2f} s (bound {bound:.1f}); 50 local buckets {local_total}")


async def gather_then_close(runs: Iterable[Awaitable[None]], limiters: list[Any], clients: list[Any]) -> float:
    """Awaits the `runs` together, then closes the `limiters` and their
    `clients`; when the runs had ended (``time.monotonic()``)."""
    await asyncio.gather(*runs)
    ended = time.monotonic()
    for lim, c in zip(limiters, clients):
        await lim.aclose()
        await c.aclose()
    return ended


async def test_incident_asyncio_fifty_tasks(server: Server) -> None:
    key = fresh_key("partner-api-async")
    run_for = 2.0
    clients = [redis.asyncio.Redis(host=HOST, port=server.port) for _ in range(50)]
    limiters = [rbr.AsyncTokenBucket(c, rate=10, burst=20, on_error="closed", timeout=0.5) for c in clients]
    admitted = [0] * 50
    start = time.monotonic()
    stop = start + run_for

    sources: collections.Counter[str] = collections.Counter()

    last_sent = start
    first_answer = math.inf

    async def instance(i: int) -> None:
        nonlocal last_sent, first_answer
        while time.monotonic() < stop:
            last_sent = max(last_sent, time.monotonic())
            d = await limiters[i].check(key)
            first_answer = min(first_answer, time.monotonic())
            admitted[i] += d.allowed
            sources[d.source or "?"] += 1
            await asyncio.sleep(0.005)

    elapsed = await gather_then_close((instance(i) for i in range(50)), limiters, clients) - start
    # Upper: all the run could earn (+1 for a token falling due during the
    # last call); lower: 90 % of what was earned from the first answer (the
    # first call reached Redis before it: 50 connections made on a busy
    # loop may start the run late) to the last request sent.
    bound = 20 + 10 * elapsed + 1
    earned = 20 + 10 * (last_sent - first_answer)
    total = sum(admitted)
    assert 0.9 * earned <= total <= bound, f"{total} admitted in {elapsed:.2f} s, bound {bound:.1f}, answers {dict(sources)}"
    print(f"\nincident, asyncio: {total} admitted in {elapsed:.2f} s (bound {bound:.1f})")


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
    t.until("redis", within=3.0)  # the breaker's probe finds it back: no new client
    assert all(d.source == "redis" for d in t.run(0.1))

    # Slow: every client paused for 500 ms.
    own_server.admin("CLIENT", "PAUSE", CLIENT_PAUSE_MS, "ALL")
    start = time.monotonic()
    slow = t.run(0.4)
    assert_policy(policy, slow, time.monotonic() - start)
    t.until("redis", within=5.0)

    # SCRIPT FLUSH mid-run: transparent (EVALSHA fails, EVAL reloads).
    before = len(t.log)
    own_server.admin("SCRIPT", "FLUSH")
    assert all(d.source == "redis" and d.allowed for d in t.run(0.1))
    own_server.admin("SCRIPT", "FLUSH")
    assert all(d.source == "redis" and d.allowed for d in t.run(0.1))
    assert len(t.log) > before

    assert t.longest <= timeout + SLACK, f"a call took {t.longest * 1000:.1f} ms (deadline {timeout * 1000:.0f} ms)"


@pytest.mark.parametrize("policy", ["open", "closed", "local"])
def test_faults_kill_pause_flush(own_server: Server, policy: str) -> None:
    timeout = 0.05
    client = own_server.client()
    limiter = fault_limiter(client, policy, timeout)
    t = Timed(limiter, fresh_key("faults"))
    assert all(d.source == "redis" and d.allowed for d in t.run(0.1))
    kill_pause_flush(own_server, t, policy, timeout)
    print(f"\nfaults, on_error={policy}: longest call {t.longest * 1000:.1f} ms (deadline {timeout * 1000:.0f} ms)")
    limiter.close()
    client.close()


def test_packed_commands_are_what_redis_py_would_send() -> None:
    """The engine packs EVALSHA (and EVAL, for NOSCRIPT) itself and the
    redis-py path writes them as they are: byte for byte what redis-py packs
    for the same arguments, for every script, kind of call and kind of key."""
    conn = redis.Connection()
    engines = [
        rb._ratebound._RedisEngine("token_bucket", rate=10, burst=20),
        rb._ratebound._RedisEngine("fixed_window", limit=5, window=1, prefix="p:"),
        rb._ratebound._RedisEngine("sliding_window", limit=5, window=1),
    ]
    calls = []
    for e in engines:
        for key in ("alice", b"\x00\xff\r\n*$", 12345, "\u00fcn\u00efc\u00f6de"):
            c = e.begin(key, 3)
            assert isinstance(c, rb._ratebound._RedisCall)
            calls += [c, c.at(1_700_000_000_000_000)]
    calls.append(engines[0].begin_pause("bob", 1.5))
    reserve = engines[0].begin_reserve("carol", 2)
    assert isinstance(reserve, rb._ratebound._RedisCall)
    calls += [reserve, engines[0].give_back(reserve, 1_700_000_000_250_000)]
    for c in calls:
        want = b"".join(conn.pack_command("EVALSHA", c.sha, 1, c.key, *c.args))
        assert c.command == want, (c, c.command, want)
        assert c.eval_command == b"".join(conn.pack_command("EVAL", c.text, 1, c.key, *c.args)), c


def test_an_idle_connection_the_server_closed_is_replaced(own_server: Server) -> None:
    """A connection the server closed while it sat idle (CLIENT KILL, a
    restart) is found out before the next call uses it, as redis-py's pool
    finds it out: that call reconnects and Redis answers it."""
    client = own_server.client()
    lim = rbr.TokenBucket(client, rate=1000, burst=1000, on_error="closed", timeout=0.5, breaker_threshold=1)
    key = fresh_key("idle")
    assert lim.check(key).source == "redis"
    assert own_server.admin("CLIENT", "KILL", "TYPE", "normal") >= 1
    time.sleep(0.05)  # the server's FIN arrives
    assert lim.check(key).source == "redis"
    own_server.kill()
    own_server.start()
    assert lim.check(key).source == "redis"
    lim.close()
    client.close()


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
    await t.back(3.0)
    own_server.admin("CLIENT", "PAUSE", CLIENT_PAUSE_MS, "ALL")
    assert_policy("closed", await t.run(0.4), 0.4)
    await t.back(5.0)
    own_server.admin("SCRIPT", "FLUSH")
    assert all(d.source == "redis" for d in await t.run(0.1))
    assert t.longest <= timeout + SLACK, f"a call took {t.longest * 1000:.1f} ms"


async def test_faults_asyncio_kill_and_pause(own_server: Server) -> None:
    timeout = 0.05
    client = redis.asyncio.Redis(host=HOST, port=own_server.port)
    limiter = rbr.AsyncTokenBucket(client, rate=1000, burst=1000, on_error="closed", timeout=timeout, breaker_cooldown=0.2)
    t = AsyncTimed(limiter, fresh_key("faults-async"))
    assert all(d.source == "redis" for d in await t.run(0.1))
    await async_kill_and_pause(own_server, t, timeout)
    print(f"\nfaults, asyncio: longest call {t.longest * 1000:.1f} ms (deadline {timeout * 1000:.0f} ms)")
    await limiter.aclose()
    await client.aclose()


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


def test_cluster_bound_holds_per_key(cluster: Cluster) -> None:
    keys = keys_per_master(cluster)
    assert len(set(keys)) == 3
    instances, run_for = 8, 2.0
    run = ClusterRun(cluster, keys, instances, run_for)

    def instance(i: int) -> None:
        client = cluster.client()
        limiter = rbr.TokenBucket(client, rate=10, burst=10, on_error="closed", timeout=0.5)
        run.instance(i, limiter, pause=0.005)
        limiter.close()
        client.close()

    in_threads(instance, instances)
    run.assert_bound_per_key()


async def test_cluster_asyncio(cluster: Cluster) -> None:
    keys = list(keys_per_master(cluster).values())
    clients = [cluster.async_client() for _ in range(5)]
    limiters = [rbr.AsyncTokenBucket(c, rate=10, burst=10, on_error="closed", timeout=0.5) for c in clients]
    # `async with` would do the same: each limiter's cluster client reads the
    # topology and command table (~0.1 s each) before the clock starts.
    for lim in limiters:
        await lim.__aenter__()
    admitted = {k: 0 for k in keys}
    sources: collections.Counter[str] = collections.Counter()
    start = time.monotonic()

    last_sent = start

    async def instance(lim: rbr.AsyncTokenBucket) -> None:
        nonlocal last_sent
        while time.monotonic() < start + 1.5:
            for k in keys:
                last_sent = max(last_sent, time.monotonic())
                d = await lim.check(k)
                admitted[k] += d.allowed
                sources[d.source or "?"] += 1
            await asyncio.sleep(0.005)

    elapsed = await gather_then_close((instance(lim) for lim in limiters), limiters, clients) - start
    # Upper: everything the run could have earned (+1 for a token falling due
    # during the last call). Lower: 90 % of what had been earned by the last
    # request sent (the wall clock runs on while the last answers come back).
    bound = 10 + 10 * elapsed + 1
    earned = 10 + 10 * (last_sent - start)
    for k, total in admitted.items():
        assert 0.9 * earned <= total <= bound, f"{k}: {total} admitted, earned {earned:.1f}, bound {bound:.1f}, answers {dict(sources)}"


# ---------------------------------------------------------------- leasing


def round_trips(server: Server) -> int:
    """EVALSHA calls since the last CONFIG RESETSTAT."""
    stats = server.admin("INFO", "commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.mark.parametrize("k", [1, 10, 100])
def test_leasing_cuts_round_trips_and_keeps_the_bound(server: Server, k: int) -> None:
    threads_n = 4
    # Round trips: 4 instances take 250 each, well within the limit.
    key = fresh_key("lease-trips")
    client = server.client()
    warm = rbr.TokenBucket(client, rate=1, burst=1)
    warm.check(fresh_key("warm"))  # the script is loaded: one EVALSHA per call from here
    warm.close()
    server.admin("CONFIG", "RESETSTAT")
    allowed = [0] * threads_n

    def spend(i: int) -> None:
        lim = rbr.TokenBucket(client, rate=1000, burst=2000, lease=k, on_error="closed", timeout=0.5)
        for _ in range(250):
            allowed[i] += lim.check(key).allowed
        lim._runner.close()  # no drain: the Return calls would count as round trips

    threads = [threading.Thread(target=spend, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    trips = round_trips(server)
    assert sum(allowed) == 1000
    # Each instance asks Redis once per k tokens: ceil(250 / k) round trips.
    want = threads_n * -(-250 // k)
    assert want <= trips <= want + 2, (k, trips, want)
    print(f"\nlease={k}: 1000 admitted in {trips} round trips")

    # The bound under contention: 8 instances, each leasing k.
    key = fresh_key("lease-bound")
    instances, run_for = 8, 1.0
    admitted = [0] * instances
    starts = [0.0] * instances
    ends = [0.0] * instances
    barrier = threading.Barrier(instances)

    def hammer(i: int) -> None:
        lim = rbr.TokenBucket(client, rate=20, burst=20, lease=k, on_error="closed", timeout=0.5)
        barrier.wait()
        starts[i] = time.monotonic()
        while time.monotonic() < starts[i] + run_for:
            admitted[i] += lim.check(key).allowed
            time.sleep(0.002)
        ends[i] = time.monotonic()
        lim.close()

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(instances)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    elapsed = max(ends) - min(starts)
    bound = 20 + 20 * elapsed + 1
    assert 0 < sum(admitted) <= bound, (k, sum(admitted), bound)
    client.close()


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


def test_close_returns_leased_tokens(server: Server) -> None:
    client = server.client()
    assert_close_returns_leased_tokens(client, fresh_key("lease-return"))
    client.close()


# -------------------------------------------------------------- bad input


def test_odd_keys_are_stored_raw(server: Server) -> None:
    client = server.client()
    prefix = fresh_key("odd") + ":"
    lim = rbr.TokenBucket(client, rate=1, burst=2, prefix=prefix)
    keys: list[Any] = ["a key with spaces", "ключ 🔑", "k" * 10240, b"\x00\xff raw", 42, ""]
    for k in keys:
        d = lim.check(k)
        assert (d.source, d.allowed, d.remaining) == ("redis", True, 1), (k, d)
        raw = k if isinstance(k, bytes) else str(k).encode()
        assert server.admin("EXISTS", prefix.encode() + b"tb:" + raw) == 1, k
    # Each key is its own limit.
    assert [lim.check(k).remaining for k in keys] == [0] * len(keys)
    assert not any(lim.check(k).allowed for k in keys)
    # 42 and "42" name the same Redis key.
    assert not lim.check("42").allowed
    with pytest.raises(TypeError):
        lim.check(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lim.check(True)
    lim.close()
    client.close()


def test_bad_numbers_are_the_cores_typed_errors(server: Server) -> None:
    client = server.client()
    lim = rbr.TokenBucket(client, rate=10, burst=20)
    # n = 0 is a query, as for every local limiter.
    q = lim.check("k", 0)
    assert (q.allowed, q.remaining, q.source) == (True, 20, "redis")
    with pytest.raises(rb.InsufficientCapacity):
        lim.check("k", 21)
    with pytest.raises(rb.QuotaError):
        lim.check("k", -1)
    with pytest.raises(rb.InsufficientCapacity):
        rbr.FixedWindow(client, limit=5, window=1).check("k", 6)
    lim.close()
    bad: list[tuple[type, Callable[[], Any], str]] = [
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=-1), "-1"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate="abc"), "abc"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, burst=0), "burst"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=2_000_000), "2000000"),
        (rb.QuotaError, lambda: rbr.FixedWindow(client, limit=0, window=1), "limit"),
        (rb.QuotaError, lambda: rbr.FixedWindow(client, limit=5, window=1e-7), "window"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, timeout=-1), "timeout"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, lease=-1), "lease"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, lease=1.5), "lease"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, breaker_threshold=0), "breaker_threshold"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, breaker_cooldown=float("nan")), "breaker_cooldown"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, lease_ttl=-2), "lease_ttl"),
        (rb.QuotaError, lambda: rbr.TokenBucket(client, rate=10, timeout=0), "timeout 0"),
        (rb.ConfigError, lambda: rbr.TokenBucket(client, rate=10, on_error="maybe"), "maybe"),
        (rb.ConfigError, lambda: rbr.TokenBucket(client, rate=10, on_error="local"), "local_rate"),
        (rb.ConfigError, lambda: rbr.TokenBucket(client, rate=10, on_error="local", local_rate=0), "local_rate"),
        (TypeError, lambda: rbr.TokenBucket(client, rate=True), "rate"),
        (TypeError, lambda: rbr.TokenBucket(client, rate=10, timeout="1"), "timeout"),
        (TypeError, lambda: rbr.TokenBucket(object(), rate=10), "client"),
        (TypeError, lambda: rbr.TokenBucket(redis.asyncio.Redis(), rate=10), "asyncio"),
        (TypeError, lambda: rbr.AsyncTokenBucket(client, rate=10), "sync"),
    ]
    for cls, make, word in bad:
        with pytest.raises(cls) as info:
            make()
        assert word in str(info.value), (word, str(info.value))
        assert "Panic" not in type(info.value).__name__
    with pytest.raises(rb.Unsupported):
        rb._ratebound._RedisEngine("sliding_window", limit=5, window=1, lease=2)
    with pytest.raises(rb.QuotaError):
        rb._ratebound._RedisEngine("leaky_bucket", rate=1)
    client.close()


def closed_port() -> int:
    return free_port()


@pytest.mark.parametrize("policy", ["open", "closed", "local"])
def test_unreachable_redis_answers_by_policy_at_once(policy: str) -> None:
    # No I/O at construction, checked by what reached the server, not by
    # time: a limiter built on a client of a port that listens (and never
    # accepts) leaves no connection in its backlog.
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(8)
        quiet = redis.Redis(host=HOST, port=listener.getsockname()[1], socket_timeout=2)
        rbr.TokenBucket(quiet, rate=10, burst=20, on_error=policy, local_rate=1 if policy == "local" else None)
        pending, _, _ = select.select([listener], [], [], 0)
        assert pending == [], "the constructor connected"
        quiet.close()
    client = redis.Redis(host=HOST, port=closed_port())  # defaults: retries with backoff
    lim = rbr.TokenBucket(client, rate=10, burst=20, on_error=policy, local_rate=1 if policy == "local" else None)
    answers = []
    for _ in range(5):
        t = time.monotonic()
        answers.append(lim.check("k"))
        took = time.monotonic() - t
        assert took < NOT_RETRIES, took  # a refused connection, not redis-py's 3.8 s of retries
    assert {d.source for d in answers} == {FAIL_SOURCE[policy]}
    want = {"open": [True] * 5, "closed": [False] * 5, "local": [True, True, False, False, False]}[policy]
    assert [d.allowed for d in answers] == want
    assert lim.breaker_open
    lim.close()
    client.close()


def test_silent_server_costs_one_deadline() -> None:
    """A host that accepts connections but never answers: the call gives up at
    its deadline (the handshake or the reply times out), not after redis-py's
    5 s default."""
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(64)
        client = redis.Redis(host=HOST, port=listener.getsockname()[1])
        lim = rbr.TokenBucket(client, rate=10, burst=20, timeout=0.05)
        for _ in range(3):
            t = time.monotonic()
            d = lim.check("k")
            took = time.monotonic() - t
            assert d.source == "fail_open"
            assert took < NOT_RETRIES, took
        lim.close()
        client.close()


async def test_unreachable_redis_asyncio() -> None:
    client = redis.asyncio.Redis(host=HOST, port=closed_port())
    lim = rbr.AsyncFixedWindow(client, limit=5, window=1, on_error="closed")
    t = time.monotonic()
    d = await lim.check("k")
    assert time.monotonic() - t < NOT_RETRIES
    assert (d.source, d.allowed) == ("fail_closed", False)
    await lim.aclose()
    await client.aclose()


# ------------------------------------------------------------ the engine


def test_engine_without_io() -> None:
    e = rb._ratebound._RedisEngine("token_bucket", rate="10/s burst 20", breaker_cooldown=0.05)
    call = e.begin("k")
    assert isinstance(call, rb._ratebound._RedisCall)
    assert call.key == b"rb:tb:k" and call.kind == "check" and call.n == 1 and call.script == "gcra"
    assert len(call.sha) == 40 and "redis.call" in call.text
    assert call.args[0] == "" and call.at(7).args[0] == "7"
    d = e.finish(call, [1, 19, 0, 100000, 1, 0, 7])
    assert (d.allowed, d.remaining, d.reset_after_ns, d.source) == (True, 19, 100_000_000, "redis")
    assert e.begin("k", scope="hourly").key == b"rb:tb@hourly:k"
    # A timeout within a deadline of Redis' last answer is the client's own
    # overload (busy), not a failure: let a deadline (50 ms) pass.
    assert e.finish(call, timed_out=True).source == "busy"
    time.sleep(0.06)
    # A reply of another shape is a failure; three open the breaker.
    assert e.finish(call, b"OK").source == "fail_open"
    assert e.finish(call, timed_out=True).source == "fail_open"
    assert e.finish(call, error="ConnectionError").source == "fail_open"
    assert e.breaker_open
    assert isinstance(e.begin("k"), rb.Decision)
    time.sleep(0.06)
    probe = e.begin("k")
    assert isinstance(probe, rb._ratebound._RedisCall)
    assert e.finish(probe, [1, 18, 0, 200000, 1, 0, 7]).source == "redis"
    assert not e.breaker_open
    # Nothing reported is a failure by the engine's rule (CallOutcome::
    # reported), as in Node; this binding raised TypeError of its own.
    assert e.finish(call).source == "fail_open"
    with pytest.raises(TypeError):
        call.at(True)  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError):
        call.at(-1)
    assert rb.TokenBucket(1).check().source is None
    assert "source='redis'" in repr(d)


def test_stats_and_bad_instants_as_python_reads_them() -> None:
    """RedisStats' counters as attributes, as a dict and in its repr (one
    list of names in the binding); a bad instant for a call, and a bad
    nanosecond count for a ManualClock, are typed errors naming the value."""
    e = rb._ratebound._RedisEngine("token_bucket", rate="10/s burst 20", on_error="closed")
    call = e.begin("k")
    assert isinstance(call, rb._ratebound._RedisCall)
    assert e.finish(call, [1, 19, 0, 100000, 1, 0, 7]).source == "redis"
    assert e.finish(call, error="ConnectionError").source == "fail_closed"
    s = e.stats
    want = {"redis": 1, "lease": 0, "damaged": 0, "fail_open": 0, "fail_closed": 1, "fail_local": 0, "busy": 0}
    assert {name: getattr(s, name) for name in want} == want
    assert s.breaker_open is False
    assert s._asdict() == {**want, "breaker_open": False}
    assert repr(s) == (
        "RedisStats(redis=1, lease=0, damaged=0, fail_open=0, fail_closed=1, fail_local=0, busy=0, breaker_open=False)"
    )
    with pytest.raises(TypeError, match="^now_us must be an int, got bool$"):
        call.at(True)  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError, match="now_us") as info:
        call.at(-1)
    assert "-1" in str(info.value) and "microseconds" in str(info.value), info.value
    c = rb.ManualClock()
    with pytest.raises(TypeError, match="^nanos must be an int, got float$"):
        c.advance_ns(1.5)  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError, match="nanos") as info:
        c.set_ns(2**64)
    assert str(2**64) in str(info.value) and "nanoseconds" in str(info.value), info.value
    with pytest.raises(TypeError, match="^seconds must be a number, got str$"):
        c.advance("1")  # type: ignore[arg-type]
    with pytest.raises(rb.QuotaError, match="seconds"):
        c.set(-1)
    assert c.now() == 0.0


# ---------------------------------------------------------------- middleware


def test_two_redis_policies_of_one_middleware_never_share_a_key(server: Server) -> None:
    """10/hour burst 20 and 100/hour, both Redis limiters on one prefix: 60
    requests let 20 through (the burst). When both wrote rb:<key> they
    shared one state and let through far more."""
    flask = Flask(__name__)
    flask.get("/")(lambda: "ok")
    prefix = f"{fresh_key('two')}:"
    burst = rbr.TokenBucket(server.client(), "10/hour burst 20", prefix=prefix, timeout=2.0)
    hourly = rbr.TokenBucket(server.client(), "100/hour", prefix=prefix, timeout=2.0)
    flask.wsgi_app = rb.wsgi.RateLimitMiddleware(  # type: ignore[method-assign]
        flask.wsgi_app, policies={"burst": burst, "hourly": hourly}, key_header="x-api-key"
    )
    client = flask.test_client()
    codes = [client.get("/", headers={"x-api-key": "alice"}).status_code for _ in range(60)]
    assert codes.count(200) == 20, codes
    assert set(codes) == {200, 429}
    # Each policy has its own key, named by it; the direct key is untouched.
    r = server.client()
    names = sorted(k.decode() for k in r.keys(f"{prefix}*"))
    assert names == [f"{prefix}tb@burst:key:alice", f"{prefix}tb@hourly:key:alice"], names
    assert burst.check(b"key:alice").allowed
    r.close()


def test_a_damaged_key_is_refused_alone_and_never_opens_the_breaker(server: Server) -> None:
    client = server.client()
    prefix = f"{fresh_key('damaged')}:"
    lim = rbr.TokenBucket(client, rate=1, burst=5, prefix=prefix, on_error="closed", timeout=2.0)
    r = server.client()
    for i, value in enumerate(["garbage", "", "1e300", "-5", "nan"]):
        r.set(f"{prefix}tb:k{i}", value)
        d = lim.check(f"k{i}")
        assert (d.allowed, d.source) == (False, "damaged"), value
    r.rpush(f"{prefix}tb:list", "x")
    assert lim.check("list").source == "damaged"
    assert not lim.breaker_open
    assert lim.check("someone-else").source == "redis"
    r.close()
    lim.close()
    client.close()


def test_middleware_global_limit_is_one_policy_away(server: Server) -> None:
    """A Redis limiter as a policy: two ASGI apps (two instances) share the
    global limit of 2 per key; the local burst policy and the quota fields
    show both; a WSGI app with a sync limiter shares it too."""
    async def hello(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("ok")

    prefix = f"{fresh_key('mw')}:"

    limiters: list[Any] = []

    def asgi_app() -> Any:
        limiter = rbr.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=server.port), rate=1, burst=2, prefix=prefix)
        limiters.append(limiter)
        return rb.asgi.RateLimitMiddleware(
            Starlette(routes=[Route("/", hello)]),
            policies={"burst": "100/s burst 100", "global": limiter},
            key_header="x-api-key",
        )

    flask = Flask(__name__)
    flask.get("/")(lambda: "ok")
    wsgi = rb.wsgi.RateLimitMiddleware(
        flask.wsgi_app,
        policies={"global": rbr.TokenBucket(server.client(), rate=1, burst=2, prefix=prefix)},
        key_header="x-api-key",
    )
    with TestClient(asgi_app()) as a, TestClient(asgi_app()) as b:
        first = a.get("/", headers={"x-api-key": "alice"})
        assert first.status_code == 200
        assert first.headers["ratelimit-policy"] == '"burst";q=100;w=1, "global";q=2;w=2'
        assert first.headers["ratelimit"] == '"burst";r=99;t=1, "global";r=1;t=1'
        assert b.get("/", headers={"x-api-key": "alice"}).status_code == 200
        third = a.get("/", headers={"x-api-key": "alice"})
        assert third.status_code == 429
        assert third.headers["retry-after"] == "1"
        assert third.headers["ratelimit"] == '"global";r=0;t=2'
        assert b.get("/", headers={"x-api-key": "bob"}).status_code == 200
        # Each app's limiter closes its connections in its app's loop (left
        # open, they would warn when collected, in whichever test runs then).
        a.portal.call(limiters[0].aclose)
        b.portal.call(limiters[1].aclose)
    flask_client = flask.test_client()
    flask.wsgi_app = wsgi  # type: ignore[method-assign]
    assert flask_client.get("/", headers={"x-api-key": "alice"}).status_code == 429
    assert flask_client.get("/", headers={"x-api-key": "carol"}).status_code == 200
    # The wrong kind of limiter for the protocol is a clear error.
    with pytest.raises(TypeError, match="asyncio limiter"):
        rb.asgi.RateLimitMiddleware(Starlette(), policies={"g": rbr.TokenBucket(server.client(), rate=1)})


def test_integer_keys_are_the_cores() -> None:
    """An int key is its decimal text in Redis: 2**53 gives the same key as
    Node's number 2 ** 53 (api.test.js: 'number keys: the core rule')."""
    e = rb._ratebound._RedisEngine(rate=1)
    assert e.begin(2**53).key == b"rb:tb:9007199254740992"
    assert e.begin(-7).key == b"rb:tb:-7"


def test_what_became_of_a_call_is_read_by_the_engines_rule() -> None:
    """A reply that is not a list of ints is the engine's Malformed, a
    failure for the fail policy, as Node's non-array replies
    (redis.test.js: 'what became of a call: the engine's rule'); a timeout
    is read before a reply, an error before a reply, nothing at all is a
    failure (it was a TypeError here; Node read the reply first)."""
    e = rb._ratebound._RedisEngine(rate=10, burst=20, on_error="closed", breaker_threshold=100)
    good = [1, 19, 0, 100_000, 1, 0, 7]
    for reply in ("garbage", b"garbage", [1, 2.5], [[1]], 5, [1, "2"]):
        assert e.finish(e.begin("k"), reply).source == "fail_closed", reply
    assert e.finish(e.begin("k"), good, timed_out=True).source == "fail_closed"
    assert e.finish(e.begin("k"), good, error="down").source == "fail_closed"
    assert e.finish(e.begin("k")).source == "fail_closed"
    assert e.finish(e.begin("k"), good).source == "redis"
