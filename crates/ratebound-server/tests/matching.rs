//! Matching request descriptors to rules as the reference server does: its
//! README examples, the walk's order, wildcards, the keys, replaces.

mod common;

use common::entries;
use ratebound_server::matching::{find, wildcard_match};
use ratebound_server::model::Config;
use ratebound_server::{Match, apply_replaces};

fn config(text: &str) -> Config {
    Config::parse(text, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
}

/// The match of `pairs` in `domain`: its limit's requests_per_unit (None:
/// unlimited) and metric key.
fn hit(c: &Config, domain: &str, pairs: &[(&str, &str)]) -> Option<(Option<u64>, String)> {
    c.find(domain, &entries(pairs)).map(|m| {
        let n = (!m.unlimited).then(|| m.limits[0].requests_per_unit);
        (n, m.metric_key)
    })
}

fn some(n: u64, metric: &str) -> Option<(Option<u64>, String)> {
    Some((Some(n), metric.to_string()))
}

#[test]
fn example_1_exact_values() {
    let c = config(common::EXAMPLE1);
    assert_eq!(
        hit(&c, "mongo_cps", &[("database", "users")]),
        some(500, "mongo_cps.database_users")
    );
    assert_eq!(
        hit(&c, "mongo_cps", &[("database", "default")]),
        some(500, "mongo_cps.database_default")
    );
    assert_eq!(hit(&c, "mongo_cps", &[("database", "other")]), None);
    assert_eq!(hit(&c, "unknown_domain", &[("database", "users")]), None);
}

#[test]
fn example_2_nested_and_key_only() {
    let c = config(common::EXAMPLE2);
    let nested = [("message_type", "marketing"), ("to_number", "2061111111")];
    assert_eq!(
        hit(&c, "messaging", &nested),
        some(5, "messaging.message_type_marketing.to_number")
    );
    assert_eq!(
        hit(&c, "messaging", &[("to_number", "2061111111")]),
        some(100, "messaging.to_number")
    );
    // Each number its own limit: the state keys differ, the metric key does not.
    let a = c
        .find("messaging", &entries(&[("to_number", "1")]))
        .unwrap();
    let b = c
        .find("messaging", &entries(&[("to_number", "2")]))
        .unwrap();
    assert_ne!(a.state_key, b.state_key);
    assert_eq!(a.metric_key, b.metric_key);
    // The placeholder alone has no rule.
    assert_eq!(hit(&c, "messaging", &[("message_type", "marketing")]), None);
}

#[test]
fn example_3_the_exact_value_before_the_key() {
    let c = config(common::EXAMPLE3);
    let d = "edge_proxy_per_ip";
    assert_eq!(
        hit(&c, d, &[("remote_address", "50.0.0.1")]),
        some(10, "edge_proxy_per_ip.remote_address")
    );
    assert_eq!(
        hit(&c, d, &[("remote_address", "50.0.0.5")]),
        some(0, "edge_proxy_per_ip.remote_address_50.0.0.5")
    );
}

#[test]
fn example_4_the_request_must_end_at_the_rules_depth() {
    let two = [("key", "value"), ("subkey", "subvalue")];
    let flat = config(common::EXAMPLE4_FLAT);
    assert_eq!(hit(&flat, "example4", &two), None);
    assert_eq!(
        hit(&flat, "example4", &[("key", "value")]),
        some(300, "example4.key_value")
    );
    let nested = config(common::EXAMPLE4_NESTED);
    assert_eq!(
        hit(&nested, "example4", &two),
        some(300, "example4.key_value.subkey")
    );
    // Shorter than the rule: the placeholder has none.
    assert_eq!(hit(&nested, "example4", &[("key", "value")]), None);
    // Longer than the tree.
    let three = [("key", "value"), ("subkey", "x"), ("more", "y")];
    assert_eq!(hit(&nested, "example4", &three), None);
    // An empty descriptor matches nothing.
    assert_eq!(hit(&nested, "example4", &[]), None);
}

#[test]
fn example_5_unlimited() {
    let c = config(common::EXAMPLE5);
    let m = c.find("internal", &entries(&[("ldap", "x")])).unwrap();
    assert!(m.unlimited && m.limits.is_empty());
    assert_eq!(
        hit(&c, "internal", &[("azure", "x")]),
        some(100, "internal.azure")
    );
}

#[test]
fn example_6_shadow_mode_is_the_matched_descriptors() {
    let c = config(common::EXAMPLE6);
    let a = c
        .find(
            "example6",
            &entries(&[("service", "auth-service"), ("user", "user-a")]),
        )
        .unwrap();
    assert!(a.descriptor.shadow_mode);
    assert_eq!(a.limits[0].requests_per_unit, 10);
    let b = c
        .find(
            "example6",
            &entries(&[("service", "auth-service"), ("user", "user-b")]),
        )
        .unwrap();
    assert!(!b.descriptor.shadow_mode);
    assert_eq!(b.limits[0].requests_per_unit, 20);
    assert_eq!(b.metric_key, "example6.service.user_user-b");
}

fn resolve<'a>(c: &'a Config, domain: &str, request: &[&[(&str, &str)]]) -> Vec<Option<Match<'a>>> {
    let mut matches: Vec<_> = request
        .iter()
        .map(|d| c.find(domain, &entries(d)))
        .collect();
    apply_replaces(&mut matches);
    matches
}

