"""The asyncio limiters' own-pool path (a ``redis.asyncio.Redis`` whose
pool the limiter copies: ratebound/redis/_runners_async.py ``_AsyncRunner._sent_read``
and ``_overloaded``, ``_AsyncGate``) in virtual time: the user's pool makes
:class:`ScriptedConnection`, a redis-py asyncio ``Connection`` whose socket
is scripted, on an event loop whose clock is a ``ManualClock`` that jumps
to the next timer instead of sleeping. The limiter's engine reads the same
clock (``_clock``, tests only), so the breaker's cool-down is on it too.

What is asserted at exact virtual instants: the fail policy (not "busy")
at the deadline when Redis never answers or answers late; a connection
slow to be made is Redis' share (the fail policy), not this client's; a
call beyond ``max_connections`` waits for a place and is refused as busy
at the deadline, never sent; the breaker opens after three, answers at
once while open and probes at the cool-down's end."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional

import pytest
import redis.asyncio

import ratebound as rb
import ratebound.redis as rbr
from test_redis_sync_deadline import (
    ADMIT,
    COOLDOWN,
    DEADLINE,
    FAIL,
    START,
    assert_three_deadlines_open_the_breaker,
    fail_options,
)
from virtual_time import virtual as run_virtual

pytestmark = pytest.mark.filterwarnings("error")

# (connect delay, reply delay, reply); a reply delay of None never answers.
Answer = tuple[float, Optional[float], Any]


def virtual(main: Callable[[rb.ManualClock], Awaitable[None]]) -> None:
    run_virtual(main, START)


def at(c: rb.ManualClock) -> float:
    return round(c.now() - START, 9)


class Server:
    """The scripted answers, in order (then ``then`` forever), and when each
    command reached the server."""

    def __init__(self, clock: rb.ManualClock, answers: list[Answer], then: Answer = (0.0, 0.0, ADMIT)) -> None:
        self.clock = clock
        self.answers = list(answers)
        self.then = then
        self.sent: list[float] = []
        self.connects = 0

    def next(self) -> Answer:
        return self.answers[0] if self.answers else self.then


def pool_of(server: Server, max_connections: Optional[int] = None) -> redis.asyncio.ConnectionPool:
    """A user's pool whose connections are :class:`ScriptedConnection`: the
    limiter's own pool copies its class and settings."""

    class ScriptedConnection(redis.asyncio.Connection):
        """Connecting takes the next answer's connect delay; a command
        reaches the server at once; its reply comes after the reply delay
        (redis-py's own timeouts are not reached: the limiter bounds the
        call with ``asyncio.wait_for``)."""

        up = False
        pending: list[Answer] = []

        @property
        def is_connected(self) -> bool:
            return self.up

        async def connect(self) -> None:
            if not self.up:
                server.connects += 1
                await asyncio.sleep(server.next()[0])
                self.up, self.pending = True, []

        async def disconnect(self, *args: Any, **kwargs: Any) -> None:
            self.up, self.pending = False, []

        async def can_read(self) -> bool:
            return False

        async def can_read_destructive(self) -> bool:
            return False

        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            await self.connect()
            server.sent.append(at(server.clock))
            self.pending.append(server.answers.pop(0) if server.answers else server.then)

        async def read_response(self, *args: Any, **kwargs: Any) -> Any:
            _, delay, reply = self.pending.pop(0)
            try:
                if delay is None:
                    await asyncio.get_running_loop().create_future()
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                # As redis-py's: interrupted mid-read, the connection is dropped.
                await self.disconnect()
                raise
            return reply

    kwargs = {} if max_connections is None else {"max_connections": max_connections}
    return redis.asyncio.ConnectionPool(connection_class=ScriptedConnection, **kwargs)


def limiter(server: Server, policy: str = "closed", max_connections: Optional[int] = None) -> rbr.AsyncTokenBucket:
    client = redis.asyncio.Redis(connection_pool=pool_of(server, max_connections))
    return rbr.AsyncTokenBucket(client, **fail_options(policy, server.clock))


@pytest.mark.parametrize("policy", ["open", "closed", "local"])
def test_a_silent_redis_gets_the_fail_policy_at_the_deadline_then_the_breaker(policy: str) -> None:
    async def main(c: rb.ManualClock) -> None:
        server = Server(c, [(0.0, None, None)] * 3)
        lim = limiter(server, policy)
        runner = lim._runner._here()
        assert runner._pool is not None  # the own-pool path
        answers = [(await lim.check("k"), at(c)) for _ in range(3)]
        assert_three_deadlines_open_the_breaker(policy, answers, server.sent, lim)
        opened = at(c)
        await asyncio.sleep(COOLDOWN - 1e-6)
        assert (await lim.check("k")).source == FAIL[policy][0]
        assert at(c) == pytest.approx(opened + COOLDOWN - 1e-6, abs=1e-9)
        assert len(server.sent) == 3
        await asyncio.sleep(1e-6)
        d = await lim.check("k")
        assert (d.source, d.allowed) == ("redis", True)
        assert server.sent[3:] == pytest.approx([opened + COOLDOWN], abs=1e-9)
        assert not lim.breaker_open
        await lim.aclose()

    virtual(main)


