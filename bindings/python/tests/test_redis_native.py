"""The native Redis connection: rb.redis limiters given a URL in place of a
redis-py client (the redis crate inside the extension, on its own runtime,
the GIL released while Redis answers, concurrent calls batched) — against
real redis-servers on 127.0.0.1 that these tests start: the spec vectors,
the incident bound, faults (a killed server, CLIENT PAUSE, SCRIPT FLUSH)
answered as on the redis-py path, the GIL left free, reconnection, bad
URLs, TLS, auth, db numbers, a 3-master cluster, pause news, a fork."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import threading
import time
from typing import Any, Callable

import pytest
import redis

import ratebound as rb
import ratebound.redis as rbr
from redis_support import (
    RECOVERY,
    SPEC,
    AsyncTimed,
    ClusterRun,
    Timed,
    assert_close_returns_leased_tokens,
    async_kill_and_pause,
    fault_limiter,
    fields,
    in_threads,
    keys_per_master,
    kill_pause_flush,
    replay,
    url,
    script_calls,
)
from redis_servers import HOST, Cluster, Server, fresh_key

pytestmark = pytest.mark.filterwarnings("error")


# ------------------------------------------------------------ test vectors


@pytest.mark.parametrize("batch", [True, False])
def test_spec_vectors_replay_with_a_url(server: Server, batch: bool) -> None:
    """Every vector of spec/redis.json, each on its own thread (so that the
    vectors' calls are in flight together and, batched, share script runs),
    each vector's steps in their order."""
    vectors = json.loads(SPEC.read_text())["vectors"]
    assert len(vectors) >= 12
    failures: list[str] = []
    counts = [0] * len(vectors)

    def run(i: int) -> None:
        counts[i] = replay(url(server), vectors[i], failures, batch=batch)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(vectors))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, "\n".join(failures)
    assert sum(counts) == sum(len(v["steps"]) for v in vectors) and sum(counts) >= 50, counts


async def test_spec_vectors_replay_asyncio_with_a_url(server: Server) -> None:
    vectors = json.loads(SPEC.read_text())["vectors"]
    failures: list[str] = []

    async def run(v: dict[str, Any]) -> int:
        prefix = fresh_key("spec-async") + ":"
        make = ASYNC_CLASSES[v["config"]["algorithm"]]
        lim = make(url(server), v["config"], prefix=prefix, timeout=2.0)
        for i, step in enumerate(v["steps"]):
            if "config" in step:
                await lim.aclose()
                lim = ASYNC_CLASSES[step["config"]["algorithm"]](url(server), step["config"], prefix=prefix, timeout=2.0)
            got = fields(await lim._check_at(v["id"], step["n"], step["at_us"]))
            for field, want in step["expect"].items():
                if got[field] != want:
                    failures.append(f"{v['id']} step {i}: {field} = {got[field]!r}, want {want!r}")
        await lim.aclose()
        return len(v["steps"])

    counts = await asyncio.gather(*(run(v) for v in vectors))
    assert not failures, "\n".join(failures)
    assert sum(counts) == sum(len(v["steps"]) for v in vectors)


ASYNC_CLASSES: dict[str, Callable[..., Any]] = {
    "token_bucket": lambda t, c, **kw: rbr.AsyncTokenBucket(t, c["rate"], c.get("burst"), lease=c.get("lease", 0), **kw),
    "fixed_window": lambda t, c, **kw: rbr.AsyncFixedWindow(t, c["limit"], c["window"], lease=c.get("lease", 0), **kw),
    "sliding_window": lambda t, c, **kw: rbr.AsyncSlidingWindow(t, c["limit"], c["window"], **kw),
}


# ------------------------------------------------- batching and the bound


@pytest.mark.parametrize("batch", [True, False])
def test_incident_fifty_instances_with_one_url(server: Server, batch: bool) -> None:
    """The incident on the native connection: fifty instances (limiters)
    naming one URL share one connection; batched or not, they stay within
    20 + 10 × elapsed and take at least 90 % of it."""
    key = fresh_key("partner-native")
    instances, run_for = 50, 2.0
    barrier = threading.Barrier(instances)
    admitted = [0] * instances
    starts = [0.0] * instances
    ends = [0.0] * instances
    sent = [0.0] * instances
    sources: collections.Counter[str] = collections.Counter()

    def instance(i: int) -> None:
        lim = rbr.TokenBucket(url(server), rate=10, burst=20, on_error="closed", timeout=0.5, batch=batch)
        barrier.wait()
        starts[i] = time.monotonic()
        while time.monotonic() < starts[i] + run_for:
            sent[i] = time.monotonic()
            d = lim.check(key)
            admitted[i] += d.allowed
            sources[d.source or "?"] += 1
            time.sleep(0.002)
        ends[i] = time.monotonic()
        lim.close()

    in_threads(instance, instances)
    elapsed = max(ends) - min(starts)
    bound = 20 + 10 * elapsed + 1
    earned = 20 + 10 * (max(sent) - min(starts))
    total = sum(admitted)
    assert 0.9 * earned <= total <= bound, f"{total} admitted in {elapsed:.2f} s, bound {bound:.1f}, answers {dict(sources)}"
    assert set(sources) == {"redis"}, dict(sources)


