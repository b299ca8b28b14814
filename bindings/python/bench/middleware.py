"""What the ASGI and WSGI middleware add to a request: a trivial app called
directly (no server, no network), bare and wrapped, 10 000 keys in turn so
every request is admitted; median of 7 runs of wall-clock µs per request
(the event loop's and the app's own work included in both, so the
difference is the middleware's).

    target/venv/bin/python bindings/python/bench/middleware.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

import ratebound as rb

N = 20_000
RUNS = 7
KEYS = [f"key-{i}".encode() for i in range(10_000)]


async def asgi_app(scope, receive, send):  # type: ignore[no-untyped-def]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def wsgi_app(environ, start_response):  # type: ignore[no-untyped-def]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


async def receive():  # type: ignore[no-untyped-def]
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message):  # type: ignore[no-untyped-def]
    return None


def scope(key: bytes) -> dict:
    return {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [(b"host", b"127.0.0.1"), (b"user-agent", b"bench"), (b"accept", b"*/*"), (b"x-api-key", key)],
        "client": ("127.0.0.1", 50000),
    }


async def run_asgi(app) -> float:  # type: ignore[no-untyped-def]
    scopes = [scope(KEYS[i % len(KEYS)]) for i in range(N)]
    start = time.perf_counter()
    for s in scopes:
        await app(s, receive, send)
    return (time.perf_counter() - start) / N * 1e6


def run_wsgi(app) -> float:  # type: ignore[no-untyped-def]
    environs = [
        {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_X_API_KEY": KEYS[i % len(KEYS)].decode(),
        }
        for i in range(N)
    ]

    def start_response(status, headers, exc_info=None):  # type: ignore[no-untyped-def]
        return None

    start = time.perf_counter()
    for e in environs:
        for _ in app(e, start_response):
            pass
    return (time.perf_counter() - start) / N * 1e6


def median(f) -> float:  # type: ignore[no-untyped-def]
    return statistics.median(f() for _ in range(RUNS))


def starlette_rows(loop) -> list:  # type: ignore[no-untyped-def]
    """The same through a Starlette app: bare, with ratebound's middleware and
    with slowapi's (in-memory storage), if slowapi is installed."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    def app() -> Starlette:
        return Starlette(routes=[Route("/", hello)])

    rows = []
    bare = app()
    ours = rb.asgi.RateLimitMiddleware(app(), rate=1e6, burst=10**6, key_header="x-api-key")
    loop.run_until_complete(run_asgi(ours))
    b = median(lambda: loop.run_until_complete(run_asgi(bare)))
    o = median(lambda: loop.run_until_complete(run_asgi(ours)))
    rows.append(("Starlette app, ratebound, one policy, draft headers", b, o))
    try:
        from slowapi import Limiter
        from slowapi.middleware import SlowAPIMiddleware

        limiter = Limiter(
            key_func=lambda request: request.headers["x-api-key"],
            default_limits=["1000000/second"],
            headers_enabled=True,
        )
        theirs = app()
        theirs.state.limiter = limiter
        theirs.add_middleware(SlowAPIMiddleware)
        loop.run_until_complete(run_asgi(theirs))
        t = median(lambda: loop.run_until_complete(run_asgi(theirs)))
        rows.append(("Starlette app, slowapi 0.1.10 (memory storage), one limit, headers", b, t))
    except ImportError as exc:
        print(f"slowapi skipped: {exc!r}")
    return rows


def main() -> None:
    wrapped = rb.asgi.RateLimitMiddleware(asgi_app, rate=1e6, burst=10**6, key_header="x-api-key")
    two = rb.asgi.RateLimitMiddleware(
        asgi_app, policies={"burst": "1000000/s burst 1000000", "hourly": "100000000/hour"}, key_header="x-api-key"
    )
    loop = asyncio.new_event_loop()
    # Each wrapped app first sees its 10 000 keys once, so that every row
    # measures tracked keys.
    loop.run_until_complete(run_asgi(wrapped))
    loop.run_until_complete(run_asgi(two))
    bare = median(lambda: loop.run_until_complete(run_asgi(asgi_app)))
    one = median(lambda: loop.run_until_complete(run_asgi(wrapped)))
    both = median(lambda: loop.run_until_complete(run_asgi(two)))
    wbare = median(lambda: run_wsgi(wsgi_app))
    wone = median(lambda: run_wsgi(rb.wsgi.RateLimitMiddleware(wsgi_app, rate=1e6, burst=10**6, key_header="x-api-key")))
    print("| per request (µs, median of 7) | bare | with ratebound | added |")
    print("|---|---:|---:|---:|")
    print(f"| ASGI, one policy, draft headers | {bare:.2f} | {one:.2f} | {one - bare:.2f} |")
    print(f"| ASGI, two policies, draft headers | {bare:.2f} | {both:.2f} | {both - bare:.2f} |")
    print(f"| WSGI, one policy, draft headers | {wbare:.2f} | {wone:.2f} | {wone - wbare:.2f} |")
    for label, b, w in starlette_rows(loop):
        print(f"| {label} | {b:.2f} | {w:.2f} | {w - b:.2f} |")


if __name__ == "__main__":
    main()
