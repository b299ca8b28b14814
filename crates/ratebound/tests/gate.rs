//! The HTTP gate as the bindings drive it: keys and missing keys, refusals
//! and what they give back, verdicts, shedding, options parsed once, the
//! client's identity and remote policies (the rest of the run-time surface
//! is `any.rs`'s).

use std::time::Duration;

use ratebound::any::{AnyClock, Key};
use ratebound::gate::{
    Gate, GateOptions, KeySource, Loose, MissingKey, Outcome, QuotaHeaders, Request,
};
use ratebound::http::NoHeaders;
use ratebound::{KeyedAlgorithm, ManualClock, Overflow, Quota};

fn manual() -> (ManualClock, AnyClock) {
    let c = ManualClock::new();
    (c.clone(), AnyClock::Manual(c))
}

fn given(key: &str) -> Request<'_, NoHeaders> {
    Request {
        key: Some(Key::Text(key)),
        peer: None,
        headers: &NoHeaders,
    }
}

/// A token bucket policy `name` of `quota`.
fn bucket(name: &str, quota: &str) -> (String, KeyedAlgorithm) {
    (
        name.to_string(),
        KeyedAlgorithm::TokenBucket(Quota::parse(quota).unwrap()),
    )
}

/// Keys given, a keyless request rejected with 401, and one remote policy
/// `global` of 1/s.
fn keyless_rejected_with_a_global_remote() -> GateOptions {
    GateOptions {
        key: KeySource::Given,
        missing: MissingKey::Reject(401),
        remote: vec![bucket("global", "1/s")],
        ..GateOptions::default()
    }
}

/// True if `verdict` sets the header `name` to `value`.
fn has(verdict: &ratebound::gate::Verdict<'_>, name: &str, value: &str) -> bool {
    verdict.headers().contains(&(name, value.to_string()))
}

fn gate(options: GateOptions, clock: AnyClock) -> Gate {
    Gate::new(vec![bucket("per-key", "1/s burst 2")], options, clock).unwrap()
}