def test_concurrent_checks_go_out_in_batches_with_the_same_decisions(server: Server) -> None:
    """64 threads on one URL: far fewer script runs than checks when
    batched, one per check when not; the same decisions either way (a key
    of burst 100 and no refill admits exactly 100 of 640 checks)."""
    for batch in (True, False):
        key = fresh_key("batched")
        lim = rbr.TokenBucket(url(server), rate="1/hour burst 100", timeout=2.0, on_error="closed", batch=batch)
        lim.check(fresh_key("warm"))
        before = script_calls(server)
        barrier = threading.Barrier(64)
        allowed = [0] * 64
        sources: collections.Counter[str] = collections.Counter()

        def run(i: int) -> None:
            barrier.wait()
            for _ in range(10):
                d = lim.check(key)
                allowed[i] += d.allowed
                sources[d.source or "?"] += 1

        threads = [threading.Thread(target=run, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        runs = script_calls(server) - before
        assert sum(allowed) == 100, (batch, sum(allowed), dict(sources))
        assert set(sources) == {"redis"}, dict(sources)
        if batch:
            assert runs < 640 * 0.8, f"{runs} script runs for 640 checks"
        else:
            assert runs == 640, runs
        print(f"\nbatch={batch}: 640 checks in {runs} script runs")
        lim.close()


async def test_asyncio_tasks_batch_on_one_connection(server: Server) -> None:
    for batch in (True, False):
        key = fresh_key("batched-async")
        lim = rbr.AsyncTokenBucket(url(server), rate="1/hour burst 100", timeout=2.0, on_error="closed", batch=batch)
        await lim.check(fresh_key("warm"))
        before = script_calls(server)
        ds = await asyncio.gather(*(lim.check(key) for _ in range(640)))
        runs = script_calls(server) - before
        assert sum(d.allowed for d in ds) == 100
        assert {d.source for d in ds} == {"redis"}
        assert (runs < 640 * 0.5) if batch else (runs == 640), (batch, runs)
        await lim.aclose()


async def test_many_asyncio_limiters_share_one_connection_and_one_socket_pair(server: Server) -> None:
    """Fifty asyncio limiters on one URL and one loop: one Redis connection
    and one socket pair to the loop, not fifty (counted in /proc/self/fd and
    by Redis' own client list)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.fail("needs /proc/self/fd", pytrace=False)
    prefix = fresh_key("shared") + ":"
    first = rbr.AsyncTokenBucket(url(server), rate=10, prefix=prefix)
    await first.check("warm")
    before_fds = len(os.listdir("/proc/self/fd"))
    before_clients = int(server.admin("INFO", "clients")["connected_clients"])
    lims = [rbr.AsyncTokenBucket(url(server), rate=10, prefix=prefix) for _ in range(50)]
    ds = await asyncio.gather(*(lim.check(f"k{i}") for i, lim in enumerate(lims)))
    assert {d.source for d in ds} == {"redis"}
    assert len(os.listdir("/proc/self/fd")) - before_fds <= 2
    assert int(server.admin("INFO", "clients")["connected_clients"]) - before_clients <= 1
    for lim in [first, *lims]:
        await lim.aclose()


# ----------------------------------------------------------------- faults


@pytest.mark.parametrize("policy", ["open", "closed", "local"])
def test_faults_kill_pause_flush(own_server: Server, policy: str) -> None:
    """As test_redis.py's redis-py test: the fail policy answers within the
    deadline while the server is killed or paused, the breaker's probe finds
    it back after a restart on the same port (no new limiter), SCRIPT FLUSH
    is transparent."""
    timeout = 0.05
    limiter = fault_limiter(url(own_server), policy, timeout)
    t = Timed(limiter, fresh_key("faults"))
    t.until("redis", within=RECOVERY)
    assert all(d.source == "redis" and d.allowed for d in t.run(0.1))

    kill_pause_flush(own_server, t, policy, timeout)
    limiter.close()


async def test_faults_asyncio_kill_pause_flush(own_server: Server) -> None:
    timeout = 0.05
    limiter = rbr.AsyncTokenBucket(url(own_server), rate=1000, burst=1000, on_error="closed", timeout=timeout, breaker_cooldown=0.2)
    t = AsyncTimed(limiter, fresh_key("faults-async"))
    await t.back(RECOVERY)
    await async_kill_and_pause(own_server, t, timeout)
    await limiter.aclose()


def test_the_gil_is_free_while_redis_is_paused(own_server: Server) -> None:
    """A check waits 300 ms on a paused server (then the fail policy
    answers); meanwhile another Python thread keeps counting, about as fast
    as when nothing else runs."""
    lim = rbr.TokenBucket(url(own_server), rate=10, burst=20, timeout=0.3)
    assert lim.check(fresh_key("warm")).source == "redis"

    def count_for(seconds: float) -> int:
        n, stop = 0, time.monotonic() + seconds
        while time.monotonic() < stop:
            n += 1
        return n

    alone = count_for(0.25)
    own_server.admin("CLIENT", "PAUSE", 1000, "ALL")
    got: list[rb.Decision] = []
    waiter = threading.Thread(target=lambda: got.append(lim.check("k")))
    waiter.start()
    time.sleep(0.01)  # the waiter is inside its call
    beside = count_for(0.25)
    waiter.join(timeout=5)
    assert got and got[0].source == "fail_open", got
    assert beside >= 0.5 * alone, f"counted {beside} beside a waiting check, {alone} alone"
    lim.close()


def test_reconnects_after_a_restart_on_the_same_port(own_server: Server) -> None:
    lim = rbr.TokenBucket(url(own_server), rate=1000, burst=1000, timeout=0.2, breaker_threshold=1000)
    assert lim.check("k").source == "redis"
    own_server.stop()
    assert lim.check("k").source == "fail_open"
    own_server.start()
    stop, sources = time.monotonic() + 5, []
    while time.monotonic() < stop:
        sources.append(lim.check("k").source)
        if sources[-1] == "redis":
            break
        time.sleep(0.02)
    assert sources[-1] == "redis", sources[-10:]
    # Still the one limiter, and an asyncio one on the same URL too.
    async def on_asyncio() -> str:
        a = rbr.AsyncTokenBucket(url(own_server), rate=10, timeout=0.5)
        d = await a.check("k2")
        await a.aclose()
        return d.source

    assert asyncio.run(on_asyncio()) == "redis"
    lim.close()


# ---------------------------------------------------------------- cluster


@pytest.mark.parametrize("how", ["scheme", "list"])
def test_cluster_bound_per_key_and_batches_per_slot(cluster: Cluster, how: str) -> None:
    """Keys on each of three masters, through redis+cluster:// or a list of
    nodes: each key's bound holds, each key lives on its own master; hot
    keys batch per slot (fewer script runs than checks on a master) and no
    node ever answers CROSSSLOT."""
    target: Any = (
        f"redis+cluster://{HOST}:{cluster.nodes[0].port}" if how == "scheme"
        else [f"redis://{HOST}:{n.port}" for n in cluster.nodes]
    )
    keys = keys_per_master(cluster)
    for n in cluster.nodes:
        n.admin("CONFIG", "RESETSTAT")
    instances, run_for = 16, 1.5
    run = ClusterRun(cluster, keys, instances, run_for)
    limiters = [rbr.TokenBucket(target, rate=10, burst=10, on_error="closed", timeout=1.0) for _ in range(instances)]
    # Ready: the topology is read in the background from construction on.
    stop = time.monotonic() + 10
    while time.monotonic() < stop and limiters[0].check(fresh_key("warm")).source != "redis":
        time.sleep(0.05)

    in_threads(lambda i: run.instance(i, limiters[i]), instances)
    run.assert_bound_per_key()
    runs = sum(script_calls(n) for n in cluster.nodes)
    assert runs < 0.9 * sum(run.checks), f"{runs} script runs for {sum(run.checks)} checks: no batching per slot"
    for n in cluster.nodes:
        errs = n.admin("INFO", "errorstats")
        assert not any("CROSSSLOT" in str(e) for e in errs), errs
    for lim in limiters:
        lim.close()


async def test_cluster_asyncio(cluster: Cluster) -> None:
    keys = list(keys_per_master(cluster).values())
    lim = rbr.AsyncTokenBucket(f"redis+cluster://{HOST}:{cluster.nodes[1].port}", rate=10, burst=10, on_error="closed", timeout=1.0)
    stop = time.monotonic() + 10
    while time.monotonic() < stop and (await lim.check(fresh_key("warm"))).source != "redis":
        await asyncio.sleep(0.05)
    ds = await asyncio.gather(*(lim.check(k) for k in keys for _ in range(15)))
    by_key = collections.Counter(k for k, d in zip((k for k in keys for _ in range(15)), ds) if d.allowed)
    assert {d.source for d in ds} == {"redis"}
    assert all(by_key[k] in (10, 11) for k in keys), by_key
    await lim.aclose()


# ------------------------------------------- waiting, pauses, leases


def test_waiters_move_past_another_instances_pause(server: Server) -> None:
    """Instance A (a URL) holds reservations up to 1.5 s ahead; instance B
    pauses the key 1 s; A hears of it on its own pub/sub connection and
    its waiters complete only after the pause, in order (the rules as in
    test_redis_waiting)."""
    from test_redis_waiting import RATE, _move_past_a_pause

    key = fresh_key("asleep-native")
    a = rbr.TokenBucket(url(server), RATE, on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(url(server), RATE, on_error="closed", timeout=1.0)
    assert not a.listening
    a.acquire_blocking(fresh_key("warm"))
    assert a.listening
    _move_past_a_pause(a, b, key, 4, [server])
    a.close()
    assert not a.listening
    b.close()


def test_cluster_waiters_move_past_a_pause_on_another_master(cluster: Cluster) -> None:
    """On a cluster URL: the listener subscribes on a seed node, the key
    lives on another master, the news crosses the cluster bus."""
    from test_redis_waiting import RATE, _elsewhere, _first_wait_then_moved

    key = _elsewhere(cluster, "cluster-asleep-native")
    target = f"redis+cluster://{HOST}:{cluster.nodes[0].port}"
    a = rbr.TokenBucket(target, RATE, on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(target, RATE, on_error="closed", timeout=1.0)
    stop = time.monotonic() + 10
    while time.monotonic() < stop and a.check(fresh_key("ready")).source != "redis":
        time.sleep(0.05)
    _first_wait_then_moved(a, b, key, 3, cluster.nodes)


async def test_asyncio_waiters_move_past_another_instances_pause(server: Server) -> None:
    from test_redis_waiting import RATE, _tasks_move_past_a_pause

    key = fresh_key("asleep-native-async")
    a = rbr.AsyncTokenBucket(url(server), RATE, on_error="closed", timeout=1.0)
    b = rbr.TokenBucket(url(server), RATE, on_error="closed", timeout=1.0)
    await a.acquire(fresh_key("warm"))
    assert a.listening
    await _tasks_move_past_a_pause(a, lambda k, s: asyncio.to_thread(b.pause, k, s), key, 4, [server])
    await a.aclose()
    assert not a.listening
    b.close()


async def test_asyncio_reserve_cancel_and_a_cancelled_acquire(server: Server) -> None:
    """Give-backs are read in Redis: the bucket's TAT returns to where it
    was before the cancelled reservation or acquire took its slot."""
    from test_redis_waiting import PERIOD, RATE, tat, until_async

    key = fresh_key("reserve-async")
    a = rbr.AsyncTokenBucket(url(server), RATE, on_error="closed", timeout=1.0)
    start = time.monotonic()
    first = await a.reserve(key)
    assert first.delay == 0.0
    # A second slot: the queue (and the key) stays a second ahead.
    await a.reserve(key, max_wait=5)
    queued = tat(server, key)
    nxt = await a.reserve(key, max_wait=5)
    assert 2 * PERIOD - (time.monotonic() - start) <= nxt.delay <= 2 * PERIOD
    assert queued is not None and tat(server, key) == queued + PERIOD * 1_000_000
    assert await nxt.acancel() is True
    assert tat(server, key) == queued
    with pytest.raises(rb.RateLimitExceeded):
        await a.reserve(key, max_wait=0.01)
    assert tat(server, key) == queued
    # A task cancelled while it waits gives its slot back: at once if its
    # reservation's reply was read, else when the reply lands (the engine's
    # `orphaned`: Redis may have taken the slot before this client heard).
    waiting = asyncio.create_task(a.acquire(key, timeout=5))
    await until_async(lambda: tat(server, key) != queued)
    assert tat(server, key) == queued + PERIOD * 1_000_000
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await until_async(lambda: tat(server, key) == queued, within=2.0)
    await a.acquire(key, timeout=5)
    assert tat(server, key) == queued + PERIOD * 1_000_000
    await a.aclose()


def test_leases_and_close_give_tokens_back(server: Server) -> None:
    assert_close_returns_leased_tokens(url(server), fresh_key("lease-native"))


def test_middleware_policy_with_a_url(server: Server) -> None:
    from flask import Flask

    flask = Flask(__name__)
    flask.get("/")(lambda: "ok")
    prefix = f"{fresh_key('mw-native')}:"
    flask.wsgi_app = rb.wsgi.RateLimitMiddleware(  # type: ignore[method-assign]
        flask.wsgi_app,
        policies={"global": rbr.TokenBucket(url(server), rate=1, burst=2, prefix=prefix)},
        key_header="x-api-key",
    )
    client = flask.test_client()
    codes = [client.get("/", headers={"x-api-key": "alice"}).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert server.admin("EXISTS", f"{prefix}tb@global:key:alice") == 1
