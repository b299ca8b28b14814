"""A remote policy that fails (issue 36 item 7), over real HTTP on
127.0.0.1 in every Python front door: trouble its fail policy covers is a
decision; an error that still escapes its check is a 503 with
``Retry-After`` — never a 500 — told to ``on_decision`` as
``"store_error"`` and logged once per episode. And the error that made it
common: a redis-py asyncio limiter first used in another event loop (a
startup check under ``asyncio.run``) now works in the server's loop,
against a real Redis (before: ``RuntimeError: Event loop is closed`` out of
the ASGI middleware, a 500 per request).

The same rule is replayed from spec/gate.json (its ``remote`` vectors) by
test_gate_spec.py (ASGI, WSGI) and test_django_middleware.py."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import warnings
from typing import Any, Callable, Iterator

import httpx
import pytest
import redis.asyncio
import uvicorn
from fastapi import FastAPI
from flask import Flask

import ratebound as rb
from test_gate_spec import free_port
from redis_servers import HOST, Server, fresh_key
from routes_spec import wsgiref_serving


@pytest.fixture(autouse=True)
def _collect_closed_loops_sockets() -> Iterator[None]:
    """These tests' event loops (uvicorn's, ``asyncio.run``'s) are closed
    when they end: the sockets opened in them (the test's redis.asyncio
    client, the limiter's runner for each loop) can no longer be closed.
    Collected at the end of each test, quietly, so that their
    ResourceWarnings do not land in whichever test runs next (one with
    warnings as errors failed on them when it ran after this file)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def serve_asgi(app: Any) -> Iterator[str]:
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host=HOST, port=port, log_level="error", lifespan="off"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(500):  # up to ~10 s
        if srv.started:
            break
        time.sleep(0.02)
    assert srv.started, "uvicorn did not start"
    try:
        yield f"http://{HOST}:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def serve_wsgi(app: Any) -> Iterator[str]:
    with wsgiref_serving(app) as url:
        yield url


def fastapi_app(**options: Any) -> Any:
    app = FastAPI()

    @app.get("/")
    def hello() -> str:
        return "ok"

    app.add_middleware(rb.asgi.RateLimitMiddleware, **options)
    return app


def flask_app(**options: Any) -> Any:
    app = Flask(__name__)

    @app.get("/")
    def hello() -> str:
        return "ok"

    app.wsgi_app = rb.wsgi.RateLimitMiddleware(app.wsgi_app, **options)  # type: ignore[method-assign]
    return app


class Flaky:
    """The application's own client for a store, given to a Redis limiter
    as any client with ``evalsha``: while ``down``, every call raises an
    error no fail policy covers (what a library raises for a closed event
    loop, a client bug); else it passes the call to a real Redis."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.down = True

    def evalsha(self, *args: Any) -> Any:
        if self.down:
            raise RuntimeError("the store's client failed")
        return self.real.evalsha(*args)

    def eval(self, *args: Any) -> Any:
        if self.down:
            raise RuntimeError("the store's client failed")
        return self.real.eval(*args)


class AsyncFlaky(Flaky):
    async def evalsha(self, *args: Any) -> Any:
        if self.down:
            raise RuntimeError("the store's client failed")
        return await self.real.evalsha(*args)

    async def eval(self, *args: Any) -> Any:
        if self.down:
            raise RuntimeError("the store's client failed")
        return await self.real.eval(*args)


FRONT_DOORS: dict[str, tuple[Callable[..., Any], Callable[[Any], Iterator[str]], bool]] = {
    "fastapi-asgi": (fastapi_app, serve_asgi, True),
    "flask-wsgi": (flask_app, serve_wsgi, False),
}


@pytest.mark.parametrize("front", FRONT_DOORS)
def test_a_failing_store_is_a_503_with_retry_after_logged_once_per_episode(
    front: str, server: Server, caplog: pytest.LogCaptureFixture  # noqa: F811 - the fixture
) -> None:
    make, serve, asyncio_ = FRONT_DOORS[front]
    if asyncio_:
        store: Flaky = AsyncFlaky(redis.asyncio.Redis(host=HOST, port=server.port))
        limiter: Any = rb.redis.AsyncTokenBucket(store, rate=100, burst=100, prefix=fresh_key("rf") + ":")
    else:
        store = Flaky(server.client())
        limiter = rb.redis.TokenBucket(store, rate=100, burst=100, prefix=fresh_key("rf") + ":")
    told: list[tuple[str, Any]] = []
    app = make(
        policies={"global": limiter},
        store_error_retry_after=7,
        on_decision=lambda e: told.append((e.outcome, e.policy)),
    )
    caplog.set_level(logging.INFO, logger="ratebound")
    answers = []
    gen = serve(app)
    base = next(gen)
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            for i in range(6):
                if i == 3:
                    store.down = False
                r = client.get("/")
                answers.append((r.status_code, r.headers.get("retry-after"), r.text if r.status_code != 200 else ""))
    finally:
        gen.close()
    failed = (503, "7", "rate limit unavailable; try again shortly\n")
    assert answers == [failed, failed, failed, (200, None, ""), (200, None, ""), (200, None, "")]
    assert told == [("store_error", "global")] * 3 + [("allowed", None)] * 3
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "ratebound"]
    assert lines == [
        (
            "WARNING",
            'ratebound: the store of remote policy "global" failed; its requests are answered 503 with '
            "Retry-After: 7 until it answers again: RuntimeError: the store's client failed",
        ),
        ("INFO", 'ratebound: the store of remote policy "global" answers again, after 3 failed checks'),
    ]


def test_a_redis_py_limiter_first_used_in_another_loop_decides_in_the_servers_loop(
    server: Server,  # noqa: F811 - the fixture
) -> None:
    """The README's FastAPI recipe with a check at startup: the limiter's
    first call runs under ``asyncio.run`` (a loop closed right after), then
    uvicorn's loop serves the requests. Each is decided by Redis: burst 3
    of a key, then 429 — not 500 (``Event loop is closed``) and not a
    fail-policy answer."""
    limiter = rb.redis.AsyncTokenBucket(
        redis.asyncio.Redis(host=HOST, port=server.port), rate=0.01, burst=3, prefix=fresh_key("rf") + ":"
    )
    assert asyncio.run(limiter.check("startup")).source == "redis"
    app = fastapi_app(policies={"global": limiter}, key_header="x-api-key")
    gen = serve_asgi(app)
    base = next(gen)
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            statuses = [client.get("/", headers={"x-api-key": "alice"}).status_code for _ in range(5)]
    finally:
        gen.close()
    assert statuses == [200, 200, 200, 429, 429]
    # Another loop after the server's: still Redis' answer.
    assert asyncio.run(limiter.check("startup")).source == "redis"
