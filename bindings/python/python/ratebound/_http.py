"""What every Python front door shares: the options of the ASGI and WSGI
middleware (and Django's), the ``_ratebound.Gate`` they build — the core's
whole request sequence, its rules and defaults — and the one place the
remote policies are asked, sync and asyncio."""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import Any, Awaitable, Callable, Iterable, Literal, Mapping, NamedTuple, Optional, TypedDict, Union

from . import _ratebound
from . import redis as _redis
from ._ratebound import Ask, Concurrency, Decision, Gate, ManualClock, Admission

_log = logging.getLogger("ratebound")

PolicySpec = Union[
    int, float, str, Mapping[str, Any], "_redis._Limiter", "_redis._AsyncLimiter", "_ratebound.SharedKeyedLimiter"
]

Remote = Union["_redis._Limiter", "_redis._AsyncLimiter", "_ratebound.SharedKeyedLimiter"]

PriorityName = Literal["critical", "normal", "background"]
"""A request's priority under the concurrency limit: ``"background"`` is
shed first (it gets a place only below ``background_fraction`` of the
limit), ``"critical"`` never."""

Priority = Union[PriorityName, Callable[[Any], str]]
"""The ``priority`` option: one priority for every request, or a function
of the framework's request returning one."""


def build_gate(
    options: Mapping[str, Any],
    policies: Optional[Mapping[str, PolicySpec]],
    *,
    key: Any = None,
    exempt: Optional[Callable[[Any], bool]] = None,
    critical: Optional[Callable[[Any], bool]] = None,
    priority: Optional[Priority] = None,
    on_decision: Optional[OnDecision] = None,
    label: Optional[str] = None,
    clock: Optional[ManualClock] = None,
) -> tuple[Gate, list[tuple[str, Remote]]]:
    """The core's gate — ``options`` (the one policy's fields among them)
    go to its one parser by name, ``None`` meaning the core's default; the
    hooks are called by the gate with the framework's request — and the
    policies decided elsewhere, by name: Redis limiters and limits shared
    by the host's processes (:class:`ratebound.SharedKeyedLimiter`), which
    the gate advertises and whose answers it merges."""
    remote: list[tuple[str, Remote]] = []
    local: Optional[list[tuple[str, Any]]] = None
    if policies is not None:
        local = []
        for name, spec in policies.items():
            if isinstance(spec, (_redis._Limiter, _redis._AsyncLimiter, _ratebound.SharedKeyedLimiter)):
                remote.append((name, spec))
            else:
                local.append((name, spec))
    gate = Gate(
        dict(options),
        local,
        [(name, limiter if isinstance(limiter, _ratebound.SharedKeyedLimiter) else limiter._engine)
         for name, limiter in remote],
        key=key, exempt=exempt, critical=critical, priority=priority, on_decision=on_decision, label=label,
        clock=clock,
    )
    return gate, remote


class RateLimitEvent(NamedTuple):
    """What ``on_decision`` is told about each limited request: ``outcome``
    (``"allowed"``, ``"refused"``, ``"shed"``, ``"rejected"`` — no valid
    key, a full key table — or ``"store_error"``: a remote policy's check
    raised, answered 503 with ``Retry-After``), ``policy`` (the policy that
    refused, or the remote policy that failed, else ``None``), ``policies`` (every policy's name), ``label`` (the route,
    or the middleware's ``label``) and, for a ``"shed"`` request, its
    ``priority`` (``"normal"`` or ``"background"``; else ``None``)."""

    outcome: str
    policy: Optional[str]
    policies: tuple[str, ...]
    label: Optional[str]
    priority: Optional[str] = None


OnDecision = Callable[[RateLimitEvent], None]


Lines = Any  # a response's header lines: (name, value) pairs of str or bytes


def with_fields(present: Lines, mine: Lines) -> Lines:
    """A response's header lines ``present`` with this limit's quota fields
    ``mine`` added. Quota fields already there (a route's own limit under
    the site middleware) are merged by the core's one rule, this limit's
    first (it decided first): ``RateLimit`` and ``RateLimit-Policy`` lists
    joined, the legacy fields of the tighter limit, the longer
    ``Retry-After``."""
    for name, _ in present:
        if name in _QUOTA_FIELDS:  # as the gates write them: lower case
            return _ratebound._merge_fields(present, mine)
    return [*present, *mine]


