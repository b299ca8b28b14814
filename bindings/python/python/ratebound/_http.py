"""Options shared by the ASGI and WSGI middleware: they build one
``_ratebound.Gate_``, which makes the whole decision in Rust."""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, TypedDict, Union

from . import _ratebound
from ._ratebound import ManualClock

PolicySpec = Union[int, float, str, Mapping[str, Any]]

_ALGORITHMS = ("token_bucket", "fixed_window", "sliding_window")


def _policy(name: str, spec: PolicySpec) -> tuple[Any, ...]:
    if isinstance(spec, Mapping):
        algorithm = spec.get("algorithm", "token_bucket")
        if algorithm not in _ALGORITHMS:
            raise ValueError(f"policy {name!r}: algorithm must be one of {_ALGORITHMS}, got {algorithm!r}")
        return (name, algorithm, spec.get("rate"), spec.get("burst"), spec.get("limit"), spec.get("window"))
    return (name, "token_bucket", spec, None, None, None)


def build_gate(
    rate: Optional[Union[int, float, str]],
    burst: Optional[int],
    policies: Optional[Mapping[str, PolicySpec]],
    trusted_proxies: Union[None, int, Iterable[str]],
    ipv6_prefix: int,
    missing_key: Union[str, int],
    headers: str,
    body: str,
    max_keys: Optional[int],
    overflow: str,
    concurrency_limit: Optional[int],
    clock: Optional[ManualClock],
) -> Any:
    if (rate is None) == (policies is None):
        raise TypeError("give either rate= (one policy) or policies= (a dict of name -> rate)")
    if policies is None:
        specs = [("default", "token_bucket", rate, burst, None, None)]
    else:
        if burst is not None:
            raise TypeError("burst= goes with rate=; give each policy its own burst")
        specs = [_policy(name, spec) for name, spec in policies.items()]
    return _ratebound.Gate_(
        specs,
        trusted_proxies=None if trusted_proxies is None else (
            trusted_proxies if isinstance(trusted_proxies, int) else list(trusted_proxies)
        ),
        ipv6_prefix=ipv6_prefix,
        missing_key=missing_key,
        headers=headers,
        body=body,
        max_keys=max_keys,
        overflow=overflow,
        concurrency_limit=concurrency_limit,
        clock=clock,
    )


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


KeyFunc = Callable[[Any], Union[str, bytes, int, None]]


class Options(TypedDict, total=False):
    """The keyword options of both middleware, for type checkers."""

    rate: Optional[Union[int, float, str]]
    burst: Optional[int]
    policies: Optional[Mapping[str, PolicySpec]]
    key_header: Optional[str]
    key: Optional[KeyFunc]
    trusted_proxies: Union[None, int, Iterable[str]]
    ipv6_prefix: int
    missing_key: Union[str, int]
    headers: str
    body: str
    exempt: Optional[Callable[[Any], bool]]
    max_keys: Optional[int]
    overflow: str
    concurrency_limit: Optional[int]
    critical: Optional[Callable[[Any], bool]]
    clock: Optional[ManualClock]


class MiddlewareBase:
    """The options both middleware take (see
    :class:`ratebound.asgi.RateLimitMiddleware`)."""

    def __init__(
        self,
        app: Any,
        *,
        rate: Optional[Union[int, float, str]] = None,
        burst: Optional[int] = None,
        policies: Optional[Mapping[str, PolicySpec]] = None,
        key_header: Optional[str] = None,
        key: Optional[KeyFunc] = None,
        trusted_proxies: Union[None, int, Iterable[str]] = None,
        ipv6_prefix: int = 64,
        missing_key: Union[str, int] = "ip",
        headers: str = "draft",
        body: str = "text",
        exempt: Optional[Callable[[Any], bool]] = None,
        max_keys: Optional[int] = 1_000_000,
        overflow: str = "evict",
        concurrency_limit: Optional[int] = None,
        critical: Optional[Callable[[Any], bool]] = None,
        clock: Optional[ManualClock] = None,
    ) -> None:
        if key_header is not None and key is not None:
            raise TypeError("give key_header= or key=, not both")
        self.app = app
        self.gate = build_gate(
            rate, burst, policies, trusted_proxies, ipv6_prefix, missing_key,
            headers, body, max_keys, overflow, concurrency_limit, clock,
        )
        self._capped = concurrency_limit is not None
        self._critical = critical
        self.key_header = key_header
        self._key = key
        self._forwarding = trusted_proxies is not None
        self._exempt = exempt
