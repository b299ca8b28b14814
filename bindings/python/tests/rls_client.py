"""A ``ShouldRateLimit`` client for test_serve_grpc.py over grpcio and the
published generated Envoy stubs (``xds-protos``), and the timing helper
of its real-time checks: ``one_window``."""

from __future__ import annotations

import math
import time
from typing import Callable, Optional, Sequence, TypeVar

from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.extensions.common.ratelimit.v3.ratelimit_pb2 import RateLimitDescriptor as Descriptor
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from serve_process import Serve

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
Unit = rls_pb2.RateLimitResponse.RateLimit
SECOND, MINUTE, HOUR, DAY = Unit.SECOND, Unit.MINUTE, Unit.HOUR, Unit.DAY
T = TypeVar("T")


def descriptor(pairs: Sequence[tuple[str, str]], hits: Optional[int] = None) -> Descriptor:
    """A request descriptor of ``pairs``, with its own ``hits_addend``
    when ``hits`` is given."""
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in pairs]
    )
    if hits is not None:
        d.hits_addend.value = hits
    return d


def ask(
    server: Serve,
    domain: str,
    descriptors: Sequence[Descriptor],
    hits_addend: int = 0,
) -> rls_pb2.RateLimitResponse:
    """One ``ShouldRateLimit`` call (10 s deadline)."""
    assert server.channel is not None
    stub = rls_pb2_grpc.RateLimitServiceStub(server.channel)
    request = rls_pb2.RateLimitRequest(
        domain=domain, descriptors=descriptors, hits_addend=hits_addend
    )
    answer: rls_pb2.RateLimitResponse = stub.ShouldRateLimit(request, timeout=10)
    return answer


def one(server: Serve, domain: str, pairs: Sequence[tuple[str, str]]) -> rls_pb2.RateLimitResponse:
    """A call with one descriptor of ``pairs``."""
    return ask(server, domain, [descriptor(pairs)])


def summary(s: rls_pb2.RateLimitResponse.DescriptorStatus) -> tuple[int, int, int, int, str]:
    """A status as (code, requests_per_unit, unit, limit_remaining, name)."""
    limit = s.current_limit
    return (s.code, limit.requests_per_unit, limit.unit, s.limit_remaining, limit.name)


def reset(s: rls_pb2.RateLimitResponse.DescriptorStatus) -> float:
    """``duration_until_reset`` in seconds."""
    d = s.duration_until_reset
    return d.seconds + d.nanos / 1e9


def headers(answer: rls_pb2.RateLimitResponse) -> dict[str, str]:
    """``response_headers_to_add`` as a dict (each name at most once)."""
    out: dict[str, str] = {}
    for h in answer.response_headers_to_add:
        assert h.key not in out, f"{h.key} twice: {answer}"
        out[h.key] = h.value
    return out


# Between the client's clock and the server's (the same machine's wall
# clock, the server's read through a monotonic clock since its start).
MARGIN = 0.02


def one_window(length: int, run: Callable[[int], Optional[T]], attempts: int = 5) -> T:
    """``run(attempt)`` inside one aligned window of ``length`` seconds
    (windows start at multiples of ``length`` since the Unix epoch, as a
    fixed window's do): begun at least ``MARGIN`` after a window starts,
    retried with the next attempt number (its keys fresh) when the
    client's clock saw it end in another window or when ``run`` returns
    None (it saw its own timing disturbed). Up to ``attempts`` tries."""
    for attempt in range(attempts):
        now = time.time()
        into = now % length
        # Too close to the window's end for a short run: the next one.
        if into < MARGIN or length - into < min(0.5 * length, 0.5):
            time.sleep(length - into + MARGIN)
        start = time.time()
        result = run(attempt)
        end = time.time()
        same = math.floor((start - MARGIN) / length) == math.floor((end + MARGIN) / length)
        if same and result is not None:
            return result
    raise AssertionError(f"no run of {attempts} stayed inside one {length} s window")


def seconds_left(length: int, at: float) -> int:
    """What a fixed window of ``length`` s aligned to the epoch says is
    left at ``at``, in whole seconds (the reference server's way)."""
    return length - int(at) % length



def seconds_left_between(length: int, start: float, end: float) -> range:
    """What a fixed window of ``length`` s says is left (whole seconds) at
    some instant from ``start`` to ``end``, both in one window (as
    ``one_window`` makes them): a second may tick between."""
    return range(seconds_left(length, end + MARGIN), seconds_left(length, start - MARGIN) + 1)
