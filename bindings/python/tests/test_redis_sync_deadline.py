"""The sync Redis limiters' deadline, fail policy and circuit breaker in
virtual time: the limiter is given a ``ManualClock`` (``_clock``, tests
only) that both the engine (the breaker's cool-down) and the sync runners
(their deadlines: ratebound/redis/_runners_common.py ``_Now``) read, and a server
that is scripted, not real, whose every call "takes" a scripted delay by
moving that clock:

- the limiter's own connections (``_Standalone``: a ``redis.Redis`` whose
  pool makes :class:`ScriptedConnection`, a redis-py ``Connection`` whose
  socket is scripted: a read waits at most the ``timeout`` it is given);
- a client used as given (``_AsIs``: :class:`ScriptedClient`), whose calls
  cannot be cut short.

Every answer is asserted at an exact virtual instant. The real-server
versions (test_redis.py ``test_faults_kill_pause_flush``) keep generous
bounds."""

from __future__ import annotations

from typing import Any, Optional, Union

import pytest
import redis

import ratebound as rb
import ratebound.redis as rbr

pytestmark = pytest.mark.filterwarnings("error")

DEADLINE = 0.05
COOLDOWN = 0.2
START = 1000.0
# A GCRA reply that admits: allowed, remaining, retry_after_us,
# reset_after_us, taken, damaged, now_us.
ADMIT = [1, 19, 0, 100_000, 1, 0, 1_000_000, 0, 0]
FAIL = {"open": ("fail_open", True), "closed": ("fail_closed", False), "local": ("local", True)}

# A scripted answer: (delay in seconds, reply); a delay of None never answers.
Answer = tuple[Optional[float], Any]


class Server:
    """What the scripted server answers, in order (then ``then`` forever),
    and when each command reached it (virtual time) and what it was."""

    def __init__(self, clock: rb.ManualClock, answers: list[Answer], then: Answer = (0.0, ADMIT)) -> None:
        self.clock = clock
        self.answers = list(answers)
        self.then = then
        self.sent: list[float] = []
        self.commands: list[Any] = []

    def receive(self, command: Any) -> Answer:
        self.sent.append(round(self.clock.now() - START, 9))
        self.commands.append(command)
        return self.answers.pop(0) if self.answers else self.then


def connection_class(server: Server) -> type:
    """A redis-py ``Connection`` whose socket is ``server``: connecting
    takes no time, a command reaches the server at once, and a read waits
    for the scripted answer at most the ``timeout`` given to it (then, as
    redis-py's, it disconnects and raises ``TimeoutError``)."""

    class ScriptedConnection(redis.Connection):
        pending: list[Answer]

        def connect(self) -> None:
            if self._sock is None:
                self._sock = object()  # type: ignore[assignment]
                self.pending = []

        def disconnect(self, *args: Any, **kwargs: Any) -> None:
            self._sock = None
            self.pending = []

        def can_read(self, timeout: float = 0) -> bool:
            return False

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            self.connect()
            self.pending.append(server.receive(command))

        def read_response(self, disable_decoding: bool = False, *, timeout: Any = None, **kw: Any) -> Any:
            delay, reply = self.pending.pop(0)
            wait = self.socket_timeout if timeout is None else timeout
            if delay is None or delay > wait:
                server.clock.advance(wait)
                self.disconnect()
                raise redis.TimeoutError("Timeout reading from the scripted server")
            server.clock.advance(delay)
            if isinstance(reply, redis.ResponseError):
                raise reply  # as redis-py raises an error reply
            return reply

    return ScriptedConnection


class ScriptedClient:
    """A client used as given: ``evalsha`` reaches the server and returns
    its scripted answer after the scripted delay (it cannot be cut short);
    one that never answers raises the client's own timeout after
    ``own_timeout`` seconds."""

    def __init__(self, server: Server, own_timeout: float = 1.0) -> None:
        self.server = server
        self.own_timeout = own_timeout

    def evalsha(self, *args: Any) -> Any:
        delay, reply = self.server.receive(args)
        if delay is None:
            self.server.clock.advance(self.own_timeout)
            raise redis.TimeoutError("Timeout reading from socket")
        self.server.clock.advance(delay)
        if isinstance(reply, redis.ResponseError):
            raise reply  # as redis-py raises an error reply
        return reply

    eval = evalsha


