//! Replays `spec/outbound.json` against the core's outbound decision (the
//! Python and Node suites replay the same file through their bindings).
#![cfg(not(ratebound_loom))]

use std::time::Duration;

use ratebound::outbound::{Advice, Outbound};
use serde_json::Value;

#[path = "support/spec.rs"]
mod spec;

fn outbound(config: Option<&Value>) -> Outbound {
    let mut o = Outbound::new();
    let Some(c) = config else { return o };
    if let Some(r) = c.get("retries") {
        o = o.with_retries(u32::try_from(r.as_u64().expect("retries")).expect("u32"));
    }
    if let Some(m) = c.get("max_pause_s") {
        o = o
            .with_max_pause(Duration::from_secs_f64(m.as_f64().expect("max_pause_s")))
            .expect("max_pause");
    }
    if let Some(s) = c.get("statuses") {
        let statuses: Vec<u16> = s
            .as_array()
            .expect("statuses")
            .iter()
            .map(|v| u16::try_from(v.as_u64().expect("status")).expect("u16"))
            .collect();
        o = o.with_statuses(&statuses).expect("statuses");
    }
    if let Some(a) = c.get("any_method") {
        o = o.with_any_method(a.as_bool().expect("any_method"));
    }
    if let Some(b) = c.get("backoff_s") {
        o = o
            .with_backoff(Duration::from_secs_f64(b.as_f64().expect("backoff_s")))
            .expect("backoff");
    }
    o
}

#[test]
fn every_vector_of_spec_outbound_json() {
    let spec = spec::load("outbound.json");
    let vectors = spec::list(&spec, "vectors", 30);
    for v in vectors {
        let id = v["id"].as_str().expect("id");
        let headers = spec::headers(v);
        let advice = outbound(v.get("config")).advise(
            v["method"].as_str().expect("method"),
            u16::try_from(v["status"].as_u64().expect("status")).expect("u16"),
            headers,
            u32::try_from(v["attempt"].as_u64().expect("attempt")).expect("u32"),
            v["now_unix"].as_f64().expect("now_unix"),
        );
        let e = &v["expect"];
        let want = Advice {
            pause: e["pause_s"].as_f64().map(Duration::from_secs_f64),
            capped: e["capped"].as_bool().expect("capped"),
            retry: e["retry"].as_bool().expect("retry"),
            gave_up: e["gave_up"].as_bool().expect("gave_up"),
        };
        assert_eq!(advice, want, "{id}: {}", v["doc"]);
    }
}

#[test]
fn bad_configuration_is_a_typed_error_naming_the_value() {
    let e = Outbound::new()
        .with_max_pause(Duration::ZERO)
        .expect_err("zero");
    assert_eq!(e.code(), "invalid_number");
    assert!(e.to_string().contains("max_pause"), "{e}");
    let e = Outbound::new().with_statuses(&[429, 42]).expect_err("42");
    assert!(e.to_string().contains("42"), "{e}");
    assert!(Outbound::new().with_statuses(&[600]).is_err());
    let e = Outbound::new()
        .with_backoff(Duration::ZERO)
        .expect_err("zero");
    assert!(e.to_string().starts_with("invalid backoff 0"), "{e}");
}

/// `options` of spec/outbound.json: the adapters' options through the one
/// reader every binding passes them to.
#[test]
fn every_options_vector_of_spec_outbound_json() {
    use ratebound::outbound::Sending;
    let spec = spec::load("outbound.json");
    let vectors = spec::list(&spec, "options", 10);
    for v in vectors {
        let id = v["id"].as_str().expect("id");
        let g = &v["given"];
        let num = |name: &str| g.get(name).map(|x| x.as_f64().expect(name));
        let statuses = spec::numbers(g, "statuses");
        let read = Outbound::from_loose(
            num("retries"),
            num("max_pause_s"),
            statuses.as_deref(),
            g.get("any_method")
                .map(|a| a.as_bool().expect("any_method")),
            num("backoff_s"),
        )
        .and_then(|o| Ok((o, Sending::from_loose(num("n"), num("timeout_s"))?)));
        match (read, v.get("error")) {
            (Ok((o, s)), None) => {
                let e = &v["expect"];
                assert_eq!(
                    u64::from(o.retries()),
                    e["retries"].as_u64().unwrap(),
                    "{id}"
                );
                assert_eq!(
                    o.max_pause().as_secs_f64(),
                    e["max_pause_s"].as_f64().unwrap(),
                    "{id}"
                );
                if let Some(b) = e.get("backoff_s") {
                    assert_eq!(o.backoff().as_secs_f64(), b.as_f64().unwrap(), "{id}");
                }
                assert_eq!(s.n(), e["n"].as_u64().unwrap(), "{id}");
                assert_eq!(
                    s.timeout().map(|t| t.as_secs_f64()),
                    e["timeout_s"].as_f64(),
                    "{id}"
                );
            }
            (Err(got), Some(want)) => {
                assert_eq!(got.code(), want["code"].as_str().unwrap(), "{id}: {got}");
                let name = format!("invalid {} ", want["name"].as_str().unwrap());
                assert!(got.to_string().starts_with(&name), "{id}: {got}");
            }
            (got, want) => panic!("{id}: got {got:?}, want {want:?}"),
        }
    }
}
