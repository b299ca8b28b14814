"""WSGI middleware (Flask, Django, any WSGI app).

>>> from flask import Flask
>>> import ratebound as rb
>>> app = Flask(__name__)
>>> app.wsgi_app = rb.wsgi.RateLimitMiddleware(app.wsgi_app, rate="10/s", key_header="X-API-Key")
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional, Union

from ._http import KeyFunc, PolicySpec, build_gate, reason
from ._ratebound import ManualClock

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

__all__ = ["RateLimitMiddleware"]


class RateLimitMiddleware:
    """Rate-limits requests before they reach ``app``; the options are those
    of :class:`ratebound.asgi.RateLimitMiddleware` (``key(environ)`` and
    ``exempt(environ)`` take the WSGI environ)."""

    def __init__(
        self,
        app: WSGIApp,
        *,
        rate: Optional[Union[int, float, str]] = None,
        burst: Optional[int] = None,
        policies: Optional[Mapping[str, PolicySpec]] = None,
        key_header: Optional[str] = None,
        key: Optional[KeyFunc] = None,
        trusted_proxies: Union[None, int, Iterable[str]] = None,
        ipv6_prefix: int = 64,
        missing_key: Union[str, int] = "ip",
        headers: str = "draft",
        body: str = "text",
        exempt: Optional[Callable[[Environ], bool]] = None,
        max_keys: Optional[int] = 1_000_000,
        overflow: str = "evict",
        clock: Optional[ManualClock] = None,
    ) -> None:
        if key_header is not None and key is not None:
            raise TypeError("give key_header= or key=, not both")
        self.app = app
        self.gate = build_gate(
            rate, burst, policies, trusted_proxies, ipv6_prefix, missing_key,
            headers, body, max_keys, overflow, clock,
        )
        self._environ_key = (
            "HTTP_" + key_header.upper().replace("-", "_") if key_header else None
        )
        self._key = key
        self._forwarding = trusted_proxies is not None
        self._exempt = exempt

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if self._exempt is not None and self._exempt(environ):
            return self.app(environ, start_response)
        if self._key is not None:
            k: Any = self._key(environ)
        elif self._environ_key is not None:
            value = environ.get(self._environ_key)
            k = value.encode("latin-1") if value else None
        else:
            k = None
        xff = fwd = None
        if self._forwarding:
            xff = environ.get("HTTP_X_FORWARDED_FOR")
            fwd = environ.get("HTTP_FORWARDED")
        status, fields, ctype, body = self.gate.decide(k, environ.get("REMOTE_ADDR"), xff, fwd, True)
        if status:
            fields.append(("content-type", ctype))
            fields.append(("content-length", str(len(body))))
            start_response(f"{status} {reason(status)}", fields)
            return [body]
        if not fields:
            return self.app(environ, start_response)

        def start_with_headers(status_line: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status_line, [*response_headers, *fields], exc_info)

        return self.app(environ, start_with_headers)
