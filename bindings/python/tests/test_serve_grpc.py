"""``ratebound serve`` seen from Python's ``grpcio`` with the published
generated Envoy stubs (``xds-protos``: grpc's build of
envoyproxy/data-plane-api), as a gateway would call it: a real server
process on 127.0.0.1 (serve_process.py), RLS v3 ``ShouldRateLimit``.

The reference server's README examples (its YAML, its descriptors, the
answers its README describes); the boundary burst of a fixed window, a
sliding window and a token bucket; stacked limits all-or-nothing; shadow
mode; ``hits_addend``; the ``RateLimit`` / ``RateLimit-Policy`` /
``Retry-After`` headers; oversized requests.

Real time: a check that depends on the window a run falls in runs in
``one_window``, which retries (a bounded number of times, with fresh
keys) a run the client's own clock saw cross a window boundary; the
answers of a run that did not are asserted exactly."""

from __future__ import annotations

import math
import time
from typing import Optional

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from envoy.service.ratelimit.v3.rls_pb2 import RateLimitResponse as Answer

from reference_examples import (
    EXAMPLE1,
    EXAMPLE2,
    EXAMPLE3,
    EXAMPLE4_FLAT,
    EXAMPLE4_NESTED,
    EXAMPLE6,
)
from rls_client import (
    DAY,
    HOUR,
    MARGIN,
    MINUTE,
    OK,
    OVER,
    SECOND,
    ask,
    descriptor,
    headers,
    one,
    one_window,
    reset,
    seconds_left,
    seconds_left_between,
    summary,
)
from serve_process import Start, metric


def test_readme_example_1_each_database_value_its_own_500_per_second(serve: Start) -> None:
    s = serve({"mongo_cps.yaml": EXAMPLE1})

    def run(attempt: int) -> tuple[float, list[Answer], Answer]:
        users = descriptor([("database", "users")])
        at = time.time()
        # 499 hits in one request, then one at a time.
        answers = [ask(s, "mongo_cps", [users], hits_addend=499)]
        answers += [ask(s, "mongo_cps", [users]) for _ in range(2)]
        # (database, users) and (database, default): the same key, two
        # values, two counters; another value has no rule (OK, no limit).
        other = ask(
            s,
            "mongo_cps",
            [descriptor([("database", "default")]), descriptor([("database", "logs")])],
        )
        return at, answers, other

    at, answers, other = one_window(1, run)
    assert [summary(a.statuses[0]) for a in answers] == [
        (OK, 500, SECOND, 1, ""),
        (OK, 500, SECOND, 0, ""),
        (OVER, 500, SECOND, 0, ""),
    ], answers
    assert [a.overall_code for a in answers] == [OK, OK, OVER]
    assert all(reset(a.statuses[0]) == seconds_left(1, at) == 1 for a in answers)
    assert other.overall_code == OK
    assert summary(other.statuses[0]) == (OK, 500, SECOND, 499, "")
    assert summary(other.statuses[1]) == (OK, 0, 0, 0, "")
    assert not other.statuses[1].HasField("current_limit")


def test_readme_example_2_marketing_five_a_day_to_a_number_any_message_100(
    serve: Start,
) -> None:
    s = serve({"messaging.yaml": EXAMPLE2})

    def run(attempt: int) -> tuple[range, list[Answer], Answer]:
        number = f"20611111{attempt:02d}"
        # The README's request: both descriptors in one call.
        both = [
            descriptor([("message_type", "marketing"), ("to_number", number)]),
            descriptor([("to_number", number)]),
        ]
        at = time.time()
        answers = [ask(s, "messaging", both) for _ in range(6)]
        day = seconds_left_between(86_400, at, time.time())
        # Another number: its own 5 and its own 100.
        other = ask(
            s,
            "messaging",
            [
                descriptor([("message_type", "marketing"), ("to_number", number + "9")]),
                descriptor([("to_number", number + "9")]),
            ],
        )
        return day, answers, other

    day, answers, other = one_window(86_400, run)
    marketing = [summary(a.statuses[0]) for a in answers]
    assert marketing == [(OK, 5, DAY, left, "") for left in (4, 3, 2, 1, 0)] + [
        (OVER, 5, DAY, 0, "")
    ], answers
    # The number's own 100 counts every request, the refused one too
    # (each descriptor is decided on its own, as the reference does).
    assert [summary(a.statuses[1]) for a in answers] == [
        (OK, 100, DAY, left, "") for left in range(99, 93, -1)
    ]
    # A logical OR of the descriptors' decisions.
    assert [a.overall_code for a in answers] == [OK] * 5 + [OVER]
    # Whole seconds to the next UTC midnight.
    left = reset(answers[-1].statuses[0])
    assert left in day, (left, day)
    assert headers(answers[-1])["Retry-After"] == str(int(left))
    assert [summary(x) for x in other.statuses] == [
        (OK, 5, DAY, 4, ""),
        (OK, 100, DAY, 99, ""),
    ]


