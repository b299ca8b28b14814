"""Replays spec/outbound.json through the binding's _Outbound (the core's
outbound decision); the Rust and Node suites replay the same file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ratebound import _ratebound

SPEC = json.loads((Path(__file__).parents[3] / "spec" / "outbound.json").read_text())


def outbound(config: dict[str, Any] | None) -> _ratebound._Outbound:
    c = config or {}
    return _ratebound._Outbound(
        retries=c.get("retries", 2),
        max_pause=c.get("max_pause_s", 300.0),
        statuses=c.get("statuses"),
        any_method=c.get("any_method", False),
    )


@pytest.mark.parametrize("v", SPEC["vectors"], ids=[v["id"] for v in SPEC["vectors"]])
def test_vector(v: dict[str, Any]) -> None:
    got = outbound(v.get("config")).advise(
        v["method"], v["status"], [tuple(h) for h in v["headers"]], v["attempt"], v["now_unix"]
    )
    e = v["expect"]
    assert got == (e["pause_s"], e["capped"], e["retry"], e["gave_up"]), v["doc"]


def test_bad_configuration_is_a_typed_error() -> None:
    import ratebound as rb

    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(rb.QuotaError, match="max_pause"):
            _ratebound._Outbound(max_pause=bad)
    with pytest.raises(rb.QuotaError, match="42"):
        _ratebound._Outbound(statuses=[429, 42])
