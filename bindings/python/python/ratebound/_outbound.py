"""What the HTTP client adapters (``ratebound.httpx``, ``ratebound.requests``)
share: the limiter bound to its calling convention, the options, and one
loop over the core's call machine (``_ratebound._Outbound.call``, replaying
``spec/outbound.json`` and ``spec/outbound_calls.json``), which says every
step — hold, wait for tokens, send, adapt the learned rate, pause, report,
retry or done — and owns every rule (the key, the waited threshold,
one-shot bodies, a failed pause, what an answer teaches, the events). This
module only sleeps, waits, sends, reads and writes the limiter's learned
word, and reports."""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import time
import warnings
from typing import Any, Awaitable, Callable, NamedTuple, Optional, TypedDict, TypeVar, Union

from . import _ratebound
from . import redis as _redis
from ._errors import RateboundError, RateLimitExceeded
from ._errors import Unsupported as _Unsupported

Number = Union[int, float]
R = TypeVar("R")


class OutboundEvent(NamedTuple):
    """What ``on_decision`` is told about a call to a partner: ``outcome``
    — ``"waited"`` (the limiter made the request wait ``seconds`` before it
    went out), ``"paused"`` (the partner's answer paused the limiter for
    ``seconds``, for everyone sharing it; ``capped`` when cut to
    ``max_pause``; for a refusal that gave no advice, the backoff;
    ``local`` when only this process could be paused: the limiter's Redis
    could not be told, so the adapter holds its own sendings for the key —
    the retry first — and a limiter failing ``"local"`` paused its local
    share), ``"retried"`` (the answer is sent again, through the
    limiter) or ``"gave_up"`` (a 429/503 the request may not be retried on,
    or retries spent: the caller gets it) or ``"adapted"`` (the answer
    changed the rate learned of the partner, for everyone sharing the
    limiter: cut on a refusal, stepped up after a quiet while; from
    ``from_rate`` to ``to_rate`` tokens per second, ``None`` for the other
    outcomes) — with the limiter ``key``, the answer's ``status`` (``None``
    before one) and the ``attempt`` (0: the first sending)."""

    outcome: str
    key: Optional[str]
    seconds: Optional[float]
    status: Optional[int]
    attempt: int
    capped: bool = False
    local: bool = False
    from_rate: Optional[float] = None
    to_rate: Optional[float] = None


OnOutbound = Callable[[OutboundEvent], None]


class OutboundOptions(TypedDict, total=False):
    """The options every adapter takes beside its limiter (see
    ``ratebound.httpx.RateLimitTransport``); those not given are the
    core's defaults."""

    key: Union[None, str, Callable[[Any], str]]
    timeout: Optional[Number]
    retries: Optional[int]
    max_pause: Optional[Number]
    backoff: Optional[Number]
    statuses: Optional[list[int]]
    any_method: Optional[bool]
    n: Optional[int]
    adaptive: Optional[bool]
    on_decision: Optional[OnOutbound]

# Keyed limiters take a key first; the others (one bucket) take none.
_KEYED = (_ratebound.KeyedLimiter, _ratebound.SharedKeyedLimiter, _redis.TokenBucket, _redis.AsyncTokenBucket)
_SINGLE = (_ratebound.Limiter, _ratebound.SharedTokenBucket)


def _algorithm(limiter: Any) -> Optional[str]:
    if isinstance(limiter, (_redis.TokenBucket, _redis.AsyncTokenBucket)):
        return "token_bucket"
    if isinstance(limiter, (_redis._Limiter, _redis._AsyncLimiter)):
        return "window"
    return getattr(limiter, "algorithm", None)


