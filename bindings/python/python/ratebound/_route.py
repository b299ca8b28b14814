"""What the per-route limits (``ratebound.fastapi``, ``ratebound.flask``,
``ratebound.django.limit``) share: the gate they build from their arguments.
Every rule and default is the core's ``Gate``, as for the middleware — and
which options a route's limit takes is the core's rule too
(``route_option``: every option of the middleware but shedding, which is
the whole application's), the same as for a Fastify route."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Union

from . import _ratebound
from ._http import OnDecision, PolicySpec, Remote, RemoteAsker, build_gate
from ._ratebound import Gate, ManualClock

KeySpec = Union[str, Callable[[Any], Union[str, bytes, int, None]]]


def route_gate(
    rate: Optional[Union[int, float, str]],
    burst: Optional[int],
    key: Optional[KeySpec],
    policies: Optional[Mapping[str, PolicySpec]],
    clock: Optional[ManualClock],
    options: Mapping[str, Any],
    on_decision: Optional[OnDecision] = None,
    label: Optional[str] = None,
    exempt: Optional[Callable[[Any], bool]] = None,
) -> tuple[Gate, list[tuple[str, Remote]]]:
    """The gate of one limit and its remote policies (Redis limiters,
    shared-memory tables, as the middleware takes them).

    ``key``: ``"ip"`` (the client address, by the proxy rules: the default,
    ``None``), a header name
    (``"x-api-key"``), or a function of the framework's request. Options are
    checked now — a bad rate, an unknown option or one of the application's
    (``concurrency_limit``, ...) fails where the route is declared, not at
    its first request."""
    for name in options:
        _ratebound._route_option(name)
    return build_gate(
        {"rate": rate, "burst": burst, **options}, policies,
        key=key, exempt=exempt, on_decision=on_decision, label=label, clock=clock,
    )


class RouteLimit(RemoteAsker):
    """What ``fastapi.limit``, ``flask.limit`` and ``django.limit`` share:
    the gate built from their arguments (checked at once), which calls the
    key function and tells ``on_decision`` — labelled by ``label``, else by
    the route — and its remote policies, asked as the middleware asks them
    (``RemoteAsker``)."""

    def __init__(
        self,
        rate: Optional[Union[int, float, str]] = None,
        burst: Optional[int] = None,
        *,
        key: Optional[KeySpec] = None,
        policies: Optional[Mapping[str, PolicySpec]] = None,
        clock: Optional[ManualClock] = None,
        on_decision: Optional[OnDecision] = None,
        label: Optional[str] = None,
        exempt: Optional[Callable[[Any], bool]] = None,
        **options: Any,
    ) -> None:
        self.gate, self._remote = route_gate(rate, burst, key, policies, clock, options, on_decision, label, exempt)
        # Whether each request's route is the event's label.
        self._route_label = on_decision is not None and label is None
