"""Defects a first user hits (issue 37 §4), each reproduced on main before
its fix: the outbound adapters re-sending a body that can be read once
(a real partner on 127.0.0.1 counts the bytes of each request it gets),
and a ``priority`` function that answers nothing or raises (a 500 under
overload, ASGI, WSGI and Django), and arguments the local limiters take
and Redis refused (or the reverse). The Retry-After cap and the retried
statuses are vectors of spec/outbound.json (tests/test_outbound_spec.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Iterator, Optional

import httpx
import pytest
import requests
from django.http import HttpRequest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import ratebound as rb
import ratebound.httpx
import ratebound.redis as rbr
import ratebound.requests
from test_django import MODES, site, urls  # noqa: F401 (a fixture)
from partners import HttpPartner
from redis_servers import HOST, Server, fresh_key


class CountingPartner(HttpPartner):
    """A partner that reads each request's whole body (sized or chunked),
    notes its length, and answers 503 without advice."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[tuple[str, int]] = []  # (method, body bytes)
        partner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def body_length(self) -> int:
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    total = 0
                    while True:
                        line = self.rfile.readline()
                        if not line:  # the client gave up mid-body
                            return total
                        size = int(line.split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return total
                        total += len(self.rfile.read(size))
                        self.rfile.readline()
                return len(self.rfile.read(int(self.headers.get("content-length") or 0)))

            def answer(self) -> None:
                length = self.body_length()
                with partner.lock:
                    partner.received.append((self.command, length))
                self.send_response(503)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"no")

            do_PUT = do_POST = answer

        self.serve(Handler, "/v1/items/7")


@pytest.fixture
def partner() -> Iterator[CountingPartner]:
    p = CountingPartner()
    yield p
    p.close()


def chunks() -> Iterator[bytes]:
    """A one-shot body: 3 000 bytes, read once."""
    for _ in range(3):
        yield b"x" * 1000


async def achunks() -> Any:
    for chunk in chunks():
        yield chunk


def outcomes(events: list[rb.httpx.OutboundEvent]) -> list[str]:
    return [e.outcome for e in events if e.outcome != "waited"]


# The refusal teaches the local bucket (learning is on by default): the
# rate is cut, told first; then the pause and the give-up.
REFUSED = ["adapted", "paused", "gave_up"]


# A refusal with no advice is retried after the backoff: 10 ms here.
ADAPTER = {"backoff": 0.01}


def test_requests_never_resends_a_generator_body(partner: CountingPartner) -> None:
    events: list[rb.httpx.OutboundEvent] = []
    with requests.Session() as session:
        session.mount("http://", rb.requests.RateLimitAdapter(rb.TokenBucket(100, 10), on_decision=events.append, **ADAPTER))
        response = session.put(partner.url, data=chunks(), timeout=5)
    assert response.status_code == 503
    assert partner.received == [("PUT", 3000)]
    assert outcomes(events) == REFUSED


def test_requests_still_resends_a_body_it_holds(partner: CountingPartner) -> None:
    with requests.Session() as session:
        session.mount("http://", rb.requests.RateLimitAdapter(rb.TokenBucket(100, 10), **ADAPTER))
        assert session.put(partner.url, data=b"x" * 3000, timeout=5).status_code == 503
    assert partner.received == [("PUT", 3000)] * 3


def test_httpx_never_resends_a_stream_body(partner: CountingPartner) -> None:
    events: list[rb.httpx.OutboundEvent] = []
    transport = rb.httpx.RateLimitTransport(rb.TokenBucket(100, 10), on_decision=events.append, **ADAPTER)
    with httpx.Client(transport=transport, timeout=5) as client:
        response = client.put(partner.url, content=chunks())
        assert response.status_code == 503
        # A body it holds is sent again.
        assert client.put(partner.url, content=b"x" * 10).status_code == 503
    assert partner.received == [("PUT", 3000)] + [("PUT", 10)] * 3
    assert outcomes(events)[:3] == REFUSED


async def test_async_httpx_never_resends_a_stream_body(partner: CountingPartner) -> None:
    events: list[rb.httpx.OutboundEvent] = []
    transport = rb.httpx.AsyncRateLimitTransport(rb.TokenBucket(100, 10), on_decision=events.append, **ADAPTER)
    async with httpx.AsyncClient(transport=transport, timeout=5) as client:
        response = await client.put(partner.url, content=achunks())
        assert response.status_code == 503
    assert partner.received == [("PUT", 3000)]
    assert outcomes(events) == REFUSED


# ------------------------------------------------------------- priority


def answers_nothing(request: Any) -> Optional[str]:
    """The easy fall-through: a priority for one path, nothing otherwise."""
    return None


def raising(request: Any) -> str:
    raise LookupError("no tenant for this request")


def unknown(request: Any) -> str:
    return "urgent"


def not_a_str(request: Any) -> Any:
    return 3


# background_fraction=0: every request is asked its priority, and a
# background one is shed at once.
CAPPED = {"rate": 1000, "concurrency_limit": 4, "background_fraction": 0}


