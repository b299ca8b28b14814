"""Load shedding in the ASGI and WSGI middleware: a concurrency cap answers
503 at once beyond it, critical requests pass, places come back."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import ratebound as rb


async def test_asgi_sheds_beyond_the_concurrency_limit() -> None:
    release = asyncio.Event()
    inside = 0

    async def slow(request):  # type: ignore[no-untyped-def]
        nonlocal inside
        inside += 1
        await release.wait()
        inside -= 1
        return PlainTextResponse("done")

    app = rb.asgi.RateLimitMiddleware(
        Starlette(routes=[Route("/", slow)]),
        rate=1000,
        burst=1000,
        concurrency_limit=4,
        critical=lambda scope: (b"x-critical", b"1") in scope["headers"],
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        start = time.perf_counter()
        tasks = [asyncio.create_task(client.get("/")) for _ in range(50)]
        for _ in range(400):
            if inside == 4 and sum(t.done() for t in tasks) == 46:
                break
            await asyncio.sleep(0.005)
        refused = [t.result() for t in tasks if t.done()]
        pending = [t for t in tasks if not t.done()]
        assert inside == 4
        assert len(refused) == 46
        assert all(r.status_code == 503 and r.headers["retry-after"] == "1" for r in refused)
        assert time.perf_counter() - start < 2.0
        critical = asyncio.create_task(client.get("/", headers={"x-critical": "1"}))
        for _ in range(400):
            if inside == 5:
                break
            await asyncio.sleep(0.005)
        assert inside == 5  # a critical request is never shed
        release.set()
        served = await asyncio.gather(*pending, critical)
        assert [r.status_code for r in served] == [200] * 5
        # Every place came back: four at once are admitted again.
        again = await asyncio.gather(*(client.get("/") for _ in range(4)))
        assert [r.status_code for r in again] == [200] * 4


def test_wsgi_sheds_beyond_the_concurrency_limit() -> None:
    release = threading.Event()
    lock = threading.Lock()
    inside = [0]

    def slow(environ, start_response):  # type: ignore[no-untyped-def]
        with lock:
            inside[0] += 1
        release.wait(10)
        with lock:
            inside[0] -= 1
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"done"]

    app = rb.wsgi.RateLimitMiddleware(
        slow, rate=1000, burst=1000, concurrency_limit=4,
        critical=lambda environ: environ.get("HTTP_X_CRITICAL") == "1",
    )
    statuses: list = []

    def call(extra: dict) -> None:  # the way a server drives an app
        got: list = []
        body = app({"REMOTE_ADDR": "127.0.0.1", **extra}, lambda status, headers, exc=None: got.append(status))
        try:
            b"".join(body)
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
        with lock:
            statuses.append(got[0])

    def until(done: Callable[[], bool]) -> None:
        """Polls `done` (under the lock) every 5 ms, for 2 s at most."""
        for _ in range(400):
            with lock:
                if done():
                    return
            time.sleep(0.005)

    threads = [threading.Thread(target=call, args=({},)) for _ in range(10)]
    for t in threads:
        t.start()
    until(lambda: inside[0] == 4 and len(statuses) == 6)
    with lock:
        assert inside[0] == 4
        assert statuses == ["503 Service Unavailable"] * 6
    critical = threading.Thread(target=call, args=({"HTTP_X_CRITICAL": "1"},))
    critical.start()
    until(lambda: inside[0] == 5)
    assert inside[0] == 5
    release.set()
    for t in [*threads, critical]:
        t.join(10)
    assert statuses.count("200 OK") == 5
    statuses.clear()
    release.clear()
    threads = [threading.Thread(target=call, args=({},)) for _ in range(4)]
    for t in threads:
        t.start()
    until(lambda: inside[0] == 4)
    release.set()
    for t in threads:
        t.join(10)
    assert statuses == ["200 OK"] * 4  # every place came back


def test_concurrency_limit_must_be_positive() -> None:
    import pytest

    with pytest.raises(rb.QuotaError):
        rb.asgi.RateLimitMiddleware(Starlette(), rate=1, concurrency_limit=0)
