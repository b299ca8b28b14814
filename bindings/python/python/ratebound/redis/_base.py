"""What the sync and the asyncio limiters share because it does not wait on
Redis: the engine and its steps between two calls, the constructors'
arguments, and :class:`RedisReservation`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Optional

from .._errors import ConfigError
from .._wait import steps
from .._ratebound import Decision, ManualClock, RedisStats, _is_redis_target, _NativeRedis
from .._ratebound import _RedisAcquisition, _RedisCall, _RedisEngine
from ._options import Key, Number, Options, Rate, SlidingOptions
from ._runners import _Outcome

if TYPE_CHECKING:
    from typing_extensions import Unpack


class _Base:
    """What every Redis limiter does without waiting; the runner (made by
    ``_connect`` for a redis-py client, ``_native_runner`` for a URL) and
    the listener are the sync or the asyncio ones. ``_native`` is the native
    connection (``None`` on the redis-py path)."""

    __slots__ = ("_engine", "_runner", "_listener", "_native")

    # Whether the limiter is an asyncio one (its calls are awaited).
    _asyncio: ClassVar[bool] = False

    def __init__(
        self, client: Any, algorithm: str, *, ssl_ca_certs: Any = None, _clock: Optional[ManualClock] = None, **options: Any
    ) -> None:
        # ``_clock`` (tests only): a ManualClock for the engine (the breaker's
        # cool-down, leases, waits) and the sync runners' deadlines — the
        # redis-py path only: a URL's native connection times its deadlines
        # on its own tokio runtime's clock, which a test cannot move.
        self._engine = _RedisEngine(algorithm, clock=_clock, **options)
        self._listener: Optional[Any] = None
        self._native: Optional[_NativeRedis] = None
        if _is_redis_target(client):
            native = self._native = _NativeRedis(client, self._engine, ssl_ca_certs=ssl_ca_certs)
            self._runner = self._native_runner(native)
            return
        if ssl_ca_certs is not None:
            raise ConfigError(
                "ssl_ca_certs is for a rediss:// URL; a redis-py client brings its own TLS settings", "invalid_option"
            )
        if _clock is None:
            self._runner = self._connect(client, self._engine.timeout)
        else:
            self._runner = self._connect(client, self._engine.timeout, _clock.now)

    @staticmethod
    def _connect(client: Any, timeout: float, now: Any = None) -> Any:
        raise NotImplementedError

    @staticmethod
    def _native_runner(native: _NativeRedis) -> Any:
        raise NotImplementedError

    def _call_for(self, step: Any, now_us: Optional[int]) -> Any:
        """The call a check makes (judged at ``now_us`` when given), or the
        decision that needs none."""
        if isinstance(step, Decision) or now_us is None:
            return step
        return step.at(now_us)

    def _steps(self, a: _RedisAcquisition) -> Iterator[tuple[str, Any]]:
        """The steps of the wait ``a`` until it is done (``_wait.steps``):
        ``("sleep", seconds)``, or ``("call", call)`` to run and hand to
        ``acquire_reply``."""
        return steps(lambda: self._engine.acquire_step(a))

    def _reserved(self, call: _RedisCall, outcome: _Outcome) -> RedisReservation:
        delay, source, end_us = self._engine.finish_reserve(call, *outcome)
        back = self._engine.give_back(call, end_us) if delay > 0 and end_us is not None else None
        return RedisReservation(self, back, delay, source)

    def _paused(self, call: _RedisCall, outcome: _Outcome) -> tuple[Optional[float], Optional[bytes]]:
        """The shift a pause gave (``None``: Redis could not be told) and
        the news to publish, if any."""
        paused = self._engine.finish_pause_news(call, *outcome)
        return (None, None) if paused is None else paused

    def _new_listener(self, listener: Any) -> Any:
        """A new ``listener`` for the pause channel, or ``None`` when the
        runner cannot subscribe."""
        subscribe = self._runner.subscriber()
        if subscribe is None:
            return None
        lis = self._listener = listener(subscribe, self._engine.pause_channel, self._engine.hear)
        return lis

    @property
    def limit(self) -> int:
        """The most one key can take at once (burst, or limit)."""
        return self._engine.limit

    @property
    def stats(self) -> RedisStats:
        """What this limiter's decisions came from so far — ``redis``,
        ``lease``, ``damaged``, the fail policy's ``fail_open``,
        ``fail_closed`` and ``fail_local``, and ``busy`` (refused because
        the call could not even leave this client before its deadline) —
        and whether its circuit breaker is open now (``breaker_open``).
        A snapshot; ``stats._asdict()`` gives a dict."""
        return self._engine.stats

    def leased(self) -> int:
        """Leased tokens this instance holds now, over all keys."""
        return self._engine.leased()

    def __repr__(self) -> str:
        e = self._engine
        url = "" if self._native is None else f"{self._native.target!r}, "
        return f"{type(self).__name__}({url}algorithm={e.algorithm!r}, limit={e.limit}, prefix={e.prefix!r})"


# The constructors, the same for a sync limiter and its asyncio twin
# (``class TokenBucket(_TokenBucketArgs, _Limiter)``).


class _TokenBucketArgs(_Base):
    __slots__ = ()

    def __init__(
        self,
        client: Any,
        rate: Rate,
        burst: Optional[int] = None,
        **options: Unpack[Options],
    ) -> None:
        super().__init__(client, "token_bucket", rate=rate, burst=burst, **options)

    def _learned(self, key: Key) -> int:
        """For the outbound adapters: the word the fleet has learned of
        ``key``'s partner (the core's ``Learned``, as bits; 0: nothing), as
        Redis' last reply for the key said — no I/O."""
        return self._engine.learned(key)

    def learned_rate(self, key: Key) -> float:
        """The rate (tokens per second) the outbound adapters of every
        instance have learned of ``key``'s partner (the adapters' key: each
        request's host unless they were given one; Redis keeps it beside
        the key's bucket, and this instance knows it as of its last call
        for the key — no I/O): the configured rate when nothing is learned."""
        return self._engine.learned_rate(key)


