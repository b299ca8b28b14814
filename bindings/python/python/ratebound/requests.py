"""Calling a partner with requests: a transport adapter that waits for the
limiter's token before each request, pauses the limiter when the partner
answers 429 or 503 with ``Retry-After`` (or ``RateLimit`` fields) — for
every instance sharing it, through a Redis limiter — and sends retries
through the limiter again.

    import requests, redis, ratebound as rb

    limit = rb.redis.TokenBucket(redis.Redis(), rate=9, burst=15)   # the fleet's
    session = requests.Session()
    session.mount("https://partner.example/", rb.requests.RateLimitAdapter(limit, key="partner"))
    session.get("https://partner.example/v1/items")

The decision (how long to pause, whether to retry) is the core's
(``spec/outbound.json``); this module only waits, pauses and sends."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional, Union
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from ._outbound import Number, OnOutbound, OutboundEvent, Options

__all__ = ["OutboundEvent", "RateLimitAdapter"]


def _host(request: requests.PreparedRequest) -> str:
    netloc = urlsplit(request.url or "").netloc
    return netloc.rpartition("@")[2]


class RateLimitAdapter(HTTPAdapter):
    """A ``requests`` transport adapter (mount it with ``session.mount``)
    that sends each request only once ``limiter`` gives it a token; the
    options are :class:`ratebound.httpx.RateLimitTransport`'s (``limiter``
    a token bucket — local, shared memory or ``rb.redis.TokenBucket``;
    ``key`` a string, a function of the ``PreparedRequest``, or the host
    and port; ``timeout`` bounding each wait: beyond it
    ``rb.RateLimitExceeded`` is raised at once and nothing is sent). The
    HTTP timeouts stay ``send``'s own (``session.get(url, timeout=...)``).
    Other keyword arguments go to ``HTTPAdapter`` (``pool_connections``,
    ...); its own ``max_retries`` stays 0 — retries are the limiter's."""

    def __init__(
        self,
        limiter: Any,
        *,
        key: Union[None, str, Callable[[requests.PreparedRequest], str]] = None,
        timeout: Optional[Number] = None,
        retries: int = 2,
        max_pause: Number = 300.0,
        statuses: Optional[list[int]] = None,
        any_method: bool = False,
        n: int = 1,
        on_decision: Optional[OnOutbound] = None,
        **kwargs: Any,
    ) -> None:
        self._o = Options(
            limiter,
            asynchronous=False,
            key=key,
            timeout=timeout,
            retries=retries,
            max_pause=max_pause,
            statuses=statuses,
            any_method=any_method,
            n=n,
            on_decision=on_decision,
        )
        super().__init__(**kwargs)

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Union[None, float, tuple[float, float], tuple[float, None]] = None,
        verify: Union[bool, str] = True,
        cert: Union[None, bytes, str, tuple[Union[bytes, str], Union[bytes, str]]] = None,
        proxies: Optional[Mapping[str, str]] = None,
    ) -> requests.Response:
        o = self._o
        key, n, wait_timeout = o.per_request(None, request, _host(request))
        attempt = 0
        while True:
            start = time.monotonic()
            o.bound.acquire_blocking(key, n, wait_timeout)
            waited = time.monotonic() - start
            if waited >= 0.001:
                o.tell("waited", key, waited, None, attempt)
            response = super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies)
            pause, capped, retry, gave_up = o.advise(
                request.method or "GET", response.status_code, list(response.headers.items()), attempt
            )
            if pause is not None:
                o.bound.pause_blocking(key, pause)
                o.tell("paused", key, pause, response.status_code, attempt, capped)
            if not retry:
                if gave_up:
                    o.tell("gave_up", key, None, response.status_code, attempt)
                return response
            response.close()
            o.tell("retried", key, None, response.status_code, attempt)
            attempt += 1
