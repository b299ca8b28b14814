"""The asyncio Redis limiters' deadline and fail policy in virtual time: a
client used as given whose script calls never answer, or answer just
before or just after the 50 ms deadline, on an event loop whose clock
jumps to its next timer instead of sleeping (the runners read the time
through the running loop's clock: ratebound/redis/_runners_async.py ``_now``).
Each answer is asserted at an exact virtual instant. The real-server
versions (test_redis.py, test_redis_native.py) keep generous bounds."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional

import pytest

import ratebound.redis as rbr
from virtual_time import ClockLoop, run_on

pytestmark = pytest.mark.filterwarnings("error")

DEADLINE = 0.05


def virtual(main: Callable[[ClockLoop], Awaitable[None]]) -> None:
    run_on(main, 1000.0)


# A GCRA reply that admits: allowed, remaining, retry_after_us,
# reset_after_us, taken, damaged, now_us.
ADMIT = [1, 19, 0, 100_000, 1, 0, 1_000_000, 0, 0]


class Scripted:
    """A client used as given: every script call answers after ``delay``
    seconds of the loop's time (None: never)."""

    def __init__(self, delay: Optional[float], reply: Optional[list[int]] = None) -> None:
        self.delay = delay
        self.reply = ADMIT if reply is None else reply
        self.sent: list[float] = []
        self.args: list[tuple[Any, ...]] = []

    async def evalsha(self, *args: Any) -> Any:
        self.sent.append(asyncio.get_running_loop().time())
        self.args.append(args)
        if self.delay is None:
            await asyncio.get_running_loop().create_future()
        await asyncio.sleep(self.delay)
        return self.reply

    eval = evalsha


FAIL = {"open": ("fail_open", True), "closed": ("fail_closed", False), "local": ("local", True)}


class NoScript(Scripted):
    """A server without the script: ``evalsha`` is refused with NOSCRIPT
    (as redis-py raises it) after ``delay``; ``eval`` answers after
    ``eval_delay``."""

    def __init__(self, delay: float, eval_delay: float) -> None:
        super().__init__(delay)
        self.eval_delay = eval_delay
        self.names: list[str] = []

    async def evalsha(self, *args: Any) -> Any:
        import redis

        self.names.append("evalsha")
        await super().evalsha(*args)
        raise redis.exceptions.NoScriptError("No matching script. Please use EVAL.", status_code="NOSCRIPT")

    async def eval(self, *args: Any) -> Any:  # type: ignore[override]
        self.names.append("eval")
        self.sent.append(asyncio.get_running_loop().time())
        await asyncio.sleep(self.eval_delay)
        return ADMIT


@pytest.mark.parametrize("eval_delay, source, took", [(0.015, "redis", 0.045), (0.025, "fail_closed", DEADLINE)])
def test_noscript_then_eval_shares_the_one_deadline(eval_delay: float, source: str, took: float) -> None:
    """NOSCRIPT after 30 ms: the EVAL goes at once, with the 20 ms left;
    answering in 15 ms is Redis' answer at 45 ms, in 25 ms too late (the
    fail policy at exactly 50 ms)."""

    async def main(loop: ClockLoop) -> None:
        client = NoScript(0.03, eval_delay)
        lim = rbr.AsyncTokenBucket(client, rate=10, burst=20, on_error="closed", timeout=DEADLINE)
        t0 = loop.time()
        d = await lim.check("k")
        assert d.source == source, d
        assert loop.time() - t0 == pytest.approx(took, abs=1e-9)
        assert client.names == ["evalsha", "eval"]
        assert [t - t0 for t in client.sent] == pytest.approx([0.0, 0.03], abs=1e-9)
        await lim.aclose()

    virtual(main)


@pytest.mark.parametrize("policy", ["open", "closed", "local"])
def test_a_call_redis_never_answers_gets_the_fail_policy_exactly_at_the_deadline(policy: str) -> None:
    """The fail policy's answer (not "busy": the client was not overloaded,
    Redis was silent) at exactly the deadline; three in a row open the
    breaker, whose answers cost no time at all."""

    async def main(loop: ClockLoop) -> None:
        client = Scripted(None)
        lim = rbr.AsyncTokenBucket(
            client, rate=10, burst=20, on_error=policy, local_rate=5 if policy == "local" else None, timeout=DEADLINE
        )
        for i in range(3):
            t0 = loop.time()
            d = await lim.check("k")
            assert (d.source, d.allowed) == FAIL[policy], (i, d)
            assert loop.time() - t0 == pytest.approx(DEADLINE, abs=1e-9), (i, loop.time() - t0)
        assert lim.breaker_open
        t0 = loop.time()
        assert (await lim.check("k")).source == FAIL[policy][0]
        assert loop.time() == t0
        assert len(client.sent) == 3
        await lim.aclose()

    virtual(main)


def test_an_answer_just_before_the_deadline_is_redis_one_just_after_is_the_fail_policys() -> None:
    async def main(loop: ClockLoop) -> None:
        early = rbr.AsyncTokenBucket(Scripted(DEADLINE - 0.001), rate=10, burst=20, on_error="closed", timeout=DEADLINE)
        t0 = loop.time()
        d = await early.check("k")
        assert (d.source, d.allowed) == ("redis", True)
        assert loop.time() - t0 == pytest.approx(DEADLINE - 0.001, abs=1e-9)
        late = rbr.AsyncTokenBucket(Scripted(DEADLINE + 0.001), rate=10, burst=20, on_error="closed", timeout=DEADLINE)
        t0 = loop.time()
        d = await late.check("k")
        assert (d.source, d.allowed) == ("fail_closed", False)
        assert loop.time() - t0 == pytest.approx(DEADLINE, abs=1e-9)
        await early.aclose()
        await late.aclose()

    virtual(main)


@pytest.mark.parametrize("how", ["acquire", "reserve"])
@pytest.mark.parametrize("wait_us", [500_000, 0])
def test_a_caller_cancelled_while_its_reservation_is_in_flight_gives_it_back(how: str, wait_us: int) -> None:
    """The caller is cancelled (a 5 ms ``wait_for``) after its reservation
    reached Redis, before the reply (10 ms): the reply is still read when
    it lands, and what Redis reserved goes back — one ``return`` call at
    exactly 10 ms, up to the TAT the reservation left. (The lost slot was
    seen in a real-Redis run of the Rust driver.)"""

    async def main(loop: ClockLoop) -> None:
        reply = [1, 0, wait_us, wait_us + 100_000, 1, 0, 1_000_000, 0, 0]
        client = Scripted(0.01, reply)
        lim = rbr.AsyncTokenBucket(client, rate=10, burst=1, on_error="closed", timeout=DEADLINE)
        t0 = loop.time()
        call = lim.acquire("k") if how == "acquire" else lim.reserve("k", max_wait=1)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(call, 0.005)
        assert len(client.sent) == 1
        await asyncio.sleep(0.005)
        for _ in range(10):
            await asyncio.sleep(0)
        assert loop.time() - t0 == pytest.approx(0.01, abs=1e-9)
        assert client.sent == [t0, t0 + 0.01], client.sent
        back = [str(a.decode() if isinstance(a, bytes) else a) for a in client.args[1]]
        assert back[-2:] == ["return", str(1_100_000 + wait_us)], back
        await lim.aclose()

    virtual(main)
