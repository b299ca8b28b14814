"""Replays spec/gate.json — the whole middleware decision — over real HTTP
on 127.0.0.1: the ASGI middleware in front of Starlette under uvicorn, and
the WSGI middleware in front of Flask under wsgiref, with httpx sending each
vector's header lines in order (test_django_middleware.py replays it through Django's
middleware with these servers). The Rust core, the tower layer and the
Express/Fastify middleware replay the same file."""

from __future__ import annotations

import json
import pathlib
import socket
import threading
import time
from typing import Any, Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

import httpx
import redis
import pytest
import uvicorn
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import ratebound as rb

SPEC = json.loads((pathlib.Path(__file__).parents[3] / "spec" / "gate.json").read_text())
VECTORS = SPEC["vectors"]
RULES = json.loads((pathlib.Path(__file__).parents[3] / "spec" / "gate_rules.json").read_text())


# The fields a policy of spec/gate.json may have. The middleware refuses a
# keyword it does not know, but reads only the policy fields it knows: a
# misspelt one would replay another policy than the file says.
POLICY_FIELDS = {"name", "algorithm", "rate", "burst", "limit", "window"}


class FailingStore:
    """A stand-in for a remote policy's store client whose every call
    raises the error a vector's ``fails`` names: ``"error"`` — an error no
    fail policy covers (a ``RuntimeError``, as an event-loop error is) — or
    ``"too_many_keys"`` (a full table's ``TooManyKeys``). A Redis limiter
    given it checks through it as through any client with ``evalsha``."""

    def __init__(self, fails: str) -> None:
        assert fails in ("error", "too_many_keys", "store_misconfigured"), fails
        self.fails = fails

    def error(self) -> Exception:
        if self.fails == "too_many_keys":
            return rb.TooManyKeys("the table is full", "too_many_keys")
        if self.fails == "store_misconfigured":
            # What redis-py raises for a wrong password: the limiter tells
            # it a misconfiguration (its fail policy is "open" here).
            return redis.exceptions.AuthenticationError("WRONGPASS invalid username-password pair or user is disabled.")
        return RuntimeError("the store failed")

    def evalsha(self, *args: Any) -> Any:
        raise self.error()

    eval = evalsha


class AsyncFailingStore(FailingStore):
    """``FailingStore`` for an asyncio limiter."""

    async def evalsha(self, *args: Any) -> Any:
        raise self.error()

    eval = evalsha