def fail_options(policy: str, clock: rb.ManualClock) -> dict[str, Any]:
    """The deadline tests' limiter options (here and in
    test_redis_pool_deadline.py): 10/s, burst 20, `policy` while Redis fails
    (a local share of 5/s for "local"), DEADLINE and COOLDOWN, on `clock`."""
    return dict(
        rate=10,
        burst=20,
        on_error=policy,
        local_rate=5 if policy == "local" else None,
        timeout=DEADLINE,
        breaker_cooldown=COOLDOWN,
        _clock=clock,
    )


def limiter(kind: str, server: Server, policy: str = "closed", **options: Any) -> rbr.TokenBucket:
    client: Union[redis.Redis, ScriptedClient]
    if kind == "own":
        client = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=connection_class(server)))
    else:
        client = ScriptedClient(server)
    lim = rbr.TokenBucket(client, **fail_options(policy, server.clock), **options)
    assert type(lim._runner).__name__ == {"own": "_Standalone", "as_given": "_AsIs"}[kind]
    return lim


def clock() -> rb.ManualClock:
    c = rb.ManualClock()
    c.set(START)
    return c


def at(c: rb.ManualClock) -> float:
    return round(c.now() - START, 9)


def assert_three_deadlines_open_the_breaker(policy: str, answers: list[tuple[Any, float]], sent: list[float], lim: Any) -> None:
    """Three calls to a silent Redis (`answers`: each one's decision and
    when it came, `sent`: when each went out, both from the start): the
    fail policy (not "busy") at exactly 50, 100, 150 ms, and the third
    opened the breaker. Here and in test_redis_pool_deadline.py."""
    for i, (d, when) in enumerate(answers):
        assert (d.source, d.allowed) == FAIL[policy], (i, d)
        assert when == pytest.approx(DEADLINE * (i + 1), abs=1e-9), (i, when)
    assert sent == pytest.approx([0.0, 0.05, 0.1], abs=1e-9)
    assert lim.breaker_open
    assert lim.stats.busy == 0


@pytest.mark.parametrize("policy", ["open", "closed", "local"])
def test_own_connections_a_silent_redis_gets_the_fail_policy_at_the_deadline_then_the_breaker(policy: str) -> None:
    """Redis never answers: each of three calls gets the fail policy (not
    "busy") at exactly 50, 100, 150 ms; the third opens the breaker, whose
    answers cost no time and send nothing until exactly 150 + 200 ms; the
    probe then goes to Redis, and its answer closes the breaker."""
    c = clock()
    server = Server(c, [(None, None)] * 3)
    lim = limiter("own", server, policy)
    assert_three_deadlines_open_the_breaker(policy, [(lim.check("k"), at(c)) for _ in range(3)], server.sent, lim)
    opened = at(c)
    c.advance(COOLDOWN - 1e-6)
    d = lim.check("k")
    assert d.source == FAIL[policy][0]
    assert at(c) == pytest.approx(opened + COOLDOWN - 1e-6, abs=1e-9)  # at once
    assert len(server.sent) == 3  # nothing sent while open
    c.advance(1e-6)
    d = lim.check("k")
    assert (d.source, d.allowed) == ("redis", True)
    assert server.sent[3:] == pytest.approx([opened + COOLDOWN], abs=1e-9)
    assert not lim.breaker_open
    lim.close()


