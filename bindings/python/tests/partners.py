"""The HTTP partners of the outbound tests share how they are served: an
HTTP server on 127.0.0.1 in a thread of its own, its ``url``, ``close``."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from redis_servers import HOST


class HttpPartner:
    """A partner serves with `serve` (its handler class, the path of its
    ``url``) and stops with `close`."""

    httpd: ThreadingHTTPServer
    url: str

    def serve(
        self,
        handler: type[BaseHTTPRequestHandler],
        path: str,
        server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer,
    ) -> None:
        self.httpd = server_class((HOST, 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://{HOST}:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
