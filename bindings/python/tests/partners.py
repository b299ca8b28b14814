"""The HTTP partners of the outbound tests share how they are served: an
HTTP server on 127.0.0.1 in a thread of its own, its ``url``, ``close``."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
