"""Limits shared by processes through a file-backed memory map
(SharedTokenBucket, SharedKeyedLimiter): real processes, SIGKILL, bad files."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import stat
import time
from pathlib import Path
from typing import Any

import pytest

import ratebound as rb

# fork, as gunicorn and uWSGI start their workers.
CTX = multiprocessing.get_context("fork")


def _hammer(path: str, iterations: int, out: "multiprocessing.Queue[int]") -> None:
    tb = rb.SharedTokenBucket(path, rate="1/h", burst=500)
    out.put(sum(tb.try_acquire() for _ in range(iterations)))


def _for(path: str, seconds: float, out: "multiprocessing.Queue[int]") -> None:
    tb = rb.SharedTokenBucket(path, rate=2000, burst=50)
    admitted = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        admitted += tb.try_acquire()
    out.put(admitted)


def _keyed(path: str, out: "multiprocessing.Queue[int]") -> None:
    k = rb.SharedKeyedLimiter(path, rate="1/h", burst=10, max_keys=1000)
    out.put(sum(k.try_acquire(f"client-{i % 50}") for i in range(5000)))


# The kill test's table: KILL_KEYS keys of one token each (measured: the
# workers reach about 90 000 of them, so the last kill still lands mid-run).
KILL_KEYS = 500_000


def _forever(path: str, log: str, ready: "multiprocessing.Queue[int]") -> None:
    # Each worker races through the keys from 0, claiming slots, and is
    # killed on the way (or, done, waits to be).
    k = rb.SharedKeyedLimiter(path, rate="1/h", burst=1, max_keys=KILL_KEYS)
    with open(log, "a", buffering=1) as f:
        ready.put(os.getpid())
        for key in range(KILL_KEYS):
            if k.try_acquire(key):
                # Written after the admission: a kill in between loses the
                # line, never invents one.
                f.write(f"{key}\n")
        signal.pause()


def _run(target, args, n: int) -> int:  # type: ignore[no-untyped-def]
    out: "multiprocessing.Queue[int]" = CTX.Queue()
    procs = [CTX.Process(target=target, args=(*args, out)) for _ in range(n)]
    for p in procs:
        p.start()
    total = sum(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return total


def test_four_processes_share_one_burst_exactly(tmp_path: Path) -> None:
    path = str(tmp_path / "api.limit")
    assert _run(_hammer, (path, 5000), 4) == 500
    assert rb.SharedTokenBucket(path, rate="1/h", burst=500).available() == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_on_the_real_clock_processes_stay_within_burst_plus_rate_times_elapsed(tmp_path: Path) -> None:
    path = str(tmp_path / "rate.limit")
    start = time.monotonic()
    total = _run(_for, (path, 0.3), 4)
    elapsed = time.monotonic() - start
    assert total <= 50 + 2000 * elapsed, (total, elapsed)
    assert total > 150, total  # they shared the refill too


def test_keyed_processes_share_each_keys_burst(tmp_path: Path) -> None:
    path = str(tmp_path / "keyed.limit")
    assert _run(_keyed, (path,), 4) == 50 * 10
    k = rb.SharedKeyedLimiter(path, rate="1/h", burst=10, max_keys=1000)
    assert len(k) == 50
    assert k.available("client-7") == 0 and k.available("client-new") == 10
    # The same key in another form is another key (str vs bytes vs int).
    assert k.available(b"client-7") == 10


def test_sigkill_during_a_run_keeps_the_bound_and_the_table_usable(tmp_path: Path) -> None:
    path = str(tmp_path / "kill.limit")
    ready: "multiprocessing.Queue[int]" = CTX.Queue()
    procs = []
    logs: list[str] = []

    def start() -> None:
        # Killed only once it runs (has opened the limiter): on a busy
        # machine a fixed pause may end before a worker starts.
        logs.append(str(tmp_path / f"log-{len(logs)}"))
        procs.append(CTX.Process(target=_forever, args=(path, logs[-1], ready)))
        procs[-1].start()
        assert ready.get(timeout=30) == procs[-1].pid

    try:
        for _ in range(3):
            start()
        for round in range(6):
            time.sleep(0.02)
            victim = procs.pop(round % len(procs))
            os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
            victim.join()
            start()
        time.sleep(0.05)
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)  # type: ignore[arg-type]
            p.join()
    logged = [0] * KILL_KEYS
    for log in logs:
        if os.path.exists(log):
            # A kill mid-line leaves a partial last line: not counted.
            for line in Path(log).read_text().splitlines(keepends=True):
                if line.endswith("\n"):
                    logged[int(line)] += 1
    k = rb.SharedKeyedLimiter(path, rate="1/h", burst=1, max_keys=KILL_KEYS)
    # Each key's one token was taken at most once, by whichever process, and
    # every logged admission is counted.
    over = [(key, n) for key, n in enumerate(logged) if n > 1 - k.available(key)]
    assert not over, over[:10]
    assert sum(logged) > 0 and 0 < len(k) <= k.slots, (sum(logged), len(k))
    # A new worker keeps working on the same table: a new key is admitted
    # (it claims a free slot), an exhausted one refused.
    assert k.try_acquire("after-the-kills")
    assert logged[0] == 1, "key 0, first for every worker, was admitted once"
    assert not k.try_acquire(0)


def test_bad_files_and_arguments_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "x.limit"
    rb.SharedTokenBucket(path, rate=10, burst=10)
    with pytest.raises(rb.SharedStateError, match="burst 10, not 20") as info:
        rb.SharedTokenBucket(path, rate=10, burst=20)
    assert info.value.code == "shm_mismatch"
    with pytest.raises(rb.SharedStateError, match="mode"):
        rb.SharedKeyedLimiter(path, rate=10, burst=10, max_keys=5)

    whole = path.read_bytes()
    path.write_bytes(b"GARBAGE!" + whole[8:])
    with pytest.raises(rb.SharedStateError, match="magic") as info:
        rb.SharedTokenBucket(path, rate=10, burst=10)
    assert info.value.code == "shm_corrupt"
    path.write_bytes(whole[:-8])
    with pytest.raises(rb.SharedStateError, match="truncated"):
        rb.SharedTokenBucket(path, rate=10, burst=10)
    path.write_bytes(whole)
    rb.SharedTokenBucket(path, rate=10, burst=10)

    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match="mode 644") as perm:
        rb.SharedTokenBucket(path, rate=10, burst=10)
    assert isinstance(perm.value, rb.SharedStatePermissionError)
    assert perm.value.code == "shm_permissions"
    os.chmod(path, 0o600)

    with pytest.raises(OSError, match="does not exist") as missing:
        rb.SharedTokenBucket(tmp_path / "no-such-dir" / "x.limit", rate=10)
    assert missing.value.code == "shm_io"
    with pytest.raises(rb.QuotaError):
        rb.SharedTokenBucket(tmp_path / "y.limit", rate=-1)
    with pytest.raises(TypeError):
        rb.SharedTokenBucket(tmp_path / "y.limit", rate=None)
    with pytest.raises(rb.QuotaError, match="max_keys"):
        rb.SharedKeyedLimiter(tmp_path / "z.limit", rate=1, max_keys=0)
    with pytest.raises(rb.InsufficientCapacity):
        rb.SharedTokenBucket(path, rate=10, burst=10).check(11)
    assert not (tmp_path / "y.limit").exists()


def test_a_shared_keyed_limiter_is_a_middleware_policy(tmp_path: Path) -> None:
    """Two WSGI apps and one ASGI app (three workers, in real life three
    processes) share a per-key limit of 2 through one file."""
    from flask import Flask
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    path = tmp_path / "clients.limit"

    def shared() -> rb.SharedKeyedLimiter:
        return rb.SharedKeyedLimiter(path, rate="1/h", burst=2, max_keys=1000)

    def flask_client():  # type: ignore[no-untyped-def]
        app = Flask(__name__)
        app.get("/")(lambda: "ok")
        app.wsgi_app = rb.wsgi.RateLimitMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, policies={"host": shared()}, key_header="x-api-key"
        )
        return app.test_client()

    async def hello(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("ok")

    a, b = flask_client(), flask_client()
    first = a.get("/", headers={"x-api-key": "alice"})
    assert first.status_code == 200
    assert first.headers["ratelimit-policy"] == '"host";q=2;w=7200'
    assert b.get("/", headers={"x-api-key": "alice"}).status_code == 200
    third = a.get("/", headers={"x-api-key": "alice"})
    assert third.status_code == 429
    assert int(third.headers["retry-after"]) > 3500
    assert b.get("/", headers={"x-api-key": "bob"}).status_code == 200
    asgi = rb.asgi.RateLimitMiddleware(
        Starlette(routes=[Route("/", hello)]),
        policies={"local": "100/s", "host": shared()},
        key_header="x-api-key",
    )
    with TestClient(asgi) as c:
        assert c.get("/", headers={"x-api-key": "alice"}).status_code == 429
        ok = c.get("/", headers={"x-api-key": "bob"})
        assert ok.status_code == 200
        assert '"host";r=0' in ok.headers["ratelimit"]
    # The key the middleware used is the gate's identity, the same in every
    # language: the limiter itself sees it.
    assert shared().available(b"key:alice") == 0


def test_a_full_shared_table_answers_503_never_500(tmp_path: Path) -> None:
    """A SharedKeyedLimiter policy whose table is full follows the gate's
    full-table rule (503, Retry-After 1) under uvicorn and wsgiref, as the
    middleware's own table does; keys already in the table go on."""
    import httpx
    from flask import Flask
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from routes_spec import uvicorn_serving, wsgiref_serving

    async def hello(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("ok")

    flask = Flask(__name__)
    flask.get("/")(lambda: "ok")
    for name, serving, wrap in [
        ("uvicorn", uvicorn_serving, lambda p: rb.asgi.RateLimitMiddleware(
            Starlette(routes=[Route("/", hello)]), policies={"host": p}, key_header="x-api-key")),
        ("wsgiref", wsgiref_serving, lambda p: rb.wsgi.RateLimitMiddleware(
            flask.wsgi_app, policies={"host": p}, key_header="x-api-key")),
    ]:
        table = rb.SharedKeyedLimiter(tmp_path / f"{name}.limit", rate="1/h", burst=100, max_keys=8)
        with serving(wrap(table)) as url, httpx.Client(base_url=url, timeout=5) as client:
            statuses: dict[int, int] = {}
            for i in range(150):
                r = client.get("/", headers={"x-api-key": f"user-{i}"})
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                if r.status_code == 503:
                    assert r.headers["retry-after"] == "1", name
                    assert "too many clients" in r.text, name
            assert set(statuses) == {200, 503}, (name, statuses)
            assert 8 <= statuses[200] <= table.slots, (name, statuses)
            # A client the table holds is still served.
            assert client.get("/", headers={"x-api-key": "user-0"}).status_code == 200, name
        with pytest.raises(rb.TooManyKeys):
            table.check(b"one-more")


def test_gunicorn_example_four_workers_share_the_limit(tmp_path: Path) -> None:
    """examples/gunicorn_shared.py under gunicorn -w 4 on 127.0.0.1: 20
    requests of one client get exactly 5 answers of 200, whichever of the
    four worker processes serves each."""
    import socket
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    examples = Path(__file__).resolve().parent.parent / "examples"
    env = dict(os.environ, RATEBOUND_LIMIT_FILE=str(tmp_path / "clients.limit"))
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", "4", "-b", f"127.0.0.1:{port}", "--chdir", str(examples),
         "gunicorn_shared:app"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        for _ in range(100):  # up to 10 s for the workers to start
            try:
                urllib.request.urlopen(urllib.request.Request(url, headers={"x-api-key": "warmup"}), timeout=2)
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        statuses = []
        for _ in range(20):
            req = urllib.request.Request(url, headers={"x-api-key": "alice", "connection": "close"})
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    statuses.append(resp.status)
            except urllib.error.HTTPError as e:
                statuses.append(e.code)
                assert e.headers["retry-after"] is not None
        assert statuses.count(200) == 5, statuses
        assert statuses.count(429) == 15, statuses
    finally:
        server.terminate()
        server.wait(timeout=10)


# Waiting on a shared limiter (issue 23): acquire, reserve, pause.


def _acquirer(path: str, keyed: bool, each: int, out: "multiprocessing.Queue[list[float]]") -> None:
    # time.monotonic is CLOCK_MONOTONIC on Linux: the table's clock.
    stamps = []
    if keyed:
        k = rb.SharedKeyedLimiter(path, rate=20, burst=2, max_keys=8)
        for _ in range(each):
            k.acquire_blocking("partner")
            stamps.append(time.monotonic())
    else:
        tb = rb.SharedTokenBucket(path, rate=20, burst=2)
        for i in range(each):
            # Both ways of waiting: threads and asyncio.
            if i % 2:
                asyncio.run(tb.acquire(1, timeout=60))
            else:
                tb.acquire_blocking(1, timeout=60)
            stamps.append(time.monotonic())
    out.put(stamps)


@pytest.mark.parametrize("keyed", [False, True])
def test_four_processes_acquiring_share_one_rate_never_early(tmp_path: Path, keyed: bool) -> None:
    path = str(tmp_path / "partner.limit")
    # Made (full) before the clock is read: no token is taken before start.
    if keyed:
        rb.SharedKeyedLimiter(path, rate=20, burst=2, max_keys=8)
    else:
        rb.SharedTokenBucket(path, rate=20, burst=2)
    start = time.monotonic()
    out: "multiprocessing.Queue[list[float]]" = CTX.Queue()
    procs = [CTX.Process(target=_acquirer, args=(path, keyed, 5, out)) for _ in range(4)]
    for p in procs:
        p.start()
    stamps = sorted(t for _ in procs for t in out.get(timeout=60))
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert len(stamps) == 20
    # 20 tokens at 20/s, burst 2: the i-th (from 0) never before
    # start + (i + 1 - 2) / 20 s (1 µs for the float clock).
    for i, t in enumerate(stamps):
        due = start + max(i + 1 - 2, 0) * 0.05
        assert t >= due - 1e-6, (i, t - start, due - start)


def _reserve_and_sleep(path: str, ready: "multiprocessing.Queue[int]") -> None:
    tb = rb.SharedTokenBucket(path, rate=1, burst=5)
    w = tb._waiter(5)
    assert w.step()[0] == "sleep"  # reserved on the shared word, 5 s ahead
    ready.put(os.getpid())
    time.sleep(60)


def test_sigkill_of_a_waiting_process_loses_only_its_own_reservation(tmp_path: Path) -> None:
    path = str(tmp_path / "kill.limit")
    tb = rb.SharedTokenBucket(path, rate=1, burst=5)
    a0 = time.monotonic()
    assert tb.check(5).allowed  # the burst, at t0 in [a0, b0]
    b0 = time.monotonic()
    ready: "multiprocessing.Queue[int]" = CTX.Queue()
    p = CTX.Process(target=_reserve_and_sleep, args=(path, ready))
    p.start()
    ready.get(timeout=30)
    os.kill(p.pid, signal.SIGKILL)
    p.join(timeout=30)
    # Its 5 tokens stay taken, nothing more: one more is due at t0 + 6 s.
    a1 = time.monotonic()
    r = tb.reserve(1, max_wait=60)
    b1 = time.monotonic()
    assert a0 + 6 - b1 - 1e-6 <= r.delay <= b0 + 6 - a1 + 1e-6, r.delay
    r.cancel()
    # A waiter that gives up gives its tokens back (the same slot again).
    w = tb._waiter(2)
    assert w.step()[0] == "sleep"
    w.abandon()
    a2 = time.monotonic()
    r = tb.reserve(1, max_wait=60)
    b2 = time.monotonic()
    assert a0 + 6 - b2 - 1e-6 <= r.delay <= b0 + 6 - a2 + 1e-6, r.delay


def test_shared_waits_beyond_their_timeout_fail_at_once_taking_nothing(tmp_path: Path) -> None:
    tb = rb.SharedTokenBucket(str(tmp_path / "t.limit"), rate="1/h", burst=1)
    tb.acquire_blocking(timeout=0)
    with pytest.raises(rb.RateLimitExceeded) as info:
        tb.acquire_blocking(timeout=1800)  # an hour away: never slept
    assert info.value.code == "deadline_exceeded"
    with pytest.raises(rb.RateLimitExceeded):
        asyncio.run(tb.acquire(timeout=1800))
    with pytest.raises(rb.RateLimitExceeded):
        tb.reserve(1, max_wait=1800)
    r = tb.reserve(1, max_wait=7200)
    assert r.delay <= 3600, "nothing was taken by the refusals"
    r.cancel()
    k = rb.SharedKeyedLimiter(str(tmp_path / "k.limit"), rate="1/h", burst=1, max_keys=8)
    k.acquire_blocking("a")
    with pytest.raises(rb.RateLimitExceeded):
        k.acquire_blocking("a", 1, timeout=1800)
    with pytest.raises(rb.RateLimitExceeded):
        asyncio.run(k.acquire("a", timeout=1800))
    k.acquire_blocking("b", timeout=0)  # its own bucket


def test_a_cancelled_shared_acquire_gives_its_reservation_back(tmp_path: Path) -> None:
    # One token per 10 s: the waiter's reservation is 10 s ahead, far more
    # than the test takes even on a loaded machine.
    tb = rb.SharedTokenBucket(str(tmp_path / "c.limit"), rate=0.1, burst=1)
    assert tb.try_acquire()

    async def main() -> None:
        task = asyncio.ensure_future(tb.acquire())
        await asyncio.sleep(0.05)
        probe = tb.reserve(1, max_wait=60)
        assert probe.delay > 15, probe.delay  # behind the waiter's slot
        probe.cancel()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        probe = tb.reserve(1, max_wait=60)
        assert probe.delay <= 10, probe.delay  # given back
        probe.cancel()

    asyncio.run(main())


def test_shared_pause_empties_the_bucket_for_every_handle(tmp_path: Path) -> None:
    path = str(tmp_path / "p.limit")
    a = rb.SharedTokenBucket(path, rate=2, burst=3)
    b = rb.SharedTokenBucket(path, rate=2, burst=3)
    start = time.monotonic()
    a.pause(1)
    d = b.check()
    elapsed = time.monotonic() - start
    assert not d.allowed
    # Empty until 1 s, then one token every 0.5 s.
    assert 1.5 - elapsed - 1e-6 <= d.retry_after <= 1.5
    a.pause(0.1)  # ends earlier: changes nothing
    assert b.check().retry_after > 1.5 - (time.monotonic() - start) - 1e-3
    k = rb.SharedKeyedLimiter(str(tmp_path / "k.limit"), rate=2, burst=3, max_keys=8)
    k.pause("alice", 1)
    assert not k.check("alice").allowed
    assert k.check("bob").allowed


@pytest.mark.parametrize("shared", [True, False])
def test_a_pause_moves_waiters_already_holding_slots_past_it_in_order(tmp_path: Path, shared: bool) -> None:
    # Three asyncio waiters hold slots due 0.2, 0.4 and 0.6 s ahead; a
    # pause of 0.5 s made at once moves each 0.5 s later, in order (without
    # the move the first would go at +0.2 s, inside the pause).
    if shared:
        tb = rb.SharedTokenBucket(str(tmp_path / "m.limit"), rate=5, burst=1)
        other = rb.SharedTokenBucket(str(tmp_path / "m.limit"), rate=5, burst=1)
    else:
        tb = other = rb.TokenBucket(5, 1)
    assert tb.try_acquire()
    start = time.monotonic()
    done: list = []

    async def one(i: int) -> None:
        await tb.acquire()
        done.append((i, time.monotonic() - start))

    async def main() -> None:
        tasks = []
        for i in range(3):
            tasks.append(asyncio.create_task(one(i)))
            await asyncio.sleep(0)  # each reserves in turn
        await asyncio.sleep(0.02)
        other.pause(0.5)
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert [i for i, _ in done] == [0, 1, 2]
    for i, t in done:
        due = 0.2 * (i + 1) + 0.5
        assert due - 0.005 <= t <= due + 0.25, (i, t)


def test_shared_bad_waits_and_pauses_are_typed_errors(tmp_path: Path) -> None:
    tb = rb.SharedTokenBucket(str(tmp_path / "b.limit"), rate=1, burst=2)
    k = rb.SharedKeyedLimiter(str(tmp_path / "k.limit"), rate=1, burst=2, max_keys=8)
    for bad in (-1, float("nan"), float("inf"), float("-inf")):
        with pytest.raises(rb.QuotaError, match="timeout"):
            tb.acquire_blocking(1, timeout=bad)
        with pytest.raises(rb.QuotaError, match="timeout"):
            asyncio.run(tb.acquire(1, timeout=bad))
        with pytest.raises(rb.QuotaError, match="timeout"):
            k.acquire_blocking("a", 1, timeout=bad)
        with pytest.raises(rb.QuotaError, match="seconds"):
            tb.pause(bad)
        with pytest.raises(rb.QuotaError, match="seconds"):
            k.pause("a", bad)
        with pytest.raises(rb.QuotaError, match="max_wait"):
            tb.reserve(1, max_wait=bad)
    with pytest.raises(rb.InsufficientCapacity):
        tb.acquire_blocking(3)
    with pytest.raises(rb.InsufficientCapacity):
        asyncio.run(k.acquire("a", 3))
    with pytest.raises(rb.InsufficientCapacity):
        tb.reserve(3)
    assert tb.available() == 2 and k.available("a") == 2, "nothing was taken"
    w = rb.SharedKeyedLimiter(str(tmp_path / "w.limit"), algorithm="fixed_window", limit=2, window=0.2, max_keys=8)
    with pytest.raises(rb.Unsupported):
        w.pause("a", 1)
    # A window waits its retry_after and decides again.
    start = time.monotonic()
    for _ in range(3):
        w.acquire_blocking("a", timeout=5)
    next_window = (start // 0.2 + 1) * 0.2
    assert time.monotonic() >= next_window - 1e-6


def test_default_room_is_the_cores(tmp_path: Path) -> None:
    """A shared table's default room is the core's DEFAULT_SHARED_MAX_KEYS
    (two slots a key), as Node's (shared.test.js); an in-process one made
    by @limit for a rate has the core's DEFAULT_MAX_KEYS, the middleware's
    (it was 100 000 of its own)."""
    assert rb._ratebound.DEFAULT_SHARED_MAX_KEYS == 10_000
    k = rb.SharedKeyedLimiter(str(tmp_path / "default"), rate=1)
    assert k.slots == 2 * rb._ratebound.DEFAULT_SHARED_MAX_KEYS
    made: list[rb.KeyedLimiter] = []

    class Spy(rb.KeyedLimiter):
        __slots__ = ()

        def __new__(cls, *args: Any, **kwargs: Any) -> "Spy":
            lim = super().__new__(cls, *args, **kwargs)
            made.append(lim)
            return lim

    real = rb.KeyedLimiter
    rb.KeyedLimiter = Spy  # type: ignore[misc]
    try:
        rb.limit("1/s", key=lambda user: user)(lambda user: user)
    finally:
        rb.KeyedLimiter = real  # type: ignore[misc]
    assert [m.max_keys for m in made] == [rb._ratebound.DEFAULT_MAX_KEYS] == [1_000_000]
