"""The extension's ``Gate``, which every front door drives: ``admit`` runs the
core's whole sequence with the hooks stored in the gate and answers with
typed objects — ``None`` (exempt), an ``Admission`` (with its concurrency
``Place``), or an ``Ask`` of the remote policies, then ``finish``."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any, Optional

import pytest

import ratebound as rb
from ratebound._ratebound import Ask, Gate, Place, Admission

PEER = "192.0.2.1"


def scope(key: Optional[bytes] = None) -> dict[str, Any]:
    headers = [(b"x-api-key", key)] if key is not None else []
    return {"type": "http", "headers": headers}


def admit(gate: Gate, request: Any = None, wsgi: bool = False) -> Any:
    headers = request["headers"] if isinstance(request, dict) and not wsgi else request
    return gate.admit(request, PEER, headers, wsgi)


def test_a_verdict_is_typed_in_both_spellings() -> None:
    clock = rb.ManualClock()
    gate = Gate({"rate": "1/s", "key_header": "x-api-key"}, clock=clock)
    passed = admit(gate, scope(b"k"))
    assert isinstance(passed, Admission)
    assert (passed.status, passed.passed, passed.outcome, passed.refused_by) == (0, True, "allowed", None)
    assert passed.place is None and passed.body is None and passed.content_type is None
    assert passed.headers == [(b"ratelimit-policy", b'"default";q=1;w=1'), (b"ratelimit", b'"default";r=0;t=1')]
    refused = admit(gate, scope(b"k"))
    assert (refused.status, refused.passed, refused.outcome, refused.refused_by) == (429, False, "refused", "default")
    assert refused.content_type == b"text/plain; charset=utf-8"
    assert refused.body == b"rate limit exceeded; retry in 1 s\n"
    assert (b"retry-after", b"1") in refused.headers
    assert repr(refused) == "Admission(status=429, outcome=\"refused\", refused_by=\"default\")"
    # A WSGI request: the environ in, str out (the body stays bytes).
    wsgi = gate.admit({"HTTP_X_API_KEY": "w"}, PEER, {"HTTP_X_API_KEY": "w"}, True)
    assert wsgi.headers[0] == ("ratelimit-policy", '"default";q=1;w=1')
    again = gate.admit({}, PEER, {"HTTP_X_API_KEY": "w"}, True)
    assert (again.status, again.content_type, type(again.body)) == (429, "text/plain; charset=utf-8", bytes)
    with pytest.raises(AttributeError):
        refused.status = 0  # type: ignore[misc]  # frozen


def test_the_place_is_held_until_released_once_or_collected() -> None:
    gate = Gate({"rate": 1000, "burst": 1000, "concurrency_limit": 1})
    first = admit(gate)
    place = first.place
    assert isinstance(place, Place) and place.held
    shed = admit(gate)
    assert (shed.status, shed.outcome, shed.place) == (503, "shed", None)
    place.release()
    assert not place.held
    place.release()  # idempotent: the place is given back once
    place.close()
    second = admit(gate)
    assert second.passed and second.place is not None
    assert admit(gate).status == 503  # one place, not two
    # Never released: given back when collected.
    del second
    gc.collect()
    third = admit(gate)
    assert third.passed and third.place.held
    third.place.close()
    assert admit(gate).passed


def test_hooks_are_called_with_the_request_and_their_exceptions_propagate() -> None:
    events: list[rb.RateLimitEvent] = []
    seen: list[tuple[str, Any]] = []

    def exempt(request: Any) -> bool:
        seen.append(("exempt", request))
        if request.get("boom") == "exempt":
            raise RuntimeError("exempt failed")
        return bool(request.get("health"))

    def key(request: Any) -> Any:
        seen.append(("key", request))
        if request.get("boom") == "key":
            raise RuntimeError("key failed")
        return request.get("user")

    def on_decision(event: rb.RateLimitEvent) -> None:
        events.append(event)
        if event.label == "boom":
            raise RuntimeError("on_decision failed")

    gate = Gate(
        {"rate": "1/h", "burst": 2, "concurrency_limit": 1},
        key=key, exempt=exempt, on_decision=on_decision,
    )
    request = {"user": "ann"}
    v = gate.admit(request, PEER, None, False, "/route")
    assert v.passed
    v.place.release()
    assert seen == [("exempt", request), ("key", request)]
    assert seen[0][1] is request
    assert events == [rb.RateLimitEvent("allowed", None, ("default",), "/route")]
    assert gate.admit({"health": True}, PEER) is None  # exempt: not told
    assert len(events) == 1
    for hook in ("exempt", "key"):
        told = len(events)
        keys = len(gate)
        with pytest.raises(RuntimeError, match=f"{hook} failed"):
            gate.admit({"boom": hook, "user": "bob"}, PEER)
        assert len(events) == told  # a request that raised is not reported
        assert len(gate) == keys  # ... nor charged (not even to its IP)
        # ... and holds no place: the next request passes the cap of one.
        ok = gate.admit({"user": "cy"}, PEER)
        assert ok.passed
        ok.place.release()
    with pytest.raises(RuntimeError, match="on_decision failed"):
        gate.admit({"user": "dee"}, PEER, None, False, "boom")
    ok = gate.admit({"user": "dee"}, PEER)
    assert ok.passed and ok.place.held  # the raising request's place came back
    floats = Gate({"rate": 1}, key=lambda r: 1.5)
    with pytest.raises(TypeError, match="a key must be str, bytes or int, got float"):
        floats.admit({}, PEER)
    assert len(floats) == 0  # what is no key charges no one
    with pytest.raises(TypeError, match="exempt must be a function"):
        Gate({"rate": 1}, exempt=True)  # type: ignore[arg-type]


def test_remote_policies_are_asked_then_finished(tmp_path: Path) -> None:
    host = rb.SharedKeyedLimiter(str(tmp_path / "t.limit"), rate="1/h", burst=1, max_keys=10)
    events: list[rb.RateLimitEvent] = []
    gate = Gate(
        {"key_header": "x-api-key", "concurrency_limit": 1}, [("local", "100/s")], [("host", host)],
        on_decision=events.append, label="site",
    )
    assert (gate.policy_names, gate.remote_names) == (("local", "host"), ["host"])
    ask = admit(gate, scope(b"k"))
    assert isinstance(ask, Ask)
    assert ask.identity == b"key:k"
    assert admit(gate, scope(b"k")).status == 503  # the Ask holds the place
    with pytest.raises(ValueError, match="0 answers for 1 remote policies"):
        gate.finish(ask, [])
    v = gate.finish(ask, [host.check(ask.identity)])
    assert v.passed and v.place is not None
    with pytest.raises(ValueError, match="already finished"):
        gate.finish(ask, [host.check(ask.identity)])
    v.place.release()
    ask = admit(gate, scope(b"k"))
    refused = gate.finish(ask, [host.check(ask.identity)])
    assert (refused.status, refused.refused_by, refused.place) == (429, "host", None)
    # A full table answers None: the gate's own full-table answer.
    full = gate.finish(admit(gate, scope(b"new")), [None])
    assert (full.status, full.outcome) == (503, "rejected")
    # Closed unanswered, an Ask gives its place back.
    ask = admit(gate, scope(b"k"))
    ask.close()
    ask.close()
    with pytest.raises(ValueError, match="another gate"):
        Gate({}, None, [("host", host)]).finish(ask, [None])
    assert isinstance(admit(gate, scope(b"k")), Ask)
    assert [e.outcome for e in events] == ["shed", "allowed", "refused", "rejected"]
    assert {e.label for e in events} == {"site"}


def test_the_configuration_is_the_cores() -> None:
    """Every default and rule is the core's GateSpec: the policy name and
    algorithm, one form of policy, one source of key."""
    assert Gate({"rate": 5}).policy_field == '"default";q=5;w=1'
    assert Gate({}, [("w", {"algorithm": "fixed_window", "limit": 3, "window": 60})]).policy_field == '"w";q=3;w=60'
    with pytest.raises(rb.ConfigError, match="either rate"):
        Gate({"rate": 5}, [("a", 1)])
    with pytest.raises(rb.ConfigError, match="either rate"):
        Gate({"burst": 5}, [("a", 1)])
    with pytest.raises(rb.ConfigError, match="give rate"):
        Gate({})
    with pytest.raises(rb.ConfigError, match="give the key once"):
        Gate({"rate": 5, "key_header": "x-api-key"}, key=lambda r: None)
    for ip in ("ip", "IP"):
        assert Gate({"rate": 5}, key=ip).admit(None, "2001:db8::1").passed
    with pytest.raises(rb.ConfigError, match='policy "a": invalid policy field "brust"'):
        Gate({}, [("a", {"rate": 1, "brust": 2})])
    with pytest.raises(rb.ConfigError, match='policy "a": invalid name "b"'):
        Gate({}, [("a", {"rate": 1, "name": "b"})])
    assert Gate({}, [("a", {"rate": 1, "name": "a"})]).policy_names == ("a",)
    with pytest.raises(rb.MissingValue, match='policy "a": missing rate'):
        Gate({}, [("a", {"burst": 2})])
    with pytest.raises(TypeError, match='policy "a" must be a rate'):
        Gate({}, [("a", True)])
    with pytest.raises(rb.ConfigError, match="is not a middleware option"):
        Gate({"rate": 5, "concurency_limit": 2})
    # A concurrency cap alone needs no policy.
    assert Gate({"concurrency_limit": 2}).capped
    # ipv6_prefix above 128 is the whole address (the core's clamp).
    assert rb.ip_key("2001:db8::1", 300) == "2001:db8::1"
