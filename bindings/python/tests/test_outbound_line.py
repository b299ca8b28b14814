"""A learning adapter takes no slot further than the core's line horizon
(1 s) ahead (issue 39): a fleet in a long line keeps the pace of the rate
in force when each slot was taken, so a rise of the learned rate would
reach the partner a queue's length late. The adapter asks its limiter for
the tokens within the horizon; the limiter refuses further ones at once
(``RateLimitExceeded``, nothing taken), and the adapter hands that to the
machine (``call.beyond``), which says hold, then ask again. Here five
calls at once through a bucket of 2/s burst 1: the fifth's slot is 2 s
away, beyond the horizon — it is refused once, held, asked again and sent:
every call is answered, none fails. With ``adaptive=False`` the adapter
asks with no limit and the line is joined as before. The rule itself
(how long the hold is, a timeout too short to hold) is the core's:
spec/outbound_calls.json's ``line-*`` vectors."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Iterator, Optional

import httpx
import pytest
import requests

import ratebound as rb
import ratebound.httpx
import ratebound.requests
from ratebound import _outbound
from partners import OkPartner
from redis_servers import HOST, Server

pytestmark = pytest.mark.filterwarnings("error")

CALLS = 5


@pytest.fixture
def partner() -> Iterator[OkPartner]:
    p = OkPartner()
    yield p
    p.close()


@pytest.fixture
def asks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Optional[float], Optional[float]]]:
    """Every ask for tokens the adapters make: (its timeout, how far the
    tokens were when the limiter refused them, or None)."""
    seen: list[tuple[Optional[float], Optional[float]]] = []
    blocking, waiting = _outbound.Bound.acquire_blocking, _outbound.Bound.acquire

    def acquire_blocking(self: Any, key: str, n: int, timeout: Optional[float]) -> None:
        try:
            blocking(self, key, n, timeout)
        except rb.RateLimitExceeded as e:
            seen.append((timeout, e.retry_after))
            raise
        seen.append((timeout, None))

    async def acquire(self: Any, key: str, n: int, timeout: Optional[float]) -> None:
        try:
            await waiting(self, key, n, timeout)
        except rb.RateLimitExceeded as e:
            seen.append((timeout, e.retry_after))
            raise
        seen.append((timeout, None))

    monkeypatch.setattr(_outbound.Bound, "acquire_blocking", acquire_blocking)
    monkeypatch.setattr(_outbound.Bound, "acquire", acquire)
    return seen


def limiter(kind: str, tmp_path: Path, server: Optional[Server], asynchronous: bool) -> Any:
    if kind == "local":
        return rb.TokenBucket(2, 1)
    if kind == "shared":
        return rb.SharedTokenBucket(tmp_path / "line.limit", 2, 1)
    assert server is not None
    cls = rb.redis.AsyncTokenBucket if asynchronous else rb.redis.TokenBucket
    return cls(f"redis://{HOST}:{server.port}/0", 2, 1, prefix=f"line-{id(tmp_path)}:", on_error="closed", timeout=1.0)


def at_once(adapter: str, bound: Any, url: str, **options: Any) -> list[int]:
    """CALLS GETs at once through `adapter`: their statuses."""
    if adapter == "httpx-async":

        async def run() -> list[int]:
            try:
                transport = rb.httpx.AsyncRateLimitTransport(bound, **options)
                async with httpx.AsyncClient(transport=transport) as client:
                    answers = await asyncio.gather(*(client.get(url) for _ in range(CALLS)))
                return [a.status_code for a in answers]
            finally:
                if isinstance(bound, rb.redis.AsyncTokenBucket):
                    await bound.aclose()

        return asyncio.run(run())
    statuses: list[int] = []
    lock = threading.Lock()
    if adapter == "httpx":
        client: Any = httpx.Client(transport=rb.httpx.RateLimitTransport(bound, **options))
        get = client.get
    else:
        client = requests.Session()
        client.mount("http://", rb.requests.RateLimitAdapter(bound, **options))

        def get(u: str) -> Any:
            return client.get(u, timeout=30)

    def one() -> None:
        status = get(url).status_code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=one) for _ in range(CALLS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    client.close()
    return statuses


@pytest.mark.parametrize("kind", ["local", "shared", "redis"])
@pytest.mark.parametrize("adapter", ["httpx", "httpx-async", "requests"])
def test_a_line_beyond_the_horizon_is_held_and_asked_again_not_failed(
    adapter: str, kind: str, partner: OkPartner, tmp_path: Path, asks: list[Any], request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("server") if kind == "redis" else None
    bound = limiter(kind, tmp_path, server, adapter == "httpx-async")
    statuses = at_once(adapter, bound, partner.url, retries=0)
    assert statuses == [200] * CALLS, statuses
    # Every ask within the horizon; at least one refused beyond it (the
    # line of five at 2/s is 2 s long), then asked again and served. (A
    # Redis bucket's deadline counts the time its round trip took: a wait
    # just under 1 s is beyond it.)
    assert all(timeout == 1.0 for timeout, _ in asks), asks
    refused = [wait for _, wait in asks if wait is not None]
    assert refused and all(wait > 0.9 for wait in refused), asks
    assert len(asks) == CALLS + len(refused), asks


def test_without_learning_the_line_is_joined_however_long(partner: OkPartner, asks: list[Any]) -> None:
    statuses = at_once("httpx", rb.TokenBucket(2, 1), partner.url, retries=0, adaptive=False)
    assert statuses == [200] * CALLS, statuses
    assert asks == [(None, None)] * CALLS, asks
