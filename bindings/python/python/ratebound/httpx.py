"""Calling a partner with httpx: a transport that waits for the limiter's
token before each request, pauses the limiter when the partner answers 429
or 503 with ``Retry-After`` (or ``RateLimit`` fields) — for every instance
sharing it, through a Redis limiter — and sends retries through the limiter
again, so they never add traffic beyond the limit.

    import httpx, redis, ratebound as rb

    limit = rb.redis.TokenBucket(redis.Redis(), rate=9, burst=15)   # the fleet's
    client = httpx.Client(transport=rb.httpx.RateLimitTransport(limit, key="partner"))
    client.get("https://partner.example/v1/items")

The decision (how long to pause, whether to retry) is the core's
(``spec/outbound.json``); this module only waits, pauses and sends."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Union

import httpx

from ._outbound import Number, OnOutbound, OutboundEvent, Options

__all__ = ["AsyncRateLimitTransport", "OutboundEvent", "RateLimitTransport"]


def _host(request: httpx.Request) -> str:
    return request.url.netloc.decode("ascii")


class RateLimitTransport(httpx.BaseTransport):
    """An ``httpx.BaseTransport`` in front of ``transport`` (default: a new
    ``httpx.HTTPTransport()``) that sends each request only once
    ``limiter`` gives it a token.

    ``limiter`` is a token bucket: ``rb.TokenBucket`` (this process),
    ``rb.SharedTokenBucket`` / ``rb.SharedKeyedLimiter`` (this host's
    processes) or ``rb.redis.TokenBucket`` (the fleet); a window cannot be
    paused and is refused. ``key`` is the limiter's key: a string, a
    function of the ``httpx.Request``, or (default) the request's host and
    port. ``timeout`` bounds each wait (seconds; default: wait as long as it
    takes): a wait that would be longer raises ``rb.RateLimitExceeded`` at
    once and sends nothing. ``retries``, ``max_pause``, ``statuses`` and
    ``any_method`` are the outbound policy (2 retries, pauses of at most 300
    s, 429 and 503, idempotent methods only). Per request,
    ``extensions={"ratebound": {"timeout": s, "key": k, "n": n}}``
    overrides ``timeout``, ``key`` and the tokens taken (``n``, default 1).
    ``on_decision`` is told an :class:`OutboundEvent` for each wait, pause,
    retry and give-up. When retries are spent the caller gets the last
    response."""

    def __init__(
        self,
        limiter: Any,
        *,
        key: Union[None, str, Callable[[httpx.Request], str]] = None,
        transport: Optional[httpx.BaseTransport] = None,
        timeout: Optional[Number] = None,
        retries: int = 2,
        max_pause: Number = 300.0,
        statuses: Optional[list[int]] = None,
        any_method: bool = False,
        n: int = 1,
        on_decision: Optional[OnOutbound] = None,
    ) -> None:
        self._o = Options(
            limiter,
            asynchronous=False,
            key=key,
            timeout=timeout,
            retries=retries,
            max_pause=max_pause,
            statuses=statuses,
            any_method=any_method,
            n=n,
            on_decision=on_decision,
        )
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        o = self._o
        key, n, timeout = o.per_request(request.extensions.get("ratebound"), request, _host(request))
        attempt = 0
        while True:
            start = time.monotonic()
            o.bound.acquire_blocking(key, n, timeout)
            waited = time.monotonic() - start
            if waited >= 0.001:
                o.tell("waited", key, waited, None, attempt)
            response = self._transport.handle_request(request)
            pause, capped, retry, gave_up = o.advise(
                request.method, response.status_code, response.headers.multi_items(), attempt
            )
            if pause is not None:
                o.bound.pause_blocking(key, pause)
                o.tell("paused", key, pause, response.status_code, attempt, capped)
            if not retry:
                if gave_up:
                    o.tell("gave_up", key, None, response.status_code, attempt)
                return response
            response.read()
            response.close()
            o.tell("retried", key, None, response.status_code, attempt)
            attempt += 1

    def close(self) -> None:
        self._transport.close()


class AsyncRateLimitTransport(httpx.AsyncBaseTransport):
    """:class:`RateLimitTransport` for ``httpx.AsyncClient``: the waits are
    asyncio sleeps (a cancelled request gives its token back), and
    ``limiter`` may be ``rb.redis.AsyncTokenBucket`` (the fleet, with
    ``redis.asyncio``) as well as a local or shared-memory token bucket."""

    def __init__(
        self,
        limiter: Any,
        *,
        key: Union[None, str, Callable[[httpx.Request], str]] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        timeout: Optional[Number] = None,
        retries: int = 2,
        max_pause: Number = 300.0,
        statuses: Optional[list[int]] = None,
        any_method: bool = False,
        n: int = 1,
        on_decision: Optional[OnOutbound] = None,
    ) -> None:
        self._o = Options(
            limiter,
            asynchronous=True,
            key=key,
            timeout=timeout,
            retries=retries,
            max_pause=max_pause,
            statuses=statuses,
            any_method=any_method,
            n=n,
            on_decision=on_decision,
        )
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        o = self._o
        key, n, timeout = o.per_request(request.extensions.get("ratebound"), request, _host(request))
        attempt = 0
        while True:
            start = time.monotonic()
            await o.bound.acquire(key, n, timeout)
            waited = time.monotonic() - start
            if waited >= 0.001:
                o.tell("waited", key, waited, None, attempt)
            response = await self._transport.handle_async_request(request)
            pause, capped, retry, gave_up = o.advise(
                request.method, response.status_code, response.headers.multi_items(), attempt
            )
            if pause is not None:
                await o.bound.pause(key, pause)
                o.tell("paused", key, pause, response.status_code, attempt, capped)
            if not retry:
                if gave_up:
                    o.tell("gave_up", key, None, response.status_code, attempt)
                return response
            await response.aread()
            await response.aclose()
            o.tell("retried", key, None, response.status_code, attempt)
            attempt += 1

    async def aclose(self) -> None:
        await self._transport.aclose()
