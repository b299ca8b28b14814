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

Every step and rule of a call is the core's (``spec/outbound.json``,
``spec/outbound_calls.json``); this module only waits, pauses and sends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional, Union
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from ._outbound import OutboundEvent, OutboundOptions, Options

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["OutboundEvent", "RateLimitAdapter"]


class RateLimitAdapter(HTTPAdapter):
    """A ``requests`` transport adapter (mount it with ``session.mount``)
    that sends each request only once ``limiter`` gives it a token; the
    options are :class:`ratebound.httpx.RateLimitTransport`'s (``limiter``
    a token bucket — local, shared memory or ``rb.redis.TokenBucket``;
    ``key`` a string, a function of the ``PreparedRequest``, or the host
    and port; ``timeout`` bounding each wait: beyond it
    ``rb.RateLimitExceeded`` is raised at once and nothing is sent;
    ``adaptive`` learning the partner's real limit from its refusals where
    the limiter can keep it, ``adaptive=False`` never). The
    HTTP timeouts stay ``send``'s own (``session.get(url, timeout=...)``).
    ``pool_connections``, ``pool_maxsize`` and ``pool_block`` go to
    ``HTTPAdapter``; its own ``max_retries`` stays 0 — retries are the
    limiter's. A body that can be read once (a generator, a file) is never
    sent again: the caller gets the refusal (``gave_up``)."""

    def __init__(
        self,
        limiter: Any,
        *,
        pool_connections: int = 10,
        pool_maxsize: int = 10,
        pool_block: bool = False,
        **options: Unpack[OutboundOptions],
    ) -> None:
        self._o = Options(limiter, asynchronous=False, **options)
        super().__init__(pool_connections=pool_connections, pool_maxsize=pool_maxsize, pool_block=pool_block)

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Union[None, float, tuple[float, float], tuple[float, None]] = None,
        verify: Union[bool, str] = True,
        cert: Union[None, bytes, str, tuple[Union[bytes, str], Union[bytes, str]]] = None,
        proxies: Optional[Mapping[str, str]] = None,
    ) -> requests.Response:
        url = urlsplit(request.url or "")
        method = request.method or "GET"
        call = self._o.call(None, request, method, (url.scheme, url.hostname or "", url.port), _replayable(request.body))
        return self._o.send_blocking(
            call,
            lambda: super(RateLimitAdapter, self).send(
                request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
            ),
            _answer,
            _discard,
        )


def _replayable(body: Any) -> bool:
    """Whether a prepared body can be sent again: bytes or text, or none
    (a generator or a file is read once)."""
    return body is None or isinstance(body, (bytes, bytearray, str))


def _answer(response: requests.Response) -> tuple[int, list[tuple[str, str]]]:
    return response.status_code, list(response.headers.items())


def _discard(response: requests.Response) -> None:
    response.close()