#[test]
fn example_7_replaces() {
    let c = config(common::EXAMPLE7);
    let one: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let two: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    // Alone, each applies.
    let m = resolve(&c, "example7", &[one]);
    assert_eq!(m[0].as_ref().unwrap().limits[0].requests_per_unit, 5);
    let m = resolve(&c, "example7", &[two]);
    assert_eq!(m[0].as_ref().unwrap().limits[0].requests_per_unit, 10);
    // Together, the named one is replaced: only 10/s applies.
    let m = resolve(&c, "example7", &[one, two]);
    assert!(m[0].is_none());
    assert_eq!(m[1].as_ref().unwrap().limits[0].requests_per_unit, 10);
}

#[test]
fn replaces_drops_one_of_several_limits_and_keeps_unlimited() {
    let c = config(
        "\
domain: r
descriptors:
  - key: a
    rate_limits:
      - name: burst
        unit: second
        requests_per_unit: 5
      - name: daily
        unit: day
        requests_per_unit: 100
  - key: b
    rate_limit:
      unlimited: true
      replaces:
        - name: burst
  - key: c
    rate_limit:
      name: daily
      unlimited: true
  - key: d
    rate_limit:
      unit: second
      requests_per_unit: 1
      replaces:
        - name: daily
",
    );
    let m = resolve(&c, "r", &[&[("a", "1")], &[("b", "1")]]);
    let a = m[0].as_ref().unwrap();
    assert_eq!(a.limits.len(), 1);
    assert_eq!(a.limits[0].name.as_deref(), Some("daily"));
    assert!(m[1].as_ref().unwrap().unlimited);
    // An unlimited rule is never replaced; a limit replaced by both goes.
    let m = resolve(
        &c,
        "r",
        &[&[("a", "1")], &[("b", "1")], &[("c", "1")], &[("d", "1")]],
    );
    assert!(m[0].is_none());
    assert!(m[2].as_ref().unwrap().unlimited);
    assert!(m[3].is_some());
    // Nothing named: nothing dropped.
    let m = resolve(&c, "r", &[&[("a", "1")], &[("a", "2")]]);
    assert_eq!(m[0].as_ref().unwrap().limits.len(), 2);
}

#[test]
fn example_8_detailed_metric() {
    let c = config(common::EXAMPLE8);
    assert_eq!(
        hit(&c, "example8", &[("key1", "unspecified_value")]),
        some(10, "example8.key1_unspecified_value")
    );
    assert_eq!(
        hit(&c, "example8", &[("key1", "unspecified_value2")]),
        some(10, "example8.key1_unspecified_value2")
    );
    assert_eq!(
        hit(&c, "example8", &[("key1", "value1")]),
        some(20, "example8.key1_value1")
    );
}

