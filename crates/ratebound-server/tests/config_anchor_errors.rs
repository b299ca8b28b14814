//! Refusals around YAML anchors, aliases and merge keys: each names the
//! file, line and column (where a bad value is written, and the alias
//! that brought it), and a file whose aliases would expand without bound
//! is refused before anything is expanded (reading them:
//! `config_anchors.rs`).

mod common;

use common::{assert_refused, parse, refused};
use ratebound_server::config::{ConfigErrorKind, MAX_ALIAS_NODES, MAX_NESTING};

/// The 1-based column of `needle` in line `line` of `text`.
fn column(text: &str, line: usize, needle: &str) -> usize {
    let l = text.lines().nth(line - 1).expect("line");
    l.find(needle).unwrap_or_else(|| panic!("{needle} in {l}")) + 1
}

#[test]
fn a_bad_value_is_placed_where_written_and_names_the_alias() {
    // The anchored block sits unread in `metadata` (ignored), its bad unit
    // read where `*t` uses it: reported at the anchored text, naming the
    // alias.
    let text = "\
domain: d
descriptors:
  - key: k
    metadata:
      template: &t {unit: fortnight, requests_per_unit: 5}
  - key: j
    rate_limit: *t
";
    let e = refused(text);
    assert_eq!(e.kind, ConfigErrorKind::InvalidValue, "{e}");
    assert_eq!(
        (e.place.line, e.place.column),
        (5, column(text, 5, "fortnight")),
        "{e}"
    );
    assert!(
        e.to_string().contains("fortnight")
            && e.to_string()
                .ends_with("(through the alias *t at line 7, column 17)"),
        "{e}"
    );

    // A bad value written in the mapping that merges: its own place, no
    // alias named.
    let text = "\
domain: d
descriptors:
  - key: k
    rate_limit: &t
      unit: second
      requests_per_unit: 5
  - key: j
    rate_limit:
      <<: *t
      requests_per_unit: -1
";
    let e = refused(text);
    assert_eq!(e.kind, ConfigErrorKind::InvalidValue, "{e}");
    assert_eq!((e.place.line, e.place.column), (10, 26), "{e}");
    assert!(
        e.message.contains("got -1") && !e.message.contains("alias"),
        "{e}"
    );

    // A bad value the merge brought: where it is written, naming the
    // alias of the merge.
    let text = "\
domain: d
descriptors:
  - key: k
    metadata:
      template: &t {unit: fortnight}
  - key: j
    rate_limit:
      <<: *t
      requests_per_unit: 5
";
    let e = refused(text);
    assert_eq!(
        (e.kind, e.place.line, e.place.column),
        (
            ConfigErrorKind::InvalidValue,
            5,
            column(text, 5, "fortnight")
        ),
        "{e}"
    );
    assert!(
        e.message
            .ends_with("(through the alias *t at line 8, column 11)"),
        "{e}"
    );

    // Through two aliases: each named, the inner first.
    let text = "\
domain: d
descriptors:
  - key: k
    metadata:
      unit_only: &u {unit: fortnight}
      block: &b {<<: *u, requests_per_unit: 5}
  - key: j
    rate_limit: *b
";
    let e = refused(text);
    assert_eq!(
        (e.place.line, e.place.column),
        (5, column(text, 5, "fortnight")),
        "{e}"
    );
    assert!(
        e.message
            .ends_with("(through the alias *u at line 6, column 22, in *b at line 8, column 17)"),
        "{e}"
    );

    // A descriptor aliased twice at one level: a duplicate, at the
    // anchored descriptor, naming the alias.
    let text = "domain: d\ndescriptors:\n  - &d {key: k, value: v}\n  - *d\n";
    let e = refused(text);
    assert_eq!(
        (e.kind, e.place.line, e.place.column),
        (ConfigErrorKind::DuplicateDescriptor, 3, 9),
        "{e}"
    );
    assert!(e.message.contains("*d at line 4, column 5"), "{e}");
}