def test_readme_example_3_per_ip_ten_a_second_and_the_black_listed_ip_none(
    serve: Start,
) -> None:
    s = serve({"edge.yaml": EXAMPLE3})

    def run(attempt: int) -> tuple[float, list[Answer], Answer]:
        ip = f"10.0.{attempt}.1"
        at = time.time()
        answers = [one(s, "edge_proxy_per_ip", [("remote_address", ip)]) for _ in range(11)]
        # Another IP: its own counter.
        fresh = one(s, "edge_proxy_per_ip", [("remote_address", f"10.0.{attempt}.2")])
        return at, answers, fresh

    at, answers, fresh = one_window(1, run)
    assert [summary(a.statuses[0]) for a in answers] == [
        (OK, 10, SECOND, left, "") for left in range(9, -1, -1)
    ] + [(OVER, 10, SECOND, 0, "")], answers
    assert all(reset(a.statuses[0]) == seconds_left(1, at) for a in answers)
    assert headers(answers[-1])["Retry-After"] == "1"
    assert "Retry-After" not in headers(answers[0])
    assert summary(fresh.statuses[0]) == (OK, 10, SECOND, 9, "")

    # The most specific match: key and value before key alone. A limit of
    # 0 refuses every request, whatever the clock.
    for _ in range(3):
        black = one(s, "edge_proxy_per_ip", [("remote_address", "50.0.0.5")])
        assert black.overall_code == OVER
        status = black.statuses[0]
        assert summary(status) == (OVER, 0, SECOND, 0, "")
        assert status.HasField("current_limit")
        assert reset(status) == 1
        assert headers(black)["Retry-After"] == "1"
    # Mixed in one request: the OR is over the limit, the other descriptor OK.
    mixed = ask(
        s,
        "edge_proxy_per_ip",
        [
            descriptor([("remote_address", "10.9.9.9")]),
            descriptor([("remote_address", "50.0.0.5")]),
        ],
    )
    assert mixed.overall_code == OVER
    assert [x.code for x in mixed.statuses] == [OK, OVER]


def test_readme_example_4_a_descriptor_matches_rules_of_its_own_depth(serve: Start) -> None:
    flat = serve({"example4.yaml": EXAMPLE4_FLAT})
    nested = serve({"example4.yaml": EXAMPLE4_NESTED})
    two = [("key", "value"), ("subkey", "subvalue")]
    # Two entries do not match the flat rule: OK, no limit.
    a = one(flat, "example4", two)
    assert a.overall_code == OK
    assert not a.statuses[0].HasField("current_limit"), a
    assert len(a.response_headers_to_add) == 0
    # One entry does.
    a = one(flat, "example4", [("key", "value")])
    assert summary(a.statuses[0]) == (OK, 300, SECOND, 299, "")

    def run(attempt: int) -> list[Answer]:
        # The nested rule: (key, value), (subkey, any value), each value
        # its own counter.
        a = [("key", "value"), ("subkey", f"a{attempt}")]
        b = [("key", "value"), ("subkey", f"b{attempt}")]
        return [one(nested, "example4", p) for p in (a, a, b)]

    got = one_window(1, run)
    assert [summary(x.statuses[0]) for x in got] == [
        (OK, 300, SECOND, 299, ""),
        (OK, 300, SECOND, 298, ""),
        (OK, 300, SECOND, 299, ""),
    ], got
    # (key, value) alone is the nested file's placeholder: no limit.
    a = one(nested, "example4", [("key", "value")])
    assert a.overall_code == OK
    assert not a.statuses[0].HasField("current_limit"), a