# The fields a gate sets (the core's list), as str and as bytes.
_QUOTA_FIELDS = frozenset([*_ratebound._GATE_FIELDS, *(n.encode() for n in _ratebound._GATE_FIELDS)])


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


KeyFunc = Callable[[Any], Union[str, bytes, int, None]]


class Options(TypedDict, total=False):
    """The keyword options of both middleware, for type checkers."""

    rate: Optional[Union[int, float, str]]
    burst: Optional[int]
    policies: Optional[Mapping[str, PolicySpec]]
    key_header: Optional[str]
    key: Optional[KeyFunc]
    trusted_proxies: Union[None, int, str, Iterable[str]]
    client_ip_header: Optional[str]
    ipv6_prefix: Optional[int]
    missing_key: Union[None, str, int]
    headers: Optional[str]
    body: Optional[str]
    exempt: Optional[Callable[[Any], bool]]
    max_keys: Optional[int]
    overflow: Optional[str]
    concurrency_limit: Union[None, int, Literal["auto"]]
    concurrency_initial: Optional[int]
    concurrency_min: Optional[int]
    concurrency_max: Optional[int]
    concurrency_tolerance: Optional[float]
    background_fraction: Optional[float]
    store_error_retry_after: Optional[int]
    critical: Optional[Callable[[Any], bool]]
    priority: Optional[Priority]
    clock: Optional[ManualClock]
    on_decision: Optional[OnDecision]
    label: Optional[str]


class RemoteAsker:
    """The one place a Python front door — the middleware, a route's own
    limit — asks its remote policies (``_remote``) for a request its gate
    (``gate``) answered with an ``Ask``, then lets the gate finish: the core
    maps each answer (``Gate.finish``)."""

    gate: Gate
    _remote: list[tuple[str, Remote]]

    def _check_remote(self, asyncio_: bool, front: str) -> None:
        """Every policy decided elsewhere suits the front door's mode:
        asyncio Redis limiters under ASGI (or an async view), sync ones
        under WSGI (or a sync view), a shared-memory limiter under both."""
        wanted = _redis._AsyncLimiter if asyncio_ else _redis._Limiter
        for _, limiter in self._remote:
            if not isinstance(limiter, (wanted, _ratebound.SharedKeyedLimiter)):
                kind = "an asyncio limiter (rb.redis.AsyncTokenBucket, ...)" if asyncio_ else "a sync limiter (rb.redis.TokenBucket, ...)"
                raise TypeError(f"a policy in Redis needs {kind} under {front}, got {type(limiter).__name__}")

    def _finish(self, ask: Ask) -> Admission:
        """The gate's verdict once the policies decided elsewhere (sync
        Redis limiters, shared-memory ones: the middleware checked their
        kind) have answered for the request's identity, in order. A check
        that raises is an answer too: the core maps it (a full table: 503
        as the gate's own; any other error: 503 with ``Retry-After``,
        outcome ``"store_error"``) — never a 500."""
        try:
            ident = ask.identity
            answers = [_sync_answer(name, limiter, ident) for name, limiter in self._remote]
        except BaseException:
            ask.close()  # the place comes back now, not when the traceback goes
            raise
        return self._told(self.gate.finish(ask, answers), answers)

    async def _finish_async(self, ask: Ask) -> Admission:
        """``_finish`` with asyncio Redis limiters: one round trip each, all
        at once (within its deadline; Redis trouble is answered by its fail
        policy, any error that escapes it by the core's rule)."""
        try:
            ident = ask.identity
            answers = await asyncio.gather(*(_asked(name, limiter, ident) for name, limiter in self._remote))
        except BaseException:
            ask.close()
            raise
        return self._told(self.gate.finish(ask, answers), answers)

    def _told(self, verdict: Admission, answers: list[Any]) -> Admission:
        """Logs a remote policy's episode of failures as the core tells it:
        a warning, with the error, when it begins; an info line when it
        ends."""
        notice = verdict.notice
        if notice is not None:
            if verdict.outcome == "store_error":
                cause = next(
                    (a for (name, _), a in zip(self._remote, answers) if name == verdict.refused_by), None
                )
                _log.warning("%s: %s: %s", notice, type(cause).__name__, cause, exc_info=cause)
            else:
                _log.info("%s", notice)
        return verdict


