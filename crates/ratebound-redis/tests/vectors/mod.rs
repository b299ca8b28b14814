//! spec/redis.json's vectors for the Rust tests: a vector's settings as a
//! [`Config`], a decision as the fields a step's `expect` names. (Apart
//! from `support/`, which other crates' tests include by path and which
//! must need nothing but the standard library.)

use std::time::Duration;

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, RedisDecision};
use serde_json::Value;

/// A spec/redis.json vector's `config` as a [`Config`] (deadline 2 s).
pub fn config_of(v: &Value) -> Config {
    let num = |k: &str| v.get(k).and_then(Value::as_f64);
    let secs = |k: &str| Duration::from_secs_f64(num(k).expect(k));
    let algorithm = match v["algorithm"].as_str().expect("algorithm") {
        "token_bucket" => {
            let q = match &v["rate"] {
                Value::String(s) => Quota::parse(s).expect("quota"),
                r => Quota::per_second(r.as_f64().expect("rate")).expect("rate"),
            };
            let q = match num("burst") {
                Some(b) => q.with_burst(b as u64).expect("burst"),
                None => q,
            };
            Algorithm::TokenBucket(q)
        }
        "fixed_window" => Algorithm::FixedWindow {
            limit: num("limit").expect("limit") as u64,
            window: secs("window"),
        },
        "sliding_window" => Algorithm::SlidingWindow {
            limit: num("limit").expect("limit") as u64,
            window: secs("window"),
        },
        other => panic!("algorithm {other}"),
    };
    let mut c = Config::new(algorithm);
    if let Some(k) = num("lease") {
        c.lease = k as u64;
    }
    c.timeout = Duration::from_secs(2);
    c
}

/// What a spec vector's `expect` compares.
pub fn observed(d: &RedisDecision) -> Value {
    serde_json::json!({
        "allowed": d.is_allowed(),
        "remaining": d.remaining(),
        "retry_after_us": d.retry_after().as_micros() as u64,
        "reset_after_us": d.reset_after().as_micros() as u64,
        "source": d.source().as_str(),
    })
}
