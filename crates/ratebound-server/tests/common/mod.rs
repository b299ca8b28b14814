//! The reference server's README examples (envoyproxy/ratelimit, "Examples"
//! 1–11), written out here as test inputs: a user's file must read
//! unchanged.

#![allow(dead_code)]

use std::path::PathBuf;

use futures_util::FutureExt;
use ratebound_server::ConfigError;
use ratebound_server::api::{Request, Response};
use ratebound_server::config::ConfigErrorKind;
use ratebound_server::engine::{Engine, RequestError};
use ratebound_server::model::Config;

pub const EXAMPLE1: &str = "\
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
";

pub const EXAMPLE2: &str = "\
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";

pub const EXAMPLE3: &str = "\
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
";

pub const EXAMPLE4_FLAT: &str = "\
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
";

pub const EXAMPLE4_NESTED: &str = "\
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
";

pub const EXAMPLE5: &str = "\
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
";

pub const EXAMPLE6: &str = "\
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
";

pub const EXAMPLE7: &str = "\
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
";

pub const EXAMPLE8: &str = "\
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

pub const EXAMPLE9_TRAILING: &str = "\
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

pub const EXAMPLE9_MIDDLE: &str = "\
domain: example9
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

pub const EXAMPLE9_MULTIPLE: &str = "\
domain: example9
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

pub const EXAMPLE10: &str = "\
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
";

pub const EXAMPLE10_WILDCARD: &str = "\
domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
";

pub const EXAMPLE11: &str = "\
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
";

pub const EXAMPLE11_METRICS: &str = "\
domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
";

/// Every example, with a file name.
pub const ALL: [(&str, &str); 16] = [
    ("example1.yaml", EXAMPLE1),
    ("example2.yaml", EXAMPLE2),
    ("example3.yaml", EXAMPLE3),
    ("example4_flat.yaml", EXAMPLE4_FLAT),
    ("example4_nested.yaml", EXAMPLE4_NESTED),
    ("example5.yaml", EXAMPLE5),
    ("example6.yaml", EXAMPLE6),
    ("example7.yaml", EXAMPLE7),
    ("example8.yaml", EXAMPLE8),
    ("example9_trailing.yaml", EXAMPLE9_TRAILING),
    ("example9_middle.yaml", EXAMPLE9_MIDDLE),
    ("example9_multiple.yaml", EXAMPLE9_MULTIPLE),
    ("example10.yaml", EXAMPLE10),
    ("example10_wildcard.yaml", EXAMPLE10_WILDCARD),
    ("example11.yaml", EXAMPLE11),
    ("example11_metrics.yaml", EXAMPLE11_METRICS),
];

/// `(key, value)` entries from string pairs.
pub fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `text` read as `limits.yaml`; panics with the error if refused.
pub fn parse(text: &str) -> Config {
    match Config::parse(text, "limits.yaml") {
        Ok(c) => c,
        Err(e) => panic!("refused: {e}"),
    }
}

/// The error `text` (as `limits.yaml`) is refused with.
pub fn refused(text: &str) -> ConfigError {
    match Config::parse(text, "limits.yaml") {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

/// Asserts `text` is refused as `kind` at `line:column`, the message
/// naming each of `names`.
pub fn assert_refused(
    text: &str,
    kind: ConfigErrorKind,
    line: usize,
    column: usize,
    names: &[&str],
) {
    let e = refused(text);
    let shown = e.to_string();
    assert_eq!(e.kind, kind, "{shown}");
    assert_eq!((e.place.line, e.place.column), (line, column), "{shown}");
    assert_eq!(e.place.file, PathBuf::from("limits.yaml"));
    assert!(
        shown.starts_with(&format!("limits.yaml:{line}:{column}: ")),
        "{shown}"
    );
    for name in names {
        assert!(shown.contains(name), "{shown} does not name {name}");
    }
}

/// An in-process engine's decision, which is ready at the first poll.
pub trait DecideNow {
    /// [`Engine::decide`], polled once.
    fn decide_now(&self, request: &Request) -> Result<Response, RequestError>;
}

impl DecideNow for Engine {
    fn decide_now(&self, request: &Request) -> Result<Response, RequestError> {
        self.decide(request)
            .now_or_never()
            .expect("an in-process decision is ready at the first poll")
    }
}
