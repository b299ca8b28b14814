"""Replays the shared vectors in spec/ (the Rust and Node suites replay the
same files) through the Python API, comparing every field a step expects."""

from __future__ import annotations

import json
import pathlib

import pytest

import ratebound as rb

SPEC = pathlib.Path(__file__).resolve().parents[3] / "spec"


def load(name: str) -> dict:
    return json.loads((SPEC / name).read_text())


def secs(ns: int) -> float:
    return ns / 1e9


def build(spec: dict, clock: rb.ManualClock) -> rb.Limiter:
    alg = spec["algorithm"]
    if alg == "token_bucket":
        return rb.TokenBucket(spec["quota"], clock=clock)
    if alg == "leaky_bucket":
        return rb.LeakyBucket(spec["quota"], secs(spec["max_delay_ns"]), clock=clock)
    if alg in ("fixed_window", "sliding_window", "sliding_log"):
        cls = {"fixed_window": rb.FixedWindow, "sliding_window": rb.SlidingWindow, "sliding_log": rb.SlidingLog}[alg]
        return cls(spec["limit"], secs(spec["window_ns"]), clock=clock)
    if alg == "all_of":
        return rb.AllOf([build(m, clock) for m in spec["members"]])
    raise AssertionError(f"unknown algorithm {alg}")


def observed(call) -> dict:
    try:
        d = call()
    except rb.RateboundError as e:
        return {"error": e.code}
    return {
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_ns": d.retry_after_ns,
        "reset_after_ns": d.reset_after_ns,
    }


def compare(where: str, got: dict, expect: dict, failures: list) -> None:
    for field, want in expect.items():
        if got.get(field) != want:
            failures.append(f"{where}: {field} = {got.get(field)!r}, want {want!r}")


def replay(vector: dict, failures: list) -> tuple[int, int]:
    """Replays one vector: (steps replayed, expectations compared)."""
    vid = vector["id"]
    clock = rb.ManualClock()
    spec = vector.get("limiter") or {"algorithm": "token_bucket", "quota": vector["quota"]}
    limiter = build(spec, clock)
    members = [build(m, clock) for m in spec.get("members", [])]
    if members:
        limiter = rb.AllOf(members)
    reservations: list = []
    admitted = refused = 0
    steps = compared = 0
    for i, step in enumerate(vector["steps"]):
        steps += 1
        if "set_time_ns" in step:
            clock.set_ns(step["set_time_ns"])
        if "advance_ns" in step:
            clock.advance_ns(step["advance_ns"])
        n = step.get("n", 1)
        for rep in range(step.get("repeat", 1)):
            call = step["call"]
            if call == "check":
                got = observed(lambda: limiter.check(n))
                if got.get("allowed") is True:
                    admitted += 1
                elif got.get("allowed") is False:
                    refused += 1
            elif call == "available":
                got = {"available": limiter.available()}
            elif call == "member_available":
                got = {"available": members[step["member"]].available()}
            elif call == "reserve":
                try:
                    r = limiter.reserve(n, secs(step["max_wait_ns"]))
                    got = {"delay_ns": r.delay_ns}
                    reservations.append(r)
                except rb.RateboundError as e:
                    got = {"error": e.code}
            elif call == "cancel":
                reservations[step["reservation"]].cancel()
                got = {}
            elif call == "set_quota":
                limiter.set_quota(step["quota"])
                got = {}
            else:
                raise AssertionError(f"{vid} step {i}: unknown call {call}")
            if "expect" in step:
                where = f"{vid} step {i}" + (f" (repeat {rep})" if rep else "")
                compare(where, got, step["expect"], failures)
                compared += 1
    if "totals" in vector:
        compare(f"{vid} totals", {"admitted": admitted, "refused": refused}, vector["totals"], failures)
        compared += 1
    return steps, compared


