//! YAML anchors (`&a`), aliases (`*a`) and merge keys (`<<: *a`,
//! `<<: [*a, *b]`), read as the reference server's parser (Go's `yaml.v2`)
//! reads them: a file written with them loads to the rules of the file
//! written out in full; errors keep naming the file, line and column
//! (where the bad value is written, and the alias that brought it:
//! `config_anchor_errors.rs`).

mod common;

use common::{assert_refused, parse, refused};
use ratebound_server::config::ConfigErrorKind;
use ratebound_server::model::{Config, Descriptor, Place, Rule, Unit};

/// `config` without its places (an alias's copy is placed where its
/// anchored node is written, not where the written-out file has it).
fn unplaced(mut config: Config) -> Config {
    fn walk(list: &mut [Descriptor]) {
        for d in list {
            d.place = Place::default();
            if let Some(Rule::Limits(limits)) = &mut d.rule {
                for l in limits {
                    l.place = Place::default();
                }
            }
            walk(&mut d.children);
        }
    }
    for domain in config.domains.values_mut() {
        domain.place = Place::default();
        walk(&mut domain.descriptors);
    }
    config
}

/// Asserts `anchored` loads to the rules of `written_out`.
fn same_rules(anchored: &str, written_out: &str) {
    assert_eq!(unplaced(parse(anchored)), unplaced(parse(written_out)));
}

// The reference README's examples 1, 6, 8 and 10 (common/mod.rs writes
// them out as the README does), written here with anchors, aliases and
// merge keys.

/// Example 1: one `rate_limit` anchored, aliased by the other value.
const EXAMPLE1_ANCHORED: &str = "\
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: &per_database
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit: *per_database
";

/// Example 6: user-b's block merges user-a's and sets its own count.
const EXAMPLE6_MERGED: &str = "\
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: &per_user
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          <<: *per_user
          requests_per_unit: 20
";

/// Example 8: the merge adds `unit` to a block that sets
/// `requests_per_unit` (flow style).
const EXAMPLE8_MERGED: &str = "\
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: &per_minute
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit: {<<: *per_minute, requests_per_unit: 20}
";

/// Example 10: a scalar anchored and used as a value.
const EXAMPLE10_SCALAR: &str = "\
domain: example10
descriptors:
  - key: route
    value_to_metric: &metric true
    descriptors:
      - key: http_method
        value_to_metric: *metric
        descriptors:
          - key: subject_id
            rate_limit:
              unit: &unit minute
              requests_per_unit: 60
";

