//! Refusals: each bad configuration with its kind, line, column and the
//! bad value named.

mod common;

use common::{assert_refused, parse, refused};
use ratebound_server::config::ConfigErrorKind;

#[test]
fn a_negative_requests_per_unit_is_refused_at_its_value() {
    let text = "\
domain: d
descriptors:
  - key: k
    # a negative limit
    rate_limit:
      unit: second
      requests_per_unit: -5
";
    let e = refused(text);
    assert_eq!(
        e.to_string(),
        "limits.yaml:7:26: requests_per_unit must be a whole number from 0 to 4294967295, got -5"
    );
    assert_eq!(e.kind, ConfigErrorKind::InvalidValue);
}

#[test]
fn requests_per_unit_must_be_a_whole_u32() {
    for bad in ["1.5", "4294967296", "ten", "\"\"", "[1]"] {
        let text = format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: {bad}\n"
        );
        let shown = bad.trim_matches('"');
        let named = if bad == "[1]" { "a list" } else { shown };
        assert_refused(&text, ConfigErrorKind::InvalidValue, 6, 26, &[named]);
    }
    // The largest is taken where the core's keyed fixed window holds it
    // (per minute); per second its 62-bit state word cannot (the
    // reference takes it: a difference, refused with the core's reason).
    parse(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 4294967295\n",
    );
    let e = refused(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 4294967295\n",
    );
    assert_eq!(e.kind, ConfigErrorKind::Unrepresentable, "{e}");
    assert!(
        e.to_string().contains("too short for limit 4294967295"),
        "{e}"
    );
}

#[test]
fn a_yaml_syntax_error_names_its_place() {
    let text = "\
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5
";
    let e = refused(text);
    assert_eq!(e.kind, ConfigErrorKind::Syntax, "{e}");
    // The parser notices at the end of the text, line 5.
    assert_eq!((e.place.line, e.place.column), (5, 1), "{e}");
    assert!(e.to_string().contains("YAML syntax error"), "{e}");
    // A tab where YAML wants spaces.
    let e = refused("domain: d\ndescriptors:\n\t- key: k\n");
    assert_eq!(
        (e.kind, e.place.line, e.place.column),
        (ConfigErrorKind::Syntax, 3, 2),
        "{e}"
    );
    assert!(e.to_string().contains("tabs"), "{e}");
}

#[test]
fn unknown_fields_are_refused_where_written() {
    // The reference's misspelled_key.yaml / misspelled_key2.yaml cases.
    let text = "\
domain: d
descriptors:
  - key: key1
    value: value1
    ratelimit:
      unit: day
      requests_per_unit: 5
";
    assert_refused(text, ConfigErrorKind::UnknownField, 5, 5, &["'ratelimit'"]);
    let text = "\
domain: d
descriptors:
  - key: key1
    value: value1
    rate_limit:
      unit: day
      requestsperunit: 5
";
    assert_refused(
        text,
        ConfigErrorKind::UnknownField,
        7,
        7,
        &["'requestsperunit'"],
    );
    // A known field at the wrong level (the reference ignores it).
    let text = "domain: d\ndescriptors:\n  - key: k\n    unit: second\n";
    assert_refused(text, ConfigErrorKind::UnknownField, 4, 5, &["'unit'"]);
    // At the top, and in a replaces entry.
    assert_refused(
        "domain: d\ndescriptor: []\n",
        ConfigErrorKind::UnknownField,
        2,
        1,
        &["'descriptor'"],
    );
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - nam: x\n";
    assert_refused(text, ConfigErrorKind::UnknownField, 8, 11, &["'nam'"]);
}

#[test]
fn unknown_units_and_algorithms_are_refused() {
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n";
    assert_refused(text, ConfigErrorKind::InvalidValue, 5, 13, &["'fortnight'"]);
    // The reference's UNKNOWN enum value is no unit.
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: unknown\n      requests_per_unit: 5\n";
    assert_refused(text, ConfigErrorKind::InvalidValue, 5, 13, &["'unknown'"]);
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: gcra\n";
    assert_refused(text, ConfigErrorKind::InvalidValue, 7, 18, &["'gcra'"]);
}

