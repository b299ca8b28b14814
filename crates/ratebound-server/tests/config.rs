//! Reading configurations: the reference server's README examples and the
//! extensions (refusals: `config_errors.rs`; directories: `config_files.rs`).

mod common;

use std::time::Duration;

use common::parse;
use ratebound_server::config::parse_window;
use ratebound_server::model::{Algorithm, Config, Descriptor, Rule, Unit, Value};

fn top<'a>(config: &'a Config, domain: &str) -> &'a [Descriptor] {
    &config.domains[domain].descriptors
}

fn limits(d: &Descriptor) -> &[ratebound_server::model::Limit] {
    match &d.rule {
        Some(Rule::Limits(l)) => l,
        other => panic!("not limits: {other:?}"),
    }
}

#[test]
fn every_readme_example_loads() {
    for (file, text) in common::ALL {
        let config = Config::parse(text, file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.domains.len(), 1, "{file}");
    }
}

#[test]
fn readme_examples_read_as_the_readme_says() {
    // Example 1: two values of one key, 500 per second each.
    let c = parse(common::EXAMPLE1);
    let d = top(&c, "mongo_cps");
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].value, Some(Value::Exact("users".into())));
    assert_eq!(d[1].value, Some(Value::Exact("default".into())));
    for desc in d {
        let l = &limits(desc)[0];
        assert_eq!(l.requests_per_unit, 500);
        assert_eq!(l.window.unit, Unit::Second);
        assert_eq!(l.window.length, Duration::from_secs(1));
        assert_eq!(l.algorithm, Algorithm::FixedWindow);
        assert_eq!(l.burst, None);
    }
    assert_eq!((d[0].place.line, d[0].place.column), (3, 5));
    assert_eq!((d[1].place.line, d[1].place.column), (9, 5));

    // Example 2: a placeholder with a nested key-only rule.
    let c = parse(common::EXAMPLE2);
    let d = top(&c, "messaging");
    assert_eq!(d[0].rule, None);
    assert_eq!(d[0].children[0].key, "to_number");
    assert_eq!(d[0].children[0].value, None);
    assert_eq!(limits(&d[0].children[0])[0].window.unit, Unit::Day);
    assert_eq!(limits(&d[1])[0].requests_per_unit, 100);

    // Example 3: requests_per_unit 0, the black list.
    let c = parse(common::EXAMPLE3);
    assert_eq!(
        limits(&top(&c, "edge_proxy_per_ip")[1])[0].requests_per_unit,
        0
    );

    // Example 5: unlimited.
    let c = parse(common::EXAMPLE5);
    assert_eq!(top(&c, "internal")[0].rule, Some(Rule::Unlimited));

    // Example 6: shadow mode on user-a only.
    let c = parse(common::EXAMPLE6);
    let users = &top(&c, "example6")[0].children;
    assert!(users[0].shadow_mode);
    assert!(!users[1].shadow_mode);

    // Example 7: a name, and replaces gathered on the descriptor.
    let c = parse(common::EXAMPLE7);
    let d = top(&c, "example7");
    assert_eq!(
        limits(&d[0].children[0])[0].name.as_deref(),
        Some("specific_limit")
    );
    assert_eq!(
        d[1].children[0].replaces,
        vec!["specific_limit".to_string()]
    );

    // Example 8: detailed_metric.
    assert!(top(&parse(common::EXAMPLE8), "example8")[0].detailed_metric);

    // Example 9: wildcards anywhere.
    let c = parse(common::EXAMPLE9_MULTIPLE);
    assert_eq!(
        top(&c, "example9")[0].value,
        Some(Value::Wildcard(vec![
            "/api/".into(),
            "/resource/".into(),
            "/action".into()
        ]))
    );

    // Example 10: value_to_metric on two levels.
    let c = parse(common::EXAMPLE10);
    let route = &top(&c, "example10")[0];
    assert!(route.value_to_metric && route.children[0].value_to_metric);

    // Example 11: share_threshold on one of two wildcards.
    let c = parse(common::EXAMPLE11);
    let d = top(&c, "example11");
    assert!(d[0].share_threshold && !d[1].share_threshold);
}

