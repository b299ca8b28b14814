"""Per-route limits over real HTTP on 127.0.0.1: FastAPI under uvicorn and
Flask under wsgiref — /login 5 per minute per IP, /api per API key, /health
unlimited, and one limit shared by two routes."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import httpx
import pytest
from fastapi import Depends, FastAPI

import ratebound as rb
import ratebound.fastapi
import ratebound.flask
from routes_spec import check_routes, uvicorn_serving, wsgiref_serving


def fastapi_app(clock: rb.ManualClock) -> FastAPI:
    app = FastAPI()
    login = rb.fastapi.limit("5/minute", clock=clock)
    api = rb.fastapi.limit(3, key="x-api-key", clock=clock)
    shared = rb.fastapi.limit(1, 2, clock=clock)

    @app.post("/login", dependencies=[Depends(login)])
    def do_login() -> dict:  # a sync endpoint
        return {"ok": True}

    @app.get("/api", dependencies=[Depends(api)])
    async def do_api() -> dict:  # an async one
        return {"ok": True}

    @app.get("/health")
    def health() -> str:
        return "ok"

    @app.get("/a", dependencies=[Depends(shared)])
    def a() -> str:
        return "a"

    @app.get("/b", dependencies=[Depends(shared)])
    def b() -> str:
        return "b"

    return app


@pytest.fixture
def uvicorn_url() -> Iterator[Any]:
    with contextlib.ExitStack() as servers:
        yield lambda app: servers.enter_context(uvicorn_serving(app))


def test_fastapi_routes_over_real_http(uvicorn_url: Any) -> None:
    clock = rb.ManualClock()
    with httpx.Client(base_url=uvicorn_url(fastapi_app(clock)), timeout=5) as client:
        check_routes(client)
        # The refusal is FastAPI's HTTPException: JSON with a detail.
        refused = client.post("/login")
        assert refused.json()["detail"].startswith("rate limit exceeded")
        clock.advance(12)
        assert client.post("/login").status_code == 200


def flask_app(clock: rb.ManualClock) -> Any:
    import flask

    app = flask.Flask(__name__)
    shared = rb.flask.limit(1, 2, clock=clock)

    @app.post("/login")
    @rb.flask.limit("5/minute", clock=clock)
    def login() -> str:
        return "ok"

    @app.get("/api")
    @rb.flask.limit(3, key="x-api-key", clock=clock)
    def api() -> str:
        return "ok"

    @app.get("/health")
    def health() -> str:
        return "ok"

    @app.get("/a")
    @shared
    def a() -> str:
        return "a"

    @app.get("/b")
    @shared
    def b() -> str:
        return "b"

    return app


def test_flask_routes_over_real_http() -> None:
    clock = rb.ManualClock()
    with wsgiref_serving(flask_app(clock)) as url, httpx.Client(base_url=url, timeout=5) as client:
        check_routes(client)
        clock.advance(12)
        assert client.post("/login").status_code == 200


def test_bad_configuration_fails_where_the_route_is_declared() -> None:
    with pytest.raises(rb.QuotaError):
        rb.fastapi.limit("5/fortnight")
    with pytest.raises(rb.QuotaError):
        rb.flask.limit(-1)
    with pytest.raises(TypeError, match='"concurency_limit": is not a middleware option'):
        rb.fastapi.limit("5/minute", concurency_limit=3)
    with pytest.raises(TypeError, match='invalid key "42": is "ip", a header name, or a function of the request'):
        rb.flask.limit("5/minute", key=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        rb.fastapi.limit("5/minute", missing_key="sometimes")


def test_metrics_example_counts_exactly_what_was_sent(uvicorn_url: Any) -> None:
    """examples/metrics.py over real HTTP: 8 logins (5 admitted, 3 refused)
    and 3 API calls, then the scraped counters hold exactly those numbers."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "metrics_example", Path(__file__).resolve().parent.parent / "examples" / "metrics.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with httpx.Client(base_url=uvicorn_url(example.app), timeout=5) as client:
        statuses = [client.post("/login").status_code for _ in range(8)]
        assert statuses == [200] * 5 + [429] * 3
        assert all(client.get("/api/items", headers={"x-api-key": "k"}).status_code == 200 for _ in range(3))
        text = client.get("/metrics").text
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("ratebound_requests_total{")
    }
    assert samples == {
        'ratebound_requests_total{outcome="allowed",policy="default",route="/login"}': 5.0,
        'ratebound_requests_total{outcome="refused",policy="default",route="/login"}': 3.0,
        'ratebound_requests_total{outcome="allowed",policy="burst",route="/api/items"}': 3.0,
        'ratebound_requests_total{outcome="allowed",policy="hourly",route="/api/items"}': 3.0,
    }, text


def test_middleware_on_decision_reports_refusing_policy_and_shedding() -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    events: list = []
    app = rb.asgi.RateLimitMiddleware(
        Starlette(routes=[Route("/", hello)]),
        policies={"burst": "100/s", "tiny": {"algorithm": "fixed_window", "limit": 1, "window": 60}},
        key_header="x-api-key",
        on_decision=events.append,
        label="api",
    )
    with TestClient(app) as c:
        assert c.get("/", headers={"x-api-key": "a"}).status_code == 200
        assert c.get("/", headers={"x-api-key": "a"}).status_code == 429
    assert events == [
        rb.RateLimitEvent("allowed", None, ("burst", "tiny"), "api"),
        rb.RateLimitEvent("refused", "tiny", ("burst", "tiny"), "api"),
    ]
    # WSGI, with a concurrency limit of 1 and a request already inside: shed.
    import flask

    seen: list = []
    inner = flask.Flask(__name__)
    inner.get("/")(lambda: "ok")
    wsgi = rb.wsgi.RateLimitMiddleware(inner.wsgi_app, rate=100, concurrency_limit=1, on_decision=seen.append)
    assert wsgi.gate.try_enter()  # one request in flight
    inner.wsgi_app = wsgi  # type: ignore[method-assign]
    assert inner.test_client().get("/").status_code == 503
    wsgi.gate.leave()
    assert [e.outcome for e in seen] == ["shed"]
