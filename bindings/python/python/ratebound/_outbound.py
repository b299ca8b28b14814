"""What the HTTP client adapters (``ratebound.httpx``, ``ratebound.requests``)
share: the limiter bound to its calling convention, the options, and the
events told to ``on_decision``. The decision itself — how long the partner
asked to pause (or the backoff, for a refusal that asked nothing), whether
to send again, how long a pause kept in this process still holds a
sending — is the core's (``_ratebound._Outbound``, replaying
``spec/outbound.json``); this module only waits, pauses, sleeps and
counts."""

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
from ._errors import RateboundError

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
    or retries spent: the caller gets it) — with the limiter ``key``, the
    answer's ``status`` (``None`` before one) and the ``attempt`` (0: the
    first sending)."""

    outcome: str
    key: Optional[str]
    seconds: Optional[float]
    status: Optional[int]
    attempt: int
    capped: bool = False
    local: bool = False


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
    """A limiter the adapters can wait on and pause: a token bucket (local,
    shared memory or Redis), keyed or single. Anything else is refused here,
    at construction: a window cannot be paused, so it cannot obey a
    partner's ``Retry-After`` for everyone."""

    def __init__(self, limiter: Any, *, asynchronous: bool) -> None:
        if limiter is None:
            raise _ratebound_error("a limiter is required: a token bucket (local, shared memory or Redis)")
        if not isinstance(limiter, _KEYED + _SINGLE + (_redis._Limiter, _redis._AsyncLimiter)):
            raise _ratebound_error(f"not a ratebound limiter: {limiter!r}")
        algorithm = _algorithm(limiter)
        if algorithm != "token_bucket":
            raise _ratebound_error(
                f"{type(limiter).__name__} ({algorithm}) cannot be paused: an outbound limit must be a token bucket"
            )
        is_async_redis = isinstance(limiter, _redis.AsyncTokenBucket)
        if is_async_redis and not asynchronous:
            raise _ratebound_error("rb.redis.AsyncTokenBucket needs the async adapter (AsyncRateLimitTransport)")
        if isinstance(limiter, _redis.TokenBucket) and asynchronous:
            raise _ratebound_error("rb.redis.TokenBucket is synchronous: use rb.redis.AsyncTokenBucket here")
        self.limiter: Any = limiter
        self.keyed = isinstance(limiter, _KEYED)
        self.remote = isinstance(limiter, (_redis.TokenBucket, _redis.AsyncTokenBucket))
        if isinstance(limiter, (_redis.TokenBucket, _redis.AsyncTokenBucket)) and limiter._engine.on_error == "open":
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

    def pause_blocking(self, key: str, seconds: float) -> bool:
        """Pauses the limiter; whether everyone sharing it was told (a
        pause Redis could not be told of pauses the local share, if any)."""
        try:
            if self.keyed:
                told = self.limiter.pause(key, seconds)
            else:
                told = self.limiter.pause(seconds)
        except RateboundError:  # a shared table with no slot for the key
            return False
        return self.told(key, seconds, told)

    async def pause(self, key: str, seconds: float) -> bool:
        """:meth:`pause_blocking` for asyncio."""
        try:
            if self.keyed:
                told = self.limiter.pause(key, seconds)
            else:
                told = self.limiter.pause(seconds)
            if inspect.isawaitable(told):
                told = await told
        except RateboundError:
            return False
        return self.told(key, seconds, told)

    def told(self, key: str, seconds: float, told: Any) -> bool:
        # A Redis limiter's pause says the shift it gave, or None when Redis
        # could not be told; a local or shared-memory pause always holds.
        if self.remote and told is None:
            self.limiter._engine.pause_local(key, seconds)
            return False
        return True


