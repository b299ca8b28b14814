"""Django: ``rb.django.RateLimitMiddleware`` configured from
``settings.RATEBOUND``, in Django's sync and async modes, over Django's test
clients, wsgiref and uvicorn, replaying spec/gate.json over HTTP under
wsgiref and uvicorn (Django's settings and the site are
django_support.py's)."""

from __future__ import annotations

import re
from typing import Any, Callable

import pytest

# First: it configures Django's settings (urls is a fixture).
from django_support import MIDDLEWARE, MODES, body_of, client_for, hello, site, urls  # noqa: F401

from django.conf import settings  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402

import ratebound as rb  # noqa: E402

# Functions the settings name by dotted path.
RECORDED: list[rb.RateLimitEvent] = []


def user_key(request: HttpRequest) -> str | None:
    return request.headers.get("x-user")


def is_payment(request: HttpRequest) -> bool:
    return request.path == "/pay"


def record(event: rb.RateLimitEvent) -> None:
    RECORDED.append(event)


@pytest.mark.parametrize("transport", MODES + ["wsgiref", "uvicorn"])
def test_middleware_refuses_per_key(urls: Callable[..., str], transport: str) -> None:
    clock = rb.ManualClock()
    with site(urls, transport, rate=1, burst=2, key_header="x-api-key", clock=clock) as client:
        first = client.get("/", headers={"x-api-key": "carol"})
        assert first.status_code == 200
        assert first.headers["ratelimit-policy"] == '"default";q=2;w=2'
        assert first.headers["ratelimit"] == '"default";r=1;t=1'
        statuses = [client.get("/", headers={"x-api-key": user}).status_code for user in ("alice", "alice")]
        refused = client.get("/", headers={"x-api-key": "alice"})
        assert statuses + [refused.status_code] == [200, 200, 429]
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["ratelimit"] == '"default";r=0;t=2'
        assert refused.content == b"rate limit exceeded; retry in 1 s\n"
        assert client.get("/", headers={"x-api-key": "bob"}).status_code == 200
        clock.advance(1)
        assert client.get("/", headers={"x-api-key": "alice"}).status_code == 200


@pytest.mark.parametrize("transport", MODES)
def test_middleware_and_a_view_limit_both_show_their_fields(urls: Callable[..., str], transport: str) -> None:
    clock = rb.ManualClock()
    login = rb.django.limit(policies={"login": "5/minute"}, clock=clock)(hello)
    settings = {"policies": {"site": "10/s"}, "clock": clock}
    with override_settings(ROOT_URLCONF=urls(path("login", login)), MIDDLEWARE=MIDDLEWARE, RATEBOUND=settings):
        with client_for(transport) as client:
            first = client.get("/login")
            assert first.status_code == 200
            # The site's fields first (it decided first), then the view's:
            # one list, neither lost — the core's rule in every front door.
            assert first.headers["ratelimit-policy"] == '"site";q=10;w=1, "login";q=5;w=60'
            assert first.headers["ratelimit"] == '"site";r=9;t=1, "login";r=4;t=12'


@pytest.mark.parametrize("transport", MODES)
def test_middleware_exempt_paths_and_url_names(urls: Callable[..., str], transport: str) -> None:
    clock = rb.ManualClock()
    with site(urls, transport, rate=1, burst=1, exempt=["/health", "status"], clock=clock) as client:
        assert [client.get("/").status_code for _ in range(2)] == [200, 429]
        for exempt in ("/health", "/health/deep", "/about/status"):
            responses = [client.get(exempt) for _ in range(3)]
            assert [r.status_code for r in responses] == [200, 200, 200], exempt
            assert "ratelimit" not in responses[0].headers
        # A prefix is a whole path segment: /healthz is limited (and spent).
        assert client.get("/healthz").status_code == 429


