//! Reading the shared vectors of `spec/` for the outbound replays
//! (outbound_spec.rs and outbound_calls.rs include this file by path, as
//! does ratebound-client's outbound_calls.rs).

#![allow(dead_code)] // each user takes its part

use serde_json::Value;

/// `spec/<name>`, parsed.
pub fn load(name: &str) -> Value {
    let path = format!("{}/../../spec/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The list `name` of a spec file, which must hold at least `at_least`
/// entries (a file that lost vectors fails here).
pub fn list<'a>(spec: &'a Value, name: &str, at_least: usize) -> &'a [Value] {
    let list = spec[name].as_array().expect(name);
    assert!(
        list.len() >= at_least,
        "the spec lost {name}: {} of at least {at_least}",
        list.len()
    );
    list
}

/// The numbers of the list `name` in `config`, when it gives one (a
/// vector's `statuses`).
pub fn numbers(config: &Value, name: &str) -> Option<Vec<f64>> {
    config.get(name).map(|list| {
        list.as_array()
            .expect(name)
            .iter()
            .map(|v| v.as_f64().expect(name))
            .collect()
    })
}

/// A vector's `headers`: its `[name, value]` pairs.
pub fn headers(v: &Value) -> Vec<(&str, &str)> {
    v["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| (h[0].as_str().expect("name"), h[1].as_str().expect("value")))
        .collect()
}

/// `a` and `b` are the same JSON, their numbers (seconds) within
/// `tolerance` of each other.
pub fn same(a: &Value, b: &Value, tolerance: f64) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            (x.as_f64().expect("n") - y.as_f64().expect("n")).abs() < tolerance
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b, tolerance))
        }
        _ => a == b,
    }
}