def test_readme_example_6_shadow_mode_answers_ok_and_counts_the_refusal(serve: Start) -> None:
    s = serve({"example6.yaml": EXAMPLE6})
    shadow = 'ratebound_descriptor_shadow_mode_total{domain="example6",'
    over = 'ratebound_descriptor_over_limit_total{domain="example6",'

    def counted(prefix: str) -> int:
        """The sum of the series beginning with ``prefix`` (0 before any)."""
        _, text = s.http_get("/metrics")
        return sum(
            metric(text, line.rsplit(" ", 1)[0])
            for line in text.splitlines()
            if line.startswith(prefix)
        )

    def run(attempt: int) -> tuple[list[Answer], list[Answer], tuple[int, int]]:
        service = ("service", f"s{attempt}")
        before = (counted(shadow), counted(over))
        a = [one(s, "example6", [service, ("user", "user-a")]) for _ in range(11)]
        b = [one(s, "example6", [service, ("user", "user-b")]) for _ in range(21)]
        after = (counted(shadow), counted(over))
        return a, b, (after[0] - before[0], after[1] - before[1])

    a, b, counts = one_window(1, run)
    # user-a: 10 a second in shadow mode: the 11th is over the limit,
    # answered OK, and asks no wait.
    assert [x.overall_code for x in a] == [OK] * 11, a[-1]
    assert [summary(x.statuses[0]) for x in a] == [
        (OK, 10, SECOND, left, "") for left in range(9, -1, -1)
    ] + [(OK, 10, SECOND, 0, "")]
    assert all("Retry-After" not in headers(x) for x in a)
    # user-b: 20 a second, enforced.
    assert [x.overall_code for x in b] == [OK] * 20 + [OVER]
    assert summary(b[-1].statuses[0]) == (OVER, 20, SECOND, 0, "")
    assert headers(b[-1])["Retry-After"] == "1"
    # Metrics: user-a's refusal in the shadow-mode count (and in the
    # over-limit count, with user-b's real one).
    assert counts == (1, 2)
    _, text = s.http_get("/metrics")
    assert 'ratebound_requests_total{transport="grpc",domain="example6",code="OVER_LIMIT"}' in text


# The boundary burst: 10 per 2 s by each algorithm (an extension the
# reference server does not have), one descriptor each, decided in the
# same requests.
BURST = """\
domain: burst
descriptors:
  - key: fixed
    rate_limit:
      requests_per_unit: 10
      window: 2s
  - key: sliding
    rate_limit:
      algorithm: sliding_window
      requests_per_unit: 10
      window: 2s
  - key: bucket
    rate_limit:
      algorithm: token_bucket
      requests_per_unit: 10
      window: 2s
"""


def test_over_a_window_boundary_the_fixed_window_admits_twice_the_limit_the_others_do_not(
    serve: Start,
) -> None:
    s = serve({"burst.yaml": BURST})
    window = 2.0
    for attempt in range(6):
        keys = [(name, f"k{attempt}") for name in ("fixed", "sliding", "bucket")]
        request = [descriptor([k]) for k in keys]
        # 10 requests 0.3 s before a boundary, 10 just after it.
        boundary = (math.floor(time.time() / window) + 1) * window
        if boundary - time.time() < 0.35:
            boundary += window
        time.sleep(max(0.0, boundary - 0.3 - time.time()))
        first_start = time.time()
        before = [ask(s, "burst", request) for _ in range(10)]
        first_end = time.time()
        time.sleep(max(0.0, boundary + MARGIN - time.time()))
        second_start = time.time()
        after = [ask(s, "burst", request) for _ in range(10)]
        second_end = time.time()
        # A run the machine's load stretched over the boundary, or long
        # enough for the others to earn back half the limit: again.
        if first_end > boundary - MARGIN or second_end - first_start > 1.0:
            continue
        assert second_start >= boundary

        def admitted(answers: list[Answer], i: int) -> int:
            return sum(a.statuses[i].code == OK for a in answers)

        # Fresh keys: each algorithm admits the whole first burst.
        assert [admitted(before, i) for i in range(3)] == [10, 10, 10], before[-1]
        # The fixed window: a new window, 10 more (20 in ~0.3 s).
        assert admitted(after, 0) == 10, after[-1]
        assert [summary(a.statuses[0])[3] for a in before + after] == list(range(9, -1, -1)) * 2
        assert [reset(a.statuses[0]) for a in before] == [1.0] * 10
        assert [reset(a.statuses[0]) for a in after] == [2.0] * 10
        # The sliding window weighs the last window's 10 by the part of
        # it still inside the 2 s behind: at most 10 x (time into the new
        # window) / 2 s more, and one for rounding.
        into = second_end - boundary
        sliding = admitted(after, 1)
        assert sliding <= 10 * into / window + 1, (sliding, into, after[-1])
        # The bucket earns 10 per 2 s since its first request.
        earned = 10 * (second_end - first_start) / window
        bucket = admitted(after, 2)
        assert bucket <= earned + 1, (bucket, earned, after[-1])
        # Refused as they are, they say so with a wait.
        refused = [a for a in after if a.statuses[1].code == OVER]
        assert refused and all(reset(a.statuses[1]) > 0 for a in refused)
        assert all(a.overall_code == OVER for a in refused)
        assert 10 + sliding < 20 and 10 + bucket < 20
        print(f"admitted: fixed 20, sliding {10 + sliding}, bucket {10 + bucket} (try {attempt})")
        return
    raise AssertionError("no run of 6 kept its bursts on either side of one boundary")


