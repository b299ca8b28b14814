"""One per-client limit for every gunicorn worker, without Redis.

Run (4 worker processes on 127.0.0.1:8000):

    RATEBOUND_LIMIT_FILE=/dev/shm/myapp-clients.limit \
        gunicorn -w 4 -b 127.0.0.1:8000 gunicorn_shared:app

Each worker opens the same file; the limit (5 per minute per X-API-Key,
burst 5) is kept in shared memory, so the 6th request of a client within a
minute is refused with 429 whichever worker serves it. The file is made
with mode 0600 on first use.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

import ratebound as rb

LIMIT_FILE = os.environ.get("RATEBOUND_LIMIT_FILE", "/dev/shm/ratebound-example-clients.limit")


def hello(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = f"served by worker {os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


# Opened in each worker (gunicorn imports the module once per worker unless
# --preload; either way, every process maps the same file).
app = rb.wsgi.RateLimitMiddleware(
    hello,
    policies={"clients": rb.SharedKeyedLimiter(LIMIT_FILE, rate="5/minute", burst=5, max_keys=100_000)},
    key_header="x-api-key",
)