#[test]
fn missing_fields_are_refused() {
    // No key: the place is the descriptor's first field.
    let text = "domain: d\ndescriptors:\n  - value: v\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n";
    assert_refused(text, ConfigErrorKind::Missing, 3, 5, &["needs a key"]);
    // An empty key (the reference's empty_key.yaml).
    let text = "domain: d\ndescriptors:\n  - key: \"\"\n";
    assert_refused(text, ConfigErrorKind::Missing, 3, 10, &["key is empty"]);
    // No unit and no window: the place is the block's first field.
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n";
    assert_refused(text, ConfigErrorKind::Missing, 5, 7, &["unit", "window"]);
    // No domain, an empty one, an empty file.
    assert_refused(
        "descriptors: []\n",
        ConfigErrorKind::Missing,
        1,
        1,
        &["domain"],
    );
    assert_refused(
        "domain: \"\"\n",
        ConfigErrorKind::Missing,
        1,
        1,
        &["domain"],
    );
    assert_refused("# nothing\n\n", ConfigErrorKind::Missing, 1, 1, &["domain"]);
    assert_refused("", ConfigErrorKind::Missing, 1, 1, &["domain"]);
}

#[test]
fn a_duplicate_descriptor_is_refused_at_the_second() {
    // The reference's duplicate_key.yaml.
    let text = "\
domain: test-domain
descriptors:
  - key: key1
    value: value1

  - key: key1
    value: value1
";
    assert_refused(
        text,
        ConfigErrorKind::DuplicateDescriptor,
        6,
        5,
        &["key 'key1' value 'value1'", "line 3"],
    );
    // Key-only twice, nested.
    let text =
        "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n";
    assert_refused(
        text,
        ConfigErrorKind::DuplicateDescriptor,
        6,
        9,
        &["key 'b' (no value)"],
    );
    // The same key with another value, or none, is no duplicate.
    parse(
        "domain: d\ndescriptors:\n  - key: a\n    value: x\n  - key: a\n    value: y\n  - key: a\n",
    );
}

#[test]
fn unlimited_goes_alone() {
    // The reference's unlimited_with_unit.yaml.
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: day\n";
    assert_refused(
        text,
        ConfigErrorKind::Conflict,
        6,
        7,
        &["unit", "unlimited"],
    );
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n      unlimited: true\n";
    assert_refused(
        text,
        ConfigErrorKind::Conflict,
        5,
        7,
        &["requests_per_unit", "unlimited"],
    );
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - unlimited: true\n";
    assert_refused(text, ConfigErrorKind::Conflict, 5, 9, &["unlimited"]);
}

#[test]
fn share_threshold_needs_a_wildcard() {
    let text = "domain: d\ndescriptors:\n  - key: files\n    value: files/a\n    share_threshold: true\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n";
    assert_refused(text, ConfigErrorKind::Conflict, 5, 22, &["'files/a'"]);
    let text = "domain: d\ndescriptors:\n  - key: files\n    share_threshold: yes\n";
    assert_refused(text, ConfigErrorKind::Conflict, 4, 22, &["'files'"]);
}

#[test]
fn the_extensions_conflicts_are_refused() {
    let head = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n";
    // unit and window.
    assert_refused(
        &format!("{head}      unit: second\n      window: 30s\n"),
        ConfigErrorKind::Conflict,
        7,
        15,
        &["unit or window"],
    );
    // burst on another algorithm than the token bucket.
    assert_refused(
        &format!("{head}      unit: second\n      algorithm: sliding_window\n      burst: 10\n"),
        ConfigErrorKind::Conflict,
        8,
        14,
        &["burst", "sliding_window"],
    );
    assert_refused(
        &format!("{head}      unit: second\n      burst: 10\n"),
        ConfigErrorKind::Conflict,
        7,
        14,
        &["fixed_window"],
    );
    // burst 0.
    assert_refused(
        &format!("{head}      unit: second\n      algorithm: token_bucket\n      burst: 0\n"),
        ConfigErrorKind::InvalidValue,
        8,
        14,
        &["burst", "got 0"],
    );
    // a window that is no duration.
    for (bad, names) in [("5 minutes", "'5 minutes'"), ("0s", "'0s'"), ("2w", "'2w'")] {
        assert_refused(
            &format!("{head}      window: {bad}\n"),
            ConfigErrorKind::InvalidValue,
            6,
            15,
            &[names],
        );
    }
    // rate_limit and rate_limits.
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n    rate_limits:\n      - unit: day\n        requests_per_unit: 9\n";
    assert_refused(text, ConfigErrorKind::Conflict, 8, 7, &["not both"]);
    // an empty rate_limits.
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n";
    assert_refused(text, ConfigErrorKind::Missing, 4, 18, &["empty"]);
}