@pytest.mark.parametrize("transport", MODES)
def test_middleware_dotted_paths_and_on_decision(urls: Callable[..., str], transport: str) -> None:
    clock = rb.ManualClock()
    RECORDED.clear()
    options = {
        "policies": {"burst": "100/s", "tiny": {"algorithm": "fixed_window", "limit": 1, "window": 60}},
        "key": f"{__name__}.user_key",
        "exempt": f"{__name__}.is_payment",
        "on_decision": f"{__name__}.record",
        "label": "site",
        "clock": clock,
    }
    with site(urls, transport, **options) as client:
        assert client.get("/", headers={"x-user": "ann"}).status_code == 200
        assert client.get("/", headers={"x-user": "ann"}).status_code == 429
        assert client.get("/", headers={"x-user": "bob"}).status_code == 200
        assert client.get("/pay").status_code == 200  # exempt: not told
    policies = ("burst", "tiny")
    assert RECORDED == [
        rb.RateLimitEvent("allowed", None, policies, "site"),
        rb.RateLimitEvent("refused", "tiny", policies, "site"),
        rb.RateLimitEvent("allowed", None, policies, "site"),
    ]


@pytest.mark.parametrize("transport", MODES)
def test_middleware_ignores_forged_forwarding_headers(urls: Callable[..., str], transport: str) -> None:
    clock = rb.ManualClock()
    with site(urls, transport, rate=1, burst=1, clock=clock) as client:
        assert client.get("/").status_code == 200
        for name in ("x-forwarded-for", "forwarded", "x-real-ip"):
            forged = {name: "for=203.0.113.9" if name == "forwarded" else "203.0.113.9"}
            assert client.get("/", headers=forged).status_code == 429, forged
    # Behind a trusted proxy (the test clients' peer is 127.0.0.1) the header names the client.
    with site(urls, transport, rate=1, burst=1, trusted_proxies=["127.0.0.1/32"], clock=clock) as client:
        statuses = [client.get("/", headers={"x-forwarded-for": ip}).status_code
                    for ip in ("203.0.113.9", "203.0.113.10", "203.0.113.9")]
        assert statuses == [200, 200, 429]


# An async streaming body is for ASGI (under WSGI Django reads it whole, with a warning).
@pytest.mark.parametrize(
    "transport, stream", [("client", "/stream"), ("async_client", "/stream"), ("async_client", "/astream")]
)
def test_middleware_sheds_and_gives_places_back(urls: Callable[..., str], transport: str, stream: str) -> None:
    clock = rb.ManualClock()
    events: list[rb.RateLimitEvent] = []
    options = {"rate": 100, "concurrency_limit": 1, "critical": is_payment, "on_decision": events.append}
    with site(urls, transport, clock=clock, **options) as client:
        # Each ordinary response gives its place back when the view answers.
        assert [client.get("/").status_code for _ in range(3)] == [200, 200, 200]
        streaming = client.get(stream)  # holds its place until its body is sent
        assert streaming.is_async == (stream == "/astream")
        shed = client.get("/")
        assert (shed.status_code, shed.headers["retry-after"]) == (503, "1")
        assert client.get("/pay").status_code == 200  # critical: never shed
        assert body_of(streaming) == b"chunk 1 chunk 2"
        assert client.get("/").status_code == 200
    assert [e.outcome for e in events] == ["allowed"] * 4 + ["shed", "allowed", "allowed"]


def priority_from_header(request: HttpRequest) -> str:
    return request.headers.get("x-priority", "normal")


@pytest.mark.parametrize("transport", MODES)
def test_middleware_priorities(urls: Callable[..., str], transport: str) -> None:
    events: list[rb.RateLimitEvent] = []
    options = {
        "rate": 100, "concurrency_limit": 2, "priority": f"{__name__}.priority_from_header",
        "on_decision": events.append,
    }
    with site(urls, transport, **options) as client:

        def status(priority: str) -> int:
            return int(client.get("/", headers={"x-priority": priority}).status_code)

        first = client.get("/stream")  # holds a place until its body is sent
        assert status("background") == 503  # the share (2 x 0.5) is taken
        assert status("normal") == 200
        second = client.get("/stream")
        assert [status("normal"), status("critical"), status("background")] == [503, 200, 503]
        assert body_of(first) + body_of(second) == b"chunk 1 chunk 2" * 2
        assert status("background") == 200  # every place back
    shed = [e.priority for e in events if e.outcome == "shed"]
    assert shed == ["background", "normal", "background"]