#[test]
fn gate_design_scenario_2() {
    let (clock, c) = manual();
    let g = gate(
        GateOptions {
            key: KeySource::Given,
            ..GateOptions::default()
        },
        c,
    );
    let req = given;
    let first = g.decide(&req("alice"));
    assert_eq!(first.status, 0);
    assert!(has(&first, "ratelimit", "\"per-key\";r=1;t=1"));
    assert_eq!(g.decide(&req("alice")).status, 0);
    let refused = g.decide(&req("alice"));
    assert_eq!(refused.status, 429);
    assert!(has(&refused, "retry-after", "1"));
    assert!(refused.body.unwrap().1.contains("retry in 1 s"));
    assert_eq!(g.decide(&req("bob")).status, 0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(g.decide(&req("alice")).status, 0);
}

#[test]
fn gate_keys_and_missing_keys() {
    let (_, c) = manual();
    let g = gate(GateOptions::default(), c.clone());
    let xff = |v| [("x-forwarded-for", v)];
    let (a, b, none) = (xff("1.2.3.4"), xff("5.6.7.8"), [("x", "")]);
    let from = |peer: &str, headers| Request {
        key: None,
        peer: Some(peer.parse().unwrap()),
        headers,
    };
    // Untrusted forwarding headers do not change the key; IPv6 is grouped by /64.
    assert_eq!(g.decide(&from("2001:db8::1", &a[..])).status, 0);
    assert_eq!(g.decide(&from("2001:db8::2", &b[..])).status, 0);
    assert_eq!(g.decide(&from("2001:db8::3", &none[..])).status, 429);
    assert_eq!(g.decide(&from("2001:db8:0:1::3", &none[..])).status, 0);

    let reject = gate(
        GateOptions {
            key: KeySource::Given,
            missing: MissingKey::Reject(401),
            headers: QuotaHeaders::Legacy,
            ..GateOptions::default()
        },
        c,
    );
    assert_eq!(reject.decide(&from("10.0.0.1", &none[..])).status, 401);
    assert_eq!(
        reject.decide(&given("")).status,
        401,
        "an empty key is no key"
    );
    let ok = reject.decide(&given("k"));
    assert_eq!(ok.status, 0);
    assert_eq!(ok.headers()[1], ("x-ratelimit-remaining", "1".to_string()));
}

#[test]
fn gate_refusal_reports_what_was_given_back() {
    // Burst admits, the per-second window refuses: the burst's token is given
    // back, and the RateLimit field says so (r=1, not 0).
    let (_, c) = manual();
    let g = Gate::new(
        vec![
            bucket("burst", "1/minute burst 3"),
            (
                "second".to_string(),
                KeyedAlgorithm::FixedWindow {
                    limit: 2,
                    window: Duration::from_secs(1),
                },
            ),
        ],
        GateOptions {
            key: KeySource::Given,
            ..GateOptions::default()
        },
        c,
    )
    .unwrap();
    let req = given("k");
    assert_eq!(g.decide(&req).status, 0);
    assert_eq!(g.decide(&req).status, 0);
    let refused = g.decide(&req);
    assert_eq!(refused.status, 429);
    let field = &refused
        .headers()
        .into_iter()
        .find(|(n, _)| *n == "ratelimit")
        .unwrap()
        .1;
    assert_eq!(field, "\"burst\";r=1;t=120, \"second\";r=0;t=1");
    // For a metrics hook: what happened, and which policy refused.
    assert_eq!(refused.outcome, Outcome::Refused);
    assert_eq!(refused.refused_by, Some("second"));
    assert_eq!(g.policy_names().collect::<Vec<_>>(), ["burst", "second"]);
    assert_eq!(g.shed().outcome.as_str(), "shed");
}

#[test]
fn verdicts_say_their_outcome() {
    let (_, c) = manual();
    let g = Gate::new(
        vec![bucket("p", "1/s burst 1")],
        keyless_rejected_with_a_global_remote(),
        c,
    )
    .unwrap();
    let ok = ratebound::Decision::from_parts(true, 1, 0, 0, 1_000_000_000);
    let no = ratebound::Decision::from_parts(false, 1, 0, 500_000_000, 1_000_000_000);
    let first = g.decide_with(&given("k"), &[ok]);
    assert_eq!((first.outcome, first.refused_by), (Outcome::Allowed, None));
    let local = g.decide_with(&given("k"), &[ok]);
    assert_eq!(
        (local.outcome, local.refused_by),
        (Outcome::Refused, Some("p"))
    );
    let remote = g.decide_with(&given("j"), &[no]);
    assert_eq!(
        (remote.outcome, remote.refused_by),
        (Outcome::Refused, Some("global"))
    );
    let keyless = Request {
        key: None,
        peer: None,
        headers: &NoHeaders,
    };
    // A remote policy whose table is full: the gate's own full-table
    // answer (503, Retry-After 1), never 500; nothing charged locally.
    let full = g.decide_with(&given("m"), &[ratebound::gate::RemoteAnswer::Full]);
    assert_eq!(
        (full.status, full.outcome, full.fields.retry_after),
        (503, Outcome::Rejected, Some(1))
    );
    // Two policies of one name would share a RateLimit entry and, in
    // Redis, a key: refused where the gate is made.
    let twice = Gate::new(
        vec![bucket("global", "1/s")],
        GateOptions {
            remote: vec![bucket("global", "1/s")],
            ..GateOptions::default()
        },
        AnyClock::default(),
    );
    let err = twice.expect_err("two policies named global");
    assert_eq!(err.code(), "invalid_option");
    assert!(err.to_string().contains("global"), "{err}");
    let after = g.decide_with(&given("m"), &[ok]);
    assert_eq!(
        after.outcome,
        Outcome::Allowed,
        "the full answer charged nothing"
    );
    let rejected = g.decide_with::<_, ratebound::Decision>(&keyless, &[]);
    assert_eq!(
        (rejected.status, rejected.outcome),
        (401, Outcome::Rejected)
    );
    assert_eq!(Outcome::Allowed.as_str(), "allowed");
}

#[test]
fn gate_sheds_beyond_its_concurrency_limit() {
    let (_, c) = manual();
    let g = Gate::new(
        vec![bucket("p", "1/s")],
        GateOptions {
            concurrency_limit: Some(2),
            ..GateOptions::default()
        },
        c.clone(),
    )
    .unwrap();
    assert!(g.is_capped());
    assert!(g.try_enter() && g.try_enter());
    assert!(!g.try_enter());
    let shed = g.shed();
    assert_eq!(shed.status, 503);
    assert!(has(&shed, "retry-after", "1"));
    g.leave();
    assert!(g.try_enter());
    let zero = Gate::new(
        vec![bucket("p", "1/s")],
        GateOptions {
            concurrency_limit: Some(0),
            ..GateOptions::default()
        },
        c,
    );
    assert_eq!(zero.err().unwrap().code(), "invalid_limit");
}

#[test]
fn gate_options_parse_once_and_name_bad_values() {
    let mut o = GateOptions::default();
    for (name, value, code, text) in [
        (
            "maxKeys",
            Loose::Number(0.0),
            "invalid_number",
            "invalid maxKeys 0",
        ),
        (
            "max_keys",
            Loose::Text("ten"),
            "invalid_option",
            "invalid max_keys \"ten\"",
        ),
        ("missing_key", Loose::Number(302.0), "invalid_number", "302"),
        ("missingKey", Loose::Text("nobody"), "parse_error", "nobody"),
        (
            "key_header",
            Loose::Text("x api key"),
            "parse_error",
            "x api key",
        ),
        ("client_ip_header", Loose::Text("x:y"), "parse_error", "x:y"),
        (
            "trusted_proxies",
            Loose::List(&["10.0.0.0/99"]),
            "parse_error",
            "10.0.0.0/99",
        ),
        (
            "trustedProxies",
            Loose::Number(-1.0),
            "invalid_number",
            "-1",
        ),
        ("ipv6_prefix", Loose::Number(1.5), "invalid_number", "1.5"),
        ("colour", Loose::Text("red"), "invalid_option", "colour"),
    ] {
        let err = o.set(name, value).unwrap_err();
        assert_eq!(err.code(), code, "{name}: {err}");
        assert!(err.to_string().contains(text), "{name}: {err}");
    }
    // A forwarding header without trusted proxies would key every request
    // by the proxy: refused when the gate is built.
    o.set("client_ip_header", Loose::Text("X-Real-IP")).unwrap();
    let policy = bucket("p", "1/s");
    let err = Gate::new(vec![policy.clone()], o.clone(), AnyClock::default())
        .err()
        .unwrap();
    assert_eq!(err.code(), "invalid_option");
    assert!(err.to_string().contains("x-real-ip"), "{err}");
    o.set("trusted_proxies", Loose::Number(1.0)).unwrap();
    o.set("ipv6Prefix", Loose::Number(500.0)).unwrap();
    assert_eq!(o.ipv6_prefix, 128);
    let g = Gate::new(vec![policy], o, AnyClock::default()).unwrap();
    assert_eq!(g.header_names().collect::<Vec<_>>(), ["x-real-ip"]);
    // The defaults live in one place.
    let d = GateOptions::default();
    assert_eq!(d.max_keys, (1_000_000, Overflow::EvictLeastRecent));
    assert_eq!(d.ipv6_prefix, 64);
    assert_eq!(d.missing, MissingKey::FallBackToIp);
}

#[test]
fn gate_identity_and_remote_policies() {
    use ratebound::Decision;
    let (_, c) = manual();
    let remote = bucket("global", "10/s burst 20");
    let g = Gate::new(
        vec![bucket("local", "1/s burst 2")],
        GateOptions {
            key: KeySource::header("x-api-key").unwrap(),
            remote: vec![remote],
            ..GateOptions::default()
        },
        c,
    )
    .unwrap();
    assert_eq!(g.policy_field(), r#""local";q=2;w=2, "global";q=20;w=2"#);
    let lines = [("x-api-key", " alice ")];
    let req = Request {
        key: None,
        peer: Some("2001:db8::9".parse().unwrap()),
        headers: &lines[..],
    };
    assert_eq!(g.identity(&req), Ok(b"key:alice".to_vec()));
    let none: [(&str, &str); 0] = [];
    let keyless = Request {
        key: None,
        peer: Some("2001:db8::9".parse().unwrap()),
        headers: &none[..],
    };
    assert_eq!(g.identity(&keyless), Ok(b"ip:2001:db8::".to_vec()));
    let twice = [("x-api-key", "a"), ("x-api-key", "b")];
    let smuggled = Request {
        key: None,
        peer: None,
        headers: &twice[..],
    };
    assert_eq!(g.identity(&smuggled), Ok(b"anonymous".to_vec()));

    // The remote policy admits: both entries in RateLimit.
    let ok = Decision::from_parts(true, 20, 19, 0, 100_000_000);
    let v = g.decide_with(&req, &[ok]);
    assert_eq!(v.status, 0);
    let field = |v: &ratebound::gate::Verdict<'_>| {
        v.headers()
            .into_iter()
            .find(|(n, _)| *n == "ratelimit")
            .map(|(_, v)| v)
    };
    assert_eq!(field(&v).unwrap(), r#""local";r=1;t=1, "global";r=19;t=1"#);
    // The remote policy refuses: 429 with its wait, the local bucket untouched.
    let no = Decision::from_parts(false, 20, 0, 2_500_000_000, 2_000_000_000);
    let v = g.decide_with(&req, &[no]);
    assert_eq!(v.status, 429);
    assert_eq!(v.fields.retry_after, Some(3));
    assert_eq!(field(&v).unwrap(), r#""global";r=0;t=2"#);
    assert_eq!(
        g.decide_with(&req, &[ok]).status,
        0,
        "the local bucket still had a token"
    );
    assert_eq!(g.decide_with(&req, &[ok]).status, 429, "now it has none");
    // The wrong number of remote decisions is a misconfiguration.
    assert_eq!(g.decide_with::<_, Decision>(&req, &[]).status, 500);

    // A keyless request refused by the options: identity says so, and
    // decide_with without remote decisions answers it.
    let (_, c) = manual();
    let reject = Gate::new(vec![], keyless_rejected_with_a_global_remote(), c).unwrap();
    let bare = Request {
        key: None,
        peer: None,
        headers: &none[..],
    };
    assert_eq!(reject.identity(&bare), Err(401));
    assert_eq!(reject.decide_with::<_, Decision>(&bare, &[]).status, 401);
    let given = Request {
        key: Some(Key::Int(42)),
        peer: None,
        headers: &none[..],
    };
    assert_eq!(reject.identity(&given), Ok(b"key:42".to_vec()));
    assert_eq!(
        reject
            .decide_with(&given, &[Decision::from_parts(true, 1, 0, 0, 0)])
            .status,
        0
    );
}
