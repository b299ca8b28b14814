"""The ASGI and WSGI middleware with real frameworks: Starlette and FastAPI
(TestClient, and uvicorn on 127.0.0.1 with httpx), Flask (its test client,
and wsgiref on 127.0.0.1)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

import ratebound as rb
from routes_spec import uvicorn_serving, wsgiref_serving


def starlette_app() -> Starlette:
    async def hello(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello), Route("/health", hello)])


def flask_app() -> Flask:
    app = Flask(__name__)

    @app.get("/")
    def hello() -> str:
        return "hello"

    @app.get("/health")
    def health() -> str:
        return "ok"

    return app


def scenario_2(get) -> None:  # type: ignore[no-untyped-def]
    """DESIGN.md scenario 2: alice 200, alice 200, alice 429 Retry-After 1, bob 200."""
    statuses = []
    for user in ("alice", "alice", "alice", "bob"):
        r = get(user)
        statuses.append(r.status_code)
        if user == "alice" and r.status_code == 429:
            assert r.headers["retry-after"] == "1"
            assert r.headers["ratelimit"] == '"default";r=0;t=2'
            assert "retry in 1 s" in r.text
    assert statuses == [200, 200, 429, 200]


def test_asgi_scenario_2_starlette() -> None:
    clock = rb.ManualClock()
    app = rb.asgi.RateLimitMiddleware(starlette_app(), rate=1, burst=2, key_header="X-API-Key", clock=clock)
    with TestClient(app) as client:
        first = client.get("/", headers={"x-api-key": "carol"})
        assert first.headers["ratelimit-policy"] == '"default";q=2;w=2'
        assert first.headers["ratelimit"] == '"default";r=1;t=1'
        scenario_2(lambda user: client.get("/", headers={"x-api-key": user}))


def test_asgi_scenario_2_fastapi_and_retry_after_honesty() -> None:
    api = FastAPI()

    @api.get("/")
    def root() -> dict:
        return {"ok": True}

    clock = rb.ManualClock()
    app = rb.asgi.RateLimitMiddleware(api, rate="1/s burst 2", key_header="x-api-key", clock=clock)
    with TestClient(app) as client:
        scenario_2(lambda user: client.get("/", headers={"x-api-key": user}))
        # A client that waits Retry-After and retries is admitted.
        clock.advance(1)
        assert client.get("/", headers={"x-api-key": "alice"}).status_code == 200


@pytest.mark.parametrize("rate", [0.3, 2.5])
def test_retry_after_is_never_early(rate: float) -> None:
    clock = rb.ManualClock()
    app = rb.asgi.RateLimitMiddleware(starlette_app(), rate=rate, key_header="x-api-key", clock=clock)
    with TestClient(app) as client:
        for _ in range(20):
            while client.get("/", headers={"x-api-key": "k"}).status_code == 200:
                pass
            r = client.get("/", headers={"x-api-key": "k"})
            assert r.status_code == 429
            secs = int(r.headers["retry-after"])
            # Waiting the advertised whole seconds is always enough.
            clock.advance(secs)
            assert client.get("/", headers={"x-api-key": "k"}).status_code == 200
            clock.advance(0.123)


def test_asgi_ip_keys_proxies_exemptions_and_problem_json() -> None:
    clock = rb.ManualClock()
    inner = starlette_app()
    app = rb.asgi.RateLimitMiddleware(
        inner, rate=1, burst=1, clock=clock, body="problem+json",
        exempt=lambda scope: scope["path"] == "/health",
    )
    with TestClient(app, client=("2001:db8::1", 1234)) as client:
        assert client.get("/").status_code == 200
        r = client.get("/", headers={"x-forwarded-for": "203.0.113.9"})
        assert r.status_code == 429  # an untrusted header does not change the key
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["status"] == 429
        assert all(client.get("/health").status_code == 200 for _ in range(5))
    with TestClient(app, client=("2001:db8::2", 1234)) as client:
        assert client.get("/").status_code == 429  # same /64
    with TestClient(app, client=("2001:db8:0:1::2", 1234)) as client:
        assert client.get("/").status_code == 200
    trusted = rb.asgi.RateLimitMiddleware(inner, rate=1, burst=1, clock=clock, trusted_proxies=["10.0.0.0/8"])
    with TestClient(trusted, client=("10.0.0.5", 1234)) as client:
        assert client.get("/", headers={"x-forwarded-for": "203.0.113.9"}).status_code == 200
        assert client.get("/", headers={"x-forwarded-for": "203.0.113.10"}).status_code == 200
        assert client.get("/", headers={"x-forwarded-for": "203.0.113.9"}).status_code == 429


def test_asgi_multiple_policies_lose_no_tokens() -> None:
    clock = rb.ManualClock()
    app = rb.asgi.RateLimitMiddleware(
        starlette_app(),
        policies={"burst": "1/minute burst 3", "second": {"algorithm": "fixed_window", "limit": 2, "window": 1}},
        key_header="x-api-key",
        clock=clock,
    )
    with TestClient(app) as client:
        get = lambda: client.get("/", headers={"x-api-key": "k"}).status_code  # noqa: E731
        # The third is refused by the per-second window; the burst policy had
        # admitted it and must give its token back.
        assert [get() for _ in range(2)] == [200, 200]
        refused = client.get("/", headers={"x-api-key": "k"})
        assert refused.status_code == 429
        # Nothing was counted, and the header says so: the burst still has 1.
        assert refused.headers["ratelimit"] == '"burst";r=1;t=120, "second";r=0;t=1'
        clock.advance(1)
        # The burst's third token is still there (it refills 1/minute).
        assert [get(), get()] == [200, 429]
    assert app.gate.policy_field == '"burst";q=3;w=180, "second";q=2;w=1'


def test_asgi_missing_key_and_malformed_input() -> None:
    clock = rb.ManualClock()
    app = rb.asgi.RateLimitMiddleware(starlette_app(), rate=1, key_header="x-api-key", missing_key=401, clock=clock)
    with TestClient(app) as client:
        assert client.get("/").status_code == 401
        assert client.get("/", headers={"x-api-key": "x" * 65536}).status_code == 200
        assert client.get("/", headers={"x-api-key": b"\xff\xfe"}).status_code == 200
    with pytest.raises(TypeError):
        rb.asgi.RateLimitMiddleware(starlette_app())
    with pytest.raises(rb.QuotaError):
        rb.asgi.RateLimitMiddleware(starlette_app(), rate=-1)
    with pytest.raises(ValueError):
        rb.asgi.RateLimitMiddleware(starlette_app(), rate=1, missing_key="sometimes")


def test_asgi_over_real_http_with_uvicorn() -> None:
    clock = rb.ManualClock()
    app = rb.asgi.RateLimitMiddleware(starlette_app(), rate=1, burst=2, key_header="x-api-key", clock=clock)
    with uvicorn_serving(app) as url, httpx.Client(base_url=url, timeout=5) as client:
        scenario_2(lambda user: client.get("/", headers={"x-api-key": user}))


def test_wsgi_scenario_2_flask() -> None:
    clock = rb.ManualClock()
    app = flask_app()
    app.wsgi_app = rb.wsgi.RateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, rate=1, burst=2, key_header="X-API-Key", clock=clock,
        exempt=lambda environ: environ["PATH_INFO"] == "/health",
    )
    client = app.test_client()
    first = client.get("/", headers={"X-API-Key": "carol"})
    assert first.headers["RateLimit-Policy"] == '"default";q=2;w=2'
    scenario_2(lambda user: client.get("/", headers={"X-API-Key": user}))
    assert all(client.get("/health").status_code == 200 for _ in range(5))
    clock.advance(1)
    assert client.get("/", headers={"X-API-Key": "alice"}).status_code == 200


def test_wsgi_legacy_headers_and_ip_keys() -> None:
    clock = rb.ManualClock()
    app = flask_app()
    app.wsgi_app = rb.wsgi.RateLimitMiddleware(app.wsgi_app, rate=1, burst=2, headers="legacy", clock=clock)  # type: ignore[method-assign]
    client = app.test_client()
    r = client.get("/", environ_base={"REMOTE_ADDR": "192.0.2.1"})
    assert (r.headers["X-RateLimit-Limit"], r.headers["X-RateLimit-Remaining"]) == ("2", "1")
    assert "RateLimit" not in r.headers
    client.get("/", environ_base={"REMOTE_ADDR": "192.0.2.1"})
    assert client.get("/", environ_base={"REMOTE_ADDR": "192.0.2.1"}).status_code == 429
    assert client.get("/", environ_base={"REMOTE_ADDR": "192.0.2.2"}).status_code == 200


def test_wsgi_over_real_http() -> None:
    clock = rb.ManualClock()
    app = flask_app()
    app.wsgi_app = rb.wsgi.RateLimitMiddleware(app.wsgi_app, rate=1, burst=2, key_header="x-api-key", clock=clock)  # type: ignore[method-assign]

    with wsgiref_serving(app) as url, httpx.Client(base_url=url, timeout=5) as client:
        scenario_2(lambda user: client.get("/", headers={"x-api-key": user}))


def test_wsgi_keys_are_lossless_outside_latin1() -> None:
    """A WSGI server that hands over characters above U+00FF (it decoded
    the bytes itself) must not fold them: ``user€`` and ``user?`` are two
    clients (each non-latin-1 character once became ``?``). PEP 3333's
    latin-1 strings are the request's bytes: ``user\\xe2\\x82\\xac`` is
    ``user€`` sent as UTF-8, one client with it."""
    def app(environ, start_response):  # type: ignore[no-untyped-def]
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    mw = rb.wsgi.RateLimitMiddleware(app, rate="1/hour", burst=1, key_header="x-api-key")

    def status(key: str) -> str:
        seen: list[str] = []
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "127.0.0.1", "HTTP_X_API_KEY": key}
        body = mw(environ, lambda s, h, exc_info=None: seen.append(s))
        b"".join(body)
        return seen[0]

    assert status("user€") == "200 OK"
    assert status("user?") == "200 OK"
    assert status("userΩ") == "200 OK"
    assert status("user€").startswith("429")
    assert status("user\xe2\x82\xac").startswith("429")
    # Lone surrogates (a server's undecodable bytes, surrogateescape): kept.
    assert status("user\udcff") == "200 OK"
    assert status("user\udcfe") == "200 OK"
    assert status("user\udcff").startswith("429")


def test_a_policy_field_the_middleware_does_not_take_is_an_error() -> None:
    """``{"rate": 1, "brust": 3}`` once ran with the default burst, the
    misspelt field ignored; unknown option names already raised."""
    for make in (
        lambda p: rb.asgi.RateLimitMiddleware(starlette_app(), policies=p),
        lambda p: rb.wsgi.RateLimitMiddleware(flask_app().wsgi_app, policies=p),
    ):
        with pytest.raises(TypeError, match="brust"):
            make({"p": {"rate": 1, "brust": 3}})
        make({"p": {"rate": 1, "burst": 3}})
