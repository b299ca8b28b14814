"""What the Django test modules share (test_django.py: ``rb.django.limit``
on views; test_django_middleware.py: ``rb.django.RateLimitMiddleware``):
Django's settings, configured once per process, here; a URLconf per test;
a client of the current site over each transport; and a small site behind
the middleware.

Each test overrides only what it needs (``ROOT_URLCONF``, ``MIDDLEWARE``,
``RATEBOUND``), so the other test modules never see Django."""

from __future__ import annotations

import contextlib
import itertools
import sys
import types
from typing import Any, AsyncIterator, Callable, Iterator

import django
import httpx
import pytest
from django.conf import settings

if not settings.configured:
    settings.configure(
        ALLOWED_HOSTS=["127.0.0.1", "testserver", "localhost"],
        INSTALLED_APPS=[],
        MIDDLEWARE=[],
        ROOT_URLCONF="ratebound_django_no_urls",
        SECRET_KEY="ratebound tests only",
    )
    django.setup()

from asgiref.sync import async_to_sync  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse  # noqa: E402
from django.test import AsyncClient, Client, override_settings  # noqa: E402
from django.urls import URLPattern, path  # noqa: E402

import ratebound as rb  # noqa: E402
import ratebound.django  # noqa: E402,F401
from routes_spec import uvicorn_serving, wsgiref_serving  # noqa: E402

MIDDLEWARE = ["ratebound.django.RateLimitMiddleware"]
_names = itertools.count()


@pytest.fixture
def urls() -> Iterator[Callable[..., str]]:
    """Makes a URLconf module of the patterns given; returns its name."""
    made: list[str] = []

    def make(*patterns: URLPattern) -> str:
        name = f"ratebound_django_urls_{next(_names)}"
        module = types.ModuleType(name)
        module.urlpatterns = list(patterns)  # type: ignore[attr-defined]
        sys.modules[name] = module
        made.append(name)
        return name

    yield make
    for name in made:
        del sys.modules[name]


class BlockingAsyncClient:
    """Django's ``AsyncClient`` (ASGI: ``ASGIRequest``, the middleware in
    async mode) called from a plain test."""

    def __init__(self) -> None:
        self._client = AsyncClient()

    def get(self, url: str, **kwargs: Any) -> Any:
        return async_to_sync(self._client.get)(url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> Any:
        return async_to_sync(self._client.post)(url, **kwargs)


@contextlib.contextmanager
def client_for(transport: str) -> Iterator[Any]:
    """A client of the current settings' site: Django's test client, its
    async one, or httpx over wsgiref (WSGI) or uvicorn (ASGI)."""
    if transport == "client":
        yield Client()
    elif transport == "async_client":
        yield BlockingAsyncClient()
    elif transport == "wsgiref":
        with wsgiref_serving(WSGIHandler()) as url, httpx.Client(base_url=url, timeout=5) as client:
            yield client
    else:
        with uvicorn_serving(ASGIHandler()) as url, httpx.Client(base_url=url, timeout=5) as client:
            yield client



# The middleware's tests: a small site.


def hello(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello")


def stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(iter([b"chunk 1 ", b"chunk 2"]))


async def astream(request: HttpRequest) -> StreamingHttpResponse:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"chunk 1 "
        yield b"chunk 2"

    return StreamingHttpResponse(chunks())


def body_of(response: Any) -> bytes:
    """A streaming response's whole body, read now."""
    if not response.is_async:
        return b"".join(response.streaming_content)

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)()


SITE = [
    path("", hello),
    path("health", hello, name="health"),
    path("health/deep", hello),
    path("healthz", hello),
    path("about/status", hello, name="status"),
    path("stream", stream),
    path("astream", astream),
    path("pay", hello),
]


@contextlib.contextmanager
def site(urls: Callable[..., str], transport: str, **ratebound: Any) -> Iterator[Any]:
    """A client of SITE behind the middleware with ``RATEBOUND=ratebound``."""
    with override_settings(ROOT_URLCONF=urls(*SITE), MIDDLEWARE=MIDDLEWARE, RATEBOUND=ratebound):
        with client_for(transport) as client:
            yield client


MODES = ["client", "async_client"]  # the middleware in Django's sync and async modes

