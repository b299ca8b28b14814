//! Reading the shared vectors of `spec/` for the outbound replays
//! (outbound_spec.rs and outbound_calls.rs include this file by path).

#![allow(dead_code)] // each user takes its part

use serde_json::Value;

/// `spec/<name>`, parsed.
pub fn load(name: &str) -> Value {
    let path = format!("{}/../../spec/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
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
