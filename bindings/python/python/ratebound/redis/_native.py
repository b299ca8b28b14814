"""The runners of a limiter given a URL in place of a redis-py client: its
calls run on ratebound's native connection (``_NativeRedis``: the Rust
``redis`` crate on the extension's own runtime), the GIL released while
Redis answers, asyncio futures completed from the runtime."""

from __future__ import annotations

import os
from typing import Any, Optional

from .._ratebound import _NativeRedis, _RedisCall, _redis_forked

# A forked child makes its own runtime and connections at its next call (the
# parent's are left alone: their threads did not survive the fork).
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_redis_forked)


class _NativeRunner:
    """The sync runner: ``run`` and ``publish`` wait on the calling thread,
    the GIL released."""

    __slots__ = ("native", "run", "publish")

    def __init__(self, native: _NativeRedis) -> None:
        self.native = native
        self.run = native.run
        self.publish = native.publish

    def subscriber(self) -> None:
        return None  # the native connection listens itself (_NativeRedis.listen)

    def close(self) -> None:
        self.native.close()


class _AsyncNativeRunner:
    """The asyncio runner: ``run`` and ``publish`` give futures of the
    running loop, completed from the runtime (no thread per call)."""

    __slots__ = ("native",)

    def __init__(self, native: _NativeRedis) -> None:
        self.native = native

    def run(self, call: _RedisCall) -> "Any":
        return self.native.arun(call)

    def publish(self, channel: str, message: bytes) -> "Any":
        return self.native.apublish(channel, message)

    def subscriber(self) -> Optional[Any]:
        return None

    async def prepare(self) -> None:
        """Nothing to get ready: the connection is made in the background
        from the limiter's construction on."""

    async def aclose(self) -> None:
        self.native.close()
