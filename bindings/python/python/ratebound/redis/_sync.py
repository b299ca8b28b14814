"""The sync limiters: :class:`TokenBucket`, :class:`FixedWindow`,
:class:`SlidingWindow`, for a ``redis.Redis`` or a
``redis.cluster.RedisCluster``."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional, TypeVar

from .._ratebound import Decision
from .._wait import drive_blocking
from ._base import RedisReservation, _Base, _FixedWindowArgs, _SlidingWindowArgs, _TokenBucketArgs
from ._listeners import _Listener
from ._options import Key, Number
from ._native import _NativeRunner
from ._runners import _AsIs, _Runner, _sync_runner

_L = TypeVar("_L", bound="_Limiter")


class _Limiter(_Base):
    """What every sync Redis limiter does."""

    __slots__ = ("_listen_lock", "_sleep")

    _runner: _Runner
    _listener: Optional[_Listener]
    _connect = staticmethod(_sync_runner)
    _native_runner = staticmethod(_NativeRunner)

    def __init__(self, client: Any, algorithm: str, **options: Any) -> None:
        super().__init__(client, algorithm, **options)
        self._listen_lock = threading.Lock()
        # A wait sleeps on the limiter's clock (a test's ManualClock moves on).
        clock = options.get("_clock")
        self._sleep: Callable[[float], Any] = time.sleep if clock is None else clock.advance
        if isinstance(self._runner, _AsIs):
            self._runner.orphaned = self._engine.orphaned

    def _listen(self) -> None:
        # A token bucket's waits listen for other instances' pauses; the
        # first waits (at most the deadline) for the subscription's first
        # attempt, so that no reservation is made before it listens (waits
        # that start meanwhile wait with it).
        if self._engine.algorithm != "token_bucket":
            return
        native = self._native
        if native is not None:
            native.listen()
            native.wait_listening(self._engine.timeout)
            return
        lis = self._listener
        if lis is None:
            with self._listen_lock:
                lis = self._listener or self._new_listener(_Listener)
                if lis is None:
                    return
        if not lis.first.is_set() and not lis.first.wait(self._engine.timeout):
            # Over either way: later waits never wait for a subscription that
            # cannot be made now (Redis down) — it goes on trying by itself.
            lis.first.set()

    @property
    def listening(self) -> bool:
        """Whether this limiter hears other instances' pauses now (from its
        first wait on; see the module docs)."""
        if self._native is not None:
            return self._native.listening
        lis = self._listener
        return lis is not None and lis.ready.is_set()

    def check(self, key: Key, n: Optional[int] = None) -> Decision:
        """Takes ``n`` tokens for ``key`` if the global limit allows: Redis'
        answer, a lease's, or the fail policy's (see ``Decision.source``).
        Never raises for a Redis failure; raises the core's errors for an
        ``n`` that can never pass."""
        native = self._native
        if native is not None:
            return native.check(key, n)  # begin, the call and finish in one step
        step = self._engine.begin(key, n)
        if type(step) is Decision:
            return step
        return self._engine.finish(step, *self._runner.run(step))

    def try_acquire(self, key: Key, n: Optional[int] = None) -> bool:
        """Like :meth:`check`, returning only whether it was allowed."""
        return self.check(key, n).allowed

    def _check_in(self, scope: str, key: Key, n: Optional[int] = None) -> Decision:
        # check() within a middleware policy's scope: that policy's own key.
        native = self._native
        if native is not None:
            return native.check(key, n, scope)
        return self._decide(self._engine.begin(key, n, scope))

    def _check_at(self, key: Key, n: int, now_us: int) -> Decision:
        # Judged at now_us (µs) instead of Redis' TIME: for test vectors.
        return self._decide(self._engine.begin(key, n), now_us)

    def _decide(self, step: Any, now_us: Optional[int] = None) -> Decision:
        call = self._call_for(step, now_us)
        if isinstance(call, Decision):
            return call
        return self._engine.finish(call, *self._runner.run(call))

    def acquire_blocking(self, key: Key, n: Optional[int] = None, timeout: Optional[Number] = None) -> None:
        """Waits until ``n`` tokens for ``key`` are taken, counted across
        every instance; the thread sleeps (releasing the GIL) meanwhile.

        A token bucket reserves them in Redis with one call — every instance
        is served in the order its call reached Redis, with no polling — and
        sleeps until they are due; a window sleeps its exact ``retry_after``
        and asks again. Raises :class:`~ratebound.RateLimitExceeded` at
        once, taking nothing, when the wait would exceed ``timeout``
        seconds. While Redis is down, ``on_error="open"`` returns at once,
        ``"closed"`` raises at once, ``"local"`` waits on the local share.
        Interrupted (``KeyboardInterrupt``, ...), it gives back what it
        holds.

        A waiter whose reservation another instance's ``pause`` moved sleeps
        on until its new time (see the module docs)."""
        a = self._engine.acquire(key, n, timeout)
        self._listen()

        def abandon() -> None:
            back = self._engine.acquire_abandon(a)
            if back is not None:
                self._runner.run(back)

        drive_blocking(
            self._steps(a), lambda call: self._engine.acquire_reply(a, *self._runner.run(call)), abandon, self._sleep
        )

    def reserve(self, key: Key, n: Optional[int] = None, max_wait: Optional[Number] = None) -> "RedisReservation":
        """Takes ``n`` tokens for ``key`` now, even if they are due only
        later (token buckets): a :class:`RedisReservation` whose ``delay``
        says when to act; ``cancel()`` gives them back. Raises
        :class:`~ratebound.RateLimitExceeded`, taking nothing, when they
        would be due only after ``max_wait`` seconds."""
        step = self._engine.begin_reserve(key, n, max_wait)
        if isinstance(step, tuple):
            return RedisReservation(self, None, step[0], step[1])
        return self._reserved(step, self._runner.run(step))

    def pause(self, key: Key, seconds: Number) -> Optional[float]:
        """Empties ``key``'s bucket for ``seconds`` on Redis' clock, for
        every instance, and moves every reservation already made past the
        pause, in its order (how to obey a partner's ``Retry-After`` once
        for the fleet). A pause ending no later than one already on changes
        nothing. Returns the shift it gave in seconds (0.0: covered already),
        or ``None`` when Redis could not be told.

        A shift is published on the prefix's pause channel for the waiters
        of the other instances (this limiter's own are told at once)."""
        call = self._engine.begin_pause(key, seconds)
        shift, news = self._paused(call, self._runner.run(call))
        if news is not None:
            self._runner.publish(self._engine.pause_channel, news)
        return shift

    def resume(self, key: Key) -> Optional[str]:
        """Lifts the pause on ``key`` for every instance, on Redis' clock, if
        nothing was built on it (one script call; the rule is the engine's):
        ``"lifted"`` — the bucket is empty now and refills at its rate from
        now on, as if the pause had ended now; ``"not_paused"`` — no pause
        was on; ``"queued"`` — reservations stand behind the pause (made
        during it or moved by it), so nothing changes and the pause ends
        when it was to end (no waiter is woken early). ``None`` when Redis
        could not be told (the pause stays on)."""
        call = self._engine.begin_resume(key)
        return self._engine.finish_resume(*self._runner.run(call))

    @property
    def breaker_open(self) -> bool:
        """Whether the circuit breaker is open (the fail policy answers
        without calling Redis until its cool-down is over)."""
        return self._engine.breaker_open

    def close(self) -> int:
        """Gives unspent leased tokens back to Redis and closes the
        limiter's connections (your client is not touched); how many keys'
        tokens went back; stops listening for pauses. The limiter stays
        usable (it reconnects, and listens again from its next wait)."""
        returned = sum(1 for call in self._engine.drain() if self._runner.run(call)[0] is not None)
        with self._listen_lock:
            lis, self._listener = self._listener, None
        if lis is not None:
            lis.close()
        self._runner.close()
        return returned

    def __enter__(self: _L) -> _L:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TokenBucket(_TokenBucketArgs, _Limiter):
    """A global token bucket (GCRA) in Redis: ``rate`` tokens per second (a
    number, or a string such as ``"10/s burst 20"``), bursts of ``burst``.

    ``client``: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` whose
    settings the limiter's own connections copy, or a URL (``redis://``,
    ``rediss://``, ``redis+cluster://``, a list of cluster nodes' URLs) for
    ratebound's own connection (see the module docs; ``batch``,
    ``ssl_ca_certs``).
    ``on_error``: ``"open"``, ``"closed"`` or ``"local"`` (with
    ``local_rate``); ``timeout``: every call's deadline in seconds; ``lease``:
    tokens taken per round trip (0: none), spent locally for up to
    ``lease_ttl`` seconds; ``breaker_threshold`` failures in a row open the
    circuit breaker for ``breaker_cooldown`` seconds.
    """

    __slots__ = ()

    def _adapt(self, key: Key, seen: int, next: int) -> bool:
        # For the outbound adapters: replaces key's learned word seen with
        # next for every instance if it is still seen (one script call, the
        # engine's compare-and-swap); False when another instance changed it
        # first or Redis could not be told (nothing learned).
        call = self._engine.begin_adapt(key, seen, next)
        if call is None:
            return False  # the breaker spares Redis
        replaced, news = self._engine.finish_adapt(call, *self._runner.run(call))
        if news is not None:
            # The other instances' waiters hear it before they send.
            self._runner.publish(self._engine.pause_channel, news)
        return replaced


class FixedWindow(_FixedWindowArgs, _Limiter):
    """At most ``limit`` per fixed window of ``window`` seconds, windows
    aligned to Redis' clock; the options are :class:`TokenBucket`'s."""

    __slots__ = ()


class SlidingWindow(_SlidingWindowArgs, _Limiter):
    """About ``limit`` per sliding ``window`` seconds (a weighted counter of
    two fixed windows); the options are :class:`TokenBucket`'s, without
    leasing (a sliding window cannot lease)."""

    __slots__ = ()
