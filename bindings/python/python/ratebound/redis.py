"""Global rate limits in Redis, shared by every instance of a service.

Fifty pods with a local ``TokenBucket(10, 20)`` each send up to fifty times
the limit; a limit they all share has to live in one place: Redis (or Redis
Cluster). Each check is one ``EVALSHA`` of a Lua script that reads Redis'
own clock; ``NOSCRIPT`` (a restart, a failover, ``SCRIPT FLUSH``, another
cluster node) loads it with ``EVAL`` within the same call. The Rust engine
(``ratebound_redis``, the one the Rust and Node drivers use) builds every
call and makes every decision; this module only runs the calls with
redis-py (``pip install redis``), which it imports when a limiter is made.

>>> import redis
>>> import ratebound as rb
>>> client = redis.Redis(host="127.0.0.1", port=1)    # nothing listens there
>>> limiter = rb.redis.TokenBucket(client, rate=10, burst=20)
>>> d = limiter.check("partner-api")
>>> d.allowed, d.source                              # the fail policy answered
(True, 'fail_open')
>>> limiter.close()
0

Sync limiters (:class:`TokenBucket`, :class:`FixedWindow`,
:class:`SlidingWindow`) take a ``redis.Redis`` or a
``redis.cluster.RedisCluster``; the asyncio ones (:class:`AsyncTokenBucket`,
:class:`AsyncFixedWindow`, :class:`AsyncSlidingWindow`) a
``redis.asyncio.Redis`` or a ``redis.asyncio.cluster.RedisCluster``.

**Deadlines.** Every call has one deadline, ``timeout`` (default 0.05 s),
for ``EVALSHA`` and a possible ``EVAL`` together. A redis-py client built
with the defaults retries with backoff and waits up to 5 s per socket
operation, so the limiter does not send its calls through your client: it
builds its own connections from your client's settings (host, port, db,
credentials, TLS, ``decode_responses`` ...: ``connection_pool.connection_kwargs``,
or a cluster client's node settings and startup nodes) with
``socket_connect_timeout`` and ``socket_timeout`` set to the deadline, no
retries (``Retry(NoBackoff(), 0)``) and a pool that never blocks (a full
pool is an error, not a queue). Your client is never used or closed; call
:meth:`TokenBucket.close` (``aclose`` for asyncio) to close the limiter's
connections.

- asyncio: the whole call runs under ``asyncio.wait_for(..., timeout)``.
- sync, ``redis.Redis``: each reply is read with the time left until the
  deadline; a new connection's connect and handshake are each bounded by
  ``timeout`` (so a call that has to connect to a host that accepts but
  does not answer can take up to twice the deadline).
- sync, ``redis.cluster.RedisCluster``: each socket operation is bounded by
  ``timeout``; after a connection error redis-py refreshes the cluster's
  topology within the failing call, each node it asks bounded the same way.
  The limiter's cluster client is made with the limiter (redis-py reads the
  cluster's topology then, each node bounded by ``timeout``), or, if the
  cluster cannot be reached then, by the first call that reaches it.
- any other client (e.g. one over a Sentinel pool) is used as given through
  ``client.evalsha``: asyncio still bounds it with ``wait_for``; a sync call
  is then bounded only by that client's own timeouts.

**A call that timed out may still have run in Redis**: its tokens may be
spent although the fail policy answered.

**Fail policy** (``on_error``): no exception from redis-py reaches the
caller — a connection error, a timeout, an error reply, a full pool are
outcomes, and the policy answers: ``"open"`` admits (``source="fail_open"``),
``"closed"`` refuses with ``retry_after`` = the breaker's cool-down
(``"fail_closed"``), ``"local"`` asks a local token bucket per key at
``local_rate`` per second (``"local"``; a share of the global rate, e.g.
rate / instances). After ``breaker_threshold`` (3) failures in a row the
circuit breaker opens: for ``breaker_cooldown`` (1 s) the policy answers at
once without calling Redis, then one call probes it, and a success closes it
— recovery needs no new client.

**Leasing** (``lease=k``): one round trip takes up to ``k`` tokens and this
instance spends the rest locally for up to ``lease_ttl`` (1 s) seconds
(``source="lease"``). Leased tokens are counted in Redis, so the global
bound holds; the cost is that up to ``k - 1`` tokens per instance can sit
unused while another instance is refused, and that tokens taken together
can be spent in a burst. ``close()`` gives unspent leased tokens back.

**Pauses reach the waiters of every instance.** ``pause`` moves every
reservation in Redis past the pause and, when it moved anything, publishes
the news on the prefix's channel (``rb:pause``; a second command within the
deadline). A token bucket limiter listens on that channel from its first
wait on (a thread for sync limiters, a task for asyncio ones, on a
connection of its own made from the same settings; in a cluster, to one
node: a ``PUBLISH`` reaches every node); the first wait waits (at most the
deadline) for the subscription before it reserves. A waiter asleep on a
reservation that a pause moved wakes at its old time and sleeps on until
its new one: no call is added to any acquisition. A waiter whose limiter
did not hear the news (the subscription was down, or the client cannot
subscribe: one used as given without ``pubsub()``) wakes at its old time
and goes ahead inside the pause; its next call finds the pause in Redis.
``close()`` / ``aclose()`` stops listening.

Keys are ``str`` (its UTF-8 bytes), ``bytes`` or ``int`` (its decimal
digits): ``1``, ``"1"`` and ``b"1"`` are the same Redis key. In Redis a key
is ``prefix`` (default ``"rb:"``), the algorithm's tag (``tb``, ``fw``,
``sw``), ``:`` and the key — ``rb:tb:alice`` — so a token bucket and a
window never read each other's state, while a limiter whose numbers change
(a redeploy) keeps its keys. A middleware checks each Redis policy in its own
scope, ``rb:tb@<policy name>:<identity>``: two policies never share a key.

**What a key holds.** A state beyond the limit (the burst or limit was
lowered) is refused with the exact wait, never a failure. A value no script
wrote (another type, text that is not the state) is rebuilt as spent and
refused with ``source="damaged"``, healing within one burst period or
window; neither reaches the fail policy or the circuit breaker. Errors the core raises for a request that
can never work: ``n`` above the burst or limit
(:class:`~ratebound.InsufficientCapacity`). ``n = 0`` is a query, as for every
local limiter: admitted, nothing taken, the key's state reported.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Optional, TypedDict, TypeVar, Union

from ._ratebound import Decision, RedisCall_, RedisEngine_

if TYPE_CHECKING:
    from typing_extensions import Unpack


class SlidingOptions(TypedDict, total=False):
    """The keyword options every limiter takes (defaults are the core's):
    ``prefix`` ("rb:"), ``on_error`` ("open", "closed" or "local" with
    ``local_rate`` tokens per second), ``timeout`` (every call's deadline,
    0.05 s), ``breaker_threshold`` (3 failures in a row open the circuit
    breaker) and ``breaker_cooldown`` (for 1 s)."""

    prefix: str
    on_error: str
    local_rate: Optional[Union[int, float]]
    timeout: Union[int, float]
    breaker_threshold: int
    breaker_cooldown: Union[int, float]


class Options(SlidingOptions, total=False):
    """:class:`SlidingOptions` and leasing: ``lease`` tokens taken per round
    trip (0: none), spent locally for up to ``lease_ttl`` seconds (1 s)."""

    lease: int
    lease_ttl: Union[int, float]

__all__ = [
    "RedisReservation",
    "AsyncFixedWindow",
    "AsyncSlidingWindow",
    "AsyncTokenBucket",
    "FixedWindow",
    "SlidingWindow",
    "TokenBucket",
]

Key = Union[str, bytes, int]
Number = Union[int, float]
Rate = Union[int, float, str]
# What became of a call: (reply, timed_out, error).
_Outcome = tuple[Optional[Any], bool, Optional[str]]
_L = TypeVar("_L", bound="_Limiter")
_A = TypeVar("_A", bound="_AsyncLimiter")

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


def _failed(e: BaseException, timeout_error: type) -> _Outcome:
    if isinstance(e, (timeout_error, TimeoutError)):
        return None, True, None
    return None, False, f"{type(e).__name__}: {e}"


def _nodes(client: Any) -> list[tuple[str, int]]:
    """The startup nodes of a cluster client (sync: a dict; asyncio: a list)."""
    nodes = getattr(client.nodes_manager, "startup_nodes", None) or getattr(client, "startup_nodes", None)
    if isinstance(nodes, dict):
        nodes = list(nodes.values())
    if not nodes:
        nodes = client.get_nodes()
    return [(n.host, n.port) for n in nodes]


# A new pub/sub object for the pause channel and what closes its connection.
_Subscribe = Callable[[], "tuple[Any, Callable[[], None]]"]
_AsyncSubscribe = Callable[[], "tuple[Any, Optional[Callable[[], Awaitable[None]]]]"]


def _listener_kwargs(redis: Any, kwargs: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The limiter's connection settings for its pause listener: raw bytes
    (a key need not be UTF-8), no retries, timeouts of at least 1 s (nobody
    waits on it but the first wait, which gives up after the deadline)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    out = dict(kwargs)
    out.update(
        decode_responses=False,
        socket_timeout=max(timeout, 1.0),
        socket_connect_timeout=max(timeout, 1.0),
        retry=Retry(NoBackoff(), 0),
    )
    return out


def _news(data: Any) -> bytes:
    return data if isinstance(data, bytes) else str(data).encode("utf-8", "surrogateescape")


class _Listener:
    """A thread that listens on the prefix's pause channel and hands every
    message to the engine; it reconnects (0.1 s to 2 s apart) whenever its
    connection is lost. ``first`` is set once its first attempt is over
    (subscribed or failed); ``ready`` while it is subscribed."""

    def __init__(self, subscribe: _Subscribe, channel: str, hear: Callable[[bytes], bool]) -> None:
        self._subscribe = subscribe
        self._channel = channel
        self._hear = hear
        self._stop = threading.Event()
        self.first = threading.Event()
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ratebound-pause-news", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            pubsub: Any = None
            close: Optional[Callable[[], None]] = None
            try:
                pubsub, close = self._subscribe()
                pubsub.subscribe(self._channel)
                while not self._stop.is_set():
                    m = pubsub.get_message(timeout=0.2)
                    if m is None:
                        continue
                    if m["type"] == "subscribe":
                        self.ready.set()
                        self.first.set()
                        backoff = 0.1
                    elif m["type"] == "message":
                        self._hear(_news(m["data"]))
            except Exception:  # a lost connection, an unreachable server: try again
                pass
            finally:
                self.ready.clear()
                self.first.set()
                for done in (getattr(pubsub, "close", None), close):
                    try:
                        if done is not None:
                            done()
                    except Exception:
                        pass
            self._stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# ------------------------------------------------------------------ sync


class _Standalone:
    """Calls on one server through the limiter's own pool, each reply read
    with the time left until the deadline."""

    def __init__(self, redis: Any, client: Any, timeout: float) -> None:
        user = client.connection_pool
        kwargs = {k: v for k, v in user.connection_kwargs.items() if k not in _POOL_OWN}
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._pool = redis.ConnectionPool(
            connection_class=user.connection_class,
            max_connections=user.max_connections,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            **kwargs,
        )
        self._timeout = timeout
        self._errors = (redis.exceptions.RedisError, OSError)
        self._timeout_error = redis.exceptions.TimeoutError
        self._noscript = redis.exceptions.NoScriptError

        def subscribe() -> tuple[Any, Callable[[], None]]:
            pool = redis.ConnectionPool(connection_class=user.connection_class, **_listener_kwargs(redis, kwargs, timeout))
            return redis.Redis(connection_pool=pool).pubsub(), pool.disconnect

        self._subscribe: _Subscribe = subscribe

    def _command(self, conn: Any, name: str, script: str, call: RedisCall_, deadline: float) -> Any:
        left = deadline - time.monotonic()
        if left <= 0:
            raise self._timeout_error("deadline passed")
        conn.send_command(name, script, 1, call.key, *call.args)
        return conn.read_response(timeout=left)

    def run(self, call: RedisCall_) -> _Outcome:
        deadline = time.monotonic() + self._timeout
        try:
            conn = self._pool.get_connection()
        except self._errors as e:
            return _failed(e, self._timeout_error)
        try:
            try:
                reply = self._command(conn, "EVALSHA", call.sha, call, deadline)
            except self._noscript:
                # Not loaded on this server (a restart, a failover, SCRIPT
                # FLUSH): EVAL loads it, within the same deadline.
                reply = self._command(conn, "EVAL", call.text, call, deadline)
            return reply, False, None
        except self._errors as e:
            # A reply that timed out is still on its way: redis-py has
            # already disconnected, so nobody reads it as theirs.
            return _failed(e, self._timeout_error)
        finally:
            self._pool.release(conn)

    def publish(self, channel: str, message: bytes) -> bool:
        """PUBLISH within the deadline; whether Redis took it."""
        deadline = time.monotonic() + self._timeout
        try:
            conn = self._pool.get_connection()
        except self._errors:
            return False
        try:
            conn.send_command("PUBLISH", channel, message)
            conn.read_response(timeout=max(deadline - time.monotonic(), 0.001))
            return True
        except self._errors:
            return False
        finally:
            self._pool.release(conn)

    def subscriber(self) -> Optional[_Subscribe]:
        return self._subscribe

    def close(self) -> None:
        self._pool.disconnect()


class _Cluster:
    """Calls through the limiter's own ``RedisCluster``, every socket
    operation bounded by the deadline, no retries."""

    def __init__(self, redis: Any, client: Any, timeout: float) -> None:
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        node: Any = redis.cluster.ClusterNode

        manager = client.nodes_manager
        kwargs = {k: v for k, v in manager.connection_kwargs.items() if k not in _CLUSTER_OWN}
        nodes = _nodes(client)

        def make() -> Any:
            return redis.cluster.RedisCluster(
                startup_nodes=[node(h, p) for h, p in nodes],
                retry=Retry(NoBackoff(), 0),
                require_full_coverage=getattr(manager, "_require_full_coverage", True),
                dynamic_startup_nodes=getattr(manager, "_dynamic_startup_nodes", True),
                address_remap=getattr(manager, "address_remap", None),
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                **kwargs,
            )

        self._make = make
        self._client: Any = None
        self._lock = threading.Lock()
        turn = [0]

        def subscribe() -> tuple[Any, Callable[[], None]]:
            # One node, the next one at each reconnection: a PUBLISH reaches
            # every node of the cluster.
            host, port = nodes[turn[0] % len(nodes)]
            turn[0] += 1
            node_kwargs = {k: v for k, v in kwargs.items() if k != "connection_class"}
            pool = redis.ConnectionPool(
                connection_class=kwargs.get("connection_class", redis.Connection),
                host=host,
                port=port,
                **_listener_kwargs(redis, node_kwargs, timeout),
            )
            return redis.Redis(connection_pool=pool).pubsub(), pool.disconnect

        self._subscribe: _Subscribe = subscribe
        self._timeout = timeout
        self._errors = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError)
        self._timeout_error = redis.exceptions.TimeoutError
        self._noscript = redis.exceptions.NoScriptError
        # Made now if the cluster answers (redis-py asks it for its topology
        # and its command table); otherwise at the first call that reaches it.
        try:
            self._client = make()
        except self._errors:
            pass

    def _get(self, deadline: float) -> Any:
        c = self._client
        if c is not None:
            return c
        if not self._lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            raise self._timeout_error("the cluster client is being made")
        try:
            if self._client is None:
                self._client = self._make()
            return self._client
        finally:
            self._lock.release()

    def run(self, call: RedisCall_) -> _Outcome:
        deadline = time.monotonic() + self._timeout
        try:
            c = self._get(deadline)
            try:
                reply = c.evalsha(call.sha, 1, call.key, *call.args)
            except self._noscript:
                if time.monotonic() >= deadline:
                    return None, True, None
                reply = c.eval(call.text, 1, call.key, *call.args)
            return reply, False, None
        except self._errors as e:
            return _failed(e, self._timeout_error)

    def publish(self, channel: str, message: bytes) -> bool:
        try:
            self._get(time.monotonic() + self._timeout).publish(channel, message)
            return True
        except self._errors:
            return False

    def subscriber(self) -> Optional[_Subscribe]:
        return self._subscribe

    def close(self) -> None:
        with self._lock:
            c, self._client = self._client, None
        if c is not None:
            c.close()


class _AsIs:
    """Any other client, used as given (bounded only by its own timeouts)."""

    def __init__(self, redis: Any, client: Any) -> None:
        self._client = client
        self._errors = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError)
        self._timeout_error = redis.exceptions.TimeoutError
        self._noscript = redis.exceptions.NoScriptError

    def run(self, call: RedisCall_) -> _Outcome:
        try:
            try:
                reply = self._client.evalsha(call.sha, 1, call.key, *call.args)
            except self._noscript:
                reply = self._client.eval(call.text, 1, call.key, *call.args)
            return reply, False, None
        except self._errors as e:
            return _failed(e, self._timeout_error)

    def publish(self, channel: str, message: bytes) -> bool:
        try:
            self._client.publish(channel, message)
            return True
        except self._errors:
            return False

    def subscriber(self) -> Optional[_Subscribe]:
        pubsub = getattr(self._client, "pubsub", None)
        if not callable(pubsub):
            return None
        return lambda: (pubsub(), lambda: None)

    def close(self) -> None:
        pass


_Runner = Union[_Standalone, _Cluster, _AsIs]


def _sync_runner(client: Any, timeout: float) -> _Runner:
    redis = _redis()
    # An asyncio client means redis.asyncio is imported already.
    aio: Any = sys.modules.get("redis.asyncio")
    if aio is not None and isinstance(client, (aio.Redis, aio.RedisCluster)):
        raise TypeError(
            "a redis.asyncio client needs an asyncio limiter: ratebound.redis.AsyncTokenBucket, "
            "AsyncFixedWindow or AsyncSlidingWindow"
        )
    if isinstance(client, redis.cluster.RedisCluster):
        return _Cluster(redis, client, timeout)
    if isinstance(client, redis.Redis) and type(client.connection_pool) in (
        redis.ConnectionPool,
        redis.BlockingConnectionPool,
    ):
        return _Standalone(redis, client, timeout)
    if callable(getattr(client, "evalsha", None)) and callable(getattr(client, "eval", None)):
        return _AsIs(redis, client)
    raise TypeError(
        f"client must be a redis.Redis or a redis.cluster.RedisCluster, got {type(client).__name__}"
    )


class _Limiter:
    """What every sync Redis limiter does."""

    __slots__ = ("_engine", "_runner", "_listener", "_listen_lock")

    def __init__(self, client: Any, algorithm: str, **options: Any) -> None:
        self._engine = RedisEngine_(algorithm, **options)
        self._runner = _sync_runner(client, self._engine.timeout)
        self._listener: Optional[_Listener] = None
        self._listen_lock = threading.Lock()

    def _listen(self) -> None:
        # A token bucket's waits listen for other instances' pauses; the
        # first waits (at most the deadline) for the subscription's first
        # attempt, so that no reservation is made before it listens (waits
        # that start meanwhile wait with it).
        if self._engine.algorithm != "token_bucket":
            return
        lis = self._listener
        if lis is None:
            with self._listen_lock:
                lis = self._listener
                if lis is None:
                    subscribe = self._runner.subscriber()
                    if subscribe is None:
                        return
                    lis = self._listener = _Listener(subscribe, self._engine.pause_channel, self._engine.hear)
        if not lis.first.is_set() and not lis.first.wait(self._engine.timeout):
            # Over either way: later waits never wait for a subscription that
            # cannot be made now (Redis down) — it goes on trying by itself.
            lis.first.set()

    @property
    def listening(self) -> bool:
        """Whether this limiter hears other instances' pauses now (from its
        first wait on; see the module docs)."""
        lis = self._listener
        return lis is not None and lis.ready.is_set()

    def check(self, key: Key, n: int = 1) -> Decision:
        """Takes ``n`` tokens for ``key`` if the global limit allows: Redis'
        answer, a lease's, or the fail policy's (see ``Decision.source``).
        Never raises for a Redis failure; raises the core's errors for an
        ``n`` that can never pass."""
        return self._decide(self._engine.begin(key, n))

    def try_acquire(self, key: Key, n: int = 1) -> bool:
        """Like :meth:`check`, returning only whether it was allowed."""
        return self.check(key, n).allowed

    def _check_in(self, scope: str, key: Key, n: int = 1) -> Decision:
        # check() within a middleware policy's scope: that policy's own key.
        return self._decide(self._engine.begin(key, n, scope))

    def _check_at(self, key: Key, n: int, now_us: int) -> Decision:
        # Judged at now_us (µs) instead of Redis' TIME: for test vectors.
        return self._decide(self._engine.begin(key, n), now_us)

    def _decide(self, step: Any, now_us: Optional[int] = None) -> Decision:
        if isinstance(step, Decision):
            return step
        call = step if now_us is None else step.at(now_us)
        reply, timed_out, error = self._runner.run(call)
        return self._engine.finish(call, reply, timed_out, error)

    def acquire_blocking(self, key: Key, n: int = 1, timeout: Optional[Number] = None) -> None:
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
        try:
            while True:
                kind, what = self._engine.acquire_step(a)
                if kind == "done":
                    return
                if kind == "sleep":
                    time.sleep(what)
                else:
                    reply, timed_out, error = self._runner.run(what)
                    self._engine.acquire_reply(a, reply, timed_out, error)
        except BaseException:
            back = self._engine.acquire_abandon(a)
            if back is not None:
                self._runner.run(back)
            raise

    def reserve(self, key: Key, n: int = 1, max_wait: Optional[Number] = None) -> "RedisReservation":
        """Takes ``n`` tokens for ``key`` now, even if they are due only
        later (token buckets): a :class:`RedisReservation` whose ``delay``
        says when to act; ``cancel()`` gives them back. Raises
        :class:`~ratebound.RateLimitExceeded`, taking nothing, when they
        would be due only after ``max_wait`` seconds."""
        step = self._engine.begin_reserve(key, n, max_wait)
        if not isinstance(step, tuple):
            reply, timed_out, error = self._runner.run(step)
            delay, source = self._engine.finish_reserve(step, reply, timed_out, error)
            return RedisReservation(self, step if delay > 0 else None, delay, source)
        return RedisReservation(self, None, step[0], step[1])

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
        paused = self._engine.finish_pause_news(call, *self._runner.run(call))
        if paused is None:
            return None
        shift, news = paused
        if news is not None:
            self._runner.publish(self._engine.pause_channel, news)
        return shift

    @property
    def breaker_open(self) -> bool:
        """Whether the circuit breaker is open (the fail policy answers
        without calling Redis until its cool-down is over)."""
        return self._engine.breaker_open

    @property
    def limit(self) -> int:
        """The most one key can take at once (burst, or limit)."""
        return self._engine.limit

    def leased(self) -> int:
        """Leased tokens this instance holds now, over all keys."""
        return self._engine.leased()

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

    def __repr__(self) -> str:
        e = self._engine
        return f"{type(self).__name__}(algorithm={e.algorithm!r}, limit={e.limit}, prefix={e.prefix!r})"


class RedisReservation:
    """Tokens reserved in Redis by ``reserve``: act after ``delay`` seconds;
    ``cancel()`` gives them back (once; never below the present)."""

    __slots__ = ("_limiter", "_call", "delay", "source")

    def __init__(self, limiter: Any, call: Any, delay: float, source: str) -> None:
        self._limiter = limiter
        self._call = call
        self.delay = delay
        self.source = source

    def cancel(self) -> bool:
        """Gives the tokens back; whether Redis took them back (False once
        given back, or for a reservation that was due at once)."""
        if isinstance(self._limiter, _AsyncLimiter):
            raise TypeError("a reservation of an asyncio limiter is given back with await acancel()")
        call, self._call = self._call, None
        if call is None:
            return False
        return self._limiter._runner.run(self._limiter._engine.give_back(call))[0] is not None

    async def acancel(self) -> bool:
        """:meth:`cancel` for a reservation of an asyncio limiter."""
        if not isinstance(self._limiter, _AsyncLimiter):
            raise TypeError("a reservation of a sync limiter is given back with cancel()")
        call, self._call = self._call, None
        if call is None:
            return False
        return (await self._limiter._runner.run(self._limiter._engine.give_back(call)))[0] is not None

    def __repr__(self) -> str:
        return f"RedisReservation(delay={self.delay!r}, source={self.source!r})"


class TokenBucket(_Limiter):
    """A global token bucket (GCRA) in Redis: ``rate`` tokens per second (a
    number, or a string such as ``"10/s burst 20"``), bursts of ``burst``.

    ``client``: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` whose
    settings the limiter's own connections copy (see the module docs).
    ``on_error``: ``"open"``, ``"closed"`` or ``"local"`` (with
    ``local_rate``); ``timeout``: every call's deadline in seconds; ``lease``:
    tokens taken per round trip (0: none), spent locally for up to
    ``lease_ttl`` seconds; ``breaker_threshold`` failures in a row open the
    circuit breaker for ``breaker_cooldown`` seconds.
    """

    __slots__ = ()

    def __init__(
        self,
        client: Any,
        rate: Rate,
        burst: Optional[int] = None,
        **options: Unpack[Options],
    ) -> None:
        super().__init__(
            client,
            "token_bucket",
            rate=rate,
            burst=burst,
            **options,
        )


class FixedWindow(_Limiter):
    """At most ``limit`` per fixed window of ``window`` seconds, windows
    aligned to Redis' clock; the options are :class:`TokenBucket`'s."""

    __slots__ = ()

    def __init__(
        self,
        client: Any,
        limit: int,
        window: Number,
        **options: Unpack[Options],
    ) -> None:
        super().__init__(
            client,
            "fixed_window",
            limit=limit,
            window=window,
            **options,
        )


class SlidingWindow(_Limiter):
    """About ``limit`` per sliding ``window`` seconds (a weighted counter of
    two fixed windows); the options are :class:`TokenBucket`'s, without
    leasing (a sliding window cannot lease)."""

    __slots__ = ()

    def __init__(
        self,
        client: Any,
        limit: int,
        window: Number,
        **options: Unpack[SlidingOptions],
    ) -> None:
        super().__init__(
            client,
            "sliding_window",
            limit=limit,
            window=window,
            **options,
        )


# --------------------------------------------------------------- asyncio


class _AsyncRunner:
    """Calls through the limiter's own asyncio client (standalone or
    cluster), each bounded as a whole by ``asyncio.wait_for``."""

    def __init__(self, client: Any, timeout: float) -> None:
        redis = _redis()
        import redis.asyncio
        import redis.asyncio.cluster
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self._timeout = timeout
        self._errors = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError)
        self._timeout_error = redis.exceptions.TimeoutError
        self._noscript = redis.exceptions.NoScriptError
        self._owned = True
        # Only a cluster client needs getting ready (see _ready).
        self._ready_ = True
        self._init: Optional[asyncio.Future[Any]] = None
        self._subscribe: Optional[_AsyncSubscribe] = None
        retry = Retry(NoBackoff(), 0)
        if isinstance(client, redis.asyncio.cluster.RedisCluster):
            self._client: Any = self._cluster(redis, client, timeout, retry)
            self._ready_ = False
            nodes = _nodes(client)
            node_kwargs = {
                k: v
                for k, v in client.connection_kwargs.items()
                if k not in _CLUSTER_OWN and k not in ("max_connections", "connection_class")
            }
            node_class = client.connection_kwargs.get("connection_class", redis.asyncio.Connection)
            turn = [0]

            def subscribe_node() -> tuple[Any, Optional[Callable[[], Awaitable[None]]]]:
                # One node, the next one at each reconnection: a PUBLISH
                # reaches every node of the cluster.
                host, port = nodes[turn[0] % len(nodes)]
                turn[0] += 1
                pool = redis.asyncio.ConnectionPool(
                    connection_class=node_class,
                    host=host,
                    port=port,
                    **_listener_kwargs(redis, node_kwargs, timeout),
                )
                sub = redis.asyncio.Redis.from_pool(pool)
                return sub.pubsub(), sub.aclose

            self._subscribe = subscribe_node
        elif isinstance(client, redis.asyncio.Redis) and type(client.connection_pool) in (
            redis.asyncio.ConnectionPool,
            redis.asyncio.BlockingConnectionPool,
        ):
            user = client.connection_pool
            kwargs = {k: v for k, v in user.connection_kwargs.items() if k not in _POOL_OWN}
            pool = redis.asyncio.ConnectionPool(
                connection_class=user.connection_class,
                max_connections=user.max_connections,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=retry,
                **kwargs,
            )
            self._client = redis.asyncio.Redis.from_pool(pool)

            def subscribe_one() -> tuple[Any, Optional[Callable[[], Awaitable[None]]]]:
                sub_pool = redis.asyncio.ConnectionPool(
                    connection_class=user.connection_class, **_listener_kwargs(redis, kwargs, timeout)
                )
                sub = redis.asyncio.Redis.from_pool(sub_pool)
                return sub.pubsub(), sub.aclose

            self._subscribe = subscribe_one
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
                "client must be a redis.asyncio.Redis or a redis.asyncio.cluster.RedisCluster, "
                f"got {type(client).__name__}"
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
        manager = client.nodes_manager
        return RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in _nodes(client)],
            retry=retry,
            require_full_coverage=getattr(manager, "require_full_coverage", True),
            dynamic_startup_nodes=getattr(manager, "_dynamic_startup_nodes", True),
            address_remap=getattr(manager, "address_remap", None),
            max_connections=client.connection_kwargs.get("max_connections", 2**31),
            ssl=ssl,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            **kwargs,
        )

    async def _attempt(self, call: RedisCall_) -> Any:
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
        await asyncio.wait_for(asyncio.shield(init), max(deadline - time.monotonic(), 0.0))
        self._ready_ = True

    async def run(self, call: RedisCall_) -> _Outcome:
        deadline = time.monotonic() + self._timeout
        try:
            if not self._ready_:
                await self._ready(deadline)
            reply = await asyncio.wait_for(self._attempt(call), max(deadline - time.monotonic(), 0.0))
            return reply, False, None
        except asyncio.TimeoutError:
            return None, True, None
        except self._errors as e:
            return _failed(e, self._timeout_error)

    async def publish(self, channel: str, message: bytes) -> bool:
        """PUBLISH within the deadline; whether Redis took it."""
        deadline = time.monotonic() + self._timeout
        try:
            if not self._ready_:
                await self._ready(deadline)
            await asyncio.wait_for(self._client.publish(channel, message), max(deadline - time.monotonic(), 0.0))
            return True
        except (asyncio.TimeoutError, *self._errors):
            return False

    def subscriber(self) -> Optional[_AsyncSubscribe]:
        return self._subscribe

    async def prepare(self) -> None:
        """Gets a cluster client ready now, without the calls' deadline; a
        failure is left for the first call."""
        if not self._ready_:
            try:
                await self._ready(time.monotonic() + 3600.0)
            except (asyncio.TimeoutError, *self._errors):
                pass

    async def aclose(self) -> None:
        if self._init is not None and not self._init.done():
            self._init.cancel()
        if self._owned:
            await self._client.aclose()


class _AsyncListener:
    """:class:`_Listener` as a task of the event loop."""

    def __init__(self, subscribe: _AsyncSubscribe, channel: str, hear: Callable[[bytes], bool]) -> None:
        self._subscribe = subscribe
        self._channel = channel
        self._hear = hear
        self.first = asyncio.Event()
        self.ready = False
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            pubsub: Any = None
            close: Optional[Callable[[], Awaitable[None]]] = None
            try:
                pubsub, close = self._subscribe()
                await pubsub.subscribe(self._channel)
                while True:
                    m = await pubsub.get_message(timeout=1.0)
                    if m is None:
                        continue
                    if m["type"] == "subscribe":
                        self.ready = True
                        self.first.set()
                        backoff = 0.1
                    elif m["type"] == "message":
                        self._hear(_news(m["data"]))
            except Exception:  # a lost connection, an unreachable server: try again
                pass
            finally:
                self.ready = False
                self.first.set()
                for done in (getattr(pubsub, "aclose", None), close):
                    try:
                        if done is not None:
                            await done()
                    except Exception:
                        pass
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def aclose(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass


class _AsyncLimiter:
    """What every asyncio Redis limiter does."""

    __slots__ = ("_engine", "_runner", "_listener")

    def __init__(self, client: Any, algorithm: str, **options: Any) -> None:
        self._engine = RedisEngine_(algorithm, **options)
        self._runner = _AsyncRunner(client, self._engine.timeout)
        self._listener: Optional[_AsyncListener] = None

    async def _listen(self) -> None:
        # As the sync limiter's _listen, on the event loop.
        if self._engine.algorithm != "token_bucket":
            return
        lis = self._listener
        if lis is None:
            subscribe = self._runner.subscriber()
            if subscribe is None:
                return
            lis = self._listener = _AsyncListener(subscribe, self._engine.pause_channel, self._engine.hear)
        if not lis.first.is_set():
            try:
                await asyncio.wait_for(lis.first.wait(), self._engine.timeout)
            except asyncio.TimeoutError:
                lis.first.set()  # as the sync _listen

    @property
    def listening(self) -> bool:
        """Whether this limiter hears other instances' pauses now (from its
        first wait on)."""
        lis = self._listener
        return lis is not None and lis.ready

    async def check(self, key: Key, n: int = 1) -> Decision:
        """Takes ``n`` tokens for ``key`` if the global limit allows (see
        :meth:`TokenBucket.check`); the call to Redis is bounded by
        ``timeout`` as a whole."""
        return await self._decide(self._engine.begin(key, n))

    async def try_acquire(self, key: Key, n: int = 1) -> bool:
        """Like :meth:`check`, returning only whether it was allowed."""
        return (await self.check(key, n)).allowed

    async def _check_in(self, scope: str, key: Key, n: int = 1) -> Decision:
        return await self._decide(self._engine.begin(key, n, scope))

    async def _check_at(self, key: Key, n: int, now_us: int) -> Decision:
        return await self._decide(self._engine.begin(key, n), now_us)

    async def _decide(self, step: Any, now_us: Optional[int] = None) -> Decision:
        if isinstance(step, Decision):
            return step
        call = step if now_us is None else step.at(now_us)
        reply, timed_out, error = await self._runner.run(call)
        return self._engine.finish(call, reply, timed_out, error)

    async def acquire(self, key: Key, n: int = 1, timeout: Optional[Number] = None) -> None:
        """Waits until ``n`` tokens for ``key`` are taken, counted across
        every instance, without blocking the event loop (see
        :meth:`TokenBucket.acquire_blocking`). A cancelled task gives back
        the tokens it holds."""
        a = self._engine.acquire(key, n, timeout)
        await self._listen()
        try:
            while True:
                kind, what = self._engine.acquire_step(a)
                if kind == "done":
                    return
                if kind == "sleep":
                    await asyncio.sleep(what)
                else:
                    reply, timed_out, error = await self._runner.run(what)
                    self._engine.acquire_reply(a, reply, timed_out, error)
        except BaseException:
            back = self._engine.acquire_abandon(a)
            if back is not None:
                await asyncio.shield(self._runner.run(back))
            raise

    async def reserve(self, key: Key, n: int = 1, max_wait: Optional[Number] = None) -> RedisReservation:
        """:meth:`TokenBucket.reserve`; give the tokens back with
        ``await reservation.acancel()``."""
        step = self._engine.begin_reserve(key, n, max_wait)
        if not isinstance(step, tuple):
            reply, timed_out, error = await self._runner.run(step)
            delay, source = self._engine.finish_reserve(step, reply, timed_out, error)
            return RedisReservation(self, step if delay > 0 else None, delay, source)
        return RedisReservation(self, None, step[0], step[1])

    async def pause(self, key: Key, seconds: Number) -> Optional[float]:
        """:meth:`TokenBucket.pause`."""
        call = self._engine.begin_pause(key, seconds)
        paused = self._engine.finish_pause_news(call, *(await self._runner.run(call)))
        if paused is None:
            return None
        shift, news = paused
        if news is not None:
            await self._runner.publish(self._engine.pause_channel, news)
        return shift

    @property
    def breaker_open(self) -> bool:
        """Whether the circuit breaker is open."""
        return self._engine.breaker_open

    @property
    def limit(self) -> int:
        """The most one key can take at once (burst, or limit)."""
        return self._engine.limit

    def leased(self) -> int:
        """Leased tokens this instance holds now, over all keys."""
        return self._engine.leased()

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

    def __repr__(self) -> str:
        e = self._engine
        return f"{type(self).__name__}(algorithm={e.algorithm!r}, limit={e.limit}, prefix={e.prefix!r})"


class AsyncTokenBucket(_AsyncLimiter):
    """:class:`TokenBucket` for a ``redis.asyncio.Redis`` or
    ``redis.asyncio.cluster.RedisCluster`` client."""

    __slots__ = ()

    def __init__(
        self,
        client: Any,
        rate: Rate,
        burst: Optional[int] = None,
        **options: Unpack[Options],
    ) -> None:
        super().__init__(
            client,
            "token_bucket",
            rate=rate,
            burst=burst,
            **options,
        )


class AsyncFixedWindow(_AsyncLimiter):
    """:class:`FixedWindow` for a ``redis.asyncio`` client."""

    __slots__ = ()

    def __init__(
        self,
        client: Any,
        limit: int,
        window: Number,
        **options: Unpack[Options],
    ) -> None:
        super().__init__(
            client,
            "fixed_window",
            limit=limit,
            window=window,
            **options,
        )


class AsyncSlidingWindow(_AsyncLimiter):
    """:class:`SlidingWindow` for a ``redis.asyncio`` client."""

    __slots__ = ()

    def __init__(
        self,
        client: Any,
        limit: int,
        window: Number,
        **options: Unpack[SlidingOptions],
    ) -> None:
        super().__init__(
            client,
            "sliding_window",
            limit=limit,
            window=window,
            **options,
        )
