"""Priorities, the adaptive limit's options and its gauge in the ASGI and
WSGI middleware: Starlette under uvicorn and Flask under werkzeug's
threaded server on 127.0.0.1 (background shed below the share, critical
never, ``on_decision`` told the shed request's priority), bad options as typed
errors (bad answers of ``priority``: tests/test_first_use.py), and ``mw.concurrency`` — its
latency taken when the response's head goes out (a ManualClock makes the
numbers exact). The adaptive limit under real overload:
tests/test_overload.py."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from typing import Any, Callable, Iterator

import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

import ratebound as rb
from routes_spec import serving, uvicorn_serving

Middleware = Callable[..., Any]
BOTH = [rb.asgi.RateLimitMiddleware, rb.wsgi.RateLimitMiddleware]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    for _ in range(800):
        if condition():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


class Held:
    """Requests held inside the app until ``release``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.go = threading.Event()

    def enter(self) -> None:
        with self.lock:
            self.inside += 1

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1

    def count(self) -> int:
        with self.lock:
            return self.inside


def starlette_held(held: Held) -> Starlette:
    async def slow(request):  # type: ignore[no-untyped-def]
        held.enter()
        try:
            for _ in range(2000):  # the server runs in its own thread and loop
                if held.go.is_set():
                    break
                await asyncio.sleep(0.005)
        finally:
            held.leave()
        return PlainTextResponse("done")

    return Starlette(routes=[Route("/", slow)])


def flask_held(held: Held) -> Flask:
    app = Flask(__name__)

    @app.get("/")
    def slow() -> str:
        held.enter()
        try:
            held.go.wait(10)
        finally:
            held.leave()
        return "done"

    return app


@contextlib.contextmanager
def werkzeug_serving(app: Any) -> Iterator[str]:
    """``app`` (WSGI) under werkzeug's threaded server on 127.0.0.1."""
    from werkzeug.serving import make_server

    with serving(make_server("127.0.0.1", 0, app, threaded=True)) as url:
        yield url


def asgi_server(held: Held, **options: Any) -> Any:
    mw = rb.asgi.RateLimitMiddleware(starlette_held(held), **options)
    return mw, uvicorn_serving(mw)


def wsgi_server(held: Held, **options: Any) -> Any:
    app = flask_held(held)
    mw = rb.wsgi.RateLimitMiddleware(app.wsgi_app, **options)
    app.wsgi_app = mw  # type: ignore[method-assign]
    return mw, werkzeug_serving(app)


def header_priority(request: Any) -> str:
    """``x-priority`` of an ASGI scope or a WSGI environ, else normal."""
    if "headers" in request:  # ASGI
        for name, value in request["headers"]:
            if name == b"x-priority":
                return str(value.decode())
        return "normal"
    return str(request.get("HTTP_X_PRIORITY", "normal"))


@pytest.mark.parametrize("serve", [asgi_server, wsgi_server], ids=["starlette-uvicorn", "flask-werkzeug"])
def test_background_is_shed_below_the_share_and_critical_never(serve: Any) -> None:
    held = Held()
    asked: list[str] = []
    events: list[rb.RateLimitEvent] = []

    def priority(request: Any) -> str:
        asked.append(header_priority(request))
        return asked[-1]

    mw, serving = serve(held, rate=1000, burst=1000, concurrency_limit=4, priority=priority, on_decision=events.append)
    statuses: list[tuple[str, int]] = []
    lock = threading.Lock()

    def get(url: str, priority: str) -> threading.Thread:
        def run() -> None:
            r = httpx.get(url, headers={"x-priority": priority}, timeout=20)
            with lock:
                statuses.append((priority, r.status_code))

        t = threading.Thread(target=run)
        t.start()
        return t

    with serving as url:
        threads = [get(url, "normal") for _ in range(2)]
        wait_for(lambda: held.count() == 2, "2 requests inside")
        # Below the share (4 x 0.5 = 2) nobody is asked.
        assert asked == []
        get(url, "background").join(10)
        assert statuses == [("background", 503)]  # half full: background waits
        threads += [get(url, "normal") for _ in range(2)]
        wait_for(lambda: held.count() == 4, "4 requests inside")
        get(url, "normal").join(10)
        assert statuses[-1] == ("normal", 503)  # full: normal is shed
        threads.append(get(url, "critical"))
        wait_for(lambda: held.count() == 5, "the critical request inside")
        concurrency = mw.concurrency
        assert (concurrency.limit, concurrency.in_flight, concurrency.adaptive) == (4, 4, False)
        held.go.set()
        for t in threads:
            t.join(10)
        wait_for(lambda: mw.concurrency.in_flight == 0, "every place back")
        get(url, "background").join(10)  # the share is free again
    assert sorted(statuses) == sorted(
        [("background", 503), ("normal", 503)] + [("normal", 200)] * 4 + [("critical", 200), ("background", 200)]
    )
    shed = [(e.outcome, e.priority) for e in events if e.outcome == "shed"]
    assert shed == [("shed", "background"), ("shed", "normal")]
    assert all(e.priority is None for e in events if e.outcome != "shed")
    assert len(events) == 8