class Told:
    """The outcomes ``on_decision`` was told, in order."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def __call__(self, event: Any) -> None:
        self.outcomes.append(event.outcome)


def middleware_options(
    options: dict[str, Any], clock: rb.ManualClock, given: Callable[[Any], Any], asyncio_: bool, told: Told
) -> dict[str, Any]:
    """The vector's options as the middleware's keyword arguments; a
    remote policy is a Redis limiter (asyncio under ASGI) over a
    ``FailingStore``."""
    out: dict[str, Any] = {"clock": clock, "on_decision": told}
    for name, value in options.items():
        if name == "policies":
            for p in value:
                assert set(p) <= POLICY_FIELDS, f"unknown policy fields {set(p) - POLICY_FIELDS}"
            out.setdefault("policies", {}).update({p["name"]: {k: v for k, v in p.items() if k != "name"} for p in value})
        elif name == "remote":
            for p in value:
                assert set(p) <= POLICY_FIELDS | {"fails"}, f"unknown remote fields {set(p) - POLICY_FIELDS}"
                assert set(p) & {"limit", "window", "algorithm"} == set(), "a token bucket"
                store = (AsyncFailingStore if asyncio_ else FailingStore)(p["fails"])
                bucket = rb.redis.AsyncTokenBucket if asyncio_ else rb.redis.TokenBucket
                out.setdefault("policies", {})[p["name"]] = bucket(store, rate=p["rate"], burst=p["burst"], on_error="open")
        elif name == "key":
            assert value == "given"
            out["key"] = given
        else:
            out[name] = value
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Current:
    """The middleware under test now: one server serves every vector."""

    app: Any = None


def first_line(lines: list[tuple[bytes, bytes]], name: bytes) -> Any:
    return next((v.decode("latin-1") for n, v in lines if n == name), None)


@pytest.fixture(scope="module")
def asgi_server() -> Iterator[tuple[str, Current]]:
    current = Current()

    async def hello(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("ok")

    inner = Starlette(routes=[Route("/", hello)])

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        # Test scaffolding, not the middleware: the client address the
        # vector names, as a proxy-less server would see it.
        peer = first_line(scope["headers"], b"x-test-peer")
        await current.app(dict(scope, client=(peer, 4711)), receive, send)

    port = free_port()
    current.app = inner
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.02)
    current.inner = inner  # type: ignore[attr-defined]
    yield f"http://127.0.0.1:{port}", current
    server.should_exit = True
    thread.join(timeout=5)


@pytest.fixture(scope="module")
def wsgi_server() -> Iterator[tuple[str, Current]]:
    current = Current()
    flask = Flask(__name__)

    @flask.get("/")
    def hello() -> str:
        return "ok"

    def app(environ, start_response):  # type: ignore[no-untyped-def]
        environ["REMOTE_ADDR"] = environ.get("HTTP_X_TEST_PEER", "")
        return current.app(environ, start_response)

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    current.inner = flask.wsgi_app  # type: ignore[attr-defined]
    yield f"http://127.0.0.1:{server.server_port}", current
    server.shutdown()
    thread.join(timeout=5)


def compare(at: str, response: httpx.Response, expect: dict[str, Any], failures: list[str]) -> None:
    if response.status_code != expect["status"]:
        failures.append(f"{at}: status = {response.status_code}, want {expect['status']}")
    for name, want in expect.get("headers", {}).items():
        got = response.headers.get(name)
        if got != want:
            failures.append(f"{at}: {name} = {got!r}, want {want!r}")
    if "body" in expect and response.text != expect["body"]:
        failures.append(f"{at}: body = {response.text!r}, want {expect['body']!r}")


def replay(
    base: str, current: Current, build: Callable[..., Any], given: Callable[[Any], Any], asyncio_: bool,
    vectors: list[Any] = VECTORS,
) -> list[str]:
    failures: list[str] = []
    with httpx.Client(base_url=base, timeout=10) as client:
        for v in vectors:
            clock = rb.ManualClock()
            told = Told()
            options = middleware_options(v["options"], clock, given, asyncio_, told)
            mw = build(current.inner, **options)  # type: ignore[attr-defined]
            current.app = mw
            for i, r in enumerate(v["requests"]):
                if "at_ns" in r:
                    clock.set_ns(r["at_ns"])
                occupied = r.get("occupied", 0)
                assert all(mw.gate.try_enter() for _ in range(occupied))
                try:
                    lines = [("x-test-peer", r["peer"]), *[(n, val) for n, val in r["headers"]]]
                    response = client.get("/", headers=lines)
                finally:
                    for _ in range(occupied):
                        mw.gate.leave()
                at = f"{v['id']} step {i}"
                compare(at, response, r["expect"], failures)
                outcome = told.outcomes[-1] if told.outcomes else None
                if "outcome" in r["expect"] and outcome != r["expect"]["outcome"]:
                    failures.append(f"{at}: outcome = {outcome!r}, want {r['expect']['outcome']!r}")
    return failures


def test_spec_has_the_cases_the_issue_names() -> None:
    ids = {v["id"] for v in VECTORS}
    assert len(VECTORS) >= 40
    for needed in ("forged-forwarded-with-hops", "header-key-repeated-lines-are-no-key", "ip-ipv6-grouped-by-64",
                   "ip-ipv4-mapped-ipv6", "header-key-empty-is-no-key", "multi-policy-refusal-gives-back",
                   "shed-when-the-cap-is-full", "problem-json-body", "remote-store-error",
                   "remote-store-error-retry-after", "remote-full-table"):
        assert needed in ids


def test_asgi_replays_every_vector(asgi_server: tuple[str, Current]) -> None:
    base, current = asgi_server

    def given(scope: Any) -> Any:
        return first_line(scope["headers"], b"x-given")

    failures = replay(base, current, rb.asgi.RateLimitMiddleware, given, asyncio_=True)
    assert not failures, "\n".join(failures)


def test_wsgi_replays_every_vector(wsgi_server: tuple[str, Current]) -> None:
    base, current = wsgi_server

    def given(environ: Any) -> Any:
        return environ.get("HTTP_X_GIVEN")

    failures = replay(base, current, rb.wsgi.RateLimitMiddleware, given, asyncio_=False)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("trusted", [1, ["127.0.0.0/8"]])
def test_forged_forwarded_header_is_refused(asgi_server: tuple[str, Current], trusted: Any) -> None:
    """Issue 11 as a new user tried it: behind a proxy writing
    X-Forwarded-For, a client sending its own ``Forwarded: for=<anything>``
    no longer chooses its own key (before the fix: 5 x 200)."""
    base, current = asgi_server
    current.app = rb.asgi.RateLimitMiddleware(current.inner, rate=1, burst=1, trusted_proxies=trusted)  # type: ignore[attr-defined]
    statuses = []
    with httpx.Client(base_url=base) as client:
        for i in range(5):
            r = client.get("/", headers=[("x-test-peer", "127.0.0.1"), ("x-forwarded-for", "5.5.5.5"),
                                         ("forwarded", f"for=9.9.{i}.1")])
            statuses.append(r.status_code)
    assert statuses == [200, 429, 429, 429, 429]


def test_options_are_checked_by_the_core() -> None:
    app = Starlette()
    with pytest.raises(rb.ConfigError, match="client_ip_header.*trusted_proxies"):
        rb.asgi.RateLimitMiddleware(app, rate=1, client_ip_header="CF-Connecting-IP")
    with pytest.raises(rb.QuotaError, match="missing_key status 200"):
        rb.asgi.RateLimitMiddleware(app, rate=1, missing_key=200)
    with pytest.raises(rb.QuotaError, match="not an HTTP header name"):
        rb.wsgi.RateLimitMiddleware(app, rate=1, key_header="x api key")
    with pytest.raises(rb.QuotaError, match="10.0.0.0/33"):
        rb.wsgi.RateLimitMiddleware(app, rate=1, trusted_proxies=["10.0.0.0/33"])
    with pytest.raises(TypeError, match="trusted_proxies must not be a bool"):
        rb.asgi.RateLimitMiddleware(app, rate=1, trusted_proxies=True)
    with pytest.raises(rb.QuotaError, match="max_keys 0"):
        rb.asgi.RateLimitMiddleware(app, rate=1, max_keys=0)
    # The helper applies the middleware's rule.
    lines = [("X-Forwarded-For", "6.6.6.6"), ("x-forwarded-for", "203.0.113.9"), ("forwarded", "for=1.1.1.1")]
    assert rb.client_ip("127.0.0.1", lines, trusted_proxies=1) == "203.0.113.9"
    assert rb.client_ip("127.0.0.1", lines, trusted_proxies=1, client_ip_header="forwarded") == "1.1.1.1"
    assert rb.client_ip("127.0.0.1", lines) == "127.0.0.1"


def route_kwargs(options: dict[str, Any], clock: rb.ManualClock) -> dict[str, Any]:
    """A ``gate_rules.json`` limit's options as keyword arguments, for the
    middleware and for a route's ``limit`` alike."""
    out = {k: v for k, v in options.items() if k != "policies"}
    out["policies"] = {p["name"]: {k: v for k, v in p.items() if k != "name"} for p in options["policies"]}
    return dict(out, clock=clock)