#[test]
fn example_9_wildcards_anywhere() {
    let c = config(common::EXAMPLE9_TRAILING);
    for v in ["value1", "value2", "valueXYZ", "value"] {
        assert_eq!(
            hit(&c, "example9", &[("key1", v)]),
            some(20, "example9.key1_value*"),
            "{v}"
        );
    }
    assert_eq!(hit(&c, "example9", &[("key1", "valu")]), None);
    let c = config(common::EXAMPLE9_MIDDLE);
    for v in ["/api/123/action", "/api/user-id/action"] {
        assert_eq!(
            hit(&c, "example9", &[("path", v)]),
            some(20, "example9.path_/api/*/action"),
            "{v}"
        );
    }
    assert_eq!(hit(&c, "example9", &[("path", "/api/123/other")]), None);
    let c = config(common::EXAMPLE9_MULTIPLE);
    for v in ["/api/v1/resource/123/action", "/api/v2/resource/456/action"] {
        assert!(hit(&c, "example9", &[("route", v)]).is_some(), "{v}");
    }
    assert_eq!(
        hit(&c, "example9", &[("route", "/api/v1/resource/123/other")]),
        None
    );
    // Without share_threshold, each value its own counter.
    let a = c
        .find(
            "example9",
            &entries(&[("route", "/api/v1/resource/1/action")]),
        )
        .unwrap();
    let b = c
        .find(
            "example9",
            &entries(&[("route", "/api/v1/resource/2/action")]),
        )
        .unwrap();
    assert_ne!(a.state_key, b.state_key);
}

#[test]
fn wildcard_table() {
    let p = |s: &str| s.split('*').map(str::to_string).collect::<Vec<_>>();
    for (pattern, value, expected) in [
        ("value*", "value", true),
        ("value*", "valueX", true),
        ("value*", "valu", false),
        ("*", "", true),
        ("*", "anything", true),
        ("*end", "the end", true),
        ("*end", "end of", false),
        ("a*b", "ab", true),
        ("a*b", "aXXb", true),
        ("a*b", "a", false),
        ("ab*ba", "aba", false),
        ("ab*ba", "abba", true),
        ("a*b*c", "abc", true),
        ("a*b*c", "aXbYc", true),
        ("a*b*c", "acb", false),
        ("a*b*c", "aXcYb", false),
        ("a**b", "ab", true),
        ("/api/*/resource/*/action", "/api//resource//action", true),
        ("/api/*/resource/*/action", "/api/1/resource/action", false),
        ("x*", "é", false),
        ("é*", "éa", true),
        ("exact", "exact", true),
        ("exact", "exactly", false),
    ] {
        assert_eq!(
            wildcard_match(&p(pattern), value),
            expected,
            "{pattern} ~ {value}"
        );
    }
}