# ------------------------------------------------------------ bad input

BAD_OPTIONS = [
    ({"concurrency_limit": 5, "concurrency_initial": 3}, rb.ConfigError, 'invalid concurrency_limit "5": is a fixed number'),
    ({"concurrency_limit": 5, "concurrency_tolerance": 2}, rb.ConfigError, 'invalid concurrency_limit "5"'),
    ({"concurrency_limit": "fast"}, rb.ConfigError, 'invalid concurrency_limit "fast": must be a whole number or "auto"'),
    ({"concurrency_limit": "auto", "concurrency_tolerance": math.nan}, rb.QuotaError, "invalid concurrency_tolerance NaN"),
    ({"concurrency_limit": "auto", "concurrency_tolerance": -2}, rb.QuotaError, "invalid concurrency_tolerance -2"),
    ({"concurrency_tolerance": 0.5}, rb.QuotaError, "invalid concurrency_tolerance 0.5"),
    ({"concurrency_limit": "auto", "concurrency_min": -1}, rb.QuotaError, "invalid concurrency_min -1"),
    ({"concurrency_initial": 2.5}, rb.QuotaError, "invalid concurrency_initial 2.5"),
    ({"concurrency_initial": 500, "concurrency_max": 100}, rb.QuotaError, "invalid concurrency initial_limit 500"),
    ({"concurrency_limit": "auto", "background_fraction": math.nan}, rb.QuotaError, "invalid background_fraction NaN"),
    ({"concurrency_limit": "auto", "background_fraction": -0.5}, rb.QuotaError, "invalid background_fraction -0.5"),
    ({"background_fraction": 0.25}, rb.ConfigError, 'invalid background_fraction "0.25": shares a concurrency limit'),
    ({"concurrency_limit": "auto", "priority": "urgent"}, rb.ConfigError, 'invalid priority "urgent": is "critical", "normal" or "background"'),
    ({"concurrency_limit": "auto", "priority": 3}, rb.ConfigError, 'invalid priority "3": must be'),
    ({"concurrency_limit": "auto", "concurrency_max": True}, TypeError, "concurrency_max must not be a bool"),
    ({"priority": "background"}, rb.ConfigError, 'invalid priority "background": sheds under a concurrency limit'),
    ({"priority": lambda r: "normal"}, rb.ConfigError, 'invalid priority "a function": sheds under a concurrency limit'),
]


@pytest.mark.parametrize("middleware", BOTH, ids=["asgi", "wsgi"])
@pytest.mark.parametrize("options, error, message", BAD_OPTIONS)
def test_bad_options_fail_at_construction_naming_the_value(
    middleware: Middleware, options: dict[str, Any], error: type, message: str
) -> None:
    with pytest.raises(error) as failure:
        middleware(lambda *a: None, rate=10, **options)
    assert message in str(failure.value)
    if error is not TypeError:
        assert isinstance(failure.value, (rb.RateboundError, ValueError))


@pytest.mark.parametrize("middleware", BOTH, ids=["asgi", "wsgi"])
def test_good_options_are_taken(middleware: Middleware) -> None:
    mw = middleware(
        lambda *a: None, rate=10, concurrency_limit="auto", concurrency_initial=8, concurrency_min=3,
        concurrency_max=40, concurrency_tolerance=2.0, background_fraction=0.25, priority="background",
    )
    assert mw.concurrency.limit == 8 and mw.concurrency.adaptive
    # A tuning value alone means "auto".
    assert middleware(lambda *a: None, rate=10, concurrency_max=50).concurrency.limit == 20
    assert middleware(lambda *a: None, rate=10).concurrency is None