def check_answers(get: Callable[[Any], Any], caplog: pytest.LogCaptureFixture) -> None:
    """`get(priority)` answers a request through a front door whose
    priority function is `priority`: `None` is normal, a raising one or a
    bad answer is shed (503 with Retry-After) and logged, never a 500."""
    assert get(answers_nothing).status_code == 200
    bad_answers = (
        (raising, "no tenant for this request"),
        (unknown, 'invalid priority "urgent"'),
        (not_a_str, 'invalid priority "3": is not a str'),
    )
    for bad, logged in bad_answers:
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="ratebound"):
            response = get(bad)
        assert response.status_code == 503, bad
        assert int(response.headers["retry-after"]) >= 1
        errors = [r for r in caplog.records if r.name == "ratebound" and r.levelno == logging.ERROR]
        assert len(errors) == 1 and errors[0].exc_info is not None
        assert logged in str(errors[0].exc_info[1])


def test_asgi_priority_answering_nothing_or_raising(caplog: pytest.LogCaptureFixture) -> None:
    async def hello(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("hello")

    def get(priority: Any) -> Any:
        mw = rb.asgi.RateLimitMiddleware(Starlette(routes=[Route("/", hello)]), priority=priority, **CAPPED)

        async def call() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=mw), base_url="http://test") as client:
                return await client.get("/")

        response = asyncio.run(call())
        assert mw.concurrency.in_flight == 0
        return response

    check_answers(get, caplog)


def test_wsgi_priority_answering_nothing_or_raising(caplog: pytest.LogCaptureFixture) -> None:
    def hello(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("content-type", "text/plain")])
        return [b"hello"]

    def get(priority: Any) -> Any:
        mw = rb.wsgi.RateLimitMiddleware(hello, priority=priority, **CAPPED)
        with httpx.Client(transport=httpx.WSGITransport(app=mw), base_url="http://test") as client:
            response = client.get("/")
        assert mw.concurrency.in_flight == 0
        return response

    check_answers(get, caplog)


def django_priority_nothing(request: HttpRequest) -> Optional[str]:
    return answers_nothing(request)


def django_priority_raising(request: HttpRequest) -> str:
    return raising(request)


def django_priority_unknown(request: HttpRequest) -> str:
    return unknown(request)


def django_priority_not_a_str(request: HttpRequest) -> Any:
    return not_a_str(request)


@pytest.mark.parametrize("transport", MODES)
def test_django_priority_answering_nothing_or_raising(
    urls: Callable[..., str], transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    paths = {
        answers_nothing: f"{__name__}.django_priority_nothing",
        raising: f"{__name__}.django_priority_raising",
        unknown: f"{__name__}.django_priority_unknown",
        not_a_str: f"{__name__}.django_priority_not_a_str",
    }

    def get(priority: Any) -> Any:
        with site(urls, transport, priority=paths[priority], **CAPPED) as client:
            return client.get("/")

    check_answers(get, caplog)


# ------------------------------------------------------------ arguments


def test_redis_takes_n_0_and_a_pause_of_0_as_the_local_limiters_do(server: Server) -> None:
    client = server.client()
    try:
        key = fresh_key("zero")
        local, shared = rb.TokenBucket(10, 2), rbr.TokenBucket(client, rate=10, burst=2)
        for acquire, pause in ((local.acquire_blocking, local.pause), (lambda n, t: shared.acquire_blocking(key, n, t), lambda s: shared.pause(key, s))):
            acquire(0, 0)  # a query: admitted at once, nothing taken
            pause(0)  # changes nothing
        # Both tokens are still there.
        assert shared.try_acquire(key, 2)
        assert local.try_acquire(2)
    finally:
        client.close()


async def test_async_redis_takes_n_0_and_a_pause_of_0(server: Server) -> None:
    client = redis_asyncio_client(server)
    try:
        key = fresh_key("zero")
        shared = rbr.AsyncTokenBucket(client, rate=10, burst=2)
        try:
            await shared.acquire(key, 0, 0)
            await shared.pause(key, 0)
            assert await shared.try_acquire(key, 2)
        finally:
            await shared.aclose()
    finally:
        await client.aclose()


def redis_asyncio_client(server: Server) -> Any:
    import redis.asyncio

    return redis.asyncio.Redis(host=HOST, port=server.port)


def test_a_pause_longer_than_a_day_is_refused_everywhere_naming_the_value(server: Server) -> None:
    client = server.client()
    try:
        key = fresh_key("year")
        pauses = [
            rb.TokenBucket(10, 2).pause,
            lambda s: rb.KeyedLimiter(10, 2).pause("k", s),
            lambda s: rbr.TokenBucket(client, rate=10, burst=2).pause(key, s),
        ]
        for pause in pauses:
            with pytest.raises(rb.QuotaError, match="invalid seconds 1000000000: a pause is at most 86400 s"):
                pause(1e9)
            pause(86_400)  # a day is taken
    finally:
        client.close()


def test_a_redis_window_given_to_an_outbound_adapter_is_refused_for_what_it_is(server: Server) -> None:
    client = server.client()
    try:
        window = rbr.FixedWindow(client, 10, 1)
        with pytest.raises(rb.ConfigError, match=r"FixedWindow \(window\) cannot be paused: .*an outbound limiter must be a token bucket"):
            rb.httpx.RateLimitTransport(window)
    finally:
        client.close()


def test_a_success_is_not_a_retried_status() -> None:
    with pytest.raises(rb.QuotaError, match='invalid status 200'):
        rb.requests.RateLimitAdapter(rb.TokenBucket(10, 2), statuses=[200])
