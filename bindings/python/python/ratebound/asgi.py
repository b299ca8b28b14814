"""ASGI middleware (Starlette, FastAPI, any ASGI 3 app).

>>> from starlette.applications import Starlette
>>> import ratebound as rb
>>> app = rb.asgi.RateLimitMiddleware(Starlette(), rate="10/s burst 20", key_header="x-api-key")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, MutableMapping

from ._http import MiddlewareBase, Options, with_fields
from ._ratebound import Ask, Admission

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RateLimitMiddleware"]


class RateLimitMiddleware(MiddlewareBase):
    """Rate-limits HTTP requests per key before they reach ``app``.

    - ``rate``/``burst`` for one token-bucket policy, or ``policies``: a dict
      of name -> rate (``"10/s burst 20"``, ``5``) or
      ``{"algorithm": "fixed_window", "limit": 100, "window": 60}``; a request
      passes only if every policy admits it, and then every policy counts it.
    - The key: the ``key_header`` request header, or ``key(scope)``, else the
      client IP (IPv6 grouped by ``ipv6_prefix`` bits, 64 by default). A key
      header counts only as one line, not empty and without a comma;
      repeated lines, a comma-joined value or an empty one are no key. A
      request without a key follows ``missing_key``: ``"ip"`` (default),
      ``"shared"`` (one bucket for all keyless requests) or a status 400-599
      such as 401 to refuse it.
    - Proxies: forwarding headers are ignored unless ``trusted_proxies``
      (CIDR strings, or a hop count) says whose to believe, and then only the
      ``client_ip_header`` is read: ``"x-forwarded-for"`` (default),
      ``"forwarded"`` (RFC 7239) or a header the proxy sets and overwrites
      (``"cf-connecting-ip"``, ``"x-real-ip"``). Never both: a proxy passes on
      whatever else the client sent.
    - Refusals: 429 with ``Retry-After`` in whole seconds rounded up and a
      ``body`` of ``"text"`` or ``"problem+json"``; 503 with ``Retry-After: 1``
      when ``overflow="reject"`` and ``max_keys`` keys (1 000 000 by default)
      are tracked; with ``overflow="evict"`` (default) the least recent goes.
    - ``headers``: ``"draft"`` (``RateLimit-Policy`` and ``RateLimit``, on every
      response), ``"legacy"`` (``X-RateLimit-*``) or ``"off"``.
    - ``exempt(scope)`` returning true bypasses limiting (health checks).
    - ``concurrency_limit``: at most this many requests in the app at once;
      beyond it, 503 with ``Retry-After: 1`` at once, before any token is
      spent — never a queue. ``critical(scope)`` returning true lets a request
      through even then (it takes no place). ``concurrency_limit="auto"``
      learns the limit from latency instead (the time to the response's
      head): it starts at 20 and stays within 2-1000 (``concurrency_initial``,
      ``concurrency_min``, ``concurrency_max``), cut when requests get
      slower than ``concurrency_tolerance`` (1.5) times the latency of
      requests that met no queue. ``priority``: ``"critical"``,
      ``"normal"``, ``"background"`` or a function of the scope returning
      one — background requests get a place only below
      ``background_fraction`` (½) of the limit, so they are shed first;
      critical ones are never shed. ``mw.concurrency`` is the limit now,
      for a gauge.
    - A policy may be a global limit in Redis (``rb.redis.AsyncTokenBucket``
      and the other asyncio limiters): it is checked for the request's key
      (``key:<key>``, ``ip:<address>`` or ``anonymous``, by the same rules),
      a refusal there is a 429 at once, and it joins the quota fields.
    """

    app: ASGIApp

    def __init__(self, app: ASGIApp, **options: Unpack[Options]) -> None:
        super().__init__(app, **options)
        self._check_remote(True, "ASGI")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        verdict = self.gate.admit(scope, client[0] if client else None, scope["headers"])
        if verdict is None:  # exempt
            await self.app(scope, receive, send)
            return
        if type(verdict) is Ask:  # not isinstance: 3x slower on an extension class
            verdict = await self._finish_async(verdict)
        if verdict.status:
            await _answer(send, verdict)
            return
        headers = verdict.headers
        place = verdict.place
        timed = place if place is not None and self._timed else None
        try:
            if not headers and timed is None:
                await self.app(scope, receive, send)
                return

            async def send_with_headers(message: Message) -> None:
                if message["type"] == "http.response.start":
                    if headers:
                        message["headers"] = with_fields(message.get("headers", ()), headers)
                    if timed is not None:
                        timed.responded()  # the latency; the place is held until the body ends
                await send(message)

            # Returns once the whole response is sent, a streaming body too.
            await self.app(scope, receive, send_with_headers)
        finally:
            if place is not None:
                place.release()


async def _answer(send: Send, verdict: Admission) -> None:
    """Sends the gate's answer: its status, fields, content type and body."""
    body = verdict.body or b""
    headers = [*verdict.headers, (b"content-type", verdict.content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": verdict.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
