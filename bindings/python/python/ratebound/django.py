"""Django: ``@limit("5/minute")`` on a view (a function or a class-based
view), and ``RateLimitMiddleware`` for the whole site, configured from
``settings.RATEBOUND``.

>>> from django.http import HttpResponse
>>> from django.views import View
>>> import ratebound as rb
>>> @rb.django.limit("5/minute")                        # per client IP
... def login(request):
...     return HttpResponse("ok")
>>> @rb.django.limit("100/s burst 200", key="x-api-key")
... class Items(View):                                   # every method of the view
...     def get(self, request):
...         return HttpResponse("[]")
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator, Mapping, Optional, TypeVar, Union

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase, StreamingHttpResponse
from django.urls import Resolver404, resolve
from django.utils.decorators import method_decorator
from django.utils.module_loading import import_string
from django.views import View

from ._errors import RateboundError
from ._http import MiddlewareBase, Options, with_fields
from ._ratebound import Ask, Place, Admission
from ._route import RouteLimit
from .wsgi import _Release

if TYPE_CHECKING:
    from collections.abc import Generator

__all__ = ["RateLimitMiddleware", "limit"]

F = TypeVar("F", bound=Callable[..., Any])
Fields = list[tuple[str, str]]
GetResponse = Callable[[HttpRequest], Any]


class _Refusal(HttpResponse):
    """The gate's refusal; awaitable too, because the sync ``dispatch`` of an
    async class-based view hands its answer to an ``await``."""

    def __await__(self) -> Generator[Any, None, _Refusal]:
        return _now(self).__await__()


async def _now(response: _Refusal) -> _Refusal:
    return response


def _refusal(verdict: Admission) -> _Refusal:
    """The answer (status, fields, content type, body) the gate gave."""
    return _Refusal(
        verdict.body or b"", status=verdict.status, content_type=verdict.content_type, headers=dict(verdict.headers)
    )


def _with_fields(response: Any, fields: Fields) -> Any:
    """``response`` with this limit's RateLimit fields added; fields a view
    limit set already are merged by the core's rule (``with_fields``)."""
    if isinstance(response, HttpResponseBase):
        for name, value in with_fields(list(response.items()), fields):
            response[name] = value
    return response


async def _with_fields_later(pending: Awaitable[Any], fields: Fields) -> Any:
    return _with_fields(await pending, fields)


class limit(RouteLimit):  # noqa: N801 - used like a function: @limit("5/minute")
    """A view decorator limiting that view (every view it decorates shares
    the one limit; a new ``limit(...)`` per view is a limit per view).

    Arguments as ``ratebound.fastapi.limit``; ``key`` may be a function of
    the ``HttpRequest``. It decorates a function view (sync or async), a
    class-based view (the class: every request to it, through
    ``dispatch``), or through ``method_decorator`` a view's ``dispatch``
    (``method_decorator(limit(...), name="dispatch")``) or one handler. A
    refusal answers 429 with ``Retry-After`` (whole seconds, rounded up) and
    the RateLimit fields; an admitted response gets the RateLimit fields too.
    The gate reads ``request.META`` (under WSGI and ASGI alike) and
    ``REMOTE_ADDR``; ``on_decision``'s label is the URL pattern
    (``request.resolver_match.route``) unless ``label`` is given.
    """

    def __call__(self, view: F) -> F:
        if isinstance(view, type):
            if not issubclass(view, View):
                raise TypeError(f"limit decorates a view function or a django.views.View, not {view.__name__}")
            method_decorator(self, name="dispatch")(view)
            return view
        if iscoroutinefunction(view):
            self._check_remote(True, "an async view")

            @functools.wraps(view)
            async def limited_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                refused, fields = await self._admit_async(request)
                if refused is not None:
                    return refused
                return _with_fields(await view(request, *args, **kwargs), fields)

            return limited_async  # type: ignore[return-value]

        self._check_remote(False, "a sync view")

        @functools.wraps(view)
        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            refused, fields = self._admit(request)
            if refused is not None:
                return refused
            response = view(request, *args, **kwargs)
            if not isinstance(response, HttpResponseBase) and inspect.isawaitable(response):
                # The dispatch of an async class-based view.
                return _with_fields_later(response, fields)
            return _with_fields(response, fields)

        return limited  # type: ignore[return-value]

    def _admit(self, request: HttpRequest) -> tuple[Optional[_Refusal], Fields]:
        """The refusal for ``request`` (or ``None``) and the fields to add.
        A route limit has no cap: None (exempt), a verdict, or with remote
        policies an Ask (sync limiters under a sync view: checked)."""
        answer = self._ask(request)
        return _answered(self._finish(answer) if isinstance(answer, Ask) else answer)

    async def _admit_async(self, request: HttpRequest) -> tuple[Optional[_Refusal], Fields]:
        """``_admit`` for an async view: asyncio Redis limiters."""
        answer = self._ask(request)
        return _answered(await self._finish_async(answer) if isinstance(answer, Ask) else answer)

    def _ask(self, request: HttpRequest) -> Union[None, Admission, Ask]:
        meta = request.META
        route = None
        if self._route_label:
            match = request.resolver_match
            route = match.route if match is not None else None
        return self.gate.admit(request, meta.get("REMOTE_ADDR"), meta, True, route)


