"""An asyncio event loop on virtual time, shared by the tests that assert
instants exactly (test_redis_deadline.py, test_redis_pool_deadline.py,
test_outbound_virtual.py): its clock is a ``ManualClock`` that jumps to the
next timer instead of sleeping, so every wait takes no real time and every
instant is exact. A limiter whose engine reads the same clock (``clock=``,
``_clock=``) and the loop agree on what time it is."""

from __future__ import annotations

import asyncio
import selectors
from typing import Any, Awaitable, Callable, Optional

import ratebound as rb


class _Jump(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Never sleeps: a wait for a timer moves the clock to it."""

    def __init__(self, clock: rb.ManualClock) -> None:
        super().__init__()
        self.clock = clock

    def select(self, timeout: Optional[float] = None) -> Any:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            self.clock.advance(timeout)
        elif not ready and timeout is None:
            ready = super().select(1.0)  # nothing scheduled: only I/O (bounded)
        return ready


class ClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is ``clock``'s."""

    def __init__(self, clock: rb.ManualClock) -> None:
        self.clock = clock
        super().__init__(selector=_Jump(clock))

    def time(self) -> float:
        return self.clock.now()


def run_on(main: Callable[[ClockLoop], Awaitable[None]], start: float = 0.0) -> None:
    """Runs ``main(loop)`` to its end on a fresh :class:`ClockLoop` whose
    clock starts at ``start`` seconds."""
    clock = rb.ManualClock()
    clock.set(start)
    loop = ClockLoop(clock)
    try:
        loop.run_until_complete(main(loop))
    finally:
        loop.close()


def virtual(main: Callable[[rb.ManualClock], Awaitable[None]], start: float = 0.0) -> None:
    """Runs ``main(clock)`` on a fresh :class:`ClockLoop` (see :func:`run_on`)."""
    run_on(lambda loop: main(loop.clock), start)
