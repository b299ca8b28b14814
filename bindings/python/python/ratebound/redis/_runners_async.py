"""The asyncio runner: calls through the limiter's own asyncio client
(standalone or cluster), each within one deadline for ``EVALSHA`` and a
possible ``EVAL``, on the running loop's clock; :class:`_PerLoop` keeps one
per event loop."""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Awaitable, Callable, Optional

from .._ratebound import _RedisCall, _ran_late
from ._listeners import _AsyncSubscribe, _subscriber
from ._runners_common import (
    _CLUSTER_OWN,
    _MAKERS,
    _UNBOUNDED,
    _UNSENT,
    _Calls,
    _cluster_kwargs,
    _failed,
    _no_retries,
    _nodes,
    _Outcome,
    _pool,
    _redis,
)


def _now() -> float:
    """The asyncio runners' clock: the running loop's (``time.monotonic()``
    on asyncio's own loops), the one place they read the time, so that a
    test's loop on virtual time drives their deadlines."""
    return asyncio.get_running_loop().time()


def _left_now(deadline: float) -> float:
    """:func:`_left` on the running loop's clock."""
    return max(deadline - _now(), 0.0)

class _AsyncGate:
    """:class:`_Gate` for asyncio: the event loop's calls beyond ``size``
    wait (without blocking the loop) for a place within their deadline. A
    semaphore belongs to one event loop: a limiter used from another loop
    gets a new one there."""

    __slots__ = ("_size", "_sem", "_loop")

    def __init__(self, size: Optional[int]) -> None:
        self._size = size if size is not None and 0 < size < _UNBOUNDED else None
        self._sem: Optional[asyncio.Semaphore] = None
        self._loop: Optional[weakref.ReferenceType[asyncio.AbstractEventLoop]] = None

    async def enter(self, deadline: float) -> Any:
        """As :meth:`_Gate.enter`."""
        if self._size is None:
            return True
        loop = asyncio.get_running_loop()
        sem = self._sem
        if sem is None or self._loop is None or self._loop() is not loop:
            sem = self._sem = asyncio.Semaphore(self._size)
            self._loop = weakref.ref(loop)
        if not sem.locked():
            await sem.acquire()  # at once: no task, no timer
            return sem
        try:
            await asyncio.wait_for(sem.acquire(), _left_now(deadline))
        except asyncio.TimeoutError:
            return None
        return sem

    def full(self) -> bool:
        """Whether every place is taken now (calls of this loop queue)."""
        sem = self._sem
        return sem is not None and sem.locked()

    @staticmethod
    def leave(place: Any) -> None:
        if place is not True:
            place.release()

