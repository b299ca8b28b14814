"""How the limiters' calls reach Redis: the sync runners (one server, a
cluster, any other client as given) and the asyncio one, on connections of
their own made from the user's client's settings, each call within one
deadline for ``EVALSHA`` and a possible ``EVAL``."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import weakref
from typing import Any, Awaitable, Callable, Optional, Union

from .._ratebound import _misconfigured, _RedisCall
from ._listeners import _AsyncSubscribe, _Subscribe, _subscriber

# What became of a call: (reply, timed_out, error, unsent). ``unsent``: the
# call never left this client before its deadline (no connection came free):
# the engine refuses it as "busy", never as Redis' failure.
_Outcome = tuple[Optional[Any], bool, Optional[str], bool]

_UNSENT: _Outcome = (None, False, None, True)

# Connection settings that are the pool's own bookkeeping, or that the
# limiter sets itself.
_POOL_OWN = frozenset(
    {
        "himport_registry",
        "maint_notifications_pool_handler",
        "maint_notifications_config",
        "orig_host_address",
        "orig_socket_timeout",
        "orig_socket_connect_timeout",
        "retry",
        "retry_on_error",
        "retry_on_timeout",
        "socket_timeout",
        "socket_connect_timeout",
        "connection_pool",
        "cache",
        "cache_config",
    }
)
# The same for a cluster client's node settings.
_CLUSTER_OWN = _POOL_OWN | {
    "redis_connect_func",
    "connection_pool_class",
    "response_callbacks",
    "oss_cluster_maint_notifications_handler",
    "host",
    "port",
    "url",
}


def _redis() -> Any:
    try:
        import redis
    except ImportError as e:  # pragma: no cover - redis-py is a test requirement
        raise ImportError("ratebound.redis needs redis-py: pip install redis") from e
    return redis


def _unsent(e: BaseException) -> bool:
    """Whether ``e`` says the call never left the client: its pool was full
    (``MaxConnectionsError``), or a blocking pool had no connection free in
    time (redis-py's "No connection available.")."""
    return type(e).__name__ == "MaxConnectionsError" or str(e) == "No connection available."


def _failed(e: BaseException, timeout_error: type) -> _Outcome:
    """What an exception from redis-py makes of a call: a timeout, a call
    that never left the client, or a failure whose text keeps the error
    code Redis sent (redis-py strips it: ``WRONGPASS``, ``NOPERM``, ``ERR``),
    for the engine's reading of a misconfiguration."""
    if isinstance(e, (timeout_error, TimeoutError)):
        return None, True, None, False
    if _unsent(e):
        return _UNSENT
    text = str(e)
    code = getattr(e, "status_code", None)
    if isinstance(code, str) and code and not text.startswith(code):
        text = f"{code} {text}"
    return None, False, f"{type(e).__name__}: {text}", False


def _raise_misconfigured(outcome: _Outcome) -> None:
    """Raises :class:`~ratebound.StoreMisconfigured` if the failure
    ``outcome`` says the store refused the client's configuration (for a
    runner that meets it outside a call, at construction)."""
    error = outcome[2]
    if error is not None:
        e = _misconfigured(error)
        if e is not None:
            raise e


def _nodes(client: Any) -> list[tuple[str, int]]:
    """The startup nodes of a cluster client (sync: a dict; asyncio: a list)."""
    nodes = getattr(client.nodes_manager, "startup_nodes", None) or getattr(client, "startup_nodes", None)
    if isinstance(nodes, dict):
        nodes = list(nodes.values())
    if not nodes:
        nodes = client.get_nodes()
    return [(n.host, n.port) for n in nodes]


def _no_retries(asyncio_: bool = False) -> Any:
    """redis-py's ``Retry(NoBackoff(), 0)`` (asyncio's, or the sync one): a
    failure is an outcome at once."""
    import importlib

    from redis.backoff import NoBackoff

    retry: Any = importlib.import_module("redis.asyncio.retry" if asyncio_ else "redis.retry")
    return retry.Retry(NoBackoff(), 0)


# The sync runners' clock (seconds): ``time.monotonic`` unless a test gives
# a limiter a ``ManualClock`` (its ``now``), the one place they read the time.
_Now = Callable[[], float]


def _left(deadline: float, now: _Now = time.monotonic) -> float:
    return max(deadline - now(), 0.0)


def _now() -> float:
    """The asyncio runners' clock: the running loop's (``time.monotonic()``
    on asyncio's own loops), the one place they read the time, so that a
    test's loop on virtual time drives their deadlines."""
    return asyncio.get_running_loop().time()


def _left_now(deadline: float) -> float:
    """:func:`_left` on the running loop's clock."""
    return max(deadline - _now(), 0.0)


# How late past its deadline an asyncio call's timer may run before the
# lateness is the event loop's own (with a quarter of the timeout).
_LATE = 0.005

# How long a sync call past its deadline still looks for a reply that
# landed in time.
_LAST_LOOK = 0.0005

# How many new connections an asyncio runner makes at once.
_MAKERS = 8

# A pool this large is no bound (redis-py's asyncio cluster default, 2**31).
_UNBOUNDED = 2**30


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


def _pool(pool_class: Any, user: Any, timeout: float, retry: Any) -> tuple[Any, dict[str, Any]]:
    """The limiter's own pool for one server, from the settings of the
    user's pool ``user``, and those settings (for the listener's pool)."""
    kwargs = {k: v for k, v in user.connection_kwargs.items() if k not in _POOL_OWN}
    pool = pool_class(
        connection_class=user.connection_class,
        max_connections=user.max_connections,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=retry,
        **kwargs,
    )
    return pool, kwargs


def _cluster_kwargs(
    manager: Any, nodes: list[tuple[str, int]], node: Any, coverage: str, timeout: float, retry: Any
) -> dict[str, Any]:
    """The settings of the limiter's own cluster client that are not the
    nodes' connection settings (``coverage``: where the nodes manager keeps
    ``require_full_coverage``)."""
    return dict(
        startup_nodes=[node(h, p) for h, p in nodes],
        retry=retry,
        require_full_coverage=getattr(manager, coverage, True),
        dynamic_startup_nodes=getattr(manager, "_dynamic_startup_nodes", True),
        address_remap=getattr(manager, "address_remap", None),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
    )


class _Calls:
    """What every runner knows: its deadline on its clock, and which errors
    are outcomes."""

    _timeout: float

    def __init__(self, redis: Any, cluster: bool = True, now: _Now = time.monotonic) -> None:
        self._now = now
        e = redis.exceptions
        self._errors: Any = (
            (e.RedisError, e.RedisClusterException, OSError) if cluster else (e.RedisError, OSError)
        )
        self._timeout_error = e.TimeoutError
        self._noscript = e.NoScriptError

    def _deadline(self) -> float:
        return self._now() + self._timeout


# ------------------------------------------------------------------ sync


class _SyncCalls(_Calls):
    """What the sync runners share: the NOSCRIPT fallback and what becomes of
    a call."""

    def _script(
        self, call: _RedisCall, evalsha: Callable[..., Any], eval_: Callable[..., Any], deadline: Optional[float] = None
    ) -> Any:
        try:
            return evalsha(call.sha, 1, call.key, *call.args)
        except self._noscript:
            # Not loaded on this server (a restart, a failover, SCRIPT
            # FLUSH, another cluster node): EVAL loads it, within the same
            # deadline.
            if deadline is not None and self._now() >= deadline:
                raise self._timeout_error("deadline passed")
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
            except self._noscript:
                # Not loaded on this server (a restart, a failover, SCRIPT
                # FLUSH): EVAL loads it, within the same deadline.
                if self._now() >= deadline:
                    raise self._timeout_error("deadline passed") from None
                conn.send_packed_command((call.eval_command,))
                reply = self._read(conn, deadline)
            clean = True
            return reply, False, None, False
        except self._errors as e:
            # A reply that timed out is still on its way: redis-py has
            # already disconnected, so nobody reads it as theirs.
            clean = True
            if isinstance(e, (self._timeout_error, TimeoutError)) and (
                own > self._timeout / 2 or self._now() - deadline > max(self._timeout / 4, _LATE)
            ):
                return _UNSENT
            return _failed(e, self._timeout_error)
        finally:
            self._give(conn, clean)

    def publish(self, channel: str, message: bytes) -> bool:
        """PUBLISH within the deadline; whether Redis took it."""
        deadline = self._deadline()
        place = self._gate.enter(deadline)
        if place is None:
            return False
        try:
            conn = self._take()
        except self._errors:
            self._gate.leave(place)
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
            self._gate.leave(place)

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
        deadline = self._deadline()
        place = self._gate.enter(deadline)
        if place is None:
            return False
        try:
            return self._took(lambda: self._get(deadline).publish(channel, message))
        finally:
            self._gate.leave(place)

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


# --------------------------------------------------------------- asyncio


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

    async def _sent_read(self, call: _RedisCall, progress: list[float]) -> Any:
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
            except self._noscript:
                # Not loaded on this server: EVAL loads it, within the deadline.
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

    async def _attempt(self, call: _RedisCall) -> Any:
        try:
            return await self._client.evalsha(call.sha, 1, call.key, *call.args)
        except self._noscript:
            # Not loaded on this node: EVAL loads it, within the deadline.
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
        late = _now() - deadline > max(self._timeout / 4, _LATE)
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
        attempt = (lambda: self._sent_read(call, progress)) if self._pool is not None else (lambda: self._attempt(call))
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