#[test]
fn replaces_entries_are_checked() {
    // The reference's replaces_self.yaml and replaces_empty.yaml.
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: me\n";
    assert_refused(text, ConfigErrorKind::Conflict, 9, 17, &["'me'"]);
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n";
    assert_refused(text, ConfigErrorKind::Missing, 8, 11, &["needs a name"]);
    // One of a descriptor's rate_limits replacing another.
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - name: a\n        unit: second\n        requests_per_unit: 1\n      - unit: day\n        requests_per_unit: 9\n        replaces:\n          - name: a\n";
    assert_refused(text, ConfigErrorKind::Conflict, 5, 9, &["'a'"]);
}

#[test]
fn a_limit_the_core_cannot_hold_is_refused_with_its_reason() {
    let head = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n";
    // 2^32 - 1 tokens a second: one every 0.23 ns.
    let e = refused(&format!(
        "{head}      algorithm: token_bucket\n      requests_per_unit: 4294967295\n      unit: second\n"
    ));
    assert_eq!(e.kind, ConfigErrorKind::Unrepresentable, "{e}");
    assert_eq!((e.place.line, e.place.column), (5, 7), "{e}");
    let shown = e.to_string();
    assert!(
        shown.contains("4294967295 requests per 1s with token_bucket"),
        "{shown}"
    );
    assert!(shown.contains("too high"), "{shown}");
    // A sliding log of more than the core's bound.
    let e = refused(&format!(
        "{head}      algorithm: sliding_log\n      requests_per_unit: 2000000\n      unit: hour\n"
    ));
    assert_eq!(e.kind, ConfigErrorKind::Unrepresentable, "{e}");
    assert!(e.to_string().contains("2000000"), "{e}");
    // A window too short for its count's bits.
    let e = refused(&format!(
        "{head}      requests_per_unit: 4294967295\n      window: 1ms\n"
    ));
    assert_eq!(e.kind, ConfigErrorKind::Unrepresentable, "{e}");
    assert!(e.to_string().contains("1ms"), "{e}");
}

#[test]
fn yaml_the_loader_does_not_take_is_refused_not_ignored() {
    // A key written twice in one mapping.
    let text = "domain: d\ndescriptors:\n  - key: k\n    key: j\n";
    assert_refused(text, ConfigErrorKind::Syntax, 4, 5, &["'key'", "line 3"]);
    // Anchors and aliases are read now, as the reference server reads
    // them (config_anchors.rs tests them).
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: &l\n      unit: second\n      requests_per_unit: 1\n  - key: j\n    rate_limit: *l\n";
    assert_eq!(parse(text).domains["d"].descriptors.len(), 2);
    // An alias of nothing: no panic.
    assert_eq!(
        refused("domain: d\ndescriptors: *nothing\n").kind,
        ConfigErrorKind::Syntax
    );
    // A list at the top; a descriptors entry that is no mapping; wrong kinds.
    assert_eq!(refused("- a\n- b\n").kind, ConfigErrorKind::Syntax);
    assert_refused(
        "domain: d\ndescriptors:\n  - k\n",
        ConfigErrorKind::InvalidValue,
        3,
        5,
        &["got k", "mapping"],
    );
    assert_refused(
        "domain: d\ndescriptors: k\n",
        ConfigErrorKind::InvalidValue,
        2,
        14,
        &["list", "k"],
    );
    assert_refused(
        "domain: [d]\n",
        ConfigErrorKind::InvalidValue,
        1,
        9,
        &["domain", "a list"],
    );
    assert_refused(
        "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n",
        ConfigErrorKind::InvalidValue,
        4,
        18,
        &["'maybe'"],
    );
    // quota_mode: accepted when false, refused when true; metadata ignored.
    parse(
        "domain: d\ndescriptors:\n  - key: k\n    quota_mode: false\n    metadata:\n      a: [1, {b: c}]\n",
    );
    assert_refused(
        "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n",
        ConfigErrorKind::Unsupported,
        4,
        17,
        &["quota_mode"],
    );
}

#[test]
fn nesting_is_bounded() {
    let mut text = String::from("domain: d\ndescriptors:\n");
    for depth in 0..100 {
        let pad = "  ".repeat(depth * 2);
        text.push_str(&format!("{pad}  - key: k{depth}\n{pad}    descriptors:\n"));
    }
    let e = refused(&text);
    assert_eq!(e.kind, ConfigErrorKind::InvalidValue, "{e}");
    assert!(e.to_string().contains("64 levels"), "{e}");
}
