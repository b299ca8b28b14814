"""The HTTP partners of the outbound tests share how they are served: an
HTTP server on 127.0.0.1 in a thread of its own, its ``url``, ``close``;
and the partners' own limit, a token bucket of their own (not
ratebound's): `Bucket`, and `BarePartner`, which answers a bare 429 beyond
it; `OkPartner`, which answers 200 with fixed header fields; `FleetPartner`, whose answers (status and header fields) are a function
of the time since a fleet's start, counted per second."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from redis_servers import HOST


class _Server(ThreadingHTTPServer):
    # Fifty callers connect at once: socketserver's listen backlog of 5
    # overflows when the accept loop is slow (a loaded machine), and a
    # connection whose handshake the kernel dropped stalls until the
    # SYN-ACK is sent again (1 s, 3 s, ...): a client read timeout that is
    # the test server's, not the limiter's.
    request_queue_size = 128


class HttpPartner:
    """A partner serves with `serve` (its handler class, the path of its
    ``url``) and stops with `close`."""

    httpd: ThreadingHTTPServer
    url: str

    def serve(
        self,
        handler: type[BaseHTTPRequestHandler],
        path: str,
        server_class: type[ThreadingHTTPServer] = _Server,
    ) -> None:
        self.httpd = server_class((HOST, 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://{HOST}:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class OkPartner(HttpPartner):
    """Answers every GET of any path with 200 "ok" and the header fields
    `headers`."""

    def __init__(self, headers: tuple[tuple[str, str], ...] = ()) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.serve(Handler, "/v1")


class Bucket:
    """A partner's limit: `rate`/s with bursts of `burst`, refilled at the
    rate in force when a request is taken (a partner may change `rate`).
    Not thread-safe: its partner holds a lock around `take`."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.last = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class BarePartner(HttpPartner):
    """Admits `rate`/s with bursts of `burst` (its own bucket) and answers
    a bare 429 beyond it, until `open()`: then everything is admitted."""

    def __init__(self, rate: float = 20, burst: float = 5) -> None:
        self.bucket = Bucket(rate, burst)
        self.lock = threading.Lock()
        self.statuses: dict[int, int] = {}
        self.limited = True
        partner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                status = partner.decide()
                body = b"ok" if status == 200 else b"no"
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.serve(Handler, "/v1/items")

    def decide(self) -> int:
        with self.lock:
            taken = self.bucket.take()
            status = 200 if taken or not self.limited else 429
            self.statuses[status] = self.statuses.get(status, 0) + 1
            return status

    def open(self) -> None:
        with self.lock:
            self.limited = False

    def count(self, status: int) -> int:
        with self.lock:
            return self.statuses.get(status, 0)


# A partner's answer: its status and header fields.
Answer = tuple[int, list[tuple[str, str]]]


class FleetPartner(HttpPartner):
    """Answers each GET with `decide(t)` — t the seconds since `start` (the
    fleet's start, set before it sends), called under a lock — `delay`
    seconds after deciding, and notes when each answer was decided."""

    def __init__(self, decide: Callable[[float], Answer], delay: float = 0.0) -> None:
        self.decide, self.delay = decide, delay
        self.start = time.time()
        self.lock = threading.Lock()
        self.hits: list[tuple[float, int]] = []
        partner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                status, fields = partner.answer()
                if partner.delay:
                    time.sleep(partner.delay)
                body = b"ok" if status == 200 else b"no"
                self.send_response(status)
                for name, value in fields:
                    self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.serve(Handler, "/v1/items")

    def answer(self) -> Answer:
        with self.lock:
            now = time.time()
            status, fields = self.decide(now - self.start)
            self.hits.append((now, status))
            return status, fields

    def per_second(self, run: int) -> list[tuple[int, int]]:
        """The 200s and the refusals (any other status) in each whole second
        since `start`; the last entry, past `run`, holds the answers to
        requests in flight at the run's end. None may come before `start`."""
        seconds = [(0, 0) for _ in range(run + 1)]
        with self.lock:
            hits = list(self.hits)
        for at, status in hits:
            assert at >= self.start, "an instance sent before the fleet's start"
            s = min(int(at - self.start), run)
            ok, no = seconds[s]
            seconds[s] = (ok + 1, no) if status == 200 else (ok, no + 1)
        return seconds


def phases(steps: list[tuple[float, float]], burst: float) -> Callable[[float], Answer]:
    """A partner's limit that changes: (from second, rate per second), burst
    `burst`; a bare 429 beyond it."""
    bucket = Bucket(steps[0][1], burst)

    def decide(t: float) -> Answer:
        bucket.rate = next((rate for since, rate in reversed(steps) if t >= since), steps[0][1])
        return (200 if bucket.take() else 429), []

    return decide


def counts(seconds: list[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """The 200s and the refusals in seconds [start, end)."""
    part = seconds[start:end]
    return sum(s[0] for s in part), sum(s[1] for s in part)
