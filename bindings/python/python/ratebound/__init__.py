"""ratebound: a lock-free rate limiter in Rust, from Python.

Every decision is made by the Rust core, so Python, Rust and Node answer
identically. Limiters are thread-safe and never spawn threads.

>>> import ratebound as rb
>>> clock = rb.ManualClock()
>>> tb = rb.TokenBucket(rate=2, burst=3, clock=clock)
>>> [tb.try_acquire() for _ in range(4)]
[True, True, True, False]
>>> d = tb.check()
>>> d.allowed, d.retry_after
(False, 0.5)
>>> clock.advance(0.5)
>>> bool(tb.check())
True
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Callable, ClassVar, Optional, TypeVar, Union, cast

from . import _ratebound
from ._errors import (
    ConfigError,
    MissingValue,
    InsufficientCapacity,
    QuotaError,
    RateboundError,
    RateLimitExceeded,
    SharedStateError,
    SharedStatePermissionError,
    StoreMisconfigured,
    StoreUnavailable,
    TooManyKeys,
    Unsupported,
)
from ._ratebound import (
    Concurrency,
    Decision,
    ManualClock,
    Reservation,
    client_ip,
    ip_key,
    retry_after_secs,
)
from . import asgi, redis, wsgi
from ._http import RateLimitEvent
from ._wait import drive as _drive
from ._wait import steps as _steps


def __getattr__(name: str) -> Any:
    # The per-route limits import their framework, the outbound adapters
    # their client: loaded on first use, so that `import ratebound` needs
    # neither FastAPI, Flask, Django, httpx nor requests.
    if name in ("django", "fastapi", "flask", "httpx", "requests"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'ratebound' has no attribute {name!r}")

__version__: str = _ratebound.__version__

__all__ = [
    "AllOf",
    "Concurrency",
    "ConfigError",
    "Decision",
    "MissingValue",
    "FixedWindow",
    "InsufficientCapacity",
    "KeyedLimiter",
    "LeakyBucket",
    "Limiter",
    "ManualClock",
    "QuotaError",
    "RateLimitEvent",
    "RateLimitExceeded",
    "RateboundError",
    "Reservation",
    "SharedKeyedLimiter",
    "SharedStateError",
    "SharedStatePermissionError",
    "SharedTokenBucket",
    "SlidingLog",
    "SlidingWindow",
    "StoreMisconfigured",
    "StoreUnavailable",
    "TokenBucket",
    "TooManyKeys",
    "Unsupported",
    "asgi",
    "client_ip",
    "ip_key",
    "limit",
    "redis",
    "retry_after_secs",
    "wsgi",
]

Rate = Union[int, float, str]
Number = Union[int, float]


async def _wait(waiter: "_ratebound.Waiter") -> None:
    """Runs a local wait's steps (see ``_wait.py``); a cancelled task gives
    back what the waiter holds."""

    async def abandon() -> None:
        waiter.abandon()

    await _drive(_steps(waiter.step), _no_call, abandon)


async def _no_call(call: Any) -> None:
    raise RuntimeError(f"ratebound: a local wait gave a call to run: {call!r}")


class Limiter(_ratebound.Limiter):
    """What every single limiter can do: ``check``, ``try_acquire``, ``peek``,
    ``available``, ``acquire`` (asyncio) and ``acquire_blocking`` (threads)."""

    __slots__ = ()

    async def acquire(self, n: Optional[int] = None, timeout: Optional[Number] = None) -> None:
        """Waits until ``n`` (default 1) are taken, without blocking the event loop.

        Raises :class:`RateLimitExceeded` at once, taking nothing, when the
        wait would exceed ``timeout`` seconds. A bucket reserves its tokens
        first and sleeps until the limiter's clock reaches them (on a
        :class:`ManualClock`, until the clock is moved there); cancelling
        the task gives them back.
        """
        await _wait(self._waiter(n, timeout))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(limit={self.limit}, available={self.available()})"


class TokenBucket(Limiter):
    """A token bucket (GCRA): ``rate`` tokens per second (a number, or a
    string such as ``"100/minute"`` or ``"10/s burst 20"``), holding at most
    ``burst`` (default: the rate's own, at least 1)."""

    __slots__ = ()

    def __new__(
        cls, rate: Rate, burst: Optional[int] = None, *, clock: Optional[ManualClock] = None
    ) -> "TokenBucket":
        return super().__new__(cls, "token_bucket", rate=rate, burst=burst, clock=clock)

    def learned_rate(self, key: Optional[str] = None) -> float:
        """The rate (tokens per second) the outbound adapters calling
        through this bucket have learned of the partner (see
        ``rb.httpx.RateLimitTransport``'s ``adaptive``): the configured
        rate when nothing is learned. One bucket holds one rate: ``key``
        is accepted (as a keyed limiter's gauge takes it) and changes
        nothing."""
        return self._learned_rate()


_W = TypeVar("_W", bound="_Window")


class _Window(Limiter):
    """The constructor of the three windows: ``limit`` per ``window``
    seconds, by the subclass's ``_algorithm``."""

    __slots__ = ()
    _algorithm: ClassVar[str]

    def __new__(cls: type[_W], limit: int, window: Number, *, clock: Optional[ManualClock] = None) -> _W:
        return super().__new__(cls, cls._algorithm, limit=limit, window=window, clock=clock)


class FixedWindow(_Window):
    """At most ``limit`` per fixed window of ``window`` seconds."""

    __slots__ = ()
    _algorithm = "fixed_window"


class SlidingWindow(_Window):
    """At most about ``limit`` per sliding ``window`` seconds (a weighted
    counter of two fixed windows: O(1) memory)."""

    __slots__ = ()
    _algorithm = "sliding_window"


class SlidingLog(_Window):
    """Exactly at most ``limit`` in any ``window`` seconds (a log of
    timestamps: O(limit) memory, ``limit`` ≤ 10**6)."""

    __slots__ = ()
    _algorithm = "sliding_log"


class LeakyBucket(Limiter):
    """A leaky bucket as a queue: requests leave ``1/rate`` s apart, and one
    is admitted only if it would leave within ``max_delay`` seconds."""

    __slots__ = ()

    def __new__(
        cls, rate: Rate, max_delay: Number, *, clock: Optional[ManualClock] = None
    ) -> "LeakyBucket":
        return super().__new__(cls, "leaky_bucket", rate=rate, max_delay=max_delay, clock=clock)


class AllOf(Limiter):
    """Admits only if every member admits; then all of them count it, and
    when one refuses, none does (what the others took is given back)."""

    __slots__ = ()

    def __new__(cls, limiters: "list[Limiter]") -> "AllOf":
        return super().__new__(cls, "all_of", members=limiters)


class KeyedLimiter(_ratebound.KeyedLimiter):
    """One limit per key (``str``, ``bytes`` or ``int``), a token bucket of
    ``rate``/``burst`` by default or ``algorithm="fixed_window"`` /
    ``"sliding_window"`` with ``limit`` and ``window``. Memory stays bounded:
    at most ``max_keys`` keys (``overflow="evict"`` forgets the least
    recently used, ``"reject"`` raises :class:`TooManyKeys`), each stored as a
    16-byte fingerprint off the Python heap. ``cleanup()`` drops keys whose
    state is fresh; ``cleanup_idle(seconds)`` those idle that long."""

    __slots__ = ()

    async def acquire(self, key: Union[str, bytes, int], n: Optional[int] = None, timeout: Optional[Number] = None) -> None:
        """Waits until ``n`` are taken for ``key`` (see :meth:`Limiter.acquire`);
        a keyed limiter does not reserve: it sleeps until the key would admit
        and asks again."""
        await _wait(self._waiter(key, n, timeout))

    def learned_rate(self, key: Union[str, bytes, int, None] = None) -> float:
        """The rate (tokens per second) the outbound adapters calling through
        this limiter have learned of ``key``'s partner (the adapters' key:
        each request's host unless they were given one; the limiter keeps
        it beside the key's state, and drops it with the key): the
        configured rate when nothing is learned. Raises ``TypeError``
        without a key, :class:`Unsupported` for a window (which does not
        learn)."""
        if key is None:
            raise TypeError("KeyedLimiter.learned_rate needs the key (the adapter's: each request's host by default)")
        return self._learned_rate(key)

    def __repr__(self) -> str:
        return f"KeyedLimiter(keys={len(self)}, max_keys={self.max_keys})"


class SharedTokenBucket(_ratebound.SharedTokenBucket):
    """A token bucket shared by every process on the host that opens
    ``path`` (a file in a shared memory map). ``acquire`` (asyncio) and
    ``acquire_blocking`` (threads) reserve on the shared word, so every
    process is served in the order it asked; ``reserve`` returns the
    :class:`Reservation`; ``pause(seconds)`` empties the bucket for every
    process (reservations already held keep their time); ``resume()`` lifts
    the pause if nothing was built on it (``"lifted"``, ``"not_paused"``,
    ``"queued"``)."""

    __slots__ = ()

    async def acquire(self, n: Optional[int] = None, timeout: Optional[Number] = None) -> None:
        """Waits until ``n`` are taken (see :meth:`Limiter.acquire`): raises
        :class:`RateLimitExceeded` at once, taking nothing, when the wait
        would exceed ``timeout`` seconds; a cancelled task gives its
        reservation back."""
        await _wait(self._waiter(n, timeout))

    def learned_rate(self, key: Optional[str] = None) -> float:
        """The rate (tokens per second) the outbound adapters of every
        process calling through this file have learned of the partner (see
        ``rb.httpx.RateLimitTransport``'s ``adaptive``; the file keeps it
        beside the bucket): the configured rate when nothing is learned.
        One bucket holds one rate: ``key`` is accepted (as a keyed
        limiter's gauge takes it) and changes nothing."""
        return self._learned_rate()


class SharedKeyedLimiter(_ratebound.SharedKeyedLimiter):
    """One limit per key, shared by every process that opens ``path``: a
    token bucket (``rate``/``burst``) or ``algorithm="fixed_window"`` /
    ``"sliding_window"``, in a table of ``max_keys`` keys fixed when the
    file is made. ``acquire(key, ...)`` waits (a bucket reserves in the
    key's slot, a window sleeps its exact ``retry_after``);
    ``pause(key, seconds)`` empties a key's bucket for every process;
    ``resume(key)`` lifts it if nothing was built on it."""

    __slots__ = ()

    async def acquire(self, key: Union[str, bytes, int], n: Optional[int] = None, timeout: Optional[Number] = None) -> None:
        """Waits until ``n`` are taken for ``key`` (see
        :meth:`SharedTokenBucket.acquire`)."""
        await _wait(self._waiter(key, n, timeout))

    def learned_rate(self, key: Union[str, bytes, int, None] = None) -> float:
        """The rate (tokens per second) the outbound adapters of every
        process have learned of ``key``'s partner (the adapters' key: each
        request's host unless they were given one; the file keeps it in
        the key's slot): the configured rate when nothing is learned.
        Raises ``TypeError`` without a key, :class:`Unsupported` for a
        window (which does not learn)."""
        if key is None:
            raise TypeError("SharedKeyedLimiter.learned_rate needs the key (the adapter's: each request's host by default)")
        return self._learned_rate(key)


F = TypeVar("F", bound=Callable[..., Any])


def limit(
    limiter: Union[Limiter, KeyedLimiter, Rate],
    *,
    key: Optional[Callable[..., Union[str, bytes, int]]] = None,
    wait: bool = False,
    timeout: Optional[Number] = None,
    max_keys: Optional[int] = None,
) -> Callable[[F], F]:
    """Limits calls to the decorated function (sync or async).

    ``limiter`` is a limiter, or a rate (``10``, ``"10/s"``) for a new token
    bucket — per key when ``key`` is given: ``key(*args, **kwargs)`` names the
    key of each call. A refused call raises :class:`RateLimitExceeded` with
    ``retry_after``; with ``wait=True`` it waits instead (``timeout`` seconds
    at most; the event loop is not blocked for async functions). The
    per-key table made for a rate keeps at most ``max_keys`` keys (default:
    the core's cap on an in-process table, 1 000 000, the middleware's),
    forgetting the least recent.
    """
    if isinstance(limiter, (Limiter, KeyedLimiter)):
        lim: Union[Limiter, KeyedLimiter] = limiter
    elif key is not None:
        lim = KeyedLimiter(limiter, max_keys=_ratebound.DEFAULT_MAX_KEYS if max_keys is None else max_keys)
    else:
        lim = TokenBucket(limiter)
    if isinstance(lim, KeyedLimiter) and key is None:
        raise TypeError("a KeyedLimiter needs key=")

    def refused(d: Decision) -> RateLimitExceeded:
        # The core's DeadlineExceeded (a wait of 0 accepted), as every
        # refused wait says it in Python and Node.
        return cast(RateLimitExceeded, _ratebound._deadline_exceeded(d.retry_after, 0.0))

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                if isinstance(lim, KeyedLimiter):
                    k = key(*args, **kwargs)  # type: ignore[misc]
                    if wait:
                        await lim.acquire(k, None, timeout)
                    else:
                        d = lim.check(k)
                        if not d:
                            raise refused(d)
                elif wait:
                    await lim.acquire(None, timeout)
                else:
                    d = lim.check()
                    if not d:
                        raise refused(d)
                return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if isinstance(lim, KeyedLimiter):
                k = key(*args, **kwargs)  # type: ignore[misc]
                if wait:
                    lim.acquire_blocking(k, None, timeout)
                else:
                    d = lim.check(k)
                    if not d:
                        raise refused(d)
            elif wait:
                lim.acquire_blocking(None, timeout)
            else:
                d = lim.check()
                if not d:
                    raise refused(d)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