STACKED = """\
domain: stacked
descriptors:
  - key: user
    rate_limits:
      - name: burst
        algorithm: token_bucket
        requests_per_unit: 2
        window: 2s
      - name: daily
        requests_per_unit: 3
        unit: day
"""


def test_stacked_limits_admit_all_or_nothing(serve: Start) -> None:
    s = serve({"stacked.yaml": STACKED})

    def run(attempt: int) -> Optional[tuple[range, list[Answer], range, list[Answer]]]:
        user = [("user", f"alice{attempt}")]
        t0 = time.time()
        first = [one(s, "stacked", user) for _ in range(3)]
        if time.time() - t0 > 0.9:
            return None  # the bucket earned a token meanwhile
        day0 = seconds_left_between(86_400, t0, time.time())
        # The bucket whole again (2 s), then the same again.
        time.sleep(2.1)
        t1 = time.time()
        second = [one(s, "stacked", user) for _ in range(2)]
        if time.time() - t1 > 0.9:
            return None
        return day0, first, seconds_left_between(86_400, t1, time.time()), second

    day0, first, day1, second = one_window(86_400, run)
    # The burst (2) refuses the third; the day's count is not charged by
    # the refusal: 1 of its 3 still left.
    assert [x.overall_code for x in first] == [OK, OK, OVER], first
    assert [summary(x.statuses[0]) for x in first] == [
        (OK, 2, SECOND, 1, "burst"),
        (OK, 2, SECOND, 0, "burst"),
        (OVER, 2, SECOND, 0, "burst"),
    ]
    # Both limits' fields; the day's t: whole seconds to UTC midnight.
    shown = [headers(x)["RateLimit"] for x in first]
    starts = [
        '"burst";r=1;t=1, "daily";r=2;t=',
        '"burst";r=0;t=2, "daily";r=1;t=',
        '"burst";r=0;t=2, "daily";r=1;t=',
    ]
    for field, start in zip(shown, starts):
        assert field.startswith(start) and int(field[len(start) :]) in day0, (shown, day0)
    assert headers(first[0])["RateLimit-Policy"] == '"burst";q=2;w=2, "daily";q=3;w=86400'
    assert "Retry-After" not in headers(first[1])
    assert headers(first[2])["Retry-After"] == "1"
    # The day's last one, then the day refuses, and the bucket's token is
    # not spent by that refusal.
    assert [x.overall_code for x in second] == [OK, OVER], second
    assert summary(second[0].statuses[0]) == (OK, 3, DAY, 0, "daily")
    assert summary(second[1].statuses[0]) == (OVER, 3, DAY, 0, "daily")
    day = int(reset(second[1].statuses[0]))
    assert day in day1, (day, day1)
    assert headers(second[1])["RateLimit"] == f'"burst";r=1;t=1, "daily";r=0;t={day}'
    assert headers(second[1])["Retry-After"] == str(day)


HOURLY = """\
domain: hourly
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: tenant
    rate_limit:
      name: per_tenant
      unit: minute
      requests_per_unit: 3
  - key: client
    rate_limit:
      algorithm: token_bucket
      requests_per_unit: 5
      unit: second
"""