class _AsyncRunner(_Calls):
    """Calls through the limiter's own asyncio client (standalone or
    cluster), each bounded as a whole by ``asyncio.wait_for``; calls beyond
    the user's ``max_connections`` wait for a connection within their
    deadline (:class:`_AsyncGate`)."""

    def __init__(self, client: Any, timeout: float) -> None:
        redis = _redis()
        import redis.asyncio
        import redis.asyncio.cluster

        super().__init__(redis)
        self._timeout = timeout
        self._owned = True
        # Only a cluster client needs getting ready (see _ready).
        self._ready_ = True
        self._init: Optional[asyncio.Future[Any]] = None
        self._subscribe: Optional[_AsyncSubscribe] = None
        self._gate = _AsyncGate(None)
        # The limiter's own pool of one server (None: a cluster, or a client
        # used as given): its calls are sent and read here (see _sent_read).
        self._pool: Any = None
        self._makers: Optional[tuple[weakref.ReferenceType[asyncio.AbstractEventLoop], asyncio.Semaphore]] = None
        retry = _no_retries(asyncio_=True)
        if isinstance(client, redis.asyncio.cluster.RedisCluster):
            self._client: Any = self._cluster(redis, client, timeout, retry)
            self._gate = _AsyncGate(client.connection_kwargs.get("max_connections"))
            self._ready_ = False
            node_kwargs = {
                k: v
                for k, v in client.connection_kwargs.items()
                if k not in _CLUSTER_OWN and k not in ("max_connections", "connection_class")
            }
            node_class = client.connection_kwargs.get("connection_class", redis.asyncio.Connection)
            self._subscribe = _subscriber(redis, True, node_class, node_kwargs, timeout, _nodes(client))
        elif isinstance(client, redis.asyncio.Redis) and type(client.connection_pool) in (
            redis.asyncio.ConnectionPool,
            redis.asyncio.BlockingConnectionPool,
        ):
            user = client.connection_pool
            pool, kwargs = _pool(redis.asyncio.ConnectionPool, user, timeout, retry)
            self._client = redis.asyncio.Redis.from_pool(pool)
            self._pool = pool
            self._gate = _AsyncGate(user.max_connections)
            self._subscribe = _subscriber(redis, True, user.connection_class, kwargs, timeout)
        elif isinstance(client, (redis.Redis, redis.cluster.RedisCluster)):
            raise TypeError(
                "a sync redis client needs a sync limiter: ratebound.redis.TokenBucket, "
                "FixedWindow or SlidingWindow"
            )
        elif callable(getattr(client, "evalsha", None)) and callable(getattr(client, "eval", None)):
            self._client = client
            self._owned = False
            pubsub = getattr(client, "pubsub", None)
            if callable(pubsub):
                self._subscribe = lambda: (pubsub(), None)
        else:
            raise TypeError(
                "client must be a URL (redis://host:port/db, rediss://, redis+cluster://), a "
                f"redis.asyncio.Redis or a redis.asyncio.cluster.RedisCluster, got {type(client).__name__}"
            )

    @staticmethod
    def _cluster(redis: Any, client: Any, timeout: float, retry: Any) -> Any:
        import inspect

        from redis.asyncio.cluster import ClusterNode, RedisCluster

        accepted = inspect.signature(RedisCluster.__init__).parameters
        kwargs = {
            k: v
            for k, v in client.connection_kwargs.items()
            if k in accepted and k not in _CLUSTER_OWN and k != "max_connections"
        }
        ssl = issubclass(client.connection_kwargs.get("connection_class", object), redis.asyncio.SSLConnection)
        return RedisCluster(
            **_cluster_kwargs(client.nodes_manager, _nodes(client), ClusterNode, "require_full_coverage", timeout, retry),
            max_connections=client.connection_kwargs.get("max_connections", 2**31),
            ssl=ssl,
            **kwargs,
        )

    def _deadline(self) -> float:
        return _now() + self._timeout

    async def _sent_read(self, call: _RedisCall, progress: list[float], deadline: float) -> Any:
        """The call on a connection of the limiter's own pool, written as
        the engine packed it and its reply read. ``progress``: ``[sent,
        own]`` — how far it got (0: still in this client's own queue for
        its turn to make a connection; 1: taking an idle connection or
        making one, the server's share; 2: sent), and how long this client
        took to send it, from the call's start, without the time a new
        connection took to be made."""
        pool = self._pool
        made = 0.0
        if getattr(pool, "_available_connections", True):
            # An idle connection (connected again here if it was dropped:
            # the server's share, as making one).
            progress[0] = 1.0
            conn = await pool.get_connection()
        else:
            # A new connection: at most _MAKERS are made at once, the other
            # calls wait for one of them (or an idle one) — 100 connections
            # made at once on a busy loop take longer than the deadline.
            makers = self._makers_here()
            await makers.acquire()
            try:
                t = _now()
                progress[0] = 1.0
                conn = await pool.get_connection()
                made = _now() - t
            finally:
                makers.release()
        try:
            await conn.send_packed_command(call.command)
            progress[1] = _now() - progress[1] - made
            progress[0] = 2.0
            try:
                return await conn.read_response()
            except self._refused as e:
                self._resend(e, _left_now(deadline))
                await conn.send_packed_command(call.eval_command)
                return await conn.read_response()
        finally:
            # A connection interrupted mid-call was disconnected by redis-py
            # (a reply may still be on its way): the pool makes a new one.
            await self._pool.release(conn)

    def _makers_here(self) -> asyncio.Semaphore:
        """This loop's permits to make a new connection (see _sent_read)."""
        loop = asyncio.get_running_loop()
        made = self._makers
        if made is None or made[0]() is not loop:
            made = self._makers = (weakref.ref(loop), asyncio.Semaphore(_MAKERS))
        return made[1]

    async def _attempt(self, call: _RedisCall, deadline: float) -> Any:
        try:
            return await self._client.evalsha(call.sha, 1, call.key, *call.args)
        except self._refused as e:
            self._resend(e, _left_now(deadline))
            return await self._client.eval(call.text, 1, call.key, *call.args)

    async def _ready(self, deadline: float) -> None:
        """A cluster client reads the cluster's topology and command table
        before its first command: once, in a task of its own that a
        deadline does not cancel (the next call waits on the same task)."""
        init = self._init
        if init is None or (init.done() and (init.cancelled() or init.exception() is not None)):
            init = self._init = asyncio.ensure_future(self._client.initialize())
        await asyncio.wait_for(asyncio.shield(init), _left_now(deadline))
        self._ready_ = True

    async def _within(self, command: Callable[[], Awaitable[Any]], deadline: float) -> Any:
        """``command()`` (and getting the client ready first) within
        ``deadline``; raises what it raised, ``asyncio.TimeoutError`` past it."""
        if not self._ready_:
            await self._ready(deadline)
        return await asyncio.wait_for(command(), _left_now(deadline))

    def _overloaded(self, progress: list[float], deadline: float) -> bool:
        """Whether a call that timed out (``progress``: see _sent_read) was
        late for this client's own reasons rather than Redis'."""
        half = self._timeout / 2
        late = _ran_late(_now() - deadline, self._timeout)
        stage, own = progress[0], progress[1]
        queued = stage == 0.0
        connecting = stage == 1.0 and self._gate.full()
        sent_late = stage == 2.0 and own > half
        # The client's own overload, not Redis' silence: still in
        # this client's queues at its deadline (for a connection,
        # for its turn to make one: 1 500 tasks started at once);
        # making a connection while every place was taken and more
        # calls queued; sent only after this client had used more
        # than half the deadline itself (Redis had less than half
        # to answer); or the deadline's timer itself ran late (a
        # loop too busy to read the reply in time). The engine
        # refuses it as busy (a call that was sent may have taken
        # its tokens: refusing never exceeds the limit), and the
        # breaker does not hear of it. Alone, a call whose
        # connection could not be made in time is Redis' trouble (a
        # server that accepts but does not answer): a timeout.
        return late or queued or connecting or sent_late

    async def run(self, call: _RedisCall) -> _Outcome:
        deadline = self._deadline()
        place = await self._gate.enter(deadline)
        if place is None:
            return _UNSENT
        # [how far, own time before the send] (see _sent_read): a client
        # used as given or a cluster's counts as sent at once, with no time
        # of this client's own (before, its start time stood there: every
        # timeout of theirs read as the client's overload, "busy", and the
        # fail policy and the breaker never heard of a silent Redis).
        progress = [2.0, 0.0] if self._pool is None else [0.0, deadline - self._timeout]
        attempt = (
            (lambda: self._sent_read(call, progress, deadline))
            if self._pool is not None
            else (lambda: self._attempt(call, deadline))
        )
        try:
            return await self._within(attempt, deadline), False, None, False
        except (asyncio.TimeoutError, self._timeout_error) as e:
            # asyncio's at the deadline, or redis-py's own (a connect bounded
            # by socket_connect_timeout).
            if self._overloaded(progress, deadline):
                return _UNSENT
            if isinstance(e, asyncio.TimeoutError):
                return None, True, None, False
            return _failed(e, self._timeout_error)
        except self._errors as e:
            return _failed(e, self._timeout_error)
        finally:
            self._gate.leave(place)

    async def publish(self, channel: str, message: bytes) -> bool:
        """PUBLISH within the deadline; whether Redis took it."""
        deadline = self._deadline()
        place = await self._gate.enter(deadline)
        if place is None:
            return False
        try:
            await self._within(lambda: self._client.publish(channel, message), deadline)
            return True
        except (asyncio.TimeoutError, *self._errors):
            return False
        finally:
            self._gate.leave(place)

    def subscriber(self) -> Optional[_AsyncSubscribe]:
        return self._subscribe

    async def prepare(self) -> None:
        """Gets a cluster client ready now, without the calls' deadline; a
        failure is left for the first call."""
        if not self._ready_:
            try:
                await self._ready(_now() + 3600.0)
            except (asyncio.TimeoutError, *self._errors):
                pass

    async def aclose(self) -> None:
        if self._init is not None and not self._init.done():
            self._init.cancel()
        if self._owned:
            await self._client.aclose()


