//! `GateSpec` / `PolicySpec`: the one parser of a dynamic front door's
//! middleware configuration — its defaults and the rules between options.

use ratebound::any::AnyClock;
use ratebound::gate::{GateSpec, Loose, PolicySpec, RemoteKind};
use ratebound::{KeyedAlgorithm, Quota};

fn policy(fields: &[(&str, Loose<'_>)]) -> PolicySpec {
    let mut p = PolicySpec::default();
    for (name, value) in fields {
        p.set(name, *value).unwrap();
    }
    p
}

#[test]
fn a_policy_defaults_to_a_token_bucket_named_default() {
    let (name, algorithm) = policy(&[("rate", Loose::Number(2.0))]).build().unwrap();
    assert_eq!(name, "default");
    assert_eq!(
        algorithm,
        KeyedAlgorithm::TokenBucket(Quota::per_second(2.0).unwrap())
    );
    let (name, algorithm) = policy(&[
        ("name", Loose::Text("hourly")),
        ("algorithm", Loose::Text("fixed_window")),
        ("limit", Loose::Number(100.0)),
        ("window", Loose::Number(3600.0)),
    ])
    .build()
    .unwrap();
    assert_eq!(
        (name.as_str(), algorithm.name()),
        ("hourly", "fixed_window")
    );
    for (field, value) in [
        ("brust", Loose::Number(1.0)),
        ("rate", Loose::List(&["1/s"])),
        ("burst", Loose::Text("2")),
        ("name", Loose::Number(1.0)),
    ] {
        let e = PolicySpec::default().set(field, value).unwrap_err();
        assert_eq!(e.code(), "invalid_option", "{field}: {e}");
        assert!(e.to_string().contains(field), "{e}");
    }
    let e = policy(&[("algorithm", Loose::Text("fixed_window"))])
        .build()
        .unwrap_err();
    assert_eq!(e.code(), "missing", "{e}");
    assert!(
        matches!(e, ratebound::Error::Missing { name: "limit" }),
        "{e}"
    );
}

#[test]
fn one_form_of_policy_and_one_source_of_key() {
    let mut both = GateSpec::default();
    both.set("rate", Loose::Text("5/s")).unwrap();
    both.add_policy(policy(&[("rate", Loose::Number(1.0))]))
        .unwrap();
    let e = both.build(AnyClock::default()).unwrap_err();
    assert!(e.to_string().contains("either rate"), "{e}");

    // A burst alone is a top-level policy without its rate.
    let mut burst = GateSpec::default();
    burst.use_policy_list();
    burst.set("burst", Loose::Number(3.0)).unwrap();
    let e = burst.build(AnyClock::default()).unwrap_err();
    assert!(
        matches!(&e, ratebound::Error::InvalidOption { name: "policies", value, .. }
            if value == "policies and a top-level rate"),
        "{e}"
    );

    let e = GateSpec::default().build(AnyClock::default()).unwrap_err();
    assert!(e.to_string().contains("give rate"), "{e}");

    for header_first in [true, false] {
        let mut spec = GateSpec::default();
        spec.set("rate", Loose::Number(1.0)).unwrap();
        if header_first {
            spec.set("key_header", Loose::Text("x-api-key")).unwrap();
            spec.give_key();
        } else {
            spec.give_key();
            spec.set("keyHeader", Loose::Text("x-api-key")).unwrap();
        }
        let e = spec.build(AnyClock::default()).unwrap_err();
        assert!(e.to_string().contains("give the key once"), "{e}");
    }

    let mut twice = GateSpec::default();
    twice.set("rate", Loose::Number(1.0)).unwrap();
    twice.set("key", Loose::Text("x-user")).unwrap();
    twice.set("key_header", Loose::Text("x-api-key")).unwrap();
    let e = twice.build(AnyClock::default()).unwrap_err();
    assert!(
        matches!(&e, ratebound::Error::InvalidOption { name: "key", value, .. }
            if value == "given more than once"),
        "{e}"
    );
    for ip in ["ip", "IP", "Ip"] {
        let mut spec = GateSpec::default();
        spec.set("rate", Loose::Number(1.0)).unwrap();
        spec.set("key", Loose::Text(ip)).unwrap();
        let gate = spec.build(AnyClock::default()).unwrap();
        assert_eq!(
            gate.options().key,
            ratebound::gate::KeySource::ClientIp,
            "{ip}"
        );
    }
    let mut header = GateSpec::default();
    header.set("rate", Loose::Number(1.0)).unwrap();
    header.set("key", Loose::Text("X-API-Key")).unwrap();
    let gate = header.build(AnyClock::default()).unwrap();
    assert_eq!(
        gate.options().key,
        ratebound::gate::KeySource::header("x-api-key").unwrap()
    );
    assert!(GateSpec::default().set("key", Loose::Number(1.0)).is_err());

    // Only a concurrency cap: no policy needed.
    let mut cap = GateSpec::default();
    cap.set("concurrency_limit", Loose::Number(4.0)).unwrap();
    assert!(cap.build(AnyClock::default()).unwrap().is_capped());
}

#[test]
fn remote_policies_are_named_by_their_kind_unless_named() {
    let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("10/s").unwrap());
    let mut spec = GateSpec::default();
    spec.add_remote(None, RemoteKind::Redis, algorithm);
    spec.add_remote(None, RemoteKind::Host, algorithm);
    spec.add_remote(Some("partner"), RemoteKind::Redis, algorithm);
    let gate = spec.clone().build(AnyClock::default()).unwrap();
    assert_eq!(
        gate.remote_names().collect::<Vec<_>>(),
        ["global", "host", "partner"]
    );
    // Two unnamed Redis policies would share a name: refused.
    spec.add_remote(None, RemoteKind::Redis, algorithm);
    let e = spec.build(AnyClock::default()).unwrap_err();
    assert!(e.to_string().contains("two policies have this name"), "{e}");
}