@pytest.mark.parametrize(
    ("name", "at_least"),
    [
        ("token_bucket.json", 8),
        ("fixed_window.json", 1),
        ("sliding_window.json", 2),
        ("sliding_log.json", 1),
        ("leaky_bucket.json", 2),
        ("boundary_burst.json", 4),
        ("all_of.json", 2),
    ],
)
def test_vectors(name: str, at_least: int) -> None:
    vectors = load(name)["vectors"]
    failures: list = []
    replayed = steps = 0
    unchecked = []
    for vector in vectors:
        n, compared = replay(vector, failures)
        replayed += 1
        steps += n
        if compared == 0:
            unchecked.append(vector["id"])
    assert not failures, "\n".join(failures)
    # Every vector and step in the file was replayed, each vector compared
    # something, and the file holds at least its floor of vectors (the Rust
    # replay's): a replay that matched nothing fails.
    in_file = (len(vectors), sum(len(v["steps"]) for v in vectors))
    assert (replayed, steps) == in_file, f"{name}: (vectors, steps) replayed {(replayed, steps)}, in the file {in_file}"
    assert not unchecked, f"{name}: vectors that compared nothing: {unchecked}"
    assert replayed >= at_least, f"{name}: {replayed} vectors, expected at least {at_least}"


def test_keyed_vectors() -> None:
    vectors = load("keyed.json")["vectors"]
    assert len(vectors) >= 4
    failures: list = []
    for vector in vectors:
        vid = vector["id"]
        spec = vector["limiter"]
        per_key = spec["per_key"]
        clock = rb.ManualClock()
        overflow = {"reject_new_keys": "reject", "evict_least_recent": "evict", None: "evict"}[spec.get("overflow")]
        if per_key["algorithm"] == "token_bucket":
            k = rb.KeyedLimiter(per_key["quota"], max_keys=spec.get("max_keys"), overflow=overflow, clock=clock)
        else:
            k = rb.KeyedLimiter(
                algorithm=per_key["algorithm"],
                limit=per_key["limit"],
                window=secs(per_key["window_ns"]),
                max_keys=spec.get("max_keys"),
                overflow=overflow,
                clock=clock,
            )
        for i, step in enumerate(vector["steps"]):
            if "advance_ns" in step:
                clock.advance_ns(step["advance_ns"])
            call = step["call"]
            if call == "check":
                got = observed(lambda: k.check(step["key"], step.get("n", 1)))
            elif call == "len":
                got = {"len": len(k)}
            elif call == "available":
                got = {"available": k.available(step["key"])}
            elif call == "cleanup":
                got = {"removed": k.cleanup()}
            elif call == "cleanup_idle":
                got = {"removed": k.cleanup_idle(secs(step["idle_ns"]))}
            elif call == "remove":
                got = {"removed": k.remove(step["key"])}
            else:
                raise AssertionError(f"{vid} step {i}: unknown call {call}")
            if "expect" in step:
                compare(f"{vid} step {i}", got, step["expect"], failures)
    assert not failures, "\n".join(failures)


def test_http_vectors() -> None:
    failures: list = []
    vectors = load("http.json")["vectors"]
    replayed = 0
    for vector in vectors:
        kind = vector["kind"]
        for i, case in enumerate(vector["cases"]):
            if kind == "retry_after":
                got = rb.retry_after_secs(case["wait_ns"])
            elif kind == "ip_key":
                got = rb.ip_key(case["ip"], case.get("prefix"))
            elif kind == "client_ip":
                trust = case["trust"]
                trusted = trust.get("cidrs", trust.get("hops"))
                got = rb.client_ip(case["peer"], [tuple(h) for h in case["headers"]], trusted, case.get("header"))
            elif kind == "ratelimit_policy":
                got = rb._ratebound.ratelimit_policy([(p["name"], p["quota"]) for p in case["policies"]])
            else:
                raise AssertionError(f"{vector['id']}: unknown kind {kind}")
            if got != case["want"]:
                failures.append(f"{vector['id']} case {i}: {got!r}, want {case['want']!r}")
            replayed += 1
    assert not failures, "\n".join(failures)
    # Every case in the file was replayed, and there are cases (as in the
    # Rust replay): a replay that matched nothing fails.
    assert replayed == sum(len(v["cases"]) for v in vectors)
    assert len(vectors) >= 4 and replayed >= 20, (len(vectors), replayed)
