"""Per-route limits for FastAPI (and Starlette routes with dependencies):
``dependencies=[Depends(limit("5/minute"))]``.

>>> from fastapi import Depends, FastAPI
>>> import ratebound as rb
>>> app = FastAPI()
>>> login = rb.fastapi.limit("5/minute")              # per client IP
>>> @app.post("/login", dependencies=[Depends(login)])
... def do_login() -> dict:
...     return {"ok": True}
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request, Response

from ._ratebound import Ask
from ._route import RouteLimit

__all__ = ["limit"]


class limit(RouteLimit):  # noqa: N801 - used like a function: Depends(limit("5/minute"))
    """A dependency that limits the routes it is given to.

    ``limit(rate, burst=None, *, key="ip", policies=None, clock=None, exempt=None,
    **options)``: one token-bucket policy ``rate`` (``"5/minute"``,
    ``"100/s burst 20"``, a number per second) or ``policies`` (a dict of
    name -> rate, as the middleware takes); ``key``: ``"ip"`` (default), a
    header name such as ``"x-api-key"``, or a function of the
    ``Request``; ``options``: the middleware's (``trusted_proxies``,
    ``client_ip_header``, ``missing_key``, ``headers``, ``body``,
    ``max_keys``, ``overflow``, ``ipv6_prefix``, ``store_error_retry_after``
    — every one but shedding, which is the application's). ``policies`` may
    hold asyncio Redis limiters and ``SharedKeyedLimiter`` tables, as the
    middleware's.

    A refusal raises ``HTTPException(429)`` with ``Retry-After`` (whole
    seconds, rounded up) and the RateLimit fields. An admitted request gets
    the RateLimit fields on its response through FastAPI's ``Response``
    parameter — merged into whatever the endpoint returns, unless it returns
    a ``Response`` object of its own (then copy them from
    ``request.state.ratelimit``). One ``limit`` object used by several
    routes is one shared limit; a new ``limit(...)`` per route is a limit
    per route. Works for sync and async endpoints. ``on_decision`` is told
    of every request (a ``RateLimitEvent``; ``label`` defaults to the route's
    path template), for metrics.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._check_remote(True, "FastAPI")

    async def __call__(self, request: Request, response: Response) -> None:
        client = request.client
        route = getattr(request.scope.get("route"), "path", None) if self._route_label else None
        # A route limit has no cap: None (exempt), a verdict, or with remote
        # policies an Ask (asyncio Redis limiters: checked when made).
        answer = self.gate.admit(request, client.host if client else None, request.scope["headers"], False, route)
        if answer is None:
            return
        verdict = await self._finish_async(answer) if isinstance(answer, Ask) else answer
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in verdict.headers}
        request.state.ratelimit = headers
        if verdict.status:
            body = verdict.body
            detail = body.decode() if body else "rate limit exceeded"
            raise HTTPException(status_code=verdict.status, detail=detail.strip(), headers=headers)
        for name, value in headers.items():
            response.headers[name] = value