def test_own_connections_an_answer_just_before_the_deadline_is_redis_one_just_after_is_the_fail_policys() -> None:
    c = clock()
    server = Server(c, [(DEADLINE - 0.001, ADMIT), (DEADLINE + 0.001, ADMIT)])
    lim = limiter("own", server)
    d = lim.check("k")
    assert (d.source, d.allowed) == ("redis", True)
    assert at(c) == pytest.approx(DEADLINE - 0.001, abs=1e-9)
    t0 = at(c)
    d = lim.check("k")
    assert (d.source, d.allowed) == ("fail_closed", False)
    assert at(c) - t0 == pytest.approx(DEADLINE, abs=1e-9)
    # The timed-out connection was dropped (its reply may still come): the
    # next call is answered on a new one, in time.
    d = lim.check("k")
    assert (d.source, d.allowed) == ("redis", True)
    lim.close()


# NOSCRIPT as redis-py raises it: the code in ``status_code`` (redis-py 6
# on), or dropped (before).
NOSCRIPTS = {
    "code": lambda: redis.exceptions.NoScriptError("No matching script. Please use EVAL.", status_code="NOSCRIPT"),
    "no_code": lambda: redis.exceptions.NoScriptError("No matching script"),
}


@pytest.mark.parametrize("form", sorted(NOSCRIPTS))
def test_own_connections_noscript_then_eval_shares_the_one_deadline(form: str) -> None:
    """NOSCRIPT after 30 ms: the EVAL that loads the script has only the
    20 ms left; answering in 25 ms is too late (fail policy at exactly
    50 ms); in 15 ms is Redis' answer at 45 ms."""
    noscript = NOSCRIPTS[form]()
    for eval_delay, expected, when in [(0.025, "fail_closed", DEADLINE), (0.015, "redis", 0.045)]:
        c = clock()
        server = Server(c, [(0.03, noscript), (eval_delay, ADMIT)])
        lim = limiter("own", server)
        d = lim.check("k")
        assert d.source == expected, (eval_delay, d)
        assert at(c) == pytest.approx(when, abs=1e-9), (eval_delay, at(c))
        assert [bytes(cmd[0]).split(b"\r\n")[2] for cmd in server.commands] == [b"EVALSHA", b"EVAL"]
        assert server.sent == pytest.approx([0.0, 0.03], abs=1e-9)
        lim.close()


@pytest.mark.parametrize("form", sorted(NOSCRIPTS))
def test_a_client_used_as_given_noscript_then_eval_within_the_one_deadline(form: str) -> None:
    """A client used as given: NOSCRIPT after 30 ms, the EVAL (the
    script's text) at once, its reply at 45 ms Redis' answer; a NOSCRIPT
    that comes 1 ms past the deadline sends no EVAL (the fail policy
    then); an
    EVAL refused with NOSCRIPT again is not sent a third time (the
    failure: the fail policy at once)."""
    c = clock()
    server = Server(c, [(0.03, NOSCRIPTS[form]()), (0.015, ADMIT)])
    lim = limiter("as_given", server)
    d = lim.check("k")
    assert (d.source, d.allowed) == ("redis", True), d
    assert at(c) == pytest.approx(0.045, abs=1e-9)
    sha, text = server.commands[0][0], server.commands[1][0]
    assert len(server.commands) == 2 and len(sha) == 40 and "redis.call" in text, server.commands
    assert server.sent == pytest.approx([0.0, 0.03], abs=1e-9)

    c = clock()
    server = Server(c, [(DEADLINE + 0.001, NOSCRIPTS[form]())])
    lim = limiter("as_given", server)
    d = lim.check("k")
    assert d.source == "fail_closed", d
    assert at(c) == pytest.approx(DEADLINE + 0.001, abs=1e-9)
    assert server.sent == [0.0]

    c = clock()
    server = Server(c, [(0.01, NOSCRIPTS[form]()), (0.01, NOSCRIPTS[form]())])
    lim = limiter("as_given", server)
    d = lim.check("k")
    assert d.source == "fail_closed", d
    assert at(c) == pytest.approx(0.02, abs=1e-9)
    assert server.sent == pytest.approx([0.0, 0.01], abs=1e-9)


