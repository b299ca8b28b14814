"""What the runners of ``_runners_sync`` and ``_runners_async`` share: the
outcome of a call, the connection settings the limiter owns, errors as
outcomes, the clock type and the deadlines' constants, the limiter's own
pool and cluster settings, and :class:`_Calls`."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from .._ratebound import _after_evalsha, _misconfigured

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


def _said(e: BaseException) -> str:
    """The text of an error from redis-py with the error code Redis sent
    first (redis-py strips it into ``status_code``: ``NOSCRIPT``,
    ``WRONGPASS``, ``NOPERM``, ``ERR``), as the engine reads errors."""
    text = str(e)
    code = getattr(e, "status_code", None)
    if isinstance(code, str) and code and not text.startswith(code):
        text = f"{code} {text}"
    return text


def _failed(e: BaseException, timeout_error: type) -> _Outcome:
    """What an exception from redis-py makes of a call: a timeout, a call
    that never left the client, or a failure whose text keeps the error
    code Redis sent (:func:`_said`), for the engine's reading of a
    misconfiguration."""
    if isinstance(e, (timeout_error, TimeoutError)):
        return None, True, None, False
    if _unsent(e):
        return _UNSENT
    return None, False, f"{type(e).__name__}: {_said(e)}", False


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


# How long a sync call past its deadline still looks for a reply that
# landed in time.
_LAST_LOOK = 0.0005

# How many new connections an asyncio runner makes at once.
_MAKERS = 8

# A pool this large is no bound (redis-py's asyncio cluster default, 2**31).
_UNBOUNDED = 2**30

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
    """What every runner knows: its deadline on its clock, which errors
    are outcomes, and what follows a call's failed ``EVALSHA``."""

    _timeout: float

    def __init__(self, redis: Any, cluster: bool = True, now: _Now = time.monotonic) -> None:
        self._now = now
        e = redis.exceptions
        self._errors: Any = (
            (e.RedisError, e.RedisClusterException, OSError) if cluster else (e.RedisError, OSError)
        )
        self._timeout_error = e.TimeoutError
        # An error the server replied (NOSCRIPT among them).
        self._refused = e.ResponseError

    def _deadline(self) -> float:
        return self._now() + self._timeout

    def _resend(self, e: BaseException, left: Optional[float]) -> None:
        """The ``EVALSHA`` of a call failed with the server's ``e``, ``left``
        seconds before its deadline (None: it has none): returns if the
        engine says to send the call's ``EVAL`` now, once (``NOSCRIPT``: a
        restart, a failover, ``SCRIPT FLUSH``, another cluster node);
        raises the timeout if it says the deadline passed, ``e`` itself
        for any other failure (ratebound_redis::plan::Resend)."""
        told = _after_evalsha(_said(e), left)
        if told == "timeout":
            raise self._timeout_error("deadline passed") from None
        if told != "eval":
            raise e