def replay_merge(base: str, current: Current, make: Callable[[dict[str, Any], dict[str, Any]], Any]) -> list[str]:
    """Replays ``gate_rules.json``'s ``merge`` vectors: ``make(site, route)``
    is the app of one vector — the site middleware over a route with its
    own limit."""
    failures: list[str] = []
    with httpx.Client(base_url=base, timeout=10) as client:
        for v in RULES["merge"]:
            clock = rb.ManualClock()
            current.app = make(route_kwargs(v["site"], clock), route_kwargs(v["route"], clock))
            for i, r in enumerate(v["requests"]):
                response = client.get("/", headers=[("x-test-peer", r["peer"])])
                compare(f"{v['id']} step {i}", response, r["expect"], failures)
    assert len(RULES["merge"]) >= 4
    return failures


def test_asgi_merges_a_fastapi_route_limit_under_the_middleware(asgi_server: tuple[str, Current]) -> None:
    """Before: the middleware appended its fields to the route's, so the
    legacy fields came twice (``5, 2``)."""
    from fastapi import Depends, FastAPI

    base, current = asgi_server

    def make(site: dict[str, Any], route: dict[str, Any]) -> Any:
        app = FastAPI()

        @app.get("/", dependencies=[Depends(rb.fastapi.limit(**route))])
        def hello() -> str:
            return "ok"

        return rb.asgi.RateLimitMiddleware(app, **site)

    failures = replay_merge(base, current, make)
    assert not failures, "\n".join(failures)


def test_wsgi_merges_a_flask_route_limit_under_the_middleware(wsgi_server: tuple[str, Current]) -> None:
    base, current = wsgi_server

    def make(site: dict[str, Any], route: dict[str, Any]) -> Any:
        app = Flask(__name__)

        @app.get("/")
        @rb.flask.limit(**route)
        def hello() -> str:
            return "ok"

        return rb.wsgi.RateLimitMiddleware(app.wsgi_app, **site)

    failures = replay_merge(base, current, make)
    assert not failures, "\n".join(failures)


