"""WSGI middleware (Flask, Django, any WSGI app).

>>> from flask import Flask
>>> import ratebound as rb
>>> app = Flask(__name__)
>>> app.wsgi_app = rb.wsgi.RateLimitMiddleware(app.wsgi_app, rate="10/s", key_header="X-API-Key")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ._http import MiddlewareBase, Options, reason, report

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RateLimitMiddleware"]


class RateLimitMiddleware(MiddlewareBase):
    """Rate-limits requests before they reach ``app``; the options are those
    of :class:`ratebound.asgi.RateLimitMiddleware` (``key(environ)`` and
    ``exempt(environ)`` take the WSGI environ)."""

    app: WSGIApp

    def __init__(self, app: WSGIApp, **options: Unpack[Options]) -> None:
        super().__init__(app, **options)
        self._check_remote(False, "WSGI")

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if self._exempt is not None and self._exempt(environ):
            return self.app(environ, start_response)
        if not self._capped:
            return self._limited(environ, start_response)
        entered = self.gate.try_enter()
        if not entered and not (self._critical is not None and self._critical(environ)):
            shed = self.gate.shed(True)
            if self._on_decision is not None:
                report(self._on_decision, self._policies, shed, self._label)
            return _answer(start_response, shed)
        if not entered:
            return self._limited(environ, start_response)
        try:
            body = self._limited(environ, start_response)
        except BaseException:
            self.gate.leave()
            raise
        # The place is held until the server has sent the whole body.
        return _Release(body, self.gate)

    def _limited(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        k = self._key(environ) if self._key is not None else None
        # The server has joined repeated header lines with commas; the gate
        # reads the environ's HTTP_* entries it needs.
        verdict = self._verdict(k, environ.get("REMOTE_ADDR"), environ, True)
        fields = verdict[1]
        if verdict[0]:
            return _answer(start_response, verdict)
        if not fields:
            return self.app(environ, start_response)

        def start_with_headers(status_line: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status_line, [*response_headers, *fields], exc_info)

        return self.app(environ, start_with_headers)


def _answer(start_response: StartResponse, verdict: Any) -> list[bytes]:
    """Starts a refusal (status, headers, content type, body) from the gate."""
    status, fields, ctype, body = verdict[:4]
    fields.append(("content-type", ctype))
    fields.append(("content-length", str(len(body))))
    start_response(f"{status} {reason(status)}", fields)
    return [body]


class _Release:
    """The app's response body, giving the concurrency place back when the
    server closes it (PEP 3333: ``close()`` is called once the response is
    done, or abandoned)."""

    def __init__(self, body: Iterable[bytes], gate: Any) -> None:
        self._body = body
        self._gate = gate

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            gate, self._gate = self._gate, None
            if gate is not None:
                gate.leave()
