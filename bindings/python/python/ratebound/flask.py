"""Per-route limits for Flask: ``@limit("5/minute")`` on a view.

>>> from flask import Flask
>>> import ratebound as rb
>>> app = Flask(__name__)
>>> @app.post("/login")
... @rb.flask.limit("5/minute")                        # per client IP
... def login() -> str:
...     return "ok"
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar, cast

import flask

from ._route import RouteLimit

__all__ = ["limit"]

F = TypeVar("F", bound=Callable[..., Any])


class limit(RouteLimit):  # noqa: N801 - used like a function: @limit("5/minute")
    """A view decorator limiting that view (every view it decorates shares
    the one limit; a new ``limit(...)`` per view is a limit per view).

    Arguments as ``ratebound.fastapi.limit``; ``key`` may be a function of
    ``flask.request``. A refusal answers 429 with ``Retry-After`` (whole
    seconds, rounded up) and the RateLimit fields; an admitted response gets
    the RateLimit fields too.
    """

    def __call__(self, view: F) -> F:
        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            request = flask.request
            k = self._key(request) if self._key is not None else None
            verdict = self.gate.decide(k, request.remote_addr, request.environ, True)
            if self._on_decision is not None:
                rule = request.url_rule
                self._tell(verdict, rule.rule if rule else None)
            status, fields, ctype, body = verdict[:4]
            if status:
                return flask.Response(body, status=status, headers=fields, content_type=ctype)
            response = flask.make_response(view(*args, **kwargs))
            for name, value in fields:
                response.headers[name] = value
            return response

        return cast(F, limited)
