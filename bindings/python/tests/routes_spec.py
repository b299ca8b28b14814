"""What every framework's per-route limits must do, over any client with
httpx's ``get``/``post`` (httpx over real HTTP, or a framework's test
client): /login 5 per minute per IP, /api per API key, /health unlimited,
and one limit shared by /a and /b. Also the servers on 127.0.0.1 the tests
run the apps under."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server


def check_routes(client: Any) -> None:
    """The same expectations for every framework."""
    for i in range(5):
        ok = client.post("/login")
        assert ok.status_code == 200, ok.text
        assert ok.headers["ratelimit-policy"] == '"default";q=5;w=60'
        assert ok.headers["ratelimit"] == f'"default";r={4 - i};t={12 * (i + 1)}'
    sixth = client.post("/login")
    assert sixth.status_code == 429
    # One token every 12 s: the wait is 12 s (rounded up, never early).
    assert sixth.headers["retry-after"] == "12"
    assert sixth.headers["ratelimit"] == '"default";r=0;t=60'
    # /api is limited per API key, not per IP: alice's fourth refused, bob fine.
    for _ in range(3):
        assert client.get("/api", headers={"x-api-key": "alice"}).status_code == 200
    assert client.get("/api", headers={"x-api-key": "alice"}).status_code == 429
    assert client.get("/api", headers={"x-api-key": "bob"}).status_code == 200
    # /health is not limited at all.
    assert all(client.get("/health").status_code == 200 for _ in range(20))
    assert "ratelimit" not in client.get("/health").headers
    # /a and /b share one limit of 2.
    assert [client.get(p).status_code for p in ("/a", "/b", "/a", "/b")] == [200, 200, 429, 429]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def uvicorn_serving(app: Any) -> Iterator[str]:
    """The base URL of ``app`` (ASGI) served by uvicorn on 127.0.0.1.

    uvicorn's ``proxy_headers`` is off: by default uvicorn itself believes
    ``X-Forwarded-For`` from 127.0.0.1 and rewrites the client address, and
    the tests want the peer the socket saw."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", proxy_headers=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.025)
        assert server.started
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def wsgiref_serving(app: Any) -> Iterator[str]:
    """The base URL of ``app`` (WSGI) served by wsgiref on 127.0.0.1, with
    its request log off."""
    with serving(make_server("127.0.0.1", 0, app, handler_class=_Quiet)) as url:
        yield url


@contextlib.contextmanager
def serving(server: Any) -> Iterator[str]:
    """The base URL of a WSGI ``server`` made on 127.0.0.1 (wsgiref's,
    werkzeug's), serving in a thread until the block ends."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
