"""The overload test's server (tests/test_overload.py runs it under uvicorn
in a process of its own): an ASGI app whose handler runs at most 4 requests
at a time for 20 ms each — a capacity of 200 requests/s — behind
``rb.asgi.RateLimitMiddleware`` with ``concurrency_limit="auto"``, or
behind nothing (``RB_OVERLOAD=none``, the contrast).

- ``GET /work``: the handler; ``x-priority: background`` / ``critical``
  marks a request's priority (else normal).
- ``GET /gauge``: ``mw.concurrency`` as JSON (exempt from limiting).
- ``GET /slots/<n>``: from now on the handler runs ``n`` at a time (the
  service's capacity changes; exempt).
- ``GET /service/<ms>``: from now on each request takes ``ms`` (a slowdown;
  exempt).

``uvicorn --factory overload_app:make_app``."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Awaitable, Callable, MutableMapping

import ratebound as rb

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

SLOTS = 4
SERVICE_S = 0.020


def priority(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"x-priority":
            return value.decode("latin-1")
    return "normal"


def make_app() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    pool = asyncio.Semaphore(SLOTS)
    service = SERVICE_S
    mw: Any = None

    def control(path: str) -> bytes:
        nonlocal pool, service
        if path.startswith("/slots/"):
            pool = asyncio.Semaphore(int(path[len("/slots/"):]))
            return b"ok"
        if path.startswith("/service/"):
            service = int(path[len("/service/"):]) / 1000
            return b"ok"
        c = mw.concurrency if mw is not None else None
        state = None if c is None else {
            "limit": c.limit, "in_flight": c.in_flight, "baseline_ms": c.baseline_ms,
            "recent_ms": c.recent_ms, "windows": c.windows,
        }
        return json.dumps(state).encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/work":
            body = control(scope["path"])
        else:
            async with pool:
                await asyncio.sleep(service)
            body = b"ok"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    if os.environ.get("RB_OVERLOAD") == "none":
        return app
    # A rate far above the load: only the concurrency limit sheds.
    mw = rb.asgi.RateLimitMiddleware(
        app, rate=1_000_000, concurrency_limit="auto", priority=priority, headers="off",
        exempt=lambda scope: scope["path"] != "/work",
    )
    return mw