#[test]
fn the_reference_examples_with_anchors_read_as_written_out() {
    same_rules(EXAMPLE1_ANCHORED, common::EXAMPLE1);
    same_rules(EXAMPLE6_MERGED, common::EXAMPLE6);
    same_rules(EXAMPLE8_MERGED, common::EXAMPLE8);
    same_rules(EXAMPLE10_SCALAR, common::EXAMPLE10);
    // And they differ where they should: a count changed in the anchored
    // block changes both descriptors.
    let changed = EXAMPLE1_ANCHORED.replace("500", "499");
    assert_ne!(unplaced(parse(&changed)), unplaced(parse(common::EXAMPLE1)));
    let c = parse(&changed);
    for d in &c.domains["mongo_cps"].descriptors {
        match &d.rule {
            Some(Rule::Limits(l)) => assert_eq!(l[0].requests_per_unit, 499),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_list_of_descriptors_and_a_descriptor_are_reused() {
    let anchored = "\
domain: d
descriptors:
  - key: tenant
    value: a
    descriptors: &per_user
      - key: user
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: ip
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: tenant
    value: b
    descriptors: *per_user
  - &plan
    key: plan
    value: free
    rate_limit: {unit: day, requests_per_unit: 1000}
  - <<: *plan
    value: paid
";
    let written_out = "\
domain: d
descriptors:
  - key: tenant
    value: a
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: ip
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: tenant
    value: b
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: ip
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: plan
    value: free
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: plan
    value: paid
    rate_limit: {unit: day, requests_per_unit: 1000}
";
    same_rules(anchored, written_out);
    // Places: a copy is where its anchored node is written; a mapping
    // that merges begins at its first written key.
    let c = parse(anchored);
    let top = &c.domains["d"].descriptors;
    let (a_user, b_user) = (&top[0].children[0], &top[1].children[0]);
    assert_eq!((a_user.place.line, a_user.place.column), (6, 9));
    assert_eq!((b_user.place.line, b_user.place.column), (6, 9));
    assert_eq!((top[3].place.line, top[3].place.column), (18, 5));
}

#[test]
fn merge_keys_follow_yaml_v2() {
    // The keys written win over the merged ones; of a list of merged
    // mappings the earlier wins; a merge adds only what is not written.
    let text = "\
domain: d
descriptors:
  - key: a
    rate_limit: &a {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: &b {unit: hour, requests_per_unit: 7, name: b_limit}
  - key: c
    rate_limit: {<<: [*a, *b]}
  - key: d
    rate_limit: {<<: [*b, *a], requests_per_unit: 9}
  - key: e
    rate_limit:
      <<: {unit: week}
      requests_per_unit: 1
";
    let c = parse(text);
    let limit = |i: usize| match &c.domains["d"].descriptors[i].rule {
        Some(Rule::Limits(l)) => l[0].clone(),
        other => panic!("{other:?}"),
    };
    let l = limit(2);
    assert_eq!(
        (l.window.unit, l.requests_per_unit, l.name.as_deref()),
        (Unit::Minute, 5, Some("b_limit"))
    );
    let l = limit(3);
    assert_eq!(
        (l.window.unit, l.requests_per_unit, l.name.as_deref()),
        (Unit::Hour, 9, Some("b_limit"))
    );
    let l = limit(4);
    assert_eq!((l.window.unit, l.requests_per_unit), (Unit::Week, 1));
    // A block that merges begins at its first written key (e's at
    // `requests_per_unit`, written after `<<`); one that writes none, at
    // its first merged key, where that is written (c's: a's `unit`).
    assert_eq!(
        (l.place.line, limit(2).place.line, limit(2).place.column),
        (14, 4, 21)
    );
    // "<<" quoted is a key like any other (here an unknown field).
    assert_refused(
        "domain: d\ndescriptors:\n  - key: k\n    \"<<\": {key: j}\n",
        ConfigErrorKind::UnknownField,
        4,
        5,
        &["'<<'"],
    );
}

#[test]
fn a_scalar_alias_keeps_how_it_was_written() {
    // Plain `true` through an alias is a boolean; a quoted "true" is the
    // string it is, here as in the anchored place.
    let text = "\
domain: d
descriptors:
  - key: k
    value: &v \"true\"
    shadow_mode: *v
";
    let e = refused(text);
    assert_eq!(e.kind, ConfigErrorKind::InvalidValue, "{e}");
    assert_eq!((e.place.line, e.place.column), (4, 15), "{e}");
    assert!(
        e.message.contains("the string \"true\"") && e.message.contains("*v at line 5, column 18"),
        "{e}"
    );
    // A key may be an alias too (of the anchored key `key`), a value the
    // domain's name.
    let c = parse("domain: &name edge\ndescriptors:\n  - &k key: *name\n  - *k : other\n");
    let d = &c.domains["edge"].descriptors;
    assert_eq!(
        d.iter()
            .map(|d| (d.key.as_str(), d.value.clone()))
            .collect::<Vec<_>>(),
        [("edge", None), ("other", None)]
    );
    // An alias key is still a key written twice.
    assert_refused(
        "domain: d\ndescriptors:\n  - &k key: a\n    *k : b\n",
        ConfigErrorKind::Syntax,
        3,
        8,
        &["'key'", "written twice", "first at line 3"],
    );
}

#[test]
fn a_rate_limit_both_merged_and_written_is_filled_in_field_by_field() {
    // yaml.v2 decodes `rate_limit` into a Go struct pointer, which a merge
    // fills and a `rate_limit` written after `<<` fills again, field by
    // field: the merged block's `name` stays under the written count.
    let text = "\
domain: d
descriptors:
  - &tenant
    key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100, name: tenant_limit}
  - <<: *tenant
    value: vip
    rate_limit: {requests_per_unit: 1000}
  - key: other
    rate_limit: &hourly {unit: hour, requests_per_unit: 7, name: hourly}
  - key: both
    <<: [{rate_limit: {requests_per_unit: 1}}, {rate_limit: *hourly}]
";
    let written_out = "\
domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100, name: tenant_limit}
  - key: tenant
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 1000, name: tenant_limit}
  - key: other
    rate_limit: {unit: hour, requests_per_unit: 7, name: hourly}
  - key: both
    rate_limit: {unit: hour, requests_per_unit: 1, name: hourly}
";
    same_rules(text, written_out);
    // Another field (a list of descriptors) is replaced whole, as yaml.v2
    // replaces a Go slice.
    let text = "\
domain: d
descriptors:
  - &parent
    key: parent
    value: a
    descriptors:
      - key: x
  - <<: *parent
    value: b
    descriptors:
      - key: y
";
    let c = parse(text);
    let b = &c.domains["d"].descriptors[1];
    assert_eq!(
        b.children
            .iter()
            .map(|d| d.key.as_str())
            .collect::<Vec<_>>(),
        ["y"]
    );
}
