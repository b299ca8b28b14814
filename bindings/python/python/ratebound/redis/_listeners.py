"""The pause listeners: a thread (sync limiters) or a task (asyncio ones)
on a connection of its own that hears the prefix's pause channel and hands
every message to the engine, and the settings it connects with."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, Awaitable, Callable, Optional

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


def _subscriber(
    redis: Any,
    asyncio_: bool,
    connection_class: Any,
    kwargs: dict[str, Any],
    timeout: float,
    nodes: Optional[list[tuple[str, int]]] = None,
) -> Callable[[], tuple[Any, Any]]:
    """A listener's ``subscribe``: a pool of its own from ``kwargs`` (see
    :func:`_listener_kwargs`) and a pub/sub object on it, sync or asyncio;
    with ``nodes`` (a cluster's), on one node, the next one at each
    reconnection: a PUBLISH reaches every node of the cluster."""
    turn = [0]

    def subscribe() -> tuple[Any, Any]:
        where: dict[str, Any] = {}
        if nodes:
            where["host"], where["port"] = nodes[turn[0] % len(nodes)]
            turn[0] += 1
        settings = dict(connection_class=connection_class, **where, **_listener_kwargs(redis, kwargs, timeout))
        if asyncio_:
            sub = redis.asyncio.Redis.from_pool(redis.asyncio.ConnectionPool(**settings))
            return sub.pubsub(), sub.aclose
        pool = redis.ConnectionPool(**settings)
        return redis.Redis(connection_pool=pool).pubsub(), pool.disconnect

    return subscribe


def _news(data: Any) -> bytes:
    return data if isinstance(data, bytes) else str(data).encode("utf-8", "surrogateescape")


class _Hearing:
    """What both listeners do with what they hear."""

    def __init__(self, subscribe: Callable[[], tuple[Any, Any]], channel: str, hear: Callable[[bytes], bool]) -> None:
        self._subscribe = subscribe
        self._channel = channel
        self._hear = hear
        self._backoff = 0.1

    def _subscribed(self, ready: bool) -> None:
        raise NotImplementedError

    def _heard(self, m: Any) -> None:
        """Takes one message (``None``: none came)."""
        if m is None:
            return
        if m["type"] == "subscribe":
            self._subscribed(True)
            self._backoff = 0.1
        elif m["type"] == "message":
            self._hear(_news(m["data"]))

    def _lost(self, pubsub: Any, method: str, close: Optional[Callable[[], Any]]) -> list[Callable[[], Any]]:
        """The connection is over: no longer subscribed. What closes the
        pub/sub object (its ``method``) and its connection."""
        self._subscribed(False)
        return [done for done in (getattr(pubsub, method, None), close) if done is not None]

    def _retry_in(self) -> float:
        """How long to wait before the next attempt to subscribe: 0.1 s at
        first and after a subscription, twice as long after each failed
        attempt, up to 2 s."""
        backoff = self._backoff
        self._backoff = min(backoff * 2, 2.0)
        return backoff


class _Listener(_Hearing):
    """A thread that listens on the prefix's pause channel and hands every
    message to the engine; it reconnects (0.1 s to 2 s apart) whenever its
    connection is lost. ``first`` is set once its first attempt is over
    (subscribed or failed); ``ready`` while it is subscribed."""

    def __init__(self, subscribe: _Subscribe, channel: str, hear: Callable[[bytes], bool]) -> None:
        super().__init__(subscribe, channel, hear)
        self._stop = threading.Event()
        self.first = threading.Event()
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ratebound-pause-news", daemon=True)
        self._thread.start()

    def _subscribed(self, ready: bool) -> None:
        if ready:
            self.ready.set()
        else:
            self.ready.clear()
        self.first.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            pubsub: Any = None
            close: Optional[Callable[[], None]] = None
            try:
                pubsub, close = self._subscribe()
                pubsub.subscribe(self._channel)
                while not self._stop.is_set():
                    self._heard(pubsub.get_message(timeout=0.2))
            except Exception:  # a lost connection, an unreachable server: try again
                pass
            finally:
                for done in self._lost(pubsub, "close", close):
                    with contextlib.suppress(Exception):
                        done()
            self._stop.wait(self._retry_in())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class _AsyncListener(_Hearing):
    """:class:`_Listener` as a task of the event loop."""

    def __init__(self, subscribe: _AsyncSubscribe, channel: str, hear: Callable[[bytes], bool]) -> None:
        super().__init__(subscribe, channel, hear)
        self.first = asyncio.Event()
        self.ready = False
        self._task = asyncio.ensure_future(self._run())

    def _subscribed(self, ready: bool) -> None:
        self.ready = ready
        self.first.set()

    async def _run(self) -> None:
        while True:
            pubsub: Any = None
            close: Optional[Callable[[], Awaitable[None]]] = None
            try:
                pubsub, close = self._subscribe()
                await pubsub.subscribe(self._channel)
                while True:
                    self._heard(await pubsub.get_message(timeout=1.0))
            except Exception:  # a lost connection, an unreachable server: try again
                pass
            finally:
                for done in self._lost(pubsub, "aclose", close):
                    with contextlib.suppress(Exception):
                        await done()
            await asyncio.sleep(self._retry_in())

    async def aclose(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
