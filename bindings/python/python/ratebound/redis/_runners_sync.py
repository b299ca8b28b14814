"""The sync runners: one server (:class:`_Standalone`), a cluster
(:class:`_Cluster`) and any other client as given (:class:`_AsIs`), each on
connections of its own made from the user's client's settings, each call
within one deadline for ``EVALSHA`` and a possible ``EVAL``."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Optional, Union

from .._ratebound import _RedisCall, _ran_late
from ._listeners import _Subscribe, _subscriber
from ._runners_common import (
    _CLUSTER_OWN,
    _LAST_LOOK,
    _UNBOUNDED,
    _UNSENT,
    _Calls,
    _cluster_kwargs,
    _failed,
    _left,
    _no_retries,
    _nodes,
    _Now,
    _Outcome,
    _pool,
    _raise_misconfigured,
    _redis,
)


class _Gate:
    """Back-pressure for the sync runners: at most ``size`` calls of the
    limiter hold a connection at once (the user's ``max_connections``), and
    a call beyond them waits for one to come free within its own deadline;
    one that got none by then never left this client (``unsent``). Without
    it the 101st concurrent call met a full pool, an error the fail policy
    answered ("open": admitted)."""

    __slots__ = ("_size", "_sem", "_pid", "_now")

    def __init__(self, size: Optional[int], now: _Now = time.monotonic) -> None:
        self._size = size if size is not None and 0 < size < _UNBOUNDED else None
        self._sem = None if self._size is None else threading.BoundedSemaphore(self._size)
        self._pid = os.getpid()
        self._now = now

    def enter(self, deadline: float) -> Any:
        """A place (to hand back to ``leave``), or ``None`` when none came
        free before ``deadline``."""
        if self._size is None:
            return True
        if self._pid != os.getpid():
            # A forked child: the parent's callers are not here.
            self._sem, self._pid = threading.BoundedSemaphore(self._size), os.getpid()
        sem = self._sem
        assert sem is not None
        if sem.acquire(blocking=False) or sem.acquire(timeout=_left(deadline, self._now)):
            return sem
        return None

    @staticmethod
    def leave(place: Any) -> None:
        if place is not True:
            place.release()

class _SyncCalls(_Calls):
    """What the sync runners share: a script run through a client's
    ``evalsha`` and ``eval``, what becomes of a call, and a publish within
    a place of the gate (:class:`_Standalone`'s and :class:`_Cluster`'s)."""

    _gate: _Gate

    def _script(
        self, call: _RedisCall, evalsha: Callable[..., Any], eval_: Callable[..., Any], deadline: Optional[float] = None
    ) -> Any:
        try:
            return evalsha(call.sha, 1, call.key, *call.args)
        except self._refused as e:
            self._resend(e, None if deadline is None else _left(deadline, self._now))
            return eval_(call.text, 1, call.key, *call.args)

    def _outcome(self, attempt: Callable[[], Any]) -> _Outcome:
        try:
            return attempt(), False, None, False
        except self._errors as e:
            return _failed(e, self._timeout_error)

    def _took(self, send: Callable[[], Any]) -> bool:
        try:
            send()
            return True
        except self._errors:
            return False

    def _gated(self, send: Callable[[float], bool]) -> bool:
        """``send(deadline)`` holding a place of the gate (one that came
        free within the deadline: False if none did)."""
        deadline = self._deadline()
        place = self._gate.enter(deadline)
        if place is None:
            return False
        try:
            return send(deadline)
        finally:
            self._gate.leave(place)


class _Standalone(_SyncCalls):
    """Calls on one server through the limiter's own pool, each reply read
    with the time left until the deadline.

    A call takes a connection from the limiter's own list of idle ones
    (redis-py's pool makes them, and counts them against
    ``max_connections``; a list's ``pop``/``append`` need no lock), checks
    it as redis-py's pool does (a closed socket: reconnect), writes the
    command the engine packed and reads the reply with the connection
    itself: no command packing, no pool bookkeeping in Python per call.
    Calls beyond ``max_connections`` wait for a connection within their
    deadline (:class:`_Gate`): the pool is never full when asked."""

    def __init__(self, redis: Any, client: Any, timeout: float, now: _Now = time.monotonic) -> None:
        super().__init__(redis, cluster=False, now=now)
        user = client.connection_pool
        self._pool, kwargs = _pool(redis.ConnectionPool, user, timeout, _no_retries())
        self._gate = _Gate(user.max_connections, now)
        self._timeout = timeout
        self._subscribe: _Subscribe = _subscriber(redis, False, user.connection_class, kwargs, timeout)
        self._idle: list[Any] = []
        self._pid = os.getpid()
        # A credential provider re-authenticates connections as the pool
        # hands them back (redis-py's release event): such connections go
        # back to redis-py's pool after every call.
        self._keep = kwargs.get("credential_provider") is None

    def _take(self) -> Any:
        """A connection for one call that holds a place of the gate (an
        idle one, else a new one from the pool)."""
        if self._pid != os.getpid():
            # A forked child never uses its parent's connections (redis-py's
            # pool resets itself too).
            self._idle, self._pid = [], os.getpid()
        try:
            conn = self._idle.pop()
        except IndexError:
            return self._pool.get_connection()
        if getattr(conn, "_sock", None) is None:
            # Not connected (a failed call disconnected it): it connects at
            # the send, within the call's deadline (can_read would connect
            # first, and a failure there would cost a second connect).
            return conn
        # As redis-py's pool checks a connection it hands out: closed by the
        # server (CLIENT KILL, a restart, an idle timeout), or data left
        # unread where no push notification can be pending: a new
        # connection at the send.
        try:
            stale = conn.can_read() and not self._pool.maint_notifications_enabled()
        except self._errors:
            stale = True
        if stale:
            conn.disconnect()
        return conn

    def _give(self, conn: Any, clean: bool) -> None:
        if not clean:
            # Interrupted mid-call: a reply may still be on its way.
            conn.disconnect()
        if self._keep and conn.pid == self._pid:
            if conn.should_reconnect():
                conn.disconnect()
            self._idle.append(conn)
        else:
            self._pool.release(conn)

    def _read(self, conn: Any, deadline: float) -> Any:
        # Past the deadline already (this thread waited for the GIL): one
        # last short look, for a reply that landed in time.
        left = max(deadline - self._now(), _LAST_LOOK)
        return conn.read_response(timeout=left)

    def run(self, call: _RedisCall) -> _Outcome:
        deadline = self._deadline()
        place = self._gate.enter(deadline)
        if place is None:
            return _UNSENT
        try:
            return self._run(call, deadline)
        finally:
            self._gate.leave(place)

    def _run(self, call: _RedisCall, deadline: float) -> _Outcome:
        try:
            conn = self._take()
        except self._errors as e:
            return _failed(e, self._timeout_error)
        clean = False
        # How long this client itself took before the send (the gate, the
        # GIL): a call that timed out after it used more than half the
        # deadline, or whose thread came back late past the deadline, is
        # the client's own overload (busy), not Redis' silence.
        own = self._now() - (deadline - self._timeout)
        try:
            conn.send_packed_command((call.command,))
            try:
                reply = self._read(conn, deadline)
            except self._refused as e:
                self._resend(e, _left(deadline, self._now))
                conn.send_packed_command((call.eval_command,))
                reply = self._read(conn, deadline)
            clean = True
            return reply, False, None, False
        except self._errors as e:
            # A reply that timed out is still on its way: redis-py has
            # already disconnected, so nobody reads it as theirs.
            clean = True
            if isinstance(e, (self._timeout_error, TimeoutError)) and (
                own > self._timeout / 2 or _ran_late(self._now() - deadline, self._timeout)
            ):
                return _UNSENT
            return _failed(e, self._timeout_error)
        finally:
            self._give(conn, clean)

    def publish(self, channel: str, message: bytes) -> bool:
        """PUBLISH within the deadline; whether Redis took it."""
        return self._gated(lambda deadline: self._publish(channel, message, deadline))

    def _publish(self, channel: str, message: bytes, deadline: float) -> bool:
        try:
            conn = self._take()
        except self._errors:
            return False
        clean = False
        try:
            conn.send_command("PUBLISH", channel, message)
            conn.read_response(timeout=max(deadline - self._now(), 0.001))
            clean = True
            return True
        except self._errors:
            clean = True
            return False
        finally:
            self._give(conn, clean)

    def subscriber(self) -> Optional[_Subscribe]:
        return self._subscribe

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            self._pool.release(conn)
        self._pool.disconnect()


class _Cluster(_SyncCalls):
    """Calls through the limiter's own ``RedisCluster``, every socket
    operation bounded by the deadline, no retries; at most
    ``max_connections`` calls at once (each node's pool size, redis-py's
    default 100), the others waiting within their deadline (:class:`_Gate`)."""

    def __init__(self, redis: Any, client: Any, timeout: float, now: _Now = time.monotonic) -> None:
        super().__init__(redis, now=now)
        manager = client.nodes_manager
        kwargs = {k: v for k, v in manager.connection_kwargs.items() if k not in _CLUSTER_OWN}
        nodes = _nodes(client)

        def make() -> Any:
            settings = _cluster_kwargs(
                manager, nodes, redis.cluster.ClusterNode, "_require_full_coverage", timeout, _no_retries()
            )
            return redis.cluster.RedisCluster(**settings, **kwargs)

        self._make = make
        self._client: Any = None
        self._lock = threading.Lock()
        self._subscribe: _Subscribe = _subscriber(
            redis,
            False,
            kwargs.get("connection_class", redis.Connection),
            {k: v for k, v in kwargs.items() if k != "connection_class"},
            timeout,
            nodes,
        )
        self._timeout = timeout
        self._gate = _Gate(kwargs.get("max_connections") or 100, now)
        # Made now if the cluster answers (redis-py asks it for its topology
        # and its command table); otherwise at the first call that reaches it.
        # A misconfiguration (a wrong password, ...) is raised now.
        try:
            self._client = make()
        except self._errors as e:
            _raise_misconfigured(_failed(e, self._timeout_error))

    def _get(self, deadline: float) -> Any:
        c = self._client
        if c is not None:
            return c
        if not self._lock.acquire(timeout=_left(deadline, self._now)):
            raise self._timeout_error("the cluster client is being made")
        try:
            if self._client is None:
                self._client = self._make()
            return self._client
        finally:
            self._lock.release()

    def run(self, call: _RedisCall) -> _Outcome:
        deadline = self._deadline()
        place = self._gate.enter(deadline)
        if place is None:
            return _UNSENT

        def attempt() -> Any:
            c = self._get(deadline)
            return self._script(call, c.evalsha, c.eval, deadline)

        try:
            return self._outcome(attempt)
        finally:
            self._gate.leave(place)

    def publish(self, channel: str, message: bytes) -> bool:
        return self._gated(lambda deadline: self._took(lambda: self._get(deadline).publish(channel, message)))

    def subscriber(self) -> Optional[_Subscribe]:
        return self._subscribe

    def close(self) -> None:
        with self._lock:
            c, self._client = self._client, None
        if c is not None:
            c.close()


class _AsIs(_SyncCalls):
    """Any other client, used as given: a call cannot be cut short (only the
    client's own timeouts end it), but one that comes back past the
    deadline is a timeout, as on every other runner — the fail policy
    answers and the breaker hears of it (before, a Redis that answered
    every call in two seconds was Redis' answer every time, two seconds
    late). A late reservation's tokens, reserved for nobody, go back
    (``orphaned``: the engine's, set by the limiter)."""

    def __init__(self, redis: Any, client: Any, timeout: float, now: _Now = time.monotonic) -> None:
        super().__init__(redis, now=now)
        self._client = client
        self._timeout = timeout
        self.orphaned: Optional[Callable[..., Optional[_RedisCall]]] = None

    def _call(self, call: _RedisCall, deadline: Optional[float]) -> _Outcome:
        return self._outcome(lambda: self._script(call, self._client.evalsha, self._client.eval, deadline))

    def run(self, call: _RedisCall) -> _Outcome:
        deadline = self._deadline()
        outcome = self._call(call, deadline)
        if outcome[0] is None or self._now() <= deadline:
            return outcome  # in time, or a failure (a timeout, an error Redis sent) as it is
        if call.kind == "reserve" and self.orphaned is not None:
            back = self.orphaned(call, *outcome)
            if back is not None:
                self._call(back, None)
        return None, True, None, False

    def publish(self, channel: str, message: bytes) -> bool:
        return self._took(lambda: self._client.publish(channel, message))

    def subscriber(self) -> Optional[_Subscribe]:
        pubsub = getattr(self._client, "pubsub", None)
        if not callable(pubsub):
            return None
        return lambda: (pubsub(), lambda: None)

    def close(self) -> None:
        pass


_Runner = Union[_Standalone, _Cluster, _AsIs]


def _sync_runner(client: Any, timeout: float, now: _Now = time.monotonic) -> _Runner:
    redis = _redis()
    # An asyncio client means redis.asyncio is imported already.
    aio: Any = sys.modules.get("redis.asyncio")
    if aio is not None and isinstance(client, (aio.Redis, aio.RedisCluster)):
        raise TypeError(
            "a redis.asyncio client needs an asyncio limiter: ratebound.redis.AsyncTokenBucket, "
            "AsyncFixedWindow or AsyncSlidingWindow"
        )
    if isinstance(client, redis.cluster.RedisCluster):
        return _Cluster(redis, client, timeout, now)
    if isinstance(client, redis.Redis) and type(client.connection_pool) in (
        redis.ConnectionPool,
        redis.BlockingConnectionPool,
    ):
        return _Standalone(redis, client, timeout, now)
    if callable(getattr(client, "evalsha", None)) and callable(getattr(client, "eval", None)):
        return _AsIs(redis, client, timeout, now)
    raise TypeError(
        "client must be a URL (redis://host:port/db, rediss://, redis+cluster://), a redis.Redis "
        f"or a redis.cluster.RedisCluster, got {type(client).__name__}"
    )
