"""What the per-route limits (``ratebound.fastapi``, ``ratebound.flask``,
``ratebound.django.limit``) share: the gate they build from their arguments.
Every rule and default is the core's ``Gate``, as for the middleware."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Union

from ._http import OnDecision, PolicySpec, build_gate
from ._ratebound import Gate, ManualClock

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
    on_decision: Optional[OnDecision] = None,
    label: Optional[str] = None,
) -> Gate:
    """The gate of one limit.

    ``key``: ``"ip"`` (the client address, by the proxy rules), a header name
    (``"x-api-key"``), or a function of the framework's request. Options are
    checked now — a bad rate or an unknown option fails where the route is
    declared, not at its first request."""
    unknown = sorted(set(options) - set(ROUTE_OPTIONS))
    if unknown:
        raise TypeError(f"unknown option {unknown[0]!r}; a route limit takes {', '.join(ROUTE_OPTIONS)}")
    gate, remote = build_gate(
        {"rate": rate, "burst": burst, **options}, policies,
        key=key, on_decision=on_decision, label=label, clock=clock,
    )
    if remote:
        raise TypeError("a route limit takes in-process policies; give Redis and shared limiters to the middleware")
    return gate


class RouteLimit:
    """What ``fastapi.limit`` and ``flask.limit`` share: the gate built from
    their arguments (checked at once), which calls the key function and
    tells ``on_decision`` — labelled by ``label``, else by the route."""

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
        self.gate = route_gate(rate, burst, key, policies, clock, options, on_decision, label)
        # Whether each request's route is the event's label.
        self._route_label = on_decision is not None and label is None
