"""Every wait's one protocol and its drivers.

A wait, a local limiter's (``Waiter.step``) or a Redis limiter's
(``_RedisEngine.acquire_step``), answers each step with ``("sleep",
seconds)``, ``("call", call)`` (Redis: run the call and hand its outcome
back) or ``("done", what)``; the deadline, what to reserve and what to give
back are the core's. :func:`steps` walks one; :func:`drive` (asyncio) and
:func:`drive_blocking` (threads) run them. (A local limiter's blocking wait
runs in the extension, the GIL released: ``acquire_blocking``.)
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Iterator


def steps(step: Callable[[], tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """The steps ``step()`` gives until it says ``"done"``."""
    while True:
        kind, what = step()
        if kind == "done":
            return
        yield kind, what


async def drive(
    walk: Iterator[tuple[str, Any]],
    run: Callable[[Any], Awaitable[None]],
    abandon: Callable[[], Awaitable[None]],
) -> None:
    """Sleeps and runs what the steps say, without blocking the event loop;
    a cancelled task (or any error) awaits ``abandon()``, which gives back
    what the wait holds."""
    try:
        for kind, what in walk:
            if kind == "sleep":
                await asyncio.sleep(what)
            else:
                await run(what)
    except BaseException:
        await abandon()
        raise


def drive_blocking(
    walk: Iterator[tuple[str, Any]],
    run: Callable[[Any], None],
    abandon: Callable[[], None],
    sleep: Callable[[float], None],
) -> None:
    """:func:`drive` for a thread: ``sleep`` blocks."""
    try:
        for kind, what in walk:
            if kind == "sleep":
                sleep(what)
            else:
                run(what)
    except BaseException:
        abandon()
        raise