class _PerLoop:
    """An asyncio limiter's runner for whichever event loop calls it: one
    :class:`_AsyncRunner` (its own client and pool) per event loop, made at
    the loop's first call. redis-py's asyncio connections belong to the loop
    that opened them — a limiter first used under ``asyncio.run`` at
    startup, then by the server's loop (or pytest-asyncio's next test) would
    write to a closed loop's sockets (``RuntimeError: Event loop is
    closed``). A closed loop's runner is dropped when a new loop comes; its
    sockets go with it. A client used as given (not redis-py's) is shared by
    every loop's runner, as the user made it."""

    def __init__(self, client: Any, timeout: float, now: Any = None) -> None:
        # ``now`` is the sync runners' clock: the asyncio ones read the
        # running loop's (_now), which a test's loop puts on virtual time.
        self._made = (client, timeout)
        # Made now, so that a client of the wrong kind is refused at once;
        # it serves the first loop that calls.
        self._first: Optional[_AsyncRunner] = _AsyncRunner(client, timeout)
        self._runners: dict[asyncio.AbstractEventLoop, _AsyncRunner] = {}
        self._subscribe = self._first.subscriber()
        # Loops in other threads may arrive together: one gets the first
        # runner, each its own.
        self._lock = threading.Lock()

    def _here(self) -> _AsyncRunner:
        loop = asyncio.get_running_loop()
        runner = self._runners.get(loop)
        if runner is not None:
            return runner
        with self._lock:
            for closed in [other for other in self._runners if other.is_closed()]:
                del self._runners[closed]
            runner, self._first = self._first, None
            if runner is None:
                runner = _AsyncRunner(*self._made)
            self._runners[loop] = runner
        return runner

    async def run(self, call: _RedisCall) -> _Outcome:
        return await self._here().run(call)

    async def publish(self, channel: str, message: bytes) -> bool:
        return await self._here().publish(channel, message)

    def subscriber(self) -> Optional[_AsyncSubscribe]:
        return self._subscribe

    async def prepare(self) -> None:
        await self._here().prepare()

    async def aclose(self) -> None:
        """Closes this loop's runner; the others' are dropped (a closed
        loop's sockets cannot be closed from another loop)."""
        with self._lock:
            runner = self._runners.pop(asyncio.get_running_loop(), None) or self._first
            self._runners.clear()
            self._first = None
        if runner is not None:
            await runner.aclose()