def test_hits_addend_per_request_and_per_descriptor(serve: Start) -> None:
    s = serve({"hourly.yaml": HOURLY})

    def run(attempt: int) -> list[Answer]:
        a = descriptor([("user", f"a{attempt}")])
        b = descriptor([("user", f"b{attempt}")])
        b5 = descriptor([("user", f"b{attempt}")], hits=5)
        a0 = descriptor([("user", f"a{attempt}")], hits=0)
        b_huge = descriptor([("user", f"b{attempt}")], hits=1 << 32)
        return [
            # The request's 3 for a; b's own 5 instead.
            ask(s, "hourly", [a, b5], hits_addend=3),
            # A request's 0 counts 1.
            ask(s, "hourly", [a], hits_addend=0),
            # A descriptor's 0 looks without counting, whatever the
            # request's; the request's 2 for b.
            ask(s, "hourly", [a0, b], hits_addend=2),
            # More than is left: over the limit, and the window stays
            # refused.
            ask(s, "hourly", [a], hits_addend=7),
            ask(s, "hourly", [a]),
            # 2^32 (a u64 per descriptor) is more than the limit ever
            # holds: over it, and nothing is charged.
            ask(s, "hourly", [b_huge]),
            ask(s, "hourly", [b]),
        ]

    answers = one_window(3600, run)
    assert [[summary(x) for x in r.statuses] for r in answers] == [
        [(OK, 10, HOUR, 7, ""), (OK, 10, HOUR, 5, "")],
        [(OK, 10, HOUR, 6, "")],
        [(OK, 10, HOUR, 6, ""), (OK, 10, HOUR, 3, "")],
        [(OVER, 10, HOUR, 0, "")],
        [(OVER, 10, HOUR, 0, "")],
        [(OVER, 10, HOUR, 0, "")],
        [(OK, 10, HOUR, 2, "")],
    ], answers
    assert [r.overall_code for r in answers] == [OK, OK, OK, OVER, OVER, OVER, OK]


def test_the_ratelimit_ratelimit_policy_and_retry_after_headers(serve: Start) -> None:
    s = serve({"hourly.yaml": HOURLY})

    def run(attempt: int) -> tuple[range, list[Answer]]:
        tenant = [("tenant", f"t{attempt}")]
        at = time.time()
        answers = [one(s, "hourly", tenant) for _ in range(4)]
        return seconds_left_between(60, at, time.time()), answers

    minute, answers = one_window(60, run)
    assert [summary(x.statuses[0]) for x in answers] == [
        (OK, 3, MINUTE, 2, "per_tenant"),
        (OK, 3, MINUTE, 1, "per_tenant"),
        (OK, 3, MINUTE, 0, "per_tenant"),
        (OVER, 3, MINUTE, 0, "per_tenant"),
    ]
    # What each answer says is left of the minute (whole seconds), the
    # same in its status and its fields.
    left = [reset(x.statuses[0]) for x in answers]
    assert all(t in minute for t in left) and left == sorted(left, reverse=True), (left, minute)
    t = [int(x) for x in left]
    assert [headers(x) for x in answers[:3]] == [
        {
            "RateLimit-Policy": '"per_tenant";q=3;w=60',
            "RateLimit": f'"per_tenant";r={r};t={t[i]}',
        }
        for i, r in enumerate((2, 1, 0))
    ], answers
    # Refused: the wait to the window's end, rounded up.
    assert headers(answers[3]) == {
        "RateLimit-Policy": '"per_tenant";q=3;w=60',
        "RateLimit": f'"per_tenant";r=0;t={t[3]}',
        "Retry-After": str(t[3]),
    }

    # Two limits in one request: a policy and a remaining count each, in
    # the descriptors' order; an unnamed limit is named by its rule.
    r = ask(
        s,
        "hourly",
        [descriptor([("client", "c")]), descriptor([("user", "u")])],
    )
    h = headers(r)
    assert set(h) == {"RateLimit-Policy", "RateLimit"}, r
    policies = [p.split(";")[1:] for p in h["RateLimit-Policy"].split(", ")]
    assert policies == [["q=5", "w=1"], ["q=10", "w=3600"]], h
    remaining = [p.split(";")[1] for p in h["RateLimit"].split(", ")]
    assert remaining == ["r=4", "r=9"], h
    names = [p.split(";")[0] for p in h["RateLimit"].split(", ")]
    assert names == [p.split(";")[0] for p in h["RateLimit-Policy"].split(", ")]
    assert all(n.startswith('"') and n.endswith('"') and len(n) > 2 for n in names)
    # No limit matched: no header.
    r = ask(s, "hourly", [descriptor([("nobody", "x")])])
    assert (r.overall_code, len(r.response_headers_to_add)) == (OK, 0), r
    # An unknown domain is OK, as the reference server answers.
    r = ask(s, "no_such_domain", [descriptor([("user", "u")])])
    assert (r.overall_code, [x.code for x in r.statuses]) == (OK, [OK]), r