def test_client_address_is_the_peer_unless_the_middleware_trusts_proxies(
    asgi_server: tuple[str, Current], wsgi_server: tuple[str, Current]
) -> None:
    """spec/gate_rules.json's ``client_address`` vectors: the socket's peer
    (the server's client address) is the key; X-Forwarded-For counts only
    under the middleware's own ``trusted_proxies``."""
    vectors = RULES["client_address"]
    assert len(vectors) >= 2
    for (base, current), build, asyncio_ in ((asgi_server, rb.asgi.RateLimitMiddleware, True),
                                             (wsgi_server, rb.wsgi.RateLimitMiddleware, False)):
        failures = replay(base, current, build, lambda _: None, asyncio_, vectors)
        assert not failures, "\n".join(failures)


def test_route_options_follow_the_core_rule() -> None:
    """spec/gate_rules.json's ``route_options``: a route's ``limit`` takes
    every option of the middleware but the application's (shedding), by
    the core's rule. Before (issue 38): a whitelist of 8 options refused
    ``store_error_retry_after`` and remote policies, and named no rule."""
    rules = RULES["route_options"]
    values = {"concurrency_limit": 2, "concurrency_initial": 2, "concurrency_min": 1, "concurrency_max": 4,
              "concurrency_tolerance": 2.0, "background_fraction": 0.5, "critical": lambda r: False,
              "priority": "normal", "store_error_retry_after": 3, "trusted_proxies": 1,
              "client_ip_header": "x-forwarded-for", "ipv6_prefix": 48, "missing_key": "shared",
              "headers": "legacy", "body": "problem_json", "max_keys": 10, "overflow": "reject",
              "key_header": "x-api-key"}
    failures = []
    for t in rules["takes"]:
        name = t["option"]
        if name not in values:
            continue  # rate, policies: the limit's own arguments
        try:
            extra = {"trusted_proxies": 1} if name == "client_ip_header" else {}
            rb.fastapi.limit("5/minute", **{name: values[name]}, **extra)
            took = True
        except rb.ConfigError as e:
            took = False
            assert "route option" in str(e), e
        if took != t["takes"]:
            failures.append(f"{name}: takes = {took}")
    assert not failures, failures
    assert len(rules["takes"]) >= 20


def test_route_limits_take_remote_policies(asgi_server: tuple[str, Current], wsgi_server: tuple[str, Current]) -> None:
    """spec/gate.json's remote-policy vectors through a FastAPI route's and
    a Flask view's own limit: a remote policy's failure is answered by the
    core's rule there too (before: a route limit refused remote policies)."""
    from fastapi import Depends, FastAPI

    vectors = [v for v in VECTORS if "remote" in v["options"]]
    assert len(vectors) >= 3

    def fastapi_app(inner: Any, **options: Any) -> Any:
        app = FastAPI()

        @app.get("/", dependencies=[Depends(rb.fastapi.limit(**options))])
        def hello() -> str:
            return "ok"

        return app

    def flask_app(inner: Any, **options: Any) -> Any:
        app = Flask(__name__)

        @app.get("/")
        @rb.flask.limit(**options)
        def hello() -> str:
            return "ok"

        return app.wsgi_app

    # FastAPI answers a route limit's refusal through HTTPException (so the
    # application's exception handlers apply): its body is FastAPI's JSON.
    as_json = json.loads(json.dumps(vectors))
    for v in as_json:
        for r in v["requests"]:
            r["expect"].pop("body", None)
            r["expect"].get("headers", {}).pop("content-type", None)
    for (base, current), build, asyncio_, replayed in ((asgi_server, fastapi_app, True, as_json),
                                                       (wsgi_server, flask_app, False, vectors)):
        failures = replay(base, current, build, lambda _: None, asyncio_, replayed)
        assert not failures, "\n".join(failures)


def test_route_limits_take_exempt(asgi_server: tuple[str, Current], wsgi_server: tuple[str, Current]) -> None:
    """A route's limit takes the middleware's hooks but shedding's (the
    core's rule): ``exempt`` lets a request by untouched — no fields, not
    counted (before: a route limit refused it)."""
    from fastapi import Depends, FastAPI

    spare = lambda request: True  # noqa: E731
    fast = FastAPI()

    @fast.get("/", dependencies=[Depends(rb.fastapi.limit(1, 1, exempt=spare))])
    def hello() -> str:
        return "ok"

    flask = Flask(__name__)

    @flask.get("/")
    @rb.flask.limit(1, 1, exempt=spare)
    def flask_hello() -> str:
        return "ok"

    for (base, current), app in ((asgi_server, fast), (wsgi_server, flask.wsgi_app)):
        current.app = app
        with httpx.Client(base_url=base, timeout=10) as client:
            answers = [client.get("/", headers=[("x-test-peer", "192.0.2.1")]) for _ in range(3)]
        assert [r.status_code for r in answers] == [200, 200, 200]
        assert all("ratelimit" not in r.headers for r in answers)