def _answered(verdict: Optional[Admission]) -> tuple[Optional[_Refusal], Fields]:
    if verdict is None:  # exempt
        return None, []
    return (_refusal(verdict) if verdict.status else None), verdict.headers


# settings.RATEBOUND's names: the middleware's keyword options.
_OPTIONS = tuple(Options.__annotations__)
_IMPORTED = ("key", "exempt", "critical", "priority", "on_decision")


class RateLimitMiddleware(MiddlewareBase):
    """Rate-limits every request before it reaches the views, with the
    options of :class:`ratebound.asgi.RateLimitMiddleware` given in
    ``settings.RATEBOUND`` (a dict: ``{"rate": "10/s", "key_header":
    "x-api-key"}``).

    ``key``, ``exempt``, ``critical``, ``priority`` and ``on_decision`` are
    functions (of the ``HttpRequest``, but ``on_decision``'s event), or their
    dotted import paths (``priority`` may also be ``"critical"``,
    ``"normal"`` or ``"background"``). ``exempt`` may also be a list of path prefixes (``"/health"``
    exempts ``/health`` and ``/health/...``, not ``/healthz``) and URL names
    (``"status"``, ``"api:ping"``). A missing or bad ``RATEBOUND`` raises
    ``ImproperlyConfigured`` naming the bad option or value when Django
    loads the middleware, at startup.

    Sync (WSGI) and async (ASGI): it runs in the mode of the request chain.
    With ``concurrency_limit`` a request holds its place until its view has
    answered, or a streaming response until its body is sent (or the server
    closes it). Policies in Redis are sync limiters (``rb.redis.TokenBucket``)
    under WSGI and asyncio ones (``rb.redis.AsyncTokenBucket``) under ASGI;
    a ``SharedKeyedLimiter`` serves both.
    """

    sync_capable = True
    async_capable = True
    app: GetResponse

    def __init__(self, get_response: GetResponse) -> None:
        is_async = iscoroutinefunction(get_response)
        try:
            super().__init__(get_response, **_settings_options())
            self._check_remote(is_async, "ASGI" if is_async else "WSGI")
        except (TypeError, ValueError, RateboundError) as e:
            raise ImproperlyConfigured(f"settings.RATEBOUND: {e}") from e
        self._is_async = is_async
        if is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Union[HttpResponseBase, Awaitable[HttpResponseBase]]:
        if self._is_async:
            return self._call_async(request)
        meta = request.META
        verdict = self.gate.admit(request, meta.get("REMOTE_ADDR"), meta, True)
        if verdict is None:  # exempt
            return self.app(request)  # type: ignore[no-any-return]
        if type(verdict) is Ask:  # not isinstance: 3x slower on an extension class
            verdict = self._finish(verdict)
        if verdict.status:
            return _refusal(verdict)
        place = verdict.place
        try:
            response = _with_fields(self.app(request), verdict.headers)
        except BaseException:
            if place is not None:
                place.release()
            raise
        return _release_when_sent(response, place)

    async def _call_async(self, request: HttpRequest) -> HttpResponseBase:
        meta = request.META
        verdict = self.gate.admit(request, meta.get("REMOTE_ADDR"), meta, True)
        if verdict is None:  # exempt
            return await self.app(request)  # type: ignore[no-any-return]
        if type(verdict) is Ask:  # not isinstance: 3x slower on an extension class
            verdict = await self._finish_async(verdict)
        if verdict.status:
            return _refusal(verdict)
        place = verdict.place
        try:
            response = _with_fields(await self.app(request), verdict.headers)
        except BaseException:
            if place is not None:
                place.release()
            raise
        return _release_when_sent(response, place)