class Options:
    """The adapters' options, checked once at construction by the core
    (``Outbound::from_loose`` for the policy, ``Sending::from_loose`` for
    each sending's ``n`` and ``timeout``: the rules and defaults of the Rust
    and Node adapters)."""

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
        on_decision: Optional[OnOutbound] = None,
    ) -> None:
        self.bound = Bound(limiter, asynchronous=asynchronous)
        if key is not None and not isinstance(key, str) and not callable(key):
            raise _ratebound_error(f"key must be a string or a function of the request, got {key!r}")
        self.key = key
        self.outbound = _ratebound._Outbound(
            retries=retries, max_pause=max_pause, statuses=statuses, any_method=any_method, backoff=backoff
        )
        self.n, self.timeout = _ratebound._Outbound.sending(n, timeout)
        self.on_decision = on_decision

    def per_request(self, overrides: Any, request: Any, host: str) -> tuple[str, int, Optional[float]]:
        """The key, n and timeout of one request: its ``ratebound``
        overrides, else the adapter's, else the request's host."""
        o = overrides if isinstance(overrides, dict) else {}
        key = o.get("key", self.key)
        if callable(key):
            key = key(request)
        if key is None:
            key = host
        if not isinstance(key, str):
            raise _ratebound_error(f"key must be a string, got {key!r}")
        n, timeout = _ratebound._Outbound.sending(
            o.get("n", self.n), o["timeout"] if "timeout" in o else self.timeout
        )
        return key, n, timeout

    def advise(self, method: str, status: int, headers: list[tuple[str, str]], attempt: int) -> Any:
        return self.outbound.advise(method, status, headers, attempt, time.time())

    def send_blocking(
        self,
        key: str,
        n: int,
        timeout: Optional[float],
        method: str,
        send: Callable[[], R],
        answer: Callable[[R], tuple[int, list[tuple[str, str]]]],
        discard: Callable[[R], None],
        resend: bool = True,
    ) -> R:
        """The sequence of one call, on this thread: wait for a token,
        ``send``, obey the ``answer`` (pause the limiter, send again through
        it), until a response is the caller's. Without ``resend`` (a body
        that can be read once: a generator, a file, a stream) the request
        is never sent again: a retry due is a give-up, and the caller gets
        the response."""
        attempt = 0
        while True:
            start = time.monotonic()
            hold = self.outbound.hold(key, timeout)
            if hold is not None:
                time.sleep(hold)
            self.bound.acquire_blocking(key, n, self.left(timeout, start))
            self.waited(key, start, attempt)
            response = send()
            status, headers = answer(response)
            pause, capped, retry, gave_up = self.advise(method, status, headers, attempt)
            if retry and not resend:
                retry, gave_up = False, True
            local = False
            if pause is not None:
                local = self.outbound.paused(key, pause, self.bound.pause_blocking(key, pause))
            if self.settled(key, status, attempt, pause, capped, retry, gave_up, local):
                return response
            discard(response)
            attempt += 1

    async def send(
        self,
        key: str,
        n: int,
        timeout: Optional[float],
        method: str,
        send: Callable[[], Awaitable[R]],
        answer: Callable[[R], tuple[int, list[tuple[str, str]]]],
        discard: Callable[[R], Awaitable[None]],
        resend: bool = True,
    ) -> R:
        """:meth:`send_blocking` for asyncio: the waits are the event loop's
        (a cancelled call gives its token back), measured on its clock (a
        test's loop on virtual time drives them)."""
        attempt = 0
        now = asyncio.get_running_loop().time
        while True:
            start = now()
            hold = self.outbound.hold(key, timeout)
            if hold is not None:
                await asyncio.sleep(hold)
            await self.bound.acquire(key, n, self.left(timeout, start, now))
            self.waited(key, start, attempt, now)
            response = await send()
            status, headers = answer(response)
            pause, capped, retry, gave_up = self.advise(method, status, headers, attempt)
            if retry and not resend:
                retry, gave_up = False, True
            local = False
            if pause is not None:
                local = self.outbound.paused(key, pause, await self.bound.pause(key, pause))
            if self.settled(key, status, attempt, pause, capped, retry, gave_up, local):
                return response
            await discard(response)
            attempt += 1

    @staticmethod
    def left(timeout: Optional[float], start: float, now: Callable[[], float] = time.monotonic) -> Optional[float]:
        """What is left of a sending's `timeout` after a hold (``now``: the
        clock ``start`` was read on)."""
        return None if timeout is None else max(0.0, timeout - (now() - start))

    def waited(self, key: str, start: float, attempt: int, now: Callable[[], float] = time.monotonic) -> None:
        waited = now() - start
        if waited >= 0.001:
            self.tell("waited", key, waited, None, attempt)

    def settled(
        self,
        key: str,
        status: int,
        attempt: int,
        pause: Optional[float],
        capped: bool,
        retry: bool,
        gave_up: bool,
        local: bool = False,
    ) -> bool:
        """Reports an answer; whether the response is the caller's."""
        if pause is not None:
            self.tell("paused", key, pause, status, attempt, capped, local)
        if retry:
            self.tell("retried", key, None, status, attempt)
        elif gave_up:
            self.tell("gave_up", key, None, status, attempt)
        return not retry

    def tell(
        self,
        outcome: str,
        key: str,
        seconds: Optional[float],
        status: Optional[int],
        attempt: int,
        capped: bool = False,
        local: bool = False,
    ) -> None:
        if self.on_decision is None:
            return
        try:
            self.on_decision(OutboundEvent(outcome, key, seconds, status, attempt, capped, local))
        except Exception:  # a metrics hook must never break the call
            logging.getLogger("ratebound").exception("on_decision raised; the call goes on")