def test_a_constant_priority_applies_to_every_request() -> None:
    def hello(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b"hello"]

    events: list[rb.RateLimitEvent] = []
    mw = rb.wsgi.RateLimitMiddleware(
        hello, rate=1000, concurrency_limit=2, background_fraction=0, priority="background", on_decision=events.append
    )
    got: list[str] = []
    mw({"REMOTE_ADDR": "127.0.0.1"}, lambda status, headers, exc=None: got.append(status))
    assert got == ["503 Service Unavailable"]
    assert events == [rb.RateLimitEvent("shed", None, ("default",), None, "background")]
    verdict = mw.gate.admit({}, "127.0.0.1", {}, True)
    assert verdict is not None and not isinstance(verdict, rb._ratebound.Ask)
    assert (verdict.status, verdict.outcome, verdict.priority) == (503, "shed", "background")
    critical = rb.wsgi.RateLimitMiddleware(hello, rate=1000, concurrency_limit=1, priority="critical")
    assert critical.gate.try_enter()  # the one place taken
    mw_got: list[str] = []
    critical({"REMOTE_ADDR": "127.0.0.1"}, lambda status, headers, exc=None: mw_got.append(status))
    assert mw_got == ["200 OK"]  # critical: never shed


# ---------------------------------------------------------------- gauge


def drive_wsgi(app: Any) -> str:
    """Calls ``app`` as a server does: the body read whole, then closed."""
    got: list[str] = []
    body = app({"REMOTE_ADDR": "127.0.0.1"}, lambda status, headers, exc=None: got.append(status))
    try:
        b"".join(body)
    finally:
        getattr(body, "close", lambda: None)()
    return got[0]


def test_wsgi_gauge_and_latency_taken_at_start_response() -> None:
    clock = rb.ManualClock()
    seen: list[int] = []

    def app(environ: Any, start_response: Any) -> Iterator[bytes]:
        seen.append(mw.concurrency.in_flight)
        clock.advance(0.010)  # 10 ms to the head
        start_response("200 OK", [("content-type", "text/plain")])

        def body() -> Iterator[bytes]:
            clock.advance(0.050)  # then a 50 ms stream: not the service's latency
            yield b"chunk"

        return body()

    mw = rb.wsgi.RateLimitMiddleware(app, rate=1000, burst=1000, concurrency_limit="auto", clock=clock)
    c = mw.concurrency
    assert (c.limit, c.in_flight, c.adaptive, c.baseline_ms, c.recent_ms, c.windows) == (20, 0, True, None, None, 0)
    for _ in range(20):  # one window at a limit of 20
        assert drive_wsgi(mw) == "200 OK"
    assert seen == [1] * 20
    c = mw.concurrency
    assert (c.limit, c.in_flight, c.windows) == (20, 0, 1)
    assert c.baseline_ms == pytest.approx(10.0) and c.recent_ms == pytest.approx(10.0)
    assert "Concurrency(limit=20, in_flight=0, adaptive=True, baseline_ms=10.000" in repr(c)


async def test_asgi_gauge_and_latency_taken_at_response_start() -> None:
    clock = rb.ManualClock()

    async def streamed(request):  # type: ignore[no-untyped-def]
        clock.advance(0.010)

        async def body():  # type: ignore[no-untyped-def]
            clock.advance(0.050)
            yield b"chunk"

        return StreamingResponse(body())

    mw = rb.asgi.RateLimitMiddleware(
        Starlette(routes=[Route("/", streamed)]), rate=1000, burst=1000, concurrency_limit="auto", headers="off",
        clock=clock,
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=mw), base_url="http://test") as client:
        for _ in range(20):
            assert (await client.get("/")).status_code == 200
    c = mw.concurrency
    assert (c.limit, c.in_flight, c.windows) == (20, 0, 1)
    assert c.baseline_ms == pytest.approx(10.0) and c.recent_ms == pytest.approx(10.0)


def test_fixed_cap_gauge_and_prometheus_in_one_line() -> None:
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    mw = rb.wsgi.RateLimitMiddleware(lambda *a: [b""], rate=10, concurrency_limit=3)
    registry = CollectorRegistry()
    Gauge("ratebound_concurrency_limit", "requests in flight allowed", registry=registry).set_function(
        lambda: mw.concurrency.limit
    )
    Gauge("ratebound_in_flight", "requests in flight", registry=registry).set_function(
        lambda: mw.concurrency.in_flight
    )
    assert mw.gate.try_enter()
    text = generate_latest(registry).decode()
    assert "ratebound_concurrency_limit 3.0" in text and "ratebound_in_flight 1.0" in text
    c = mw.concurrency
    assert (c.limit, c.in_flight, c.adaptive, c.baseline_ms, c.recent_ms, c.windows) == (3, 1, False, None, None, 0)
    mw.gate.leave()
    assert mw.concurrency.in_flight == 0
