"""Replays spec/outbound_calls.json: through the core's call machine as the
adapters drive it (``_Outbound.call``, on a virtual clock: every step,
``waited`` and holds too), and through each adapter — ``rb.httpx``'s sync
and async transports over ``httpx.MockTransport``, ``rb.requests`` over
``HTTPAdapter`` answering from the vector — with the limiter's wait and
pause recorded (and answered as the vector says: shared, local, failed).
The adapters' clocks are real, so they skip ``machine_only`` vectors and
compare every step but holds and ``waited``. The learning vectors go
through the machine with the learned word each sending went under (as the
adapters read it from the limiter after the tokens came) and the limiter's
answer to each ``adapt``; a local ``rb.TokenBucket`` of the vector's quota
is the ceiling. The Rust and Node suites replay the same file."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Optional
from urllib.parse import urlsplit

import httpx
import pytest
import requests
import requests.adapters
from requests.structures import CaseInsensitiveDict

import ratebound as rb
import ratebound.httpx
import ratebound.requests
from ratebound import _outbound, _ratebound

SPEC = json.loads((Path(__file__).parents[3] / "spec" / "outbound_calls.json").read_text())
VECTORS = SPEC["vectors"]
ADAPTED = [v for v in VECTORS if not v.get("machine_only")]
REACH = {"shared": True, "local": False, "failed": None}

# The adapters' options named as the vectors name them.
OPTIONS = {"key": "key", "timeout_s": "timeout", "n": "n", "retries": "retries", "max_pause_s": "max_pause",
           "backoff_s": "backoff", "any_method": "any_method", "statuses": "statuses", "adaptive": "adaptive"}
# The ceiling a learning vector's limiter is configured with.
QUOTA = "30/s burst 30"


def options(v: dict[str, Any]) -> dict[str, Any]:
    """The adapter's options; learning is off unless the vector says so."""
    given = {OPTIONS[k]: x for k, x in v.get("config", {}).items() if k in OPTIONS}
    return {"adaptive": False, **given}


def learned(s: dict[str, Any], field: str = "learned") -> int:
    """The learned word a sending went under (fresh when not given), or
    when its first wait began (``learned_before``; absent: the same)."""
    if field not in s:
        field = "learned"
    w = s.get(field)
    if w is None:
        return 0
    return _ratebound._Outbound.learned_word(w["units"], w["at_ms"], w.get("cut", False))


def same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) < 1e-6
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


@pytest.mark.parametrize("v", VECTORS, ids=[v["id"] for v in VECTORS])
def test_machine(v: dict[str, Any]) -> None:
    """Every step, on a virtual clock, as the adapters' loops drive it."""
    ceiling = rb.TokenBucket(v.get("config", {}).get("quota", QUOTA))
    o = _ratebound._Outbound(**options(v), limiter=ceiling)
    assert o.learning == (v.get("config", {}).get("adaptive") is True)
    r = v["request"]
    u = urlsplit(r["url"])
    call = o.call(r["method"], u.scheme, u.hostname or "", u.port, r.get("key"), r.get("n"), r.get("timeout_s"),
                  "timeout_s" in r, r["body"] != "stream")
    assert call.key == v["expect"]["key"]
    now, i, steps, words, waited, refused = 1000.0, 0, [], [], None, (0, 0)
    while True:
        try:
            step = call.next(now)
        except rb.RateLimitExceeded as e:
            # The limiter's deadline error, told by the machine.
            steps.append(["exceeded", e.retry_after, e.max_wait])
            break
        steps.append(list(step))
        kind, s = step[0], v["sendings"][min(i, len(v["sendings"]) - 1)]
        if kind == "event":
            # The rates learned, told beside the spec's fields: the words'
            # shares of the ceiling's rate.
            steps[-1], rates = steps[-1][:7], step[7:]
            if step[1] == "adapted":
                assert same(list(rates), [ceiling.learned_rate() * u / 65536 for u in words.pop()]), rates
            else:
                assert rates == (None, None)
        if kind == "hold":
            now += step[1]
        elif kind == "acquire":
            refused = refused if refused[0] == i else (i, 0)
            if refused[1] < len(s.get("beyond_s", [])):
                call.beyond(s["beyond_s"][refused[1]])
                refused = (i, refused[1] + 1)
                continue
            now += s.get("acquire_s", 0)
            if o.learning:
                # The first wait of a sending begins under learned_before.
                call.reserving(learned(s, "learned" if waited == i else "learned_before"))
                waited = i
                call.saw(learned(s))
        elif kind == "send":
            call.answered(s["status"], [tuple(h) for h in s["headers"]], 1.8e9)
        elif kind == "adapt":
            steps[-1] = steps[-1][:4]  # the words themselves are the limiter's
            words.append(step[1:3])
            call.adapted(s.get("adapt", "replaced") == "replaced")
        elif kind == "pause":
            call.paused(REACH[s.get("pause", "shared")], now)
        elif kind == "retry":
            i += 1
        elif kind == "done":
            break
    assert same(steps, v["expect"]["steps"]), (steps, v["expect"]["steps"])