def _settings_options() -> dict[str, Any]:
    """The middleware's options from ``settings.RATEBOUND``, functions
    imported from their dotted paths and ``exempt`` lists made a function."""
    # Imported here, not at the top: unconfigured, the lazy settings object
    # raises on any attribute, and tools that walk this module's names
    # (doctest) would trip over it.
    from django.conf import settings

    try:
        config = settings.RATEBOUND
    except AttributeError:
        raise ImproperlyConfigured(
            "RateLimitMiddleware needs settings.RATEBOUND, a dict of its options such as {'rate': '10/s'}"
        ) from None
    if not isinstance(config, Mapping):
        raise ImproperlyConfigured(f"settings.RATEBOUND is a dict of options, not {type(config).__name__}")
    options = dict(config)
    for name in options:
        if name not in _OPTIONS:
            raise ImproperlyConfigured(
                f"settings.RATEBOUND: unknown option {name!r}; the options are {', '.join(_OPTIONS)}"
            )
    for name in _IMPORTED:
        value = options.get(name)
        # A priority's name ("background") is no dotted path to import.
        if isinstance(value, str) and not (name == "priority" and "." not in value):
            try:
                options[name] = import_string(value)
            except ImportError as e:
                raise ImproperlyConfigured(f"settings.RATEBOUND: {name} {value!r} cannot be imported: {e}") from e
    exempt = options.get("exempt")
    if isinstance(exempt, (list, tuple)):
        options["exempt"] = _exempt_rule(exempt)
    return options


def _exempt_rule(spec: Union[list[Any], tuple[Any, ...]]) -> Callable[[HttpRequest], bool]:
    """Whether a request is exempt: its path under one of the prefixes in
    ``spec`` (strings starting with ``/``), or its URL named in ``spec``."""
    if not all(isinstance(item, str) and item for item in spec):
        raise ImproperlyConfigured(f"settings.RATEBOUND: exempt lists path prefixes and URL names, got {spec!r}")
    prefixes = tuple(p for p in spec if p.startswith("/"))
    under = tuple(p if p.endswith("/") else p + "/" for p in prefixes)
    names = frozenset(p for p in spec if not p.startswith("/"))

    def exempt(request: HttpRequest) -> bool:
        path = request.path_info
        if path in prefixes or path.startswith(under):
            return True
        if not names:
            return False
        try:
            match = resolve(path, getattr(request, "urlconf", None))
        except Resolver404:
            return False
        return match.view_name in names

    return exempt


def _release_when_sent(response: HttpResponseBase, place: Optional[Place]) -> HttpResponseBase:
    """Gives the concurrency place back now, or for a streaming response
    when it is closed (sent or abandoned)."""
    if place is None:
        return response
    if isinstance(response, StreamingHttpResponse):
        place.responded()  # an adaptive limit's latency: the head goes out now, the body later
        body = response.streaming_content
        if isinstance(body, Iterator):
            response.streaming_content = _Release(body, place)
        else:
            response.streaming_content = _ReleaseAsync(body, place)  # type: ignore[arg-type]  # an async body: only __aiter__ is used
    else:
        place.release()
    return response


class _ReleaseAsync(_Release):
    """An async streaming body holding its request's concurrency place
    until Django closes the response (its ASGI handler closes every
    response once sent or abandoned, as a WSGI server does)."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._body  # type: ignore[return-value]
