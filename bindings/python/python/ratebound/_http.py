"""Options shared by the ASGI and WSGI middleware: they build one
``_ratebound.Gate_``, which makes the whole decision in Rust."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, NamedTuple, Optional, TypedDict, Union

from . import _ratebound
from . import redis as _redis
from ._errors import TooManyKeys
from ._ratebound import ManualClock

PolicySpec = Union[
    int, float, str, Mapping[str, Any], "_redis._Limiter", "_redis._AsyncLimiter", "_ratebound.SharedKeyedLimiter"
]

_POLICY_FIELDS = ("algorithm", "rate", "burst", "limit", "window")


def _policy(name: str, spec: PolicySpec) -> tuple[Any, ...]:
    """One policy as the core's gate takes it; the core checks it. A field
    it does not know is an error naming it (``"brust"`` is not ignored)."""
    if isinstance(spec, Mapping):
        unknown = sorted(str(k) for k in spec if k not in _POLICY_FIELDS)
        if unknown:
            raise TypeError(f"policy {name!r}: unknown field {unknown[0]!r}; a policy takes {', '.join(_POLICY_FIELDS)}")
        algorithm = spec.get("algorithm", "token_bucket")
        return (name, algorithm, spec.get("rate"), spec.get("burst"), spec.get("limit"), spec.get("window"))
    return (name, "token_bucket", spec, None, None, None)


Remote = Union["_redis._Limiter", "_redis._AsyncLimiter", "_ratebound.SharedKeyedLimiter"]


def build_gate(
    rate: Optional[Union[int, float, str]],
    burst: Optional[int],
    policies: Optional[Mapping[str, PolicySpec]],
    options: dict[str, Any],
    given_key: bool,
    clock: Optional[ManualClock],
) -> tuple[Any, list[tuple[str, Remote]]]:
    """The core's gate (``options`` go to its one parser by name; ``None``
    means the core's default) and the policies decided elsewhere — Redis
    limiters and limits shared by the host's processes
    (:class:`ratebound.SharedKeyedLimiter`), by name — which the gate
    advertises and whose decisions it merges."""
    if (rate is None) == (policies is None):
        raise TypeError("give either rate= (one policy) or policies= (a dict of name -> rate)")
    remote: list[tuple[str, Remote]] = []
    if policies is None:
        specs = [("default", "token_bucket", rate, burst, None, None)]
    else:
        if burst is not None:
            raise TypeError("burst= goes with rate=; give each policy its own burst")
        specs = []
        for name, spec in policies.items():
            if isinstance(spec, (_redis._Limiter, _redis._AsyncLimiter, _ratebound.SharedKeyedLimiter)):
                remote.append((name, spec))
            else:
                specs.append(_policy(name, spec))
    gate = _ratebound.Gate_(
        specs, options, given_key=given_key, clock=clock,
        remote=[
            (name, limiter if isinstance(limiter, _ratebound.SharedKeyedLimiter) else limiter._engine)
            for name, limiter in remote
        ],
    )
    return gate, remote


class RateLimitEvent(NamedTuple):
    """What ``on_decision`` is told about each limited request: ``outcome``
    (``"allowed"``, ``"refused"``, ``"shed"`` or ``"rejected"`` — no valid
    key, a full key table), ``policy`` (the policy that refused, else
    ``None``), ``policies`` (every policy's name) and ``label`` (the route,
    or the middleware's ``label``)."""

    outcome: str
    policy: Optional[str]
    policies: tuple[str, ...]
    label: Optional[str]


OnDecision = Callable[[RateLimitEvent], None]


def report(on_decision: OnDecision, policies: tuple[str, ...], verdict: Any, label: Optional[str]) -> None:
    """Tells ``on_decision`` what ``verdict`` (a gate answer) did."""
    on_decision(RateLimitEvent(verdict[4], verdict[5], policies, label))


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
    concurrency_limit: Optional[int]
    critical: Optional[Callable[[Any], bool]]
    clock: Optional[ManualClock]
    on_decision: Optional[OnDecision]
    label: Optional[str]


class MiddlewareBase:
    """The options both middleware take (see
    :class:`ratebound.asgi.RateLimitMiddleware`). Every option left at
    ``None`` takes the core's default, the same in Rust and Node."""

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
        concurrency_limit: Optional[int] = None,
        critical: Optional[Callable[[Any], bool]] = None,
        clock: Optional[ManualClock] = None,
        on_decision: Optional[OnDecision] = None,
        label: Optional[str] = None,
    ) -> None:
        if key_header is not None and key is not None:
            raise TypeError("give key_header= or key=, not both")
        self.app = app
        self.gate, self._remote = build_gate(
            rate,
            burst,
            policies,
            {
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
            },
            key is not None,
            clock,
        )
        # Metrics: told of every limited request when set; nothing is done
        # for it otherwise.
        self._on_decision = on_decision
        self._label = label
        self._policies: tuple[str, ...] = tuple(self.gate.policy_names)
        self._capped = concurrency_limit is not None
        self._critical = critical
        self._key = key
        self._exempt = exempt

    def _check_remote(self, asyncio_: bool, front: str) -> None:
        """Every policy decided elsewhere suits the middleware's mode:
        asyncio Redis limiters under ASGI, sync ones under WSGI, a
        shared-memory limiter under both."""
        wanted = _redis._AsyncLimiter if asyncio_ else _redis._Limiter
        for _, limiter in self._remote:
            if not isinstance(limiter, (wanted, _ratebound.SharedKeyedLimiter)):
                kind = "an asyncio limiter (rb.redis.AsyncTokenBucket, ...)" if asyncio_ else "a sync limiter (rb.redis.TokenBucket, ...)"
                raise TypeError(f"a policy in Redis needs {kind} under {front}, got {type(limiter).__name__}")

    def _verdict(self, key: Any, peer: Optional[str], headers: Any, wsgi: bool) -> Any:
        """The gate's verdict on a request, told to ``on_decision``. Policies
        decided elsewhere (sync Redis limiters, shared-memory ones: the
        middleware checked their kind) get the request's identity first,
        and the gate decides with their answers."""
        if self._remote:
            ident = self.gate.identity(key, peer, headers, wsgi)
            decisions = [] if isinstance(ident, int) else [_sync_answer(n, lim, ident) for n, lim in self._remote]
            verdict = self.gate.decide_with(key, peer, headers, decisions, wsgi)
        else:
            verdict = self.gate.decide(key, peer, headers, wsgi)
        if self._on_decision is not None:
            report(self._on_decision, self._policies, verdict, self._label)
        return verdict

    async def _verdict_async(self, key: Any, peer: Optional[str], headers: Any, wsgi: bool) -> Any:
        """``_verdict`` with asyncio Redis limiters: one round trip each, all
        at once (within its deadline; Redis trouble is answered by its fail
        policy)."""
        if self._remote:
            ident = self.gate.identity(key, peer, headers, wsgi)
            decisions = [] if isinstance(ident, int) else await asyncio.gather(
                *(_asked(n, lim, ident) for n, lim in self._remote)
            )
            verdict = self.gate.decide_with(key, peer, headers, list(decisions), wsgi)
        else:
            verdict = self.gate.decide(key, peer, headers, wsgi)
        if self._on_decision is not None:
            report(self._on_decision, self._policies, verdict, self._label)
        return verdict


def _sync_answer(name: str, limiter: Remote, ident: bytes) -> Any:
    """A remote policy's answer for ``ident`` as the gate takes it: a Redis
    limiter checks the key in its policy's own scope (two policies of one
    middleware never share a Redis key); a shared-memory table that is full
    answers ``None``, which the gate turns into its full-table answer."""
    if isinstance(limiter, _ratebound.SharedKeyedLimiter):
        try:
            return limiter.check(ident)
        except TooManyKeys:
            return None
    return limiter._check_in(name, ident)


def _asked(name: str, limiter: Remote, ident: bytes) -> Awaitable[Any]:
    """``_sync_answer`` to await: an asyncio Redis limiter's round trip, or
    a shared-memory decision made at once."""
    if isinstance(limiter, _redis._AsyncLimiter):
        return limiter._check_in(name, ident)
    return _ready(_sync_answer(name, limiter, ident))


async def _ready(decision: Any) -> Any:
    return decision
