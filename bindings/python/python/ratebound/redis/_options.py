"""What the Redis limiters take: their keyword options and the types of
their arguments."""

from __future__ import annotations

import os
from typing import Optional, TypedDict, Union


class SlidingOptions(TypedDict, total=False):
    """The keyword options every limiter takes (defaults are the core's):
    ``prefix`` ("rb:"), ``on_error`` ("open", "closed" or "local" with
    ``local_rate`` tokens per second), ``timeout`` (every call's deadline,
    0.05 s), ``breaker_threshold`` (3 failures in a row open the circuit
    breaker) and ``breaker_cooldown`` (for 1 s). With a URL in place of a
    client: ``batch`` (True: concurrent calls on the native connection go
    out as one batch script run; False: one run per call; the redis-py path
    always makes one per call) and ``ssl_ca_certs`` (a PEM file of the CAs
    a ``rediss://`` server's certificate must chain to; default: the
    system's roots)."""

    prefix: str
    on_error: str
    batch: bool
    ssl_ca_certs: Union[str, "os.PathLike[str]"]
    local_rate: Optional[Union[int, float]]
    timeout: Union[int, float]
    breaker_threshold: int
    breaker_cooldown: Union[int, float]


class Options(SlidingOptions, total=False):
    """:class:`SlidingOptions` and leasing: ``lease`` tokens taken per round
    trip (0: none), spent locally for up to ``lease_ttl`` seconds (1 s)."""

    lease: int
    lease_ttl: Union[int, float]


Key = Union[str, bytes, int]
Number = Union[int, float]
Rate = Union[int, float, str]