@pytest.mark.parametrize("policy", ["open", "closed", "local"])
def test_a_client_used_as_given_a_late_reply_is_the_fail_policy_and_opens_the_breaker(policy: str) -> None:
    """A client used as given cannot be cut short: its call returns when it
    returns. A reply 1 ms past the deadline is a timeout all the same (the
    fail policy, at 51 ms: when the call came back), and so is the client's
    own timeout (1 s); three in a row open the breaker, which answers at
    once, sends nothing, and probes at exactly the cool-down's end."""
    c = clock()
    server = Server(c, [(DEADLINE + 0.001, ADMIT), (None, None), (DEADLINE + 0.001, ADMIT)])
    lim = limiter("as_given", server, policy)
    ends = []
    for i in range(3):
        d = lim.check("k")
        assert (d.source, d.allowed) == FAIL[policy], (i, d)
        ends.append(at(c))
    assert ends == pytest.approx([0.051, 1.051, 1.102], abs=1e-9)
    assert lim.breaker_open
    assert lim.stats.busy == 0
    c.advance(COOLDOWN - 1e-6)
    assert lim.check("k").source == FAIL[policy][0]
    assert len(server.sent) == 3
    c.advance(1e-6)
    d = lim.check("k")
    assert (d.source, d.allowed) == ("redis", True)
    assert server.sent[3:] == pytest.approx([1.102 + COOLDOWN], abs=1e-9)
    assert not lim.breaker_open


def test_a_client_used_as_given_a_reply_at_the_deadline_is_redis_one() -> None:
    c = clock()
    server = Server(c, [(DEADLINE, ADMIT)])
    lim = limiter("as_given", server)
    d = lim.check("k")
    assert (d.source, d.allowed) == ("redis", True)
    assert at(c) == pytest.approx(DEADLINE, abs=1e-9)


def test_a_client_used_as_given_a_late_reservation_is_given_back() -> None:
    """A reservation whose reply came 1 ms late is refused (fail policy
    "closed": ``RateLimitExceeded``), and what Redis reserved for it goes
    back at once: one ``return`` call, up to the TAT the reservation left."""
    c = clock()
    wait_us = 500_000
    reply = [1, 0, wait_us, wait_us + 100_000, 1, 0, 1_000_000, 0, 0]
    server = Server(c, [(DEADLINE + 0.001, reply)], then=(0.0, [1, 0, 0, 0, 1, 0, 1_051_000, 0, 0]))
    lim = limiter("as_given", server)
    with pytest.raises(rb.RateLimitExceeded):
        lim.reserve("k", max_wait=1)
    assert server.sent == pytest.approx([0.0, 0.051], abs=1e-9)
    back = [str(a.decode() if isinstance(a, bytes) else a) for a in server.commands[1]]
    assert back[-2:] == ["return", str(1_100_000 + wait_us)], back


def test_a_wait_sleeps_on_the_limiters_clock() -> None:
    """``acquire_blocking`` reserves once and sleeps until the tokens are
    due on the limiter's clock: 300 ms after the reply, exactly."""
    c = clock()
    reply = [1, 0, 300_000, 400_000, 1, 0, 1_000_000, 0, 0]
    server = Server(c, [(0.01, reply)])
    lim = limiter("as_given", server)
    lim.acquire_blocking("k", timeout=1)
    assert server.sent == [0.0]
    assert at(c) == pytest.approx(0.31, abs=1e-6)


@pytest.mark.parametrize("threshold", [1, 5])
def test_the_breaker_opens_after_exactly_breaker_threshold_timeouts(threshold: int) -> None:
    c = clock()
    server = Server(c, [(None, None)] * threshold)
    lim = limiter("own", server, breaker_threshold=threshold)
    for i in range(threshold):
        assert not lim.breaker_open, i
        assert lim.check("k").source == "fail_closed"
        assert at(c) == pytest.approx(DEADLINE * (i + 1), abs=1e-9)
    assert lim.breaker_open
    assert lim.check("k").source == "fail_closed"
    assert len(server.sent) == threshold
    lim.close()
