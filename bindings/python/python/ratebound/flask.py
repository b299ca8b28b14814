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

from ._ratebound import Ask
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
        self._check_remote(False, "Flask")
        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            request = flask.request
            route = None
            if self._route_label:
                rule = request.url_rule
                route = rule.rule if rule else None
            # A route limit has no cap: None (exempt), a verdict, or with
            # remote policies an Ask (sync Redis limiters: checked when made).
            answer = self.gate.admit(request, request.remote_addr, request.environ, True, route)
            if answer is None:
                return view(*args, **kwargs)
            verdict = self._finish(answer) if isinstance(answer, Ask) else answer
            fields = verdict.headers
            if verdict.status:
                return flask.Response(verdict.body, status=verdict.status, headers=fields, content_type=verdict.content_type)
            response = flask.make_response(view(*args, **kwargs))
            for name, value in fields:
                response.headers[name] = value
            return response

        return cast(F, limited)
