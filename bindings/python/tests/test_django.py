"""Django: ``rb.django.limit`` on function, class-based and async views —
the routes every framework is held to (``routes_spec.check_routes``) through
Django's test client, its ASGI test client, wsgiref and uvicorn on
127.0.0.1. The middleware's tests are test_django_middleware.py's; Django's
settings and the shared pieces are django_support.py's."""

from __future__ import annotations

from typing import Callable

import pytest

# First: it configures Django's settings. MODES and site are for
# test_first_use.py, which imports them from here; urls is a fixture.
from django_support import MODES, client_for, site, urls  # noqa: F401

from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import URLPattern, path  # noqa: E402
from django.utils.decorators import method_decorator  # noqa: E402
from django.views import View  # noqa: E402

import ratebound as rb  # noqa: E402
from routes_spec import check_routes  # noqa: E402


def function_views(clock: rb.ManualClock) -> list[URLPattern]:
    shared = rb.django.limit(1, 2, clock=clock)

    @rb.django.limit("5/minute", clock=clock)
    def login(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    @rb.django.limit(3, key="x-api-key", clock=clock)
    def api(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    def health(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    @shared
    def a(request: HttpRequest) -> HttpResponse:
        return HttpResponse("a")

    @shared
    def b(request: HttpRequest) -> HttpResponse:
        return HttpResponse("b")

    return [path("login", login), path("api", api), path("health", health), path("a", a), path("b", b)]


def class_views(clock: rb.ManualClock) -> list[URLPattern]:
    shared = rb.django.limit(1, 2, clock=clock)

    @rb.django.limit("5/minute", clock=clock)  # the class: every request to it
    class Login(View):
        def post(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")

    @method_decorator(rb.django.limit(3, key="x-api-key", clock=clock), name="dispatch")
    class Api(View):
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")

    class Health(View):
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")

    @shared
    class A(View):
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("a")

    class B(View):
        @method_decorator(shared)  # one handler
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("b")

    return [
        path("login", Login.as_view()),
        path("api", Api.as_view()),
        path("health", Health.as_view()),
        path("a", A.as_view()),
        path("b", B.as_view()),
    ]


def async_views(clock: rb.ManualClock) -> list[URLPattern]:
    shared = rb.django.limit(1, 2, clock=clock)

    @rb.django.limit("5/minute", clock=clock)
    async def login(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    @rb.django.limit(3, key="x-api-key", clock=clock)
    class Api(View):  # an async class-based view, decorated whole
        async def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")

    async def health(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    @shared
    async def a(request: HttpRequest) -> HttpResponse:
        return HttpResponse("a")

    @method_decorator(shared, name="dispatch")  # its dispatch is sync, its handlers async
    class B(View):
        async def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("b")

    return [
        path("login", login),
        path("api", Api.as_view()),
        path("health", health),
        path("a", a),
        path("b", B.as_view()),
    ]


VIEWS = {"function": function_views, "class": class_views, "async": async_views}


TRANSPORTS = ["client", "async_client", "wsgiref", "uvicorn"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("views", list(VIEWS))
def test_limit_on_views(views: str, transport: str, urls: Callable[..., str]) -> None:
    clock = rb.ManualClock()
    with override_settings(ROOT_URLCONF=urls(*VIEWS[views](clock))), client_for(transport) as client:
        check_routes(client)
        refused = client.post("/login")
        assert refused.status_code == 429
        assert refused.headers["content-type"] == "text/plain; charset=utf-8"
        assert refused.content == b"rate limit exceeded; retry in 12 s\n"
        # A forged X-Forwarded-For is not a new client: no proxy is trusted.
        assert client.post("/login", headers={"x-forwarded-for": "203.0.113.9"}).status_code == 429
        assert client.post("/login", headers={"forwarded": "for=203.0.113.9"}).status_code == 429
        clock.advance(12)
        assert client.post("/login").status_code == 200
        assert client.post("/login").status_code == 429
        # Admitted responses carry the fields, whatever the kind of view.
        assert client.get("/api", headers={"x-api-key": "carol"}).headers["ratelimit"] == '"default";r=2;t=1'
        assert client.get("/b").headers["ratelimit"] == '"default";r=1;t=1'


def test_limit_key_function_and_on_decision_label(urls: Callable[..., str]) -> None:
    clock = rb.ManualClock()
    events: list[rb.RateLimitEvent] = []
    per_user = rb.django.limit(
        1, 1, key=lambda request: request.GET.get("user"), on_decision=events.append, clock=clock
    )
    named = rb.django.limit(1, 1, on_decision=events.append, label="reports", clock=clock)

    @per_user
    def item(request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse(str(pk))

    @named
    def report(request: HttpRequest) -> HttpResponse:
        return HttpResponse("report")

    with override_settings(ROOT_URLCONF=urls(path("items/<int:pk>", item), path("reports/", report))):
        client = Client()
        assert [client.get(f"/items/{n}?user=ann").status_code for n in (1, 2)] == [200, 429]
        assert client.get("/items/3?user=bob").content == b"3"
        assert [client.get("/reports/").status_code for _ in range(2)] == [200, 429]
    assert events == [
        rb.RateLimitEvent("allowed", None, ("default",), "items/<int:pk>"),
        rb.RateLimitEvent("refused", "default", ("default",), "items/<int:pk>"),
        rb.RateLimitEvent("allowed", None, ("default",), "items/<int:pk>"),
        rb.RateLimitEvent("allowed", None, ("default",), "reports"),
        rb.RateLimitEvent("refused", "default", ("default",), "reports"),
    ]


def test_limit_bad_configuration_fails_where_the_view_is_declared() -> None:
    with pytest.raises(rb.QuotaError, match='"5/fortnight"'):
        rb.django.limit("5/fortnight")
    with pytest.raises(TypeError, match='"concurency_limit": is not a middleware option'):
        rb.django.limit("5/minute", concurency_limit=3)

    class NotAView:
        pass

    with pytest.raises(TypeError, match="not NotAView"):
        rb.django.limit("5/minute")(NotAView)

