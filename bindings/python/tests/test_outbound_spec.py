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
    # Absent: None, the core's default.
    return _ratebound._Outbound(
        retries=c.get("retries"),
        max_pause=c.get("max_pause_s"),
        statuses=c.get("statuses"),
        any_method=c.get("any_method"),
        backoff=c.get("backoff_s"),
    )


@pytest.mark.parametrize("v", SPEC["vectors"], ids=[v["id"] for v in SPEC["vectors"]])
def test_vector(v: dict[str, Any]) -> None:
    got = outbound(v.get("config")).advise(
        v["method"], v["status"], [tuple(h) for h in v["headers"]], v["attempt"], v["now_unix"]
    )
    e = v["expect"]
    assert got == (e["pause_s"], e["capped"], e["retry"], e["gave_up"]), v["doc"]


@pytest.mark.parametrize("v", SPEC["options"], ids=[v["id"] for v in SPEC["options"]])
def test_options_vector(v: dict[str, Any]) -> None:
    """The adapters' options through the core's one reader, as Rust and
    Node read them."""
    import ratebound as rb

    g = v["given"]
    try:
        o = outbound(g)
        n, timeout = _ratebound._Outbound.sending(g.get("n"), g.get("timeout_s"))
    except rb.RateboundError as e:
        want = v.get("error")
        assert want is not None, (v["id"], e)
        assert e.code == want["code"] and str(e).startswith(f"invalid {want['name']} "), (v["id"], e)
        return
    assert "error" not in v, v["id"]
    e = v["expect"]
    assert (o.retries, o.max_pause, n, timeout) == (e["retries"], e["max_pause_s"], e["n"], e["timeout_s"]), v["id"]
    if "backoff_s" in e:
        assert o.backoff == e["backoff_s"], v["id"]


def test_bad_configuration_is_a_typed_error() -> None:
    import ratebound as rb

    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(rb.QuotaError, match="max_pause"):
            _ratebound._Outbound(max_pause=bad)
    with pytest.raises(rb.QuotaError, match="42"):
        _ratebound._Outbound(statuses=[429, 42])