#[test]
fn the_walks_order_exact_then_wildcards_in_file_order_then_key() {
    let c = config(
        "\
domain: o
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: ab*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: a*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: abc
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: other
    value: abc
    rate_limit: {unit: second, requests_per_unit: 5}
",
    );
    let n = |v: &str| hit(&c, "o", &[("k", v)]).and_then(|(n, _)| n);
    assert_eq!(n("abc"), Some(4));
    assert_eq!(n("abd"), Some(2));
    assert_eq!(n("axx"), Some(3));
    assert_eq!(n("zzz"), Some(1));
    // The walk does not go back: a specific match whose children do not
    // match is not retried as the key-only sibling.
    let c = config(
        "\
domain: g
descriptors:
  - key: k
    value: v
    descriptors:
      - key: child
        value: only
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    descriptors:
      - key: child
        rate_limit: {unit: second, requests_per_unit: 2}
",
    );
    assert_eq!(hit(&c, "g", &[("k", "v"), ("child", "other")]), None);
    assert_eq!(
        hit(&c, "g", &[("k", "w"), ("child", "other")]).unwrap().0,
        Some(2)
    );
    // A rule with nothing below it does not match a longer request.
    let c = config(
        "domain: l\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert_eq!(hit(&c, "l", &[("k", "v"), ("k2", "v")]), None);
}

#[test]
fn example_10_value_to_metric() {
    let c = config(common::EXAMPLE10);
    let m = |r: &str, h: &str, s: &str| {
        hit(
            &c,
            "example10",
            &[("route", r), ("http_method", h), ("subject_id", s)],
        )
    };
    assert_eq!(
        m("api", "GET", "123"),
        some(60, "example10.route_api.http_method_GET.subject_id")
    );
    assert_eq!(
        m("web", "POST", "456"),
        some(60, "example10.route_web.http_method_POST.subject_id")
    );
    let c = config(common::EXAMPLE10_WILDCARD);
    assert_eq!(
        hit(
            &c,
            "example10_wildcard",
            &[
                ("user", "alice"),
                ("action", "readfile"),
                ("resource", "documents")
            ]
        ),
        some(
            100,
            "example10_wildcard.user_alice.action_readfile.resource"
        )
    );
}

#[test]
fn example_11_share_threshold() {
    let c = config(common::EXAMPLE11);
    let key = |k: &str, v: &str| c.find("example11", &entries(&[(k, v)])).unwrap().state_key;
    // Shared: one counter for every file.
    assert_eq!(key("files", "files/a.pdf"), key("files", "files/b.csv"));
    assert_eq!(
        key("files", "files/a.pdf"),
        "#9:example11|5:files*7:files/*"
    );
    // Not shared: one each.
    assert_ne!(
        key("files_no_share", "files_no_share/a.pdf"),
        key("files_no_share", "files_no_share/b.csv")
    );
    assert_eq!(
        key("files_no_share", "files_no_share/a.pdf"),
        "#9:example11|14:files_no_share=20:files_no_share/a.pdf"
    );
    assert_eq!(
        hit(&c, "example11", &[("files", "files/x")]),
        some(10, "example11.files_files/*")
    );
    // With value_to_metric, the metric keeps the pattern. The reference's
    // code (and its tests) write `route_api/*.method`; its README's prose
    // says `route_api.method_GET`: the code is what runs.
    let c = config(common::EXAMPLE11_METRICS);
    let m = c
        .find(
            "example11_metrics",
            &entries(&[("route", "api/v1"), ("method", "GET")]),
        )
        .unwrap();
    assert_eq!(m.metric_key, "example11_metrics.route_api/*.method");
    let n = c
        .find(
            "example11_metrics",
            &entries(&[("route", "api/v2"), ("method", "GET")]),
        )
        .unwrap();
    assert_eq!(m.state_key, n.state_key);
    let o = c
        .find(
            "example11_metrics",
            &entries(&[("route", "api/v2"), ("method", "PUT")]),
        )
        .unwrap();
    assert_ne!(m.state_key, o.state_key);
}

#[test]
fn share_threshold_with_detailed_metric() {
    let c = config(
        "\
domain: s
descriptors:
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    let m = c
        .find("s", &entries(&[("service", "svc/a"), ("endpoint", "get")]))
        .unwrap();
    assert_eq!(m.metric_key, "s.service_svc/*.endpoint_get");
    let f = find(
        &c.domains["s"],
        &entries(&[("service", "svc/b"), ("endpoint", "get")]),
    )
    .unwrap();
    assert_eq!(m.state_key, f.state_key);
}

#[test]
fn state_keys_are_unambiguous() {
    let c = config(
        "domain: d\ndescriptors:\n  - key: a_b\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    // The reference's `domain_key_value_` join gives these one key.
    let x = c.find("d", &entries(&[("a_b", "c")])).unwrap();
    let y = c.find("d", &entries(&[("a", "b_c")])).unwrap();
    assert_ne!(x.state_key, y.state_key);
    assert_eq!(x.state_key, "#1:d|3:a_b=1:c");
    assert_eq!(y.state_key, "#1:d|1:a=3:b_c");
    // A value with the separators in it stays one value.
    let z = c.find("d", &entries(&[("a", "1:x|1:y")])).unwrap();
    assert_eq!(z.state_key, "#1:d|1:a=7:1:x|1:y");
}
