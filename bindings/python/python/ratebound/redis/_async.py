"""The asyncio limiters: :class:`AsyncTokenBucket`,
:class:`AsyncFixedWindow`, :class:`AsyncSlidingWindow`, for a
``redis.asyncio.Redis`` or a ``redis.asyncio.cluster.RedisCluster``."""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar, Optional, TypeVar

from .._ratebound import Decision
from .._wait import drive
from ._base import RedisReservation, _Base, _FixedWindowArgs, _SlidingWindowArgs, _TokenBucketArgs
from ._listeners import _AsyncListener
from ._options import Key, Number
from ._native import _AsyncNativeRunner
from ._runners import _PerLoop

_A = TypeVar("_A", bound="_AsyncLimiter")

# The give-backs sent for cancelled callers, held until they are done (the
# loop keeps only weak references to its tasks).
_ORPHANS: "set[asyncio.Future[Any]]" = set()


class _AsyncLimiter(_Base):
    """What every asyncio Redis limiter does."""

    __slots__ = ()

    _asyncio: ClassVar[bool] = True
    _runner: _PerLoop
    _listener: Optional[_AsyncListener]
    _connect = staticmethod(_PerLoop)
    _native_runner = staticmethod(_AsyncNativeRunner)

    async def _listen(self) -> None:
        # As the sync limiter's _listen, on the event loop.
        if self._engine.algorithm != "token_bucket":
            return
        native = self._native
        if native is not None:
            native.listen()
            deadline = time.monotonic() + self._engine.timeout
            while not native.heard_first and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            native.wait_listening(0.0)  # over either way, as below
            return
        lis = self._listener or self._new_listener(_AsyncListener)
        if lis is None:
            return
        if not lis.first.is_set():
            try:
                await asyncio.wait_for(lis.first.wait(), self._engine.timeout)
            except asyncio.TimeoutError:
                lis.first.set()  # as the sync _listen

    @property
    def listening(self) -> bool:
        """Whether this limiter hears other instances' pauses now (from its
        first wait on)."""
        if self._native is not None:
            return self._native.listening
        lis = self._listener
        return lis is not None and lis.ready

    async def check(self, key: Key, n: Optional[int] = None) -> Decision:
        """Takes ``n`` tokens for ``key`` if the global limit allows (see
        :meth:`TokenBucket.check`); the call to Redis is bounded by
        ``timeout`` as a whole."""
        native = self._native
        if native is not None:
            d = native.acheck(key, n)  # a Decision already, or a future of one
            return d if type(d) is Decision else await d
        return await self._decide(self._engine.begin(key, n))

    async def try_acquire(self, key: Key, n: Optional[int] = None) -> bool:
        """Like :meth:`check`, returning only whether it was allowed."""
        return (await self.check(key, n)).allowed

    async def _check_in(self, scope: str, key: Key, n: Optional[int] = None) -> Decision:
        native = self._native
        if native is not None:
            d = native.acheck(key, n, scope)
            return d if type(d) is Decision else await d
        return await self._decide(self._engine.begin(key, n, scope))

    async def _check_at(self, key: Key, n: int, now_us: int) -> Decision:
        return await self._decide(self._engine.begin(key, n), now_us)

    async def _decide(self, step: Any, now_us: Optional[int] = None) -> Decision:
        call = self._call_for(step, now_us)
        if isinstance(call, Decision):
            return call
        return self._engine.finish(call, *(await self._runner.run(call)))

    async def acquire(self, key: Key, n: Optional[int] = None, timeout: Optional[Number] = None) -> None:
        """Waits until ``n`` tokens for ``key`` are taken, counted across
        every instance, without blocking the event loop (see
        :meth:`TokenBucket.acquire_blocking`). A cancelled task gives back
        the tokens it holds."""
        a = self._engine.acquire(key, n, timeout)
        await self._listen()

        async def run(call: Any) -> None:
            self._engine.acquire_reply(a, *(await self._run_owned(call)))

        async def abandon() -> None:
            back = self._engine.acquire_abandon(a)
            if back is not None:
                await asyncio.shield(self._runner.run(back))

        await drive(self._steps(a), run, abandon)

    async def reserve(self, key: Key, n: Optional[int] = None, max_wait: Optional[Number] = None) -> RedisReservation:
        """:meth:`TokenBucket.reserve`; give the tokens back with
        ``await reservation.acancel()``."""
        step = self._engine.begin_reserve(key, n, max_wait)
        if isinstance(step, tuple):
            return RedisReservation(self, None, step[0], step[1])
        return self._reserved(step, await self._run_owned(step))

    async def _run_owned(self, call: Any) -> Any:
        # A reservation's call runs as a task of its own, so that it
        # outlives a cancelled caller (asyncio.wait_for, a timeout, a
        # disconnected client): the reply still comes, and what Redis
        # reserved for nobody goes back (the engine's `orphaned`).
        task = asyncio.ensure_future(self._runner.run(call))
        try:
            return await asyncio.shield(task)
        except BaseException:
            task.add_done_callback(lambda t: self._orphaned(call, t))
            raise

    def _orphaned(self, call: Any, task: "asyncio.Future[Any]") -> None:
        if task.cancelled() or task.exception() is not None:
            return
        back = self._engine.orphaned(call, *task.result())
        if back is not None:
            _ORPHANS.add(give := asyncio.ensure_future(self._runner.run(back)))
            give.add_done_callback(_ORPHANS.discard)

    async def pause(self, key: Key, seconds: Number) -> Optional[float]:
        """:meth:`TokenBucket.pause`."""
        call = self._engine.begin_pause(key, seconds)
        shift, news = self._paused(call, await self._runner.run(call))
        if news is not None:
            await self._runner.publish(self._engine.pause_channel, news)
        return shift

    async def resume(self, key: Key) -> Optional[str]:
        """:meth:`TokenBucket.resume`."""
        call = self._engine.begin_resume(key)
        return self._engine.finish_resume(*(await self._runner.run(call)))

    @property
    def breaker_open(self) -> bool:
        """Whether the circuit breaker is open."""
        return self._engine.breaker_open

    async def aclose(self) -> int:
        """Gives unspent leased tokens back to Redis, stops listening for
        pauses and closes the limiter's own client (not yours); how many
        keys' tokens went back."""
        returned = 0
        for call in self._engine.drain():
            if (await self._runner.run(call))[0] is not None:
                returned += 1
        lis, self._listener = self._listener, None
        if lis is not None:
            await lis.aclose()
        await self._runner.aclose()
        return returned

    async def __aenter__(self: _A) -> _A:
        """Gets the limiter's cluster client ready (its topology and command
        table, ~0.1 s), so that no call pays for it."""
        await self._runner.prepare()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncTokenBucket(_TokenBucketArgs, _AsyncLimiter):
    """:class:`TokenBucket` for a ``redis.asyncio.Redis`` or
    ``redis.asyncio.cluster.RedisCluster`` client, or a URL (ratebound's
    own connection, its futures completed without blocking the loop)."""

    __slots__ = ()

    async def _adapt(self, key: Key, seen: int, next: int) -> bool:
        # TokenBucket._adapt, its call awaited on the event loop.
        call = self._engine.begin_adapt(key, seen, next)
        if call is None:
            return False
        replaced, news = self._engine.finish_adapt(call, *(await self._runner.run(call)))
        if news is not None:
            await self._runner.publish(self._engine.pause_channel, news)
        return replaced


class AsyncFixedWindow(_FixedWindowArgs, _AsyncLimiter):
    """:class:`FixedWindow` for a ``redis.asyncio`` client."""

    __slots__ = ()


class AsyncSlidingWindow(_SlidingWindowArgs, _AsyncLimiter):
    """:class:`SlidingWindow` for a ``redis.asyncio`` client."""

    __slots__ = ()
