"""What the per-route limits (``ratebound.fastapi``, ``ratebound.flask``)
share: the ``key`` option and the gate they build. Every rule and default is
the core's ``Gate``, as for the middleware."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Union

from ._http import OnDecision, PolicySpec, build_gate, report
from ._ratebound import ManualClock

KeySpec = Union[str, Callable[[Any], Union[str, bytes, int, None]]]

# The middleware options a per-route limit takes (shedding is app-wide: use
# the middleware's concurrency_limit).
ROUTE_OPTIONS = (
    "trusted_proxies",
    "client_ip_header",
    "ipv6_prefix",
    "missing_key",
    "headers",
    "body",
    "max_keys",
    "overflow",
)


def route_gate(
    rate: Optional[Union[int, float, str]],
    burst: Optional[int],
    key: KeySpec,
    policies: Optional[Mapping[str, PolicySpec]],
    clock: Optional[ManualClock],
    options: Mapping[str, Any],
) -> tuple[Any, Optional[Callable[[Any], Any]]]:
    """The gate of one limit, and the key function when ``key`` is one.

    ``key``: ``"ip"`` (the client address, by the proxy rules), a header name
    (``"x-api-key"``), or a function of the framework's request. Options are
    checked now — a bad rate or an unknown option fails where the route is
    declared, not at its first request."""
    unknown = sorted(set(options) - set(ROUTE_OPTIONS))
    if unknown:
        raise TypeError(f"unknown option {unknown[0]!r}; a route limit takes {', '.join(ROUTE_OPTIONS)}")
    key_header: Optional[str] = None
    key_func: Optional[Callable[[Any], Any]] = None
    if callable(key):
        key_func = key
    elif isinstance(key, str):
        if key.lower() != "ip":
            key_header = key
    else:
        raise TypeError(f"key is 'ip', a header name or a function of the request, not {type(key).__name__}")
    gate, remote = build_gate(rate, burst, policies, {**options, "key_header": key_header}, key_func is not None, clock)
    if remote:
        raise TypeError("a route limit takes in-process policies; give Redis and shared limiters to the middleware")
    return gate, key_func


class RouteLimit:
    """What ``fastapi.limit`` and ``flask.limit`` share: the gate built from
    their arguments (checked at once), the key function and the metrics
    hook."""

    def __init__(
        self,
        rate: Optional[Union[int, float, str]] = None,
        burst: Optional[int] = None,
        *,
        key: KeySpec = "ip",
        policies: Optional[Mapping[str, PolicySpec]] = None,
        clock: Optional[ManualClock] = None,
        on_decision: Optional[OnDecision] = None,
        label: Optional[str] = None,
        **options: Any,
    ) -> None:
        self.gate, self._key = route_gate(rate, burst, key, policies, clock, options)
        self._on_decision = on_decision
        self._label = label
        self._policies: tuple[str, ...] = tuple(self.gate.policy_names)

    def _tell(self, verdict: Any, route: Optional[str]) -> None:
        """Tells ``on_decision`` (set) what ``verdict`` did on ``route``."""
        if self._on_decision is not None:
            report(self._on_decision, self._policies, verdict, self._label or route)