#[test]
fn units_are_read_case_insensitively_as_the_reference() {
    for (written, unit) in [
        ("second", Unit::Second),
        ("SECOND", Unit::Second),
        ("Minute", Unit::Minute),
        ("hour", Unit::Hour),
        ("day", Unit::Day),
        ("week", Unit::Week),
        ("month", Unit::Month),
        ("YEAR", Unit::Year),
    ] {
        let text = format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: {written}\n      requests_per_unit: 3\n"
        );
        let c = parse(&text);
        let l = &limits(&top(&c, "d")[0])[0];
        assert_eq!(l.window.unit, unit, "{written}");
        assert_eq!(l.window.length, unit.length(), "{written}");
    }
}

#[test]
fn the_extensions_are_read() {
    let c = parse(
        "\
domain: ext
descriptors:
  - key: api_key
    rate_limits:
      - name: burst
        requests_per_unit: 20
        window: 2s
        algorithm: token_bucket
        burst: 40
      - name: daily
        requests_per_unit: 10000
        unit: day
        replaces:
          - name: other
  - key: path
    rate_limit:
      algorithm: sliding_window
      requests_per_unit: 100
      window: 1500ms
  - key: user
    rate_limit:
      algorithm: sliding_log
      requests_per_unit: 5
      unit: minute
  - key: token
    rate_limit:
      algorithm: token_bucket
      requests_per_unit: 5
      unit: second
",
    );
    let d = top(&c, "ext");
    let l = limits(&d[0]);
    assert_eq!(l.len(), 2);
    assert_eq!(l[0].name.as_deref(), Some("burst"));
    assert_eq!(l[0].algorithm, Algorithm::TokenBucket);
    assert_eq!(l[0].burst, Some(40));
    assert_eq!(l[0].window.length, Duration::from_secs(2));
    assert_eq!(l[0].window.unit, Unit::Second);
    assert_eq!((l[0].place.line, l[0].place.column), (5, 9));
    assert_eq!(l[1].algorithm, Algorithm::FixedWindow);
    assert_eq!(l[1].window.unit, Unit::Day);
    assert_eq!(d[0].replaces, vec!["other".to_string()]);
    let l = &limits(&d[1])[0];
    assert_eq!(l.algorithm, Algorithm::SlidingWindow);
    assert_eq!(l.window.length, Duration::from_millis(1500));
    // A window no unit divides reports SECOND.
    assert_eq!(l.window.unit, Unit::Second);
    assert_eq!(limits(&d[2])[0].algorithm, Algorithm::SlidingLog);
    // A token bucket without burst: None (the engine takes requests_per_unit).
    assert_eq!(limits(&d[3])[0].burst, None);
}

#[test]
fn a_window_reports_the_largest_unit_that_divides_it() {
    for (text, unit, millis) in [
        ("500ms", Unit::Second, 500),
        ("1500ms", Unit::Second, 1_500),
        ("2s", Unit::Second, 2_000),
        ("90s", Unit::Second, 90_000),
        ("30s", Unit::Second, 30_000),
        ("120s", Unit::Minute, 120_000),
        ("5m", Unit::Minute, 300_000),
        ("60m", Unit::Hour, 3_600_000),
        ("1h", Unit::Hour, 3_600_000),
        ("1d", Unit::Day, 86_400_000),
        ("7d", Unit::Week, 604_800_000),
        ("30d", Unit::Month, 2_592_000_000),
        ("365d", Unit::Year, 31_536_000_000),
    ] {
        let w = parse_window(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(w.unit, unit, "{text}");
        assert_eq!(w.length, Duration::from_millis(millis), "{text}");
    }
    for bad in ["0s", "5", "5 minutes", "1.5s", "-1s", "s", "2w", ""] {
        assert!(parse_window(bad).is_err(), "{bad}");
    }
}
