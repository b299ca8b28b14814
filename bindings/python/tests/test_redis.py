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
import threading
import time

import pytest
import redis
import redis.asyncio

import ratebound as rb
import ratebound.redis as rbr

from redis_servers import HOST, Cluster, Server, fresh_key
from redis_support import (
    assert_close_returns_leased_tokens,
    async_kill_and_pause,
    AsyncTimed,
    ClusterRun,
    fault_limiter,
    gather_then_close,
    in_threads,
    keys_per_master,
    kill_pause_flush,
    replay,
    round_trips,
    SPEC,
    Timed,
)

# Any warning (an unclosed socket or client, a deprecation) fails these tests.
pytestmark = pytest.mark.filterwarnings("error")


# ------------------------------------------------------------ test vectors


def test_spec_vectors_replay_against_redis(server: Server) -> None:
    vectors = json.loads(SPEC.read_text())["vectors"]
    assert len(vectors) >= 12
    failures: list[str] = []
    client = server.client()
    steps = sum(replay(client, v, failures) for v in vectors)
    client.close()
    assert not failures, "\n".join(failures)
    assert steps == sum(len(v["steps"]) for v in vectors) and steps >= 50, steps


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


def test_close_returns_leased_tokens(server: Server) -> None:
    client = server.client()
    assert_close_returns_leased_tokens(client, fresh_key("lease-return"))
    client.close()