@pytest.mark.parametrize("transport", MODES)
def test_middleware_adaptive_limit_from_settings(urls: Callable[..., str], transport: str) -> None:
    options = {"rate": 100, "concurrency_limit": "auto", "concurrency_max": 50, "priority": "background"}
    with site(urls, transport, **options) as client:
        # The limit starts at 20: a background request alone is far below its share.
        assert [client.get("/").status_code for _ in range(3)] == [200] * 3
        streaming = client.get("/stream")
        assert body_of(streaming) == b"chunk 1 chunk 2"


@pytest.mark.parametrize("transport", MODES)
def test_middleware_with_a_shared_limit(urls: Callable[..., str], transport: str, tmp_path: Any) -> None:
    clock = rb.ManualClock()
    host = rb.SharedKeyedLimiter(str(tmp_path / "site.limit"), rate="1/h", burst=2, max_keys=1000)
    events: list[rb.RateLimitEvent] = []
    options = {"policies": {"local": "100/s", "host": host}, "key_header": "x-api-key", "on_decision": events.append}
    with site(urls, transport, clock=clock, **options) as client:
        responses = [client.get("/", headers={"x-api-key": "k"}) for _ in range(3)]
        assert [r.status_code for r in responses] == [200, 200, 429]
        assert responses[0].headers["ratelimit-policy"] == '"local";q=100;w=1, "host";q=2;w=7200'
    assert [(e.outcome, e.policy) for e in events] == [("allowed", None), ("allowed", None), ("refused", "host")]


@pytest.mark.parametrize(
    "ratebound, message, cause",
    [
        ({"rate": "5/minute", "concurency_limit": 3}, "unknown option 'concurency_limit'", None),
        ({"rate": "5/fortnight"}, 'cannot parse "5/fortnight"', rb.QuotaError),
        ({"rate": 5, "missing_key": "sometimes"}, 'cannot parse "sometimes": missing_key', rb.QuotaError),
        ({"rate": 5, "key": "nowhere.key_of"}, "key 'nowhere.key_of' cannot be imported", ImportError),
        ({"rate": 5, "exempt": ["/health", 7]}, "exempt lists path prefixes and URL names", None),
        ({"rate": 5, "key": user_key, "key_header": "x-api-key"}, 'given more than once": give the key once: key ("ip", a header name or a function of the request) or key_header', TypeError),
        ("10/s", "settings.RATEBOUND is a dict of options, not str", None),
        ({"rate": 5, "concurrency_limit": "auto", "priority": "urgent"}, 'invalid priority "urgent": is "critical"', rb.ConfigError),
        ({"rate": 5, "concurrency_limit": 4, "priority": "nowhere.priority_of"}, "priority 'nowhere.priority_of' cannot be imported", ImportError),
        ({"rate": 5, "concurrency_limit": "auto", "concurrency_tolerance": float("nan")}, "invalid concurrency_tolerance NaN", rb.QuotaError),
        ({"rate": 5, "concurrency_limit": 4, "concurrency_min": 2}, 'invalid concurrency_limit "4": is a fixed number', rb.ConfigError),
        ({"rate": 5, "background_fraction": 0.2}, 'invalid background_fraction "0.2"', rb.ConfigError),
    ],
)
def test_middleware_bad_settings_fail_at_startup(ratebound: Any, message: str, cause: Any) -> None:
    with override_settings(MIDDLEWARE=MIDDLEWARE, RATEBOUND=ratebound):
        with pytest.raises(ImproperlyConfigured, match=re.escape(message)) as failure:
            WSGIHandler()  # loads the middleware: what a server does at startup
    if cause is not None:
        assert isinstance(failure.value.__cause__, cause)


def test_middleware_without_settings_fails_at_startup() -> None:
    from django.core.wsgi import get_wsgi_application

    with override_settings(MIDDLEWARE=MIDDLEWARE):
        assert not hasattr(settings, "RATEBOUND")
        with pytest.raises(ImproperlyConfigured, match=r"needs settings\.RATEBOUND"):
            get_wsgi_application()