class MiddlewareBase(RemoteAsker):
    """The options both middleware take (see
    :class:`ratebound.asgi.RateLimitMiddleware`). Every option left at
    ``None`` takes the core's default, the same in Rust and Node; every rule
    between options is the core's too."""

    def __init__(
        self,
        app: Any,
        *,
        rate: Optional[Union[int, float, str]] = None,
        burst: Optional[int] = None,
        policies: Optional[Mapping[str, PolicySpec]] = None,
        key_header: Optional[str] = None,
        key: Optional[KeyFunc] = None,
        trusted_proxies: Union[None, int, str, Iterable[str]] = None,
        client_ip_header: Optional[str] = None,
        ipv6_prefix: Optional[int] = None,
        missing_key: Union[None, str, int] = None,
        headers: Optional[str] = None,
        body: Optional[str] = None,
        exempt: Optional[Callable[[Any], bool]] = None,
        max_keys: Optional[int] = None,
        overflow: Optional[str] = None,
        concurrency_limit: Union[None, int, Literal["auto"]] = None,
        concurrency_initial: Optional[int] = None,
        concurrency_min: Optional[int] = None,
        concurrency_max: Optional[int] = None,
        concurrency_tolerance: Optional[float] = None,
        background_fraction: Optional[float] = None,
        store_error_retry_after: Optional[int] = None,
        critical: Optional[Callable[[Any], bool]] = None,
        priority: Optional[Priority] = None,
        clock: Optional[ManualClock] = None,
        on_decision: Optional[OnDecision] = None,
        label: Optional[str] = None,
    ) -> None:
        self.app = app
        self.gate, self._remote = build_gate(
            {
                "rate": rate,
                "burst": burst,
                "key_header": key_header,
                "trusted_proxies": trusted_proxies,
                "client_ip_header": client_ip_header,
                "ipv6_prefix": ipv6_prefix,
                "missing_key": missing_key,
                "headers": headers,
                "body": body,
                "max_keys": max_keys,
                "overflow": overflow,
                "concurrency_limit": concurrency_limit,
                "concurrency_initial": concurrency_initial,
                "concurrency_min": concurrency_min,
                "concurrency_max": concurrency_max,
                "concurrency_tolerance": concurrency_tolerance,
                "background_fraction": background_fraction,
                "store_error_retry_after": store_error_retry_after,
            },
            policies,
            key=key, exempt=exempt, critical=critical, priority=priority, on_decision=on_decision, label=label,
            clock=clock,
        )
        # Under an adaptive limit a request's latency is taken when its
        # response's head goes out (Place.responded), not when its body ends.
        self._timed = self.gate.adaptive

    @property
    def concurrency(self) -> Optional[Concurrency]:
        """The concurrency limit now, for a metrics gauge — ``limit``,
        ``in_flight``, ``adaptive``, ``baseline_ms``, ``recent_ms``,
        ``windows`` — or ``None`` without ``concurrency_limit``. A
        snapshot: read it again for new values (prometheus-client:
        ``Gauge("concurrency_limit", "").set_function(lambda:
        mw.concurrency.limit)``)."""
        return self.gate.concurrency


# What a remote policy answers the gate: its decision, or the error its
# check raised (the core maps it by its ``code``).
_Answer = Union[Decision, Exception]


def _sync_answer(name: str, limiter: Remote, ident: bytes) -> _Answer:
    """A remote policy's answer for ``ident`` as the gate takes it: a Redis
    limiter checks the key in its policy's own scope (two policies of one
    middleware never share a Redis key); a check that raises answers its
    exception (a full shared-memory table's ``TooManyKeys``, an error of
    the user's client), which the core maps — never a 500. Interrupts
    (``KeyboardInterrupt``, a cancelled task) are not answers: they go on."""
    try:
        if isinstance(limiter, _ratebound.SharedKeyedLimiter):
            return limiter.check(ident)
        return limiter._check_in(name, ident)  # type: ignore[return-value]  # a sync limiter: the middleware checked
    except Exception as e:
        return e


def _asked(name: str, limiter: Remote, ident: bytes) -> Awaitable[_Answer]:
    """``_sync_answer`` to await: an asyncio Redis limiter's round trip, or
    a shared-memory decision made at once."""
    if isinstance(limiter, _redis._AsyncLimiter):
        return _awaited(limiter._check_in(name, ident))
    return _ready(_sync_answer(name, limiter, ident))


async def _awaited(check: Awaitable[Decision]) -> _Answer:
    try:
        return await check
    except Exception as e:
        return e


async def _ready(answer: _Answer) -> _Answer:
    return answer
