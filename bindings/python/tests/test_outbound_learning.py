"""The outbound adapters learn a partner's real limit (issue 39): a partner
written here on 127.0.0.1 admits 20/s (its own bucket, not ratebound) and
answers a bare 429 — no ``Retry-After``, no ``RateLimit`` fields — beyond
it; the caller's local ``rb.TokenBucket`` is configured ten times higher.
Learning on (the default), the refusals cut the bucket's rate, told as
``adapted`` events (from a higher to a lower rate), and
``limiter.learned_rate()`` falls below the configured rate; once the
partner is quiet the rate steps back up. With ``adaptive=False`` the same
refusals change nothing. The loops are bounded by counts; no assertion is
on how long anything took. The rules themselves (how much, how often) are
the core's: spec/outbound_calls.json's ``learn-*`` vectors, replayed by
tests/test_outbound_calls.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import httpx
import pytest
import redis
import requests

import ratebound as rb
import ratebound.httpx
import ratebound.requests
from partners import BarePartner, OkPartner
from redis_servers import HOST, Server, fresh_key

pytestmark = pytest.mark.filterwarnings("error")

ADAPTERS = ["httpx", "httpx-async", "requests"]
CONFIGURED = 200.0  # the caller's rate: ten times the partner's


@pytest.fixture
def partner() -> Iterator[BarePartner]:
    p = BarePartner()
    yield p
    p.close()


def drive(adapter: str, limiter: Any, url: str, most: int, enough: Callable[[], bool], **options: Any) -> int:
    """GETs through `adapter` over `limiter`, one after another, until
    `enough()` or `most` were sent; how many were."""
    if adapter == "httpx":
        with httpx.Client(transport=rb.httpx.RateLimitTransport(limiter, **options)) as client:
            for sent in range(most):
                if enough():
                    return sent
                client.get(url)
        return most
    if adapter == "httpx-async":

        async def run() -> int:
            try:
                async with httpx.AsyncClient(transport=rb.httpx.AsyncRateLimitTransport(limiter, **options)) as client:
                    for sent in range(most):
                        if enough():
                            return sent
                        await client.get(url)
                return most
            finally:
                if isinstance(limiter, rb.redis.AsyncTokenBucket):
                    await limiter.aclose()  # its connections belong to this loop

        return asyncio.run(run())
    with requests.Session() as session:
        session.mount("http://", rb.requests.RateLimitAdapter(limiter, **options))
        for sent in range(most):
            if enough():
                return sent
            session.get(url, timeout=10).close()
    return most


def adapted(events: list[rb.httpx.OutboundEvent]) -> list[rb.httpx.OutboundEvent]:
    return [e for e in events if e.outcome == "adapted"]


# The limiters that learn: one bucket in this process, a keyed one (per
# key, beside the key's state), and the shared-memory ones, whose file
# keeps the learned rate for every process on the host.
LEARNERS = ["local", "keyed", "shared", "shared-keyed"]


def learner(kind: str, tmp_path: Path, rate: float = CONFIGURED, burst: int = 20) -> Any:
    tmp_path.mkdir(parents=True, exist_ok=True)
    if kind == "local":
        return rb.TokenBucket(rate, burst)
    if kind == "keyed":
        return rb.KeyedLimiter(rate, burst, max_keys=8)
    if kind == "shared":
        return rb.SharedTokenBucket(tmp_path / "partner.limit", rate, burst)
    return rb.SharedKeyedLimiter(tmp_path / "partners.limit", rate, burst, max_keys=8)


def gauge(limiter: Any, key: Optional[str]) -> float:
    """The learned rate: a keyed limiter's for the adapter's key."""
    keyed = (rb.KeyedLimiter, rb.SharedKeyedLimiter, rb.redis.TokenBucket, rb.redis.AsyncTokenBucket)
    return limiter.learned_rate(key) if isinstance(limiter, keyed) else limiter.learned_rate()  # type: ignore[no-any-return]


# The Redis token buckets learn for the fleet: Redis keeps the learned word
# beside the key's bucket. Over a redis-py client (sync, or asyncio for the
# async adapter) and over a URL (ratebound's native connection).
CONNECTIONS = ["redis-py", "url"]


def redis_learner(
    connection: str, server: Server, prefix: str, asynchronous: bool, rate: float = CONFIGURED, burst: int = 20
) -> Any:
    """A Redis token bucket under `prefix` (the fleet's keys): asyncio for
    the async adapter; "closed" on an outage (an outbound limiter that
    fails open draws a warning); a deadline a loaded machine keeps."""
    target: Any = f"redis://{HOST}:{server.port}/0"
    if connection == "redis-py":
        target = redis.asyncio.Redis(host=HOST, port=server.port) if asynchronous else server.client()
    cls = rb.redis.AsyncTokenBucket if asynchronous else rb.redis.TokenBucket
    return cls(target, rate, burst, prefix=prefix, on_error="closed", timeout=1.0)


@pytest.mark.parametrize("connection", CONNECTIONS)
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_redis_bucket_learns_from_bare_429s_for_every_instance(
    adapter: str, connection: str, partner: BarePartner, server: Server
) -> None:
    prefix = fresh_key("learn") + ":"
    limiter = redis_learner(connection, server, prefix, adapter == "httpx-async")
    # Another instance of the fleet: its own limiter and connection, the
    # same keys in Redis.
    other = redis_learner(connection, server, prefix, False)
    try:
        assert gauge(limiter, "partner") == CONFIGURED
        events: list[rb.httpx.OutboundEvent] = []
        sent = drive(adapter, limiter, partner.url, 400, lambda: len(adapted(events)) >= 2, retries=0,
                     on_decision=events.append)
        cuts = adapted(events)
        assert len(cuts) >= 2, (sent, partner.statuses)
        assert all(e.status == 429 and e.from_rate is not None and e.to_rate is not None
                   and e.from_rate > e.to_rate for e in cuts), cuts
        assert cuts[0].from_rate == pytest.approx(CONFIGURED)
        assert all(a.to_rate == b.from_rate for a, b in zip(cuts, cuts[1:])), cuts
        key = cuts[0].key
        assert key is not None and all(e.key == key for e in cuts)
        assert gauge(limiter, key) == cuts[-1].to_rate < CONFIGURED
        # The other instance knows it from its first call for the key on
        # (the learned rate is read without I/O, from Redis' last reply),
        # and Redis runs the bucket at it: its burst scaled down too.
        assert gauge(other, key) == CONFIGURED
        taken = [other.try_acquire(key) for _ in range(20)]
        assert gauge(other, key) == cuts[-1].to_rate
        assert sum(taken) < 20, taken
        assert all(e.from_rate is None and e.to_rate is None for e in events if e.outcome != "adapted")

        # The partner stops refusing: after a quiet while a success steps
        # the rate back up, for the fleet.
        partner.open()
        low = gauge(limiter, key)
        events.clear()
        sent = drive(adapter, limiter, partner.url, 400, lambda: bool(adapted(events)), retries=0,
                     on_decision=events.append)
        ups = adapted(events)
        assert ups, (sent, partner.statuses)
        up = ups[0]
        assert up.status == 200 and up.from_rate == low and up.to_rate is not None and low < up.to_rate <= CONFIGURED
        other.check(key, 0)  # a query: takes nothing, hears the word
        assert gauge(other, key) == gauge(limiter, key) >= up.to_rate
    finally:
        other.close()
        if isinstance(limiter, rb.redis.TokenBucket):
            limiter.close()


@pytest.mark.parametrize("connection", CONNECTIONS)
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_redis_bucket_with_adaptive_false_learns_nothing(
    adapter: str, connection: str, partner: BarePartner, server: Server
) -> None:
    prefix = fresh_key("fixed") + ":"
    limiter = redis_learner(connection, server, prefix, adapter == "httpx-async")
    events: list[rb.httpx.OutboundEvent] = []
    try:
        drive(adapter, limiter, partner.url, 60, lambda: False, retries=0, adaptive=False, on_decision=events.append)
    finally:
        if isinstance(limiter, rb.redis.TokenBucket):
            limiter.close()
    assert partner.count(429) > 10, partner.statuses
    assert adapted(events) == []
    key = next(e.key for e in events if e.outcome == "gave_up")
    other = redis_learner(connection, server, prefix, False)
    other.check(key, 0)
    assert gauge(other, key) == gauge(limiter, key) == CONFIGURED and other.limit == 20
    other.close()


def test_a_redis_bucket_that_cannot_reach_redis_learns_nothing_and_the_call_goes_on() -> None:
    # Nothing listens on port 1: the acquisition is the local share's
    # (on_error="local"), the adapt fails — nothing learned, no exception,
    # no "adapted" event — and the caller gets the refusal.
    for target in (redis.Redis(host=HOST, port=1), f"redis://{HOST}:1/0"):
        limiter = rb.redis.TokenBucket(target, 100, 10, on_error="local", local_rate=100)
        assert _refused(limiter) == ["gave_up"]
        assert limiter.learned_rate("partner.example") == 100.0
        word = rb._ratebound._Outbound.learned_word(32768, 1_800_000_000_000, True)
        assert limiter._adapt("partner.example", 0, word) is False
        # The breaker open (it is, after these failures): no call at all.
        assert limiter.breaker_open
        assert limiter._adapt("partner.example", 0, word) is False
        limiter.close()


def test_an_asyncio_redis_bucket_that_cannot_reach_redis_learns_nothing() -> None:
    async def run() -> list[bool]:
        word = rb._ratebound._Outbound.learned_word(32768, 1_800_000_000_000, True)
        out = []
        for target in (redis.asyncio.Redis(host=HOST, port=1), f"redis://{HOST}:1/0"):
            limiter = rb.redis.AsyncTokenBucket(target, 100, 10, on_error="closed")
            out.append(await limiter._adapt("k", 0, word))
            out.append(limiter.learned_rate("k") == 100.0)
            await limiter.aclose()
        return out

    assert asyncio.run(run()) == [False, True, False, True]


def test_the_redis_learned_word_is_a_compare_and_swap_for_the_fleet(server: Server) -> None:
    # Two instances: the first replaces the fresh word; the second, still
    # holding the fresh word as seen, is refused (the word is another now)
    # and hears the word in force from that reply.
    prefix = fresh_key("cas") + ":"
    a, b = (redis_learner(c, server, prefix, False) for c in CONNECTIONS)
    half = rb._ratebound._Outbound.learned_word(32768, 1_800_000_000_000, True)
    quarter = rb._ratebound._Outbound.learned_word(16384, 1_800_000_000_001, True)
    assert a._learned("k") == b._learned("k") == 0
    assert a._adapt("k", 0, half) is True
    assert a._learned("k") == half and a.learned_rate("k") == pytest.approx(CONFIGURED / 2)
    assert b._adapt("k", 0, quarter) is False
    assert b._learned("k") == half
    assert b._adapt("k", half, quarter) is True
    assert a.check("k", 0).allowed and a._learned("k") == quarter
    assert a.learned_rate("k") == pytest.approx(CONFIGURED / 4)
    # Each key its own word; a window learns nothing.
    assert a.learned_rate("other") == CONFIGURED
    window = rb.redis.FixedWindow(server.client(), 10, 1, prefix=prefix)
    with pytest.raises(rb.Unsupported, match="fixed_window"):
        window._engine.begin_adapt("k", 0, half)
    a.close(), b.close(), window.close()


@pytest.mark.parametrize("kind", LEARNERS)
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_bare_429s_cut_the_learned_rate_and_a_quiet_partner_lets_it_back_up(
    adapter: str, kind: str, partner: BarePartner, tmp_path: Path
) -> None:
    limiter = learner(kind, tmp_path)
    assert gauge(limiter, "partner") == CONFIGURED
    events: list[rb.httpx.OutboundEvent] = []
    # retries=0: every refusal is the caller's; learning does not need a retry.
    sent = drive(adapter, limiter, partner.url, 400, lambda: len(adapted(events)) >= 2, retries=0,
                 on_decision=events.append)
    cuts = adapted(events)
    assert len(cuts) >= 2, (sent, partner.statuses)
    # Each cut on a refusal, from a higher rate to a lower one, the first
    # from the configured rate, each from where the one before left it.
    assert all(e.status == 429 and e.from_rate is not None and e.to_rate is not None and e.from_rate > e.to_rate
               for e in cuts), cuts
    assert cuts[0].from_rate == pytest.approx(CONFIGURED)
    assert all(a.to_rate == b.from_rate for a, b in zip(cuts, cuts[1:])), cuts
    assert all(e.key == cuts[0].key and e.seconds is None for e in cuts)
    # The gauge reads what the events told; the bucket runs at it (its
    # burst scaled down with the rate: a shared table keeps its configured
    # `limit`, so its checks tell).
    key = cuts[0].key
    assert gauge(limiter, key) == cuts[-1].to_rate < CONFIGURED
    if kind == "local":
        assert limiter.limit < 20
    else:
        keyed = kind in ("keyed", "shared-keyed")
        taken = [limiter.try_acquire(key) if keyed else limiter.try_acquire() for _ in range(20)]
        assert sum(taken) < 20, taken
        if kind == "keyed":
            # Per key: another partner's key keeps the whole quota.
            assert gauge(limiter, "other.example") == CONFIGURED
            assert sum(limiter.try_acquire("other.example") for _ in range(20)) == 20
    # The other outcomes carry no rates.
    assert all(e.from_rate is None and e.to_rate is None for e in events if e.outcome != "adapted")

    # The partner stops refusing: after a quiet while, a success steps the
    # rate up (never above the configured one).
    partner.open()
    low = gauge(limiter, key)
    events.clear()
    sent = drive(adapter, limiter, partner.url, 400, lambda: bool(adapted(events)), retries=0,
                 on_decision=events.append)
    ups = adapted(events)
    assert ups, (sent, partner.statuses)
    up = ups[0]
    assert up.status == 200 and up.from_rate == low and up.to_rate is not None and low < up.to_rate <= CONFIGURED
    assert gauge(limiter, key) == up.to_rate


@pytest.mark.parametrize("kind", LEARNERS)
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_adaptive_false_learns_nothing_from_the_same_refusals(
    adapter: str, kind: str, partner: BarePartner, tmp_path: Path
) -> None:
    limiter = learner(kind, tmp_path)
    events: list[rb.httpx.OutboundEvent] = []
    drive(adapter, limiter, partner.url, 60, lambda: False, retries=0, adaptive=False, on_decision=events.append)
    assert partner.count(429) > 10, partner.statuses  # the evidence was there
    assert adapted(events) == []
    key = next(e.key for e in events if e.outcome == "gave_up")
    assert gauge(limiter, key) == CONFIGURED
    if kind == "keyed":
        assert limiter.available(key) <= 20 and sum(limiter.try_acquire("fresh") for _ in range(25)) == 20
    else:
        assert limiter.limit == 20


def _refused(limiter: Any, **options: Any) -> list[str]:
    """The outcomes of one GET answered 429 through rb.httpx over `limiter`."""
    events: list[rb.httpx.OutboundEvent] = []
    mock = httpx.MockTransport(lambda request: httpx.Response(429))
    transport = rb.httpx.RateLimitTransport(limiter, transport=mock, retries=0, on_decision=events.append, **options)
    with httpx.Client(transport=transport) as client:
        assert client.get("http://partner.example/").status_code == 429
    return [e.outcome for e in events if e.outcome != "waited"]


@pytest.mark.parametrize("kind", LEARNERS + CONNECTIONS)
def test_learning_is_on_by_default_where_the_limiter_learns(kind: str, tmp_path: Path, server: Server) -> None:
    def make(sub: str) -> Any:
        if kind in CONNECTIONS:
            return redis_learner(kind, server, fresh_key(sub) + ":", False, 100, 10)
        return learner(kind, tmp_path / sub, 100, 10)

    assert _refused(make("a")) == ["adapted", "gave_up"]
    assert _refused(make("b"), adaptive=True) == ["adapted", "gave_up"]
    assert _refused(make("c"), adaptive=False) == ["gave_up"]


def test_a_shared_learned_rate_is_read_by_every_handle_on_the_file(tmp_path: Path) -> None:
    # Two handles on one file stand for two worker processes (the processes
    # test below runs real ones): one adapter's cut is the other's rate.
    path = tmp_path / "partner.limit"
    a, b = rb.SharedTokenBucket(path, 100, 10), rb.SharedTokenBucket(path, 100, 10)
    assert _refused(a) == ["adapted", "gave_up"]
    assert a.learned_rate() == b.learned_rate() == pytest.approx(70.0, abs=0.01)
    assert b.learned_rate("any key") == b.learned_rate()
    keyed = tmp_path / "partners.limit"
    k1, k2 = (rb.SharedKeyedLimiter(keyed, 100, 10, max_keys=8) for _ in range(2))
    assert _refused(k1) == ["adapted", "gave_up"]
    assert k2.learned_rate("partner.example") == pytest.approx(70.0, abs=0.01)
    assert k2.learned_rate("other.example") == 100.0
    with pytest.raises(TypeError, match="needs the key"):
        k2.learned_rate()
    with pytest.raises(rb.Unsupported, match="fixed_window"):
        rb.SharedKeyedLimiter(tmp_path / "w.limit", algorithm="fixed_window", limit=10, window=1, max_keys=8).learned_rate("k")


def test_bad_adaptive_is_a_clear_error_at_construction(tmp_path: Any) -> None:
    for bad in ("yes", 1, 0.0):
        with pytest.raises(TypeError, match=r"adaptive must be True, False or None, got (str 'yes'|int 1|float 0\.0)"):
            rb.httpx.RateLimitTransport(rb.TokenBucket(1, 1), adaptive=bad)
    with pytest.raises(TypeError, match="adaptive must be True, False or None"):
        rb.httpx.AsyncRateLimitTransport(rb.TokenBucket(1, 1), adaptive="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="adaptive must be True, False or None"):
        rb.requests.RateLimitAdapter(rb.TokenBucket(1, 1), adaptive="yes")  # type: ignore[arg-type]
    # Every limiter an adapter takes (a token bucket: one that can be
    # paused) keeps what is learned, the in-process keyed one too:
    # insisting is fine. A keyed window serves no adapter, learning or not.
    rb.httpx.RateLimitTransport(rb.KeyedLimiter(10, 10), adaptive=True)
    rb.requests.RateLimitAdapter(rb.KeyedLimiter(10, 10), adaptive=True)
    for adaptive in (True, False, None):
        with pytest.raises(rb.ConfigError, match=r"KeyedLimiter \(sliding_window\) cannot be paused"):
            rb.httpx.RateLimitTransport(
                rb.KeyedLimiter(algorithm="sliding_window", limit=10, window=1), adaptive=adaptive
            )
    # The Redis token buckets learn (Redis keeps the word): insisting is
    # fine. A Redis window neither learns nor serves an adapter.
    rb.httpx.RateLimitTransport(
        rb.redis.TokenBucket(redis.Redis(host=HOST, port=1), rate=1, burst=1, on_error="closed"), adaptive=True
    )
    rb.httpx.AsyncRateLimitTransport(
        rb.redis.AsyncTokenBucket(redis.asyncio.Redis(host=HOST, port=1), rate=1, burst=1, on_error="closed"),
        adaptive=True,
    )
    window = rb.redis.FixedWindow(redis.Redis(host=HOST, port=1), 10, 1, on_error="closed")
    with pytest.raises(rb.ConfigError, match="FixedWindow"):
        rb.httpx.RateLimitTransport(window, adaptive=True)


# A worker process: GETs `url` through rb.requests over the shared bucket at
# `path` until it has seen two changes of the learned rate (or 300
# requests), then prints each change as "from to status".
_WORKER = """
import sys
import requests
import ratebound as rb
import ratebound.requests

url, path, configured = sys.argv[1], sys.argv[2], float(sys.argv[3])
limiter = rb.SharedTokenBucket(path, configured, 20)
events = []
with requests.Session() as session:
    session.mount("http://", rb.requests.RateLimitAdapter(limiter, retries=0, on_decision=events.append))
    for _ in range(300):
        if sum(e.outcome == "adapted" for e in events) >= 2:
            break
        session.get(url, timeout=10).close()
for e in events:
    if e.outcome == "adapted":
        print(e.from_rate, e.to_rate, e.status, flush=True)
"""


def test_worker_processes_learn_one_rate_through_the_file(partner: BarePartner, tmp_path: Path) -> None:
    # Four processes, each its own adapter, one SharedTokenBucket file: a
    # change is made by one compare-and-swap on the file's word from the
    # word its request was sent under, so no two processes change the
    # same word — no two changes start from the same rate (four local
    # buckets would each cut from the configured rate) — and the file
    # holds the last of them for every process.
    path = tmp_path / "partner.limit"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, partner.url, str(path), str(CONFIGURED)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    changes: list[tuple[float, float, int]] = []
    for w in workers:
        out, _ = w.communicate(timeout=120)
        assert w.returncode == 0
        changes += [(float(a), float(b), int(s)) for a, b, s in (line.split() for line in out.splitlines())]
    assert len(changes) >= 4, (changes, partner.statuses)
    froms = [c[0] for c in changes]
    assert len(set(froms)) == len(froms), f"two processes changed the same word: {sorted(changes, reverse=True)}"
    assert froms.count(CONFIGURED) == 1, "one cut from the configured rate, for all of them"
    assert all(c[2] == 429 and c[1] < c[0] for c in changes if c[2] == 429)
    here = rb.SharedTokenBucket(path, CONFIGURED, 20)
    assert here.learned_rate() in {c[1] for c in changes}
    assert here.learned_rate() < CONFIGURED


@pytest.mark.parametrize("adapter", ["httpx", "requests"])
def test_an_announced_quota_is_a_share_of_the_bucket_as_it_is_now(adapter: str) -> None:
    """The bucket's quota changed after the adapter was built (10/s → 20/s):
    the announced 100 for 10 s is a share of the quota as it is now —
    100 / (20 + 20·10), 9.09/s — not of the one the adapter was built with
    (100 / (10 + 10·10) of the new quota: 18.2/s, twice what the partner
    announced). (The asyncio transport shares the sync one's core.)"""
    partner = OkPartner((("RateLimit-Remaining", "100"), ("RateLimit-Reset", "10")))
    limit = rb.TokenBucket(10, 10)
    client: Any
    if adapter == "httpx":
        client = httpx.Client(transport=rb.httpx.RateLimitTransport(limit))
    else:
        client = requests.Session()
        client.mount("http://", rb.requests.RateLimitAdapter(limit))
    try:
        limit.set_quota(20, 20)
        assert client.get(partner.url).status_code == 200
        assert limit.learned_rate() == pytest.approx(100 / 11, abs=0.01)
    finally:
        client.close()
        partner.close()


@pytest.mark.parametrize("kind", ["local", "keyed"])
def test_a_cut_while_waiting_asks_again_only_where_the_wait_held_a_slot(kind: str, tmp_path: Path) -> None:
    # A bucket's wait holds a slot priced before the cut: the machine asks
    # for the tokens again. A keyed limiter takes them only when due, at
    # the rate in force then: asking again would take them twice.
    o = rb._ratebound._Outbound(limiter=learner(kind, tmp_path))
    assert o.learning
    call = o.call("GET", "http", "partner.example", None, None, None, None, False, True)
    assert call.next(1000.0)[0] == "acquire"
    call.reserving(0)
    call.saw(rb._ratebound._Outbound.learned_word(32768, 1_800_000_000_000, True))
    assert call.next(1000.0)[0] == ("acquire" if kind == "local" else "send")