class Script:
    """One vector's run through an adapter: the partner's answers in turn,
    the limiter's waits and pauses recorded, the events told."""

    def __init__(self, v: dict[str, Any]) -> None:
        self.v, self.sent, self.seen = v, 0, []  # type: ignore[var-annotated]
        self.keys: set[str] = set()

    def answer(self) -> tuple[int, list[tuple[str, str]]]:
        self.seen.append(["send"])
        s = self.v["sendings"][self.sent]
        self.sent += 1
        return s["status"], [tuple(h) for h in s["headers"]]

    def acquire(self, key: str, n: int, timeout: Optional[float]) -> None:
        self.keys.add(key)
        self.seen.append(["acquire", n, timeout])

    def pause(self, key: str, seconds: float) -> Optional[bool]:
        self.seen.append(["pause", seconds])
        return REACH[self.v["sendings"][self.sent - 1].get("pause", "shared")]

    def hook(self, e: rb.httpx.OutboundEvent) -> None:
        assert e.key is not None
        self.keys.add(e.key)
        if e.outcome != "waited":
            self.seen.append(["event", e.outcome, e.seconds, e.status, e.attempt, e.capped, e.local])

    def check(self) -> None:
        want = [s for s in self.v["expect"]["steps"]
                if s[0] not in ("hold", "retry", "done") and not (s[0] == "event" and s[1] == "waited")]
        assert same(self.seen, want), (self.seen, want)
        assert self.keys == {self.v["expect"]["key"]}
        assert self.sent == len(self.v["sendings"])


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Script]]:
    """Routes the adapters' limiter calls to the current script."""
    current: list[Script] = []

    async def acquire(self: Any, key: str, n: int, timeout: Optional[float]) -> None:
        current[0].acquire(key, n, timeout)

    async def pause(self: Any, key: str, seconds: float) -> Optional[bool]:
        return current[0].pause(key, seconds)

    monkeypatch.setattr(_outbound.Bound, "acquire_blocking", lambda self, k, n, t: current[0].acquire(k, n, t))
    monkeypatch.setattr(_outbound.Bound, "acquire", acquire)
    monkeypatch.setattr(_outbound.Bound, "pause_blocking", lambda self, k, s: current[0].pause(k, s))
    monkeypatch.setattr(_outbound.Bound, "pause", pause)
    yield current


def limiter() -> rb.TokenBucket:
    return rb.TokenBucket(1000, 1000)


def overrides(v: dict[str, Any]) -> dict[str, Any]:
    r = v["request"]
    own = {"key": r.get("key"), "n": r.get("n"), "timeout": r.get("timeout_s")}
    return {"ratebound": {k: x for k, x in own.items() if x is not None}}


def gen() -> Iterator[bytes]:
    yield b"payload"


async def agen() -> AsyncIterator[bytes]:
    yield b"payload"


def httpx_answer(s: Script) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        status, headers = s.answer()
        return httpx.Response(status, headers=headers, content=b"")

    return httpx.MockTransport(handle)


@pytest.mark.parametrize("v", ADAPTED, ids=[v["id"] for v in ADAPTED])
def test_httpx_sync(v: dict[str, Any], script: list[Script]) -> None:
    s = Script(v)
    script.append(s)
    r = v["request"]
    transport = rb.httpx.RateLimitTransport(limiter(), transport=httpx_answer(s), on_decision=s.hook, **options(v))
    body: Any = {"bytes": b"payload", "stream": gen(), "none": None}[r["body"]]
    with httpx.Client(transport=transport) as client:
        client.request(r["method"], r["url"], content=body, extensions=overrides(v))
    s.check()


@pytest.mark.parametrize("v", ADAPTED, ids=[v["id"] for v in ADAPTED])
async def test_httpx_async(v: dict[str, Any], script: list[Script]) -> None:
    s = Script(v)
    script.append(s)
    r = v["request"]
    transport = rb.httpx.AsyncRateLimitTransport(limiter(), transport=httpx_answer(s), on_decision=s.hook, **options(v))
    body: Any = {"bytes": b"payload", "stream": agen(), "none": None}[r["body"]]
    async with httpx.AsyncClient(transport=transport) as client:
        await client.request(r["method"], r["url"], content=body, extensions=overrides(v))
    s.check()


# rb.requests takes no per-request options.
PLAIN = [v for v in ADAPTED if not {"key", "n", "timeout_s"} & set(v["request"])]


@pytest.mark.parametrize("v", PLAIN, ids=[v["id"] for v in PLAIN])
def test_requests(v: dict[str, Any], script: list[Script], monkeypatch: pytest.MonkeyPatch) -> None:
    s = Script(v)
    script.append(s)

    def send(self: Any, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        status, headers = s.answer()
        response = requests.Response()
        response.status_code, response.headers = status, CaseInsensitiveDict(dict(headers))
        response._content, response.url, response.request = b"", request.url or "", request
        response._content_consumed = True
        return response

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", send)
    r = v["request"]
    session = requests.Session()
    adapter = rb.requests.RateLimitAdapter(limiter(), on_decision=s.hook, **options(v))
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    body: Any = {"bytes": b"payload", "stream": gen(), "none": None}[r["body"]]
    session.request(r["method"], r["url"], data=body)
    s.check()


def test_a_raising_hook_is_logged_once_and_the_call_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def hook(e: rb.httpx.OutboundEvent) -> None:
        raise RuntimeError("a broken metrics hook")

    statuses = iter([503, 503, 200])
    mock = httpx.MockTransport(lambda request: httpx.Response(next(statuses)))
    transport = rb.httpx.RateLimitTransport(limiter(), transport=mock, backoff=0.001, on_decision=hook)
    with caplog.at_level(logging.INFO, logger="ratebound"), httpx.Client(transport=transport) as client:
        assert client.get("http://partner.example/").status_code == 200
    told = [r for r in caplog.records if r.name == "ratebound"]
    # Four events (paused, retried, twice): one warning.
    assert len(told) == 1 and told[0].levelno == logging.WARNING, [(r.levelname, r.getMessage()) for r in told]
