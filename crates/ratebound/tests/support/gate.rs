//! Shared by the replays of `spec/gate.json` in this crate and in
//! `ratebound-http` (which includes this file by path).

use ratebound::KeyedAlgorithm;
use ratebound::any::{Rate, keyed_algorithm};
use serde_json::Value;

/// The vectors file.
pub fn load() -> Value {
    let path = format!("{}/../../spec/gate.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `spec/gate_rules.json`: the rules between a front door and its
/// framework (two limits on one response, the client address).
pub fn load_rules() -> Value {
    let path = format!("{}/../../spec/gate_rules.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One policy of a vector's options.
pub fn policy(p: &Value) -> (String, KeyedAlgorithm) {
    let num = |k: &str| p.get(k).and_then(Value::as_f64);
    let rate = match p.get("rate") {
        Some(Value::String(s)) => Some(Rate::Text(s)),
        Some(v) => v.as_f64().map(Rate::PerSecond),
        None => None,
    };
    let algorithm = p
        .get("algorithm")
        .and_then(Value::as_str)
        .unwrap_or("token_bucket");
    let alg = keyed_algorithm(algorithm, rate, num("burst"), num("limit"), num("window"))
        .unwrap_or_else(|e| panic!("policy {p}: {e}"));
    (p["name"].as_str().unwrap_or("default").to_string(), alg)
}

/// A vector's remote policy (`options.remote`): its name, its shape and
/// the stable code of the error each of its checks ends in (`fails`).
pub fn remote(p: &Value) -> (String, KeyedAlgorithm, String) {
    let mut fields = p.clone();
    let fails = fields
        .as_object_mut()
        .and_then(|o| o.remove("fails"))
        .and_then(|f| f.as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("remote policy {p}: no fails"));
    assert!(
        ["error", "too_many_keys", "store_misconfigured"].contains(&fails.as_str()),
        "remote policy {p}: fails {fails}"
    );
    let (name, algorithm) = policy(&fields);
    (name, algorithm, fails)
}

/// What a remote policy whose checks fail with `fails` answers, by the
/// core's one rule.
pub fn failing(fails: &str) -> ratebound::gate::RemoteAnswer {
    let code = (fails != "error").then_some(fails);
    ratebound::gate::RemoteAnswer::from_error(code)
}

/// Compares the outcome told to the decision hook with `expect.outcome`,
/// when the vector gives one.
pub fn compare_outcome(at: &str, got: Option<&str>, expect: &Value, failures: &mut Vec<String>) {
    if let Some(want) = expect.get("outcome").and_then(Value::as_str)
        && got != Some(want)
    {
        failures.push(format!("{at}: outcome = {got:?}, want {want:?}"));
    }
}

/// Compares one answer with `expect`; failures are
/// `"<id> step <i>: <field> = <got>, want <want>"`.
pub fn compare(
    at: &str,
    status: u16,
    header: impl Fn(&str) -> Option<String>,
    body: Option<&str>,
    expect: &Value,
    failures: &mut Vec<String>,
) {
    let want = expect["status"].as_u64().unwrap();
    if u64::from(status) != want {
        failures.push(format!("{at}: status = {status}, want {want}"));
    }
    if let Some(fields) = expect.get("headers").and_then(Value::as_object) {
        for (name, want) in fields {
            let got = header(name);
            let want = want.as_str().map(str::to_string);
            if got != want {
                failures.push(format!("{at}: {name} = {got:?}, want {want:?}"));
            }
        }
    }
    if let Some(want) = expect.get("body").and_then(Value::as_str)
        && body != Some(want)
    {
        failures.push(format!("{at}: body = {body:?}, want {want:?}"));
    }
}
