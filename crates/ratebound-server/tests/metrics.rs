//! The engine's counts per domain and descriptor, in Prometheus' text
//! format: hits, within, near (80 % spent), over, shadow mode; a hostile
//! value in a metric key escaped; the series bounded.

mod common;
use common::DecideNow;

use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound_server::api::{Request, RequestDescriptor};
use ratebound_server::engine::{Engine, Options};
use ratebound_server::model::Config;

const NOON: u64 = 1_796_558_400 * 1_000_000_000;

fn engine(yaml: &str) -> Engine {
    let clock = ManualClock::new();
    clock.set_nanos(NOON);
    let options = Options {
        clock: AnyClock::Manual(clock),
        max_keys: 100,
        ..Options::default()
    };
    Engine::with_options(Config::parse(yaml, "m.yaml").expect("config"), options).expect("engine")
}

fn ask(e: &Engine, domain: &str, entries: &[(&str, &str)]) {
    let req = Request {
        domain: domain.to_string(),
        descriptors: vec![RequestDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            hits_addend: None,
            limit: None,
        }],
        hits_addend: 0,
    };
    e.decide_now(&req).expect("decide");
}

/// The value of the series `name{labels}` in `text`.
fn value(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn decisions_are_counted_per_descriptor_within_near_over_and_shadow() {
    // The reference README's example 6: user-a in shadow mode (10/s),
    // user-b limited (20/s).
    let e = engine(common::EXAMPLE6);
    for _ in 0..12 {
        ask(
            &e,
            "example6",
            &[("service", "auth-service"), ("user", "user-a")],
        );
    }
    for _ in 0..17 {
        ask(
            &e,
            "example6",
            &[("service", "auth-service"), ("user", "user-b")],
        );
    }
    let mut text = String::new();
    e.render_metrics(&mut text);
    let a = "{domain=\"example6\",descriptor=\"example6.service.user_user-a\"}";
    let b = "{domain=\"example6\",descriptor=\"example6.service.user_user-b\"}";
    let get = |m: &str, s: &str| value(&text, &format!("{m}{s}"));
    assert_eq!(
        get("ratebound_descriptor_hits_total", a),
        Some(12),
        "{text}"
    );
    assert_eq!(get("ratebound_descriptor_within_limit_total", a), Some(10));
    assert_eq!(get("ratebound_descriptor_over_limit_total", a), Some(2));
    assert_eq!(get("ratebound_descriptor_shadow_mode_total", a), Some(2));
    // user-b: 17 of 20, the 17th past 80 % (16).
    assert_eq!(get("ratebound_descriptor_within_limit_total", b), Some(17));
    assert_eq!(get("ratebound_descriptor_near_limit_total", b), Some(1));
    assert_eq!(get("ratebound_descriptor_over_limit_total", b), Some(0));
    assert!(text.contains("# TYPE ratebound_descriptor_hits_total counter"));
}

#[test]
fn a_hostile_value_in_a_metric_key_is_escaped() {
    let e = engine(
        "domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit:
      unit: second
      requests_per_unit: 5
",
    );
    ask(&e, "d", &[("user", "x\"} 999\nevil_total 1")]);
    let mut text = String::new();
    e.render_metrics(&mut text);
    assert!(!text.lines().any(|l| l.starts_with("evil_total")), "{text}");
    assert!(
        text.contains(r#"descriptor="d.user_x\"} 999\nevil_total 1"} 1"#),
        "{text}"
    );
}

#[test]
fn past_the_bound_new_series_are_counted_as_other() {
    use ratebound_server::stats::{MAX_SERIES, OTHER};
    let e = engine(
        "domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit:
      unit: second
      requests_per_unit: 5
",
    );
    for i in 0..MAX_SERIES + 5 {
        ask(&e, "d", &[("user", &format!("u{i}"))]);
    }
    ask(&e, "d", &[("user", "u0")]);
    let mut text = String::new();
    e.render_metrics(&mut text);
    let hits: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("ratebound_descriptor_hits_total{"))
        .collect();
    assert_eq!(
        hits.len(),
        MAX_SERIES + 1,
        "the bound, and one series for the rest"
    );
    let other = format!("{{domain=\"d\",descriptor=\"{OTHER}\"}}");
    assert_eq!(
        value(&text, &format!("ratebound_descriptor_hits_total{other}")),
        Some(5)
    );
    // A series counted apart stays apart.
    assert_eq!(
        value(
            &text,
            "ratebound_descriptor_hits_total{domain=\"d\",descriptor=\"d.user_u0\"}"
        ),
        Some(2)
    );
}