def _caller_level() -> int:
    """The ``stacklevel`` naming the first frame outside ratebound: the
    user's line that made the adapter."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("ratebound"):
        level, frame = level + 1, frame.f_back  # type: ignore[assignment]
    return level


def _ratebound_error(message: str) -> Exception:
    from ._errors import ConfigError

    return ConfigError(message)


class Bound:
    """A limiter the adapters can wait on and pause, keyed or single: a
    ratebound limiter (the core refuses one that is not a token bucket)."""

    def __init__(self, limiter: Any, *, asynchronous: bool) -> None:
        if limiter is None:
            raise _ratebound_error("a limiter is required: a token bucket (local, shared memory or Redis)")
        if not isinstance(limiter, _KEYED + _SINGLE + (_redis._Limiter, _redis._AsyncLimiter)):
            raise _ratebound_error(f"not a ratebound limiter: {limiter!r}")
        self.algorithm = _algorithm(limiter) or "unknown"
        is_async_redis = isinstance(limiter, _redis.AsyncTokenBucket)
        if is_async_redis and not asynchronous:
            raise _ratebound_error("rb.redis.AsyncTokenBucket needs the async adapter (AsyncRateLimitTransport)")
        if isinstance(limiter, _redis.TokenBucket) and asynchronous:
            raise _ratebound_error("rb.redis.TokenBucket is synchronous: use rb.redis.AsyncTokenBucket here")
        self.limiter: Any = limiter
        self.keyed = isinstance(limiter, _KEYED)
        self.remote = isinstance(limiter, (_redis.TokenBucket, _redis.AsyncTokenBucket))

    def warn_if_open(self) -> None:
        if self.remote and self.limiter._engine.on_error == "open":
            warnings.warn(
                "an outbound limiter that fails open sends every request to the partner while Redis is "
                "unreachable (a flood partners block keys for): build it with "
                'on_error="local", local_rate=<this instance\'s share> (or "closed")',
                RuntimeWarning,
                stacklevel=_caller_level(),
            )

    def acquire_blocking(self, key: str, n: int, timeout: Optional[float]) -> None:
        if self.keyed:
            self.limiter.acquire_blocking(key, n, timeout)
        else:
            self.limiter.acquire_blocking(n, timeout)

    async def acquire(self, key: str, n: int, timeout: Optional[float]) -> None:
        if self.keyed:
            await self.limiter.acquire(key, n, timeout)
        else:
            await self.limiter.acquire(n, timeout)

    def _pause(self, key: str, seconds: float) -> Any:
        return self.limiter.pause(key, seconds) if self.keyed else self.limiter.pause(seconds)

    def pause_blocking(self, key: str, seconds: float) -> Optional[bool]:
        """Pauses the limiter: True when everyone sharing it was told,
        False when only this process (Redis could not be told: the local
        share is paused), None when the limiter failed to (a shared table
        with no slot for the key)."""
        try:
            return self.told(key, seconds, self._pause(key, seconds))
        except RateboundError:
            return None

    async def pause(self, key: str, seconds: float) -> Optional[bool]:
        """:meth:`pause_blocking` for asyncio."""
        try:
            told = self._pause(key, seconds)
            return self.told(key, seconds, await told if inspect.isawaitable(told) else told)
        except RateboundError:
            return None

    def learned(self, key: str) -> int:
        """The learned word the limiter holds for ``key`` (the core's
        ``Learned``, as bits)."""
        return self.limiter._learned(key) if self.keyed else self.limiter._learned()  # type: ignore[no-any-return]

    def _adapt(self, key: str, seen: int, next: int) -> Any:
        return self.limiter._adapt(key, seen, next) if self.keyed else self.limiter._adapt(seen, next)

    def adapt_blocking(self, key: str, seen: int, next: int) -> bool:
        """Replaces ``key``'s learned word ``seen`` with ``next`` for
        everyone sharing the limiter, if it is still ``seen``: whether it
        did (False when the limiter failed to)."""
        try:
            return bool(self._adapt(key, seen, next))
        except RateboundError:
            return False

    async def adapt(self, key: str, seen: int, next: int) -> bool:
        """:meth:`adapt_blocking` for asyncio."""
        try:
            replaced = self._adapt(key, seen, next)
            return bool(await replaced if inspect.isawaitable(replaced) else replaced)
        except RateboundError:
            return False

    def told(self, key: str, seconds: float, told: Any) -> bool:
        # A Redis limiter's pause says the shift it gave, or None when Redis
        # could not be told; a local or shared-memory pause always holds.
        if self.remote and told is None:
            self.limiter._engine.pause_local(key, seconds)
            return False
        return True


class Options:
    """An adapter's options, checked once at construction by the core
    (``_Outbound``: the policy, each sending's ``n`` and ``timeout``, the
    limiters accepted), and its loops over the core's call machine."""

    def __init__(
        self,
        limiter: Any,
        *,
        asynchronous: bool,
        key: Union[None, str, Callable[[Any], str]] = None,
        timeout: Optional[Number] = None,
        retries: Optional[int] = None,
        max_pause: Optional[Number] = None,
        backoff: Optional[Number] = None,
        statuses: Optional[list[int]] = None,
        any_method: Optional[bool] = None,
        n: Optional[int] = None,
        adaptive: Optional[bool] = None,
        on_decision: Optional[OnOutbound] = None,
    ) -> None:
        self.bound = bound = Bound(limiter, asynchronous=asynchronous)
        if key is not None and not isinstance(key, str) and not callable(key):
            raise _ratebound_error(f"key must be a string or a function of the request, got {key!r}")
        self.key_fn = key if callable(key) else None
        try:
            self.outbound = _ratebound._Outbound(
                algorithm=bound.algorithm, key=key if isinstance(key, str) else None, n=n, timeout=timeout,
                retries=retries, max_pause=max_pause, statuses=statuses, any_method=any_method, backoff=backoff,
                adaptive=adaptive, limiter=limiter,
            )
        except _Unsupported as e:
            if bound.algorithm == "token_bucket":
                raise  # adaptive=True with a limiter that cannot learn: the core's error, naming it
            name = type(limiter).__name__
            raise _ratebound_error(f"{name} ({bound.algorithm}) cannot be paused: {e}") from None
        self.learning = self.outbound.learning
        bound.warn_if_open()
        self.on_decision = on_decision

    def call(
        self, overrides: Any, request: Any, method: str, target: tuple[str, str, Optional[int]], resendable: bool
    ) -> Any:
        """One request's call: its ``ratebound`` overrides (key, n,
        timeout), else the key function's key; the rest is the core's."""
        o = overrides if isinstance(overrides, dict) else {}
        key = o.get("key")
        if key is None and self.key_fn is not None:
            key = self.key_fn(request)
        if key is not None and not isinstance(key, str):
            raise _ratebound_error(f"key must be a string, got {key!r}")
        scheme, host, port = target
        return self.outbound.call(
            method, scheme, host or "", port, key, o.get("n"), o.get("timeout"), "timeout" in o, resendable
        )

    def send_blocking(
        self, call: Any, send: Callable[[], R], answer: Callable[[R], tuple[int, list[tuple[str, str]]]],
        discard: Callable[[R], None],
    ) -> R:
        """One call, on this thread: the machine's steps until the response
        is the caller's."""
        response: Any = None
        while True:
            step = call.next(time.monotonic())
            kind = step[0]
            if kind == "acquire":
                if self.learning:
                    call.reserving(self.bound.learned(call.key))
                try:
                    self.bound.acquire_blocking(call.key, step[1], step[2])
                except RateLimitExceeded as e:
                    # Nothing taken: the machine says hold, or raises it.
                    call.beyond(e.retry_after)
                    continue
                if self.learning:
                    call.saw(self.bound.learned(call.key))
            elif kind == "send":
                response = send()
                call.answered(*answer(response), time.time())
            elif kind == "adapt":
                call.adapted(self.bound.adapt_blocking(call.key, step[4], step[5]))
            elif kind == "pause":
                call.paused(self.bound.pause_blocking(call.key, step[1]), time.monotonic())
            elif kind == "event":
                self.tell(call.key, step)
            elif kind == "hold":
                time.sleep(step[1])
            elif kind == "retry":
                discard(response)
            else:
                return response  # type: ignore[no-any-return]

    async def send(
        self, call: Any, send: Callable[[], Awaitable[R]], answer: Callable[[R], tuple[int, list[tuple[str, str]]]],
        discard: Callable[[R], Awaitable[None]],
    ) -> R:
        """:meth:`send_blocking` for asyncio: the waits are the event loop's
        (a cancelled call gives its token back), on its clock (a test's
        loop on virtual time drives them)."""
        now = asyncio.get_running_loop().time
        response: Any = None
        while True:
            step = call.next(now())
            kind = step[0]
            if kind == "acquire":
                if self.learning:
                    call.reserving(self.bound.learned(call.key))
                try:
                    await self.bound.acquire(call.key, step[1], step[2])
                except RateLimitExceeded as e:
                    call.beyond(e.retry_after)
                    continue
                if self.learning:
                    call.saw(self.bound.learned(call.key))
            elif kind == "send":
                response = await send()
                call.answered(*answer(response), time.time())
            elif kind == "adapt":
                call.adapted(await self.bound.adapt(call.key, step[4], step[5]))
            elif kind == "pause":
                call.paused(await self.bound.pause(call.key, step[1]), now())
            elif kind == "event":
                self.tell(call.key, step)
            elif kind == "hold":
                await asyncio.sleep(step[1])
            elif kind == "retry":
                await discard(response)
            else:
                return response  # type: ignore[no-any-return]

    def tell(self, key: str, step: tuple[Any, ...]) -> None:
        if self.on_decision is None:
            return
        try:
            self.on_decision(OutboundEvent(step[1], key, *step[2:]))
        except Exception:  # a metrics hook never breaks the call; told once
            if self.outbound.hook_threw():
                logging.getLogger("ratebound").warning(
                    "on_decision raised; the call goes on (later raises are not logged)", exc_info=True
                )
