"""WSGI middleware (Flask, Django, any WSGI app).

>>> from flask import Flask
>>> import ratebound as rb
>>> app = Flask(__name__)
>>> app.wsgi_app = rb.wsgi.RateLimitMiddleware(app.wsgi_app, rate="10/s", key_header="X-API-Key")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ._http import MiddlewareBase, Options, reason, with_fields
from ._ratebound import Ask, Place, Admission

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
        # The server has joined repeated header lines with commas; the gate
        # reads the environ's HTTP_* entries it needs.
        verdict = self.gate.admit(environ, environ.get("REMOTE_ADDR"), environ, True)
        if verdict is None:  # exempt
            return self.app(environ, start_response)
        if type(verdict) is Ask:  # not isinstance: 3x slower on an extension class
            verdict = self._finish(verdict)
        if verdict.status:
            return _answer(start_response, verdict)
        fields = verdict.headers
        start = start_response
        place = verdict.place
        timed = place if place is not None and self._timed else None
        if fields or timed is not None:

            def start_with_headers(status_line: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                if timed is not None:
                    timed.responded()  # the latency; the place is held until the body is closed
                return start_response(status_line, with_fields(response_headers, fields) if fields else response_headers, exc_info)

            start = start_with_headers
        if place is None:
            return self.app(environ, start)
        try:
            body = self.app(environ, start)
        except BaseException:
            place.release()
            raise
        # The place is held until the server has sent the whole body.
        return _Release(body, place)


def _answer(start_response: StartResponse, verdict: Admission) -> list[bytes]:
    """Starts the gate's answer: its status, fields, content type and body."""
    body = verdict.body or b""
    fields = [*verdict.headers, ("content-type", verdict.content_type), ("content-length", str(len(body)))]
    start_response(f"{verdict.status} {reason(verdict.status)}", fields)
    return [body]


class _Release:
    """The app's response body, giving the concurrency place back when the
    server closes it (PEP 3333: ``close()`` is called once the response is
    done, or abandoned; a body never closed gives it back when collected)."""

    def __init__(self, body: Iterable[bytes], place: Place) -> None:
        self._body = body
        self._place = place

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._place.release()