def test_middleware_redis_limiter_of_the_wrong_kind_fails_at_startup() -> None:
    import redis

    import ratebound.redis as rbr

    sync_bucket = rbr.TokenBucket(redis.Redis(host="127.0.0.1", port=1), rate=10)
    async_bucket = rbr.AsyncTokenBucket(redis.asyncio.Redis(host="127.0.0.1", port=1), rate=10)
    with override_settings(MIDDLEWARE=MIDDLEWARE, RATEBOUND={"policies": {"global": sync_bucket}}):
        with pytest.raises(ImproperlyConfigured, match=r"needs an asyncio limiter \(rb.redis.AsyncTokenBucket, ...\) under ASGI, got TokenBucket"):
            ASGIHandler()
    with override_settings(MIDDLEWARE=MIDDLEWARE, RATEBOUND={"policies": {"global": async_bucket}}):
        with pytest.raises(ImproperlyConfigured, match=r"needs a sync limiter \(rb.redis.TokenBucket, ...\) under WSGI, got AsyncTokenBucket"):
            WSGIHandler()


# spec/gate.json over HTTP: the middleware, loaded from settings.RATEBOUND
# per vector, behind wsgiref (WSGI) and uvicorn (ASGI), with the servers and
# the replay of test_gate_spec.py (which gives each request the vector's
# peer as its client address).
from test_gate_spec import RULES, VECTORS, asgi_server, replay, replay_merge, wsgi_server  # noqa: E402,F401 - the servers are fixtures


class LoadedMiddleware(rb.django.RateLimitMiddleware):
    """The middleware, remembered when Django loads it: the replay takes
    concurrency places from its gate (test scaffolding only)."""

    last: Any = None

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)
        LoadedMiddleware.last = self


def ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def given_key(request: HttpRequest) -> Any:
    return request.META.get("HTTP_X_GIVEN")


@pytest.mark.parametrize("server", ["wsgiref", "uvicorn"])
def test_middleware_replays_every_gate_vector(server: str, urls: Callable[..., str], request: Any) -> None:
    base, current = request.getfixturevalue({"wsgiref": "wsgi_server", "uvicorn": "asgi_server"}[server])
    handler = {"wsgiref": WSGIHandler, "uvicorn": ASGIHandler}[server]

    def build(inner: Any, **options: Any) -> Any:
        # What a server does at startup: Django loads the middleware, which
        # reads settings.RATEBOUND (the vector's options).
        with override_settings(RATEBOUND=options):
            app = handler()
        app.gate = LoadedMiddleware.last.gate  # type: ignore[attr-defined]
        return app

    middleware = [f"{__name__}.LoadedMiddleware"]
    with override_settings(ROOT_URLCONF=urls(path("", ok)), MIDDLEWARE=middleware):
        failures = replay(base, current, build, given_key, asyncio_=server == "uvicorn")
        # spec/gate_rules.json's client addresses: REMOTE_ADDR unless the
        # middleware trusts proxies.
        failures += replay(base, current, build, given_key, server == "uvicorn", RULES["client_address"])
    assert not failures, "\n".join(failures)
    assert len(VECTORS) >= 48


@pytest.mark.parametrize("server", ["wsgiref", "uvicorn"])
def test_middleware_merges_a_view_limit_by_the_core_rule(server: str, urls: Callable[..., str], request: Any) -> None:
    """spec/gate_rules.json's ``merge`` vectors: a view's ``limit`` under
    the middleware. Before: the view's entries came first and the site's
    legacy fields overwrote the tighter view's."""
    base, current = request.getfixturevalue({"wsgiref": "wsgi_server", "uvicorn": "asgi_server"}[server])
    handler = {"wsgiref": WSGIHandler, "uvicorn": ASGIHandler}[server]
    made: list[Any] = []

    def make(site: dict[str, Any], route: dict[str, Any]) -> Any:
        view = rb.django.limit(**route)(ok)
        made.append(override_settings(ROOT_URLCONF=urls(path("", view)), RATEBOUND=site))
        made[-1].enable()
        return handler()

    try:
        with override_settings(MIDDLEWARE=MIDDLEWARE):
            failures = replay_merge(base, current, make)
    finally:
        for o in reversed(made):
            o.disable()
    assert not failures, "\n".join(failures)
