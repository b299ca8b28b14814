"""Calling a partner with httpx: a transport that waits for the limiter's
token before each request, pauses the limiter when the partner answers 429
or 503 with ``Retry-After`` (or ``RateLimit`` fields) — for every instance
sharing it, through a Redis limiter — and sends retries through the limiter
again, so they never add traffic beyond the limit.

    import httpx, redis, ratebound as rb

    limit = rb.redis.TokenBucket(redis.Redis(), rate=9, burst=15)   # the fleet's
    client = httpx.Client(transport=rb.httpx.RateLimitTransport(limit, key="partner"))
    client.get("https://partner.example/v1/items")

Every step and rule of a call is the core's (``spec/outbound.json``,
``spec/outbound_calls.json``); this module only waits, pauses and sends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import httpx

from ._outbound import OutboundEvent, OutboundOptions, Options

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AsyncRateLimitTransport", "OutboundEvent", "RateLimitTransport"]


def _replayable(request: httpx.Request) -> bool:
    """Whether the request's body can be sent again: one it holds (bytes,
    text, JSON, a form), not a stream read once (a generator, a file,
    multipart)."""
    return isinstance(request.stream, httpx.ByteStream)


def _answer(response: httpx.Response) -> tuple[int, list[tuple[str, str]]]:
    return response.status_code, response.headers.multi_items()


def _discard(response: httpx.Response) -> None:
    response.read()
    response.close()


async def _adiscard(response: httpx.Response) -> None:
    await response.aread()
    await response.aclose()


class _Limited:
    """The options both transports take (see :class:`RateLimitTransport`)."""

    _asynchronous = False

    def __init__(self, limiter: Any, **options: Unpack[OutboundOptions]) -> None:
        self._o = Options(limiter, asynchronous=self._asynchronous, **options)

    def _call(self, request: httpx.Request) -> Any:
        u = request.url
        return self._o.call(
            request.extensions.get("ratebound"), request, request.method, (u.scheme, u.host, u.port),
            _replayable(request),
        )


class RateLimitTransport(_Limited, httpx.BaseTransport):
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
    once and sends nothing. ``retries``, ``max_pause``, ``backoff``,
    ``statuses`` and ``any_method`` are the outbound policy (2 retries,
    pauses of at most 300 s, 429 and 503, idempotent methods only; no retry
    without a pause: a refusal with no ``Retry-After`` or ``RateLimit``
    fields pauses ``backoff`` seconds, default 1, doubling per refusal of
    the call). A pause Redis cannot be told of (Redis down) is kept in this
    process: the adapter's sendings for the key, the retry first, wait it
    out, and a limiter failing ``"local"`` pauses its local share; the
    ``paused`` event says ``local``. A Redis limiter failing ``"open"``
    draws a ``RuntimeWarning`` here: during an outage it would send every
    request to the partner. Per request,
    ``extensions={"ratebound": {"timeout": s, "key": k, "n": n}}``
    overrides ``timeout``, ``key`` and the tokens taken (``n``, default 1).
    ``adaptive`` learns the partner's real limit (default: wherever the
    limiter can keep it — ``rb.TokenBucket``, ``rb.SharedTokenBucket``, a
    token-bucket ``rb.SharedKeyedLimiter``, ``rb.redis.TokenBucket`` and
    ``AsyncTokenBucket``): a refusal (429/503, with or
    without a pause, retried or not) cuts the rate the limiter runs at, for
    everyone sharing it, and a success after a quiet while steps it back
    up, never above the configured rate (the core's rule);
    ``adaptive=False`` never does, ``adaptive=True`` insists
    (``rb.Unsupported`` for a limiter that cannot learn: windows,
    ``rb.KeyedLimiter``). ``limiter.learned_rate()`` (a keyed limiter's:
    ``learned_rate(key)``) reads the rate in force. ``on_decision`` is told an :class:`OutboundEvent` for each wait,
    pause, retry, give-up and change of the learned rate (``adapted``,
    with ``from_rate`` and ``to_rate``). When retries are spent the
    caller gets the last response; a body that can be read once (a
    generator, an async iterator, a file) is never sent again: the caller
    gets the refusal (``gave_up``)."""

    def __init__(
        self, limiter: Any, *, transport: Optional[httpx.BaseTransport] = None, **options: Unpack[OutboundOptions]
    ) -> None:
        super().__init__(limiter, **options)
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._o.send_blocking(
            self._call(request), lambda: self._transport.handle_request(request), _answer, _discard
        )

    def close(self) -> None:
        self._transport.close()


class AsyncRateLimitTransport(_Limited, httpx.AsyncBaseTransport):
    """:class:`RateLimitTransport` for ``httpx.AsyncClient``: the waits are
    asyncio sleeps (a cancelled request gives its token back), and
    ``limiter`` may be ``rb.redis.AsyncTokenBucket`` (the fleet, with
    ``redis.asyncio``) as well as a local or shared-memory token bucket."""

    _asynchronous = True

    def __init__(
        self, limiter: Any, *, transport: Optional[httpx.AsyncBaseTransport] = None, **options: Unpack[OutboundOptions]
    ) -> None:
        super().__init__(limiter, **options)
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._o.send(
            self._call(request), lambda: self._transport.handle_async_request(request), _answer, _adiscard
        )

    async def aclose(self) -> None:
        await self._transport.aclose()
