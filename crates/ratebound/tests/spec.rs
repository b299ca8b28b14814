//! Replays the shared test vectors in `spec/` (the Python and Node suites
//! replay the same files).

use std::time::Duration;

use ratebound::{Decision, Error, ManualClock, Quota, Reservation, TokenBucket};
use serde_json::Value;

fn load(name: &str) -> Value {
    let path = format!("{}/../../spec/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn u64_of(v: &Value, key: &str) -> Option<u64> {
    v.get(key).map(|x| {
        x.as_u64()
            .unwrap_or_else(|| panic!("{key} must be a u64: {x}"))
    })
}

/// What one call produced, as the JSON field names of `expect`.
fn observed(result: Result<Decision, Error>) -> Value {
    match result {
        Ok(d) => serde_json::json!({
            "allowed": d.is_allowed(),
            "limit": d.limit(),
            "remaining": d.remaining(),
            "retry_after_ns": d.retry_after_nanos(),
            "reset_after_ns": d.reset_after_nanos(),
        }),
        Err(e) => serde_json::json!({ "error": e.code() }),
    }
}

fn compare(id: &str, step: usize, got: &Value, expect: &Value, failures: &mut Vec<String>) {
    for (field, want) in expect.as_object().expect("expect is an object") {
        let got = got.get(field).unwrap_or(&Value::Null);
        if got != want {
            failures.push(format!("{id} step {step}: {field} = {got}, want {want}"));
        }
    }
}

fn replay(vector: &Value, failures: &mut Vec<String>) {
    let id = vector["id"].as_str().expect("id");
    let quota = Quota::parse(vector["quota"].as_str().expect("quota")).expect("valid quota");
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(quota, clock.clone());
    let mut reservations: Vec<Option<Reservation<'_, ManualClock>>> = Vec::new();
    let (mut admitted, mut refused) = (0u64, 0u64);

    for (i, step) in vector["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .enumerate()
    {
        if let Some(t) = u64_of(step, "set_time_ns") {
            clock.set_nanos(t);
        }
        if let Some(dt) = u64_of(step, "advance_ns") {
            clock.advance_nanos(dt);
        }
        let n = u64_of(step, "n").unwrap_or(1);
        let got = match step["call"].as_str().expect("call") {
            "check" => {
                let result = bucket.check_n(n);
                match &result {
                    Ok(d) if d.is_allowed() => admitted += 1,
                    Ok(_) => refused += 1,
                    Err(_) => {}
                }
                // check() and check_n(1) must agree.
                observed(result)
            }
            "available" => serde_json::json!({ "available": bucket.available() }),
            "reserve" => {
                let max_wait =
                    Duration::from_nanos(u64_of(step, "max_wait_ns").expect("max_wait_ns"));
                match bucket.reserve_n(n, max_wait) {
                    Ok(r) => {
                        let got = serde_json::json!({ "delay_ns": r.delay().as_nanos() as u64 });
                        reservations.push(Some(r));
                        got
                    }
                    Err(e) => serde_json::json!({ "error": e.code() }),
                }
            }
            "cancel" => {
                let k = u64_of(step, "reservation").expect("reservation") as usize;
                reservations[k]
                    .take()
                    .expect("each reservation is cancelled once")
                    .cancel();
                Value::Null
            }
            "set_quota" => {
                bucket.set_quota(
                    Quota::parse(step["quota"].as_str().expect("quota")).expect("valid quota"),
                );
                Value::Null
            }
            other => panic!("{id} step {i}: unknown call {other}"),
        };
        if let Some(expect) = step.get("expect") {
            compare(id, i, &got, expect, failures);
        }
    }
    if let Some(totals) = vector.get("totals") {
        let got = serde_json::json!({ "admitted": admitted, "refused": refused });
        compare(id, usize::MAX, &got, totals, failures);
    }
}

#[test]
fn token_bucket_vectors() {
    let spec = load("token_bucket.json");
    let vectors = spec["vectors"].as_array().expect("vectors");
    assert!(vectors.len() >= 8, "expected the full set of vectors");
    let mut failures = Vec::new();
    for vector in vectors {
        replay(vector, &mut failures);
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn check_and_check_at_agree_with_check_n() {
    // The same scenario through the three entry points gives the same answers.
    let quota = Quota::parse("2/s burst 3").unwrap();
    let clock = ManualClock::new();
    let (a, b, c) = (
        TokenBucket::with_clock(quota, clock.clone()),
        TokenBucket::with_clock(quota, clock.clone()),
        TokenBucket::with_clock(quota, clock.clone()),
    );
    for advance in [0, 0, 0, 0, 250, 250, 10_000, 0, 0, 0] {
        clock.advance(Duration::from_millis(advance));
        let now = ratebound::Clock::now(&clock);
        let (x, y, z) = (a.check(), b.check_n(1).unwrap(), c.check_at(now));
        assert_eq!(x, y);
        assert_eq!(x, z);
    }
}