def test_an_answer_just_before_the_deadline_is_redis_one_just_after_is_the_fail_policys() -> None:
    async def main(c: rb.ManualClock) -> None:
        server = Server(c, [(0.0, DEADLINE - 0.001, ADMIT), (0.0, DEADLINE + 0.001, ADMIT)])
        lim = limiter(server)
        d = await lim.check("k")
        assert (d.source, d.allowed) == ("redis", True)
        assert at(c) == pytest.approx(DEADLINE - 0.001, abs=1e-9)
        t0 = at(c)
        d = await lim.check("k")
        assert (d.source, d.allowed) == ("fail_closed", False)
        assert at(c) - t0 == pytest.approx(DEADLINE, abs=1e-9)
        assert lim.stats.busy == 0
        await lim.aclose()

    virtual(main)


def test_a_connection_slow_to_be_made_is_redis_share_not_this_clients() -> None:
    """Making the connection takes 40 ms of the 50 (Redis accepts slowly),
    then no answer: a timeout at exactly 50 ms, the fail policy, not busy.
    Made in 30 ms and answered 10 ms later: Redis' answer at 40 ms."""

    async def main(c: rb.ManualClock) -> None:
        server = Server(c, [(0.04, None, None)])
        lim = limiter(server)
        d = await lim.check("k")
        assert (d.source, d.allowed) == ("fail_closed", False)
        assert at(c) == pytest.approx(DEADLINE, abs=1e-9)
        assert server.sent == pytest.approx([0.04], abs=1e-9)
        assert lim.stats.busy == 0
        server.answers = [(0.03, 0.01, ADMIT)]
        t0 = at(c)
        d = await lim.check("k")
        assert (d.source, d.allowed) == ("redis", True)
        assert at(c) - t0 == pytest.approx(0.04, abs=1e-9)
        await lim.aclose()

    virtual(main)


def test_a_call_beyond_max_connections_waits_for_a_place_and_is_busy_at_the_deadline() -> None:
    """``max_connections=2``, three calls at once. Redis silent: two are
    sent and get the fail policy at exactly 50 ms; the third waits for a
    place all that time, is never sent, and is refused as busy at 50 ms
    (not at once, as a full pool would). Then Redis answers the first call
    in 10 ms: the waiting call takes its place, is sent at 10 ms and
    answered at 20 ms; the silent one times out at 50 ms while Redis
    answered others within that deadline: the client's own trouble (busy,
    the engine's rule), not the fail policy's."""

    async def main(c: rb.ManualClock) -> None:
        server = Server(c, [(0.0, None, None)] * 2)
        lim = limiter(server, "open", max_connections=2)

        async def timed() -> tuple[str, bool, float]:
            d = await lim.check("k")
            return d.source, d.allowed, at(c)

        answers = await asyncio.gather(*(timed() for _ in range(3)))
        assert sorted(answers) == [
            ("busy", False, pytest.approx(DEADLINE, abs=1e-9)),
            ("fail_open", True, pytest.approx(DEADLINE, abs=1e-9)),
            ("fail_open", True, pytest.approx(DEADLINE, abs=1e-9)),
        ], answers
        assert server.sent == [0.0, 0.0]
        assert (lim.stats.busy, lim.stats.fail_open) == (1, 2)

        t0 = at(c)
        server.answers = [(0.0, 0.01, ADMIT), (0.0, None, None), (0.0, 0.01, ADMIT)]
        answers = await asyncio.gather(*(timed() for _ in range(3)))
        assert sorted(answers) == [
            ("busy", False, pytest.approx(t0 + DEADLINE, abs=1e-9)),
            ("redis", True, pytest.approx(t0 + 0.01, abs=1e-9)),
            ("redis", True, pytest.approx(t0 + 0.02, abs=1e-9)),
        ], answers
        assert server.sent[2:] == pytest.approx([t0, t0, t0 + 0.01], abs=1e-9)
        assert (lim.stats.busy, lim.stats.fail_open, lim.stats.redis) == (2, 2, 2)
        await lim.aclose()

    virtual(main)