class _FixedWindowArgs(_Base):
    __slots__ = ()
    _window: ClassVar[str] = "fixed_window"

    def __init__(self, client: Any, limit: int, window: Number, **options: Unpack[Options]) -> None:
        super().__init__(client, self._window, limit=limit, window=window, **options)


class _SlidingWindowArgs(_FixedWindowArgs):
    """:class:`_FixedWindowArgs` without the leases (``SlidingOptions``)."""

    __slots__ = ()
    _window: ClassVar[str] = "sliding_window"

    if TYPE_CHECKING:

        def __init__(self, client: Any, limit: int, window: Number, **options: Unpack[SlidingOptions]) -> None: ...


def _of_asyncio(limiter: Any) -> bool:
    return isinstance(limiter, _Base) and limiter._asyncio


class RedisReservation:
    """Tokens reserved in Redis by ``reserve``: act after ``delay`` seconds;
    ``cancel()`` gives them back (once; never below the present) — only if
    no reservation was made after this one since, nor a pause: a cancel in
    the middle of a queue gives nothing back, so the queue never exceeds
    the limit."""

    __slots__ = ("_limiter", "_back", "delay", "source")

    def __init__(self, limiter: Any, back: Any, delay: float, source: str) -> None:
        self._limiter = limiter
        self._back = back
        self.delay = delay
        self.source = source

    def _give_back(self) -> Optional[_RedisCall]:
        """The call that gives the tokens back, once (``None`` after)."""
        back: Optional[_RedisCall]
        back, self._back = self._back, None
        return back

    def cancel(self) -> bool:
        """Gives the tokens back; whether Redis took them back (False once
        given back, for a reservation that was due at once, or one that
        later reservations or a pause have built on)."""
        if _of_asyncio(self._limiter):
            raise TypeError("a reservation of an asyncio limiter is given back with await acancel()")
        back = self._give_back()
        return back is not None and bool(self._limiter._engine.given_back(*self._limiter._runner.run(back)))

    async def acancel(self) -> bool:
        """:meth:`cancel` for a reservation of an asyncio limiter."""
        if not _of_asyncio(self._limiter):
            raise TypeError("a reservation of a sync limiter is given back with cancel()")
        back = self._give_back()
        return back is not None and bool(self._limiter._engine.given_back(*(await self._limiter._runner.run(back))))

    def __repr__(self) -> str:
        return f"RedisReservation(delay={self.delay!r}, source={self.source!r})"