#[test]
fn merge_keys_the_reference_would_read_differently_are_refused() {
    // A key written before `<<` that the merge sets too: yaml.v2 takes the
    // merged value there (it applies `<<` in the order written), YAML's
    // merge rule the written one. Refused, not guessed.
    let text = "\
domain: d
descriptors:
  - key: k
    rate_limit: &per_minute
      unit: minute
      requests_per_unit: 10
  - key: j
    rate_limit:
      requests_per_unit: 20
      <<: *per_minute
";
    assert_refused(
        text,
        ConfigErrorKind::Conflict,
        9,
        7,
        &["'requests_per_unit'", "'<<' (line 10)", "write '<<' first"],
    );
    // Written after `<<`, or not set by the merge: read.
    parse(&text.replace(
        "requests_per_unit: 20\n      <<: *per_minute",
        "<<: *per_minute\n      requests_per_unit: 20",
    ));
    parse(&text.replace(
        "requests_per_unit: 20\n      <<: *per_minute",
        "name: j\n      <<: *per_minute",
    ));
    // `<<` takes mappings only.
    let head = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: &r {unit: second}\n    value: &s text\n  - key: j\n    rate_limit:\n      <<: ";
    assert_refused(
        &format!("{head}*s\n"),
        ConfigErrorKind::InvalidValue,
        5,
        15,
        &["'<<'", "got 'text'", "*s at line 8, column 11"],
    );
    assert_refused(
        &format!("{head}[*r, [a]]\n"),
        ConfigErrorKind::InvalidValue,
        8,
        16,
        &["'<<'", "got a list"],
    );
    // `<<` twice, or a key twice beside a merge: written twice.
    assert_refused(
        &format!("{head}*r\n      <<: *r\n"),
        ConfigErrorKind::Syntax,
        9,
        7,
        &["'<<'", "written twice", "first at line 8"],
    );
    assert_refused(
        &format!("{head}*r\n      requests_per_unit: 1\n      requests_per_unit: 2\n"),
        ConfigErrorKind::Syntax,
        10,
        7,
        &["'requests_per_unit'", "written twice", "first at line 9"],
    );
}

#[test]
fn aliases_to_nothing_or_to_themselves_are_refused() {
    assert_refused(
        "domain: d\ndescriptors: *nothing\n",
        ConfigErrorKind::Syntax,
        2,
        14,
        &["*nothing", "names no anchor"],
    );
    // An alias written before its anchor names nothing yet.
    assert_refused(
        "domain: d\ndescriptors:\n  - key: *k\n  - key: &k k\n",
        ConfigErrorKind::Syntax,
        3,
        10,
        &["*k", "&k must be written before it"],
    );
    // A node that contains its own alias.
    assert_refused(
        "domain: d\ndescriptors:\n  - key: k\n    metadata: &m {self: *m}\n",
        ConfigErrorKind::Syntax,
        4,
        25,
        &["*m", "contain itself"],
    );
    // Tags are still refused (as before anchors were read).
    assert_refused(
        "domain: d\ndescriptors:\n  - key: !!str k\n",
        ConfigErrorKind::Syntax,
        3,
        16,
        &["tags"],
    );
}

#[test]
fn a_billion_laughs_is_refused_at_the_alias_that_passes_the_bound() {
    // Each level nine aliases of the one before: 10, 91, 820, 7 381,
    // 66 430, 597 871 ... nodes; about 10^10 at the last level, were it
    // expanded.
    let mut text = String::from(
        "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
    for pair in names.windows(2) {
        let (prev, this) = (pair[0], pair[1]);
        let aliases = vec![format!("*{prev}"); 9].join(", ");
        text.push_str(&format!("      {this}: &{this} [{aliases}]\n"));
    }
    text.push_str("  - key: j\n    metadata: *j\n");
    let e = refused(&text);
    assert_eq!(e.kind, ConfigErrorKind::Syntax, "{e}");
    // a..e add 74 718 nodes; f's first *e (66 430 more) passes the bound.
    assert_eq!(
        (e.place.line, e.place.column),
        (10, column(&text, 10, "*e")),
        "{e}"
    );
    assert!(
        e.message.contains("*e")
            && e.message.contains(&MAX_ALIAS_NODES.to_string())
            && e.message.contains("74718 so far"),
        "{e}"
    );
    // Reuse well under the bound reads.
    let mut text = String::from(
        "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    text.push_str("      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n      c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n");
    parse(&text);
}

#[test]
fn nesting_is_bounded_before_the_reader() {
    // Deeper than any rule, in ignored metadata: refused by the loader.
    let mut text = String::from("domain: d\ndescriptors:\n  - key: k\n    metadata:\n");
    for depth in 0..MAX_NESTING + 10 {
        text.push_str(&format!("{}a:\n", " ".repeat(6 + depth)));
    }
    let e = refused(&text);
    assert_eq!(e.kind, ConfigErrorKind::Syntax, "{e}");
    assert!(e.message.contains(&format!("{MAX_NESTING} levels")), "{e}");
}