def test_an_oversized_request_is_a_grpc_error_and_the_server_answers_after(
    serve: Start,
) -> None:
    s = serve({"hourly.yaml": HOURLY})
    too_large = grpc.StatusCode.RESOURCE_EXHAUSTED
    many, wide = "descriptors: 10000", "entries: 10000"
    refused = [
        # 10 000 descriptors.
        ("hourly", [descriptor([("user", str(i))]) for i in range(10_000)], too_large, many),
        # 10 000 entries in one descriptor.
        ("hourly", [descriptor([("user", str(i)) for i in range(10_000)])], too_large, wide),
        # A 1 MB value (under the message bound, over the text bound).
        ("hourly", [descriptor([("user", "x" * 1_000_000)])], too_large, "value: 1000000"),
        # Malformed: no descriptor, no domain.
        ("hourly", [], grpc.StatusCode.INVALID_ARGUMENT, "descriptors"),
        ("", [descriptor([("user", "0")])], grpc.StatusCode.INVALID_ARGUMENT, "domain"),
    ]
    for domain, descriptors, code, named in refused:
        with pytest.raises(grpc.RpcError) as caught:
            ask(s, domain, descriptors)
        error = caught.value
        assert isinstance(error, grpc.Call)
        assert error.code() == code, error
        assert named in (error.details() or ""), error.details()
    # Nothing was counted, and the server still answers, on the same
    # channel and on a new one.
    assert s.process is not None and s.process.poll() is None
    r = ask(s, "hourly", [descriptor([("user", "0")])])
    assert summary(r.statuses[0]) == (OK, 10, HOUR, 9, ""), r
    with grpc.insecure_channel(s.grpc_addr) as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        r = stub.ShouldRateLimit(
            rls_pb2.RateLimitRequest(domain="hourly", descriptors=[descriptor([("user", "1")])]),
            timeout=10,
        )
        assert summary(r.statuses[0]) == (OK, 10, HOUR, 9, ""), r
    _, text = s.http_get("/metrics")
    errors = 'ratebound_request_errors_total{transport="grpc",reason="%s"}'
    assert (metric(text, errors % "too_large"), metric(text, errors % "invalid")) == (3, 2)


# A window no whole second divides: its duration_until_reset is exact (ns),
# so it shows the server's Unix time to the client.
CLOCK = """\
domain: clock
descriptors:
  - key: k
    rate_limit:
      requests_per_unit: 1000000
      window: 1500ms
"""


def test_the_servers_unix_time_is_the_machines(serve: Start) -> None:
    """Fixed windows align to the Unix epoch, as the reference server's
    (and several servers over one store must agree on where a window
    ends): the server's time, read through the window's end, is the
    client's wall clock within MARGIN (the best of 20 calls)."""
    s = serve({"clock.yaml": CLOCK})
    best: Optional[tuple[float, float]] = None
    for _ in range(20):
        sent = time.time()
        answer = one(s, "clock", [("k", "v")])
        came = time.time()
        server_into = 1.5 - reset(answer.statuses[0])
        # Server minus client, in (-0.75 s, 0.75 s].
        offset = (server_into - ((sent + came) / 2) % 1.5 + 0.75) % 1.5 - 0.75
        if best is None or came - sent < best[0]:
            best = (came - sent, offset)
    assert best is not None
    rtt, offset = best
    assert abs(offset) <= MARGIN + rtt / 2, (
        f"the server's Unix time is {offset * 1e3:+.1f} ms off the machine's "
        f"(round trip {rtt * 1e3:.2f} ms)"
    )
