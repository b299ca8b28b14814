//! Replays the shared test vectors in `spec/` (the Python and Node suites
//! replay the same files).

use std::sync::Arc;
use std::time::Duration;

use ratebound::{
    AllOf, Decision, Error, FixedWindow, KeyedAlgorithm, KeyedLimiter, LeakyBucket, Limiter,
    ManualClock, Overflow, Quota, Reservation, SlidingLog, SlidingWindow, TokenBucket,
};
use serde_json::{Value, json};

fn load(name: &str) -> Value {
    let path = format!("{}/../../spec/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A vector's steps, numbered from 0.
fn steps(vector: &Value) -> impl Iterator<Item = (usize, &Value)> {
    vector["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .enumerate()
}

fn u64_of(v: &Value, key: &str) -> Option<u64> {
    v.get(key).map(|x| {
        x.as_u64()
            .unwrap_or_else(|| panic!("{key} must be a u64: {x}"))
    })
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} must be a string in {v}"))
}

/// The limiter a vector describes, with the concrete type where a call
/// needs more than the `Limiter` trait.
enum Built {
    Bucket(Arc<TokenBucket<ManualClock>>),
    Leaky(Arc<LeakyBucket<ManualClock>>),
    Composite(Arc<AllOf>),
    Other(Arc<dyn Limiter>),
}

impl Built {
    fn limiter(&self) -> Arc<dyn Limiter> {
        match self {
            Built::Bucket(b) => b.clone(),
            Built::Leaky(l) => l.clone(),
            Built::Composite(c) => c.clone(),
            Built::Other(o) => o.clone(),
        }
    }

    fn reserve(&self, n: u64, max_wait: Duration) -> Result<Reservation<'_>, Error> {
        match self {
            Built::Bucket(b) => b.reserve_n(n, max_wait),
            Built::Leaky(l) => l.reserve_n(n, max_wait),
            _ => panic!("reserve needs a token bucket or a leaky bucket"),
        }
    }
}

fn build(spec: &Value, clock: &ManualClock) -> Built {
    let window = || Duration::from_nanos(u64_of(spec, "window_ns").expect("window_ns"));
    let limit = || u64_of(spec, "limit").expect("limit");
    let quota = || Quota::parse(str_of(spec, "quota")).expect("valid quota");
    let c = clock.clone();
    match str_of(spec, "algorithm") {
        "token_bucket" => Built::Bucket(Arc::new(TokenBucket::with_clock(quota(), c))),
        "leaky_bucket" => {
            let max_delay =
                Duration::from_nanos(u64_of(spec, "max_delay_ns").expect("max_delay_ns"));
            Built::Leaky(Arc::new(
                LeakyBucket::with_clock(quota(), max_delay, c).unwrap(),
            ))
        }
        "fixed_window" => Built::Other(Arc::new(
            FixedWindow::with_clock(limit(), window(), c).unwrap(),
        )),
        "sliding_window" => Built::Other(Arc::new(
            SlidingWindow::with_clock(limit(), window(), c).unwrap(),
        )),
        "sliding_log" => Built::Other(Arc::new(
            SlidingLog::with_clock(limit(), window(), c).unwrap(),
        )),
        "all_of" => {
            let members = spec["members"].as_array().expect("members");
            let members = members.iter().map(|m| build(m, clock).limiter()).collect();
            Built::Composite(Arc::new(AllOf::new(members).unwrap()))
        }
        other => panic!("unknown algorithm {other}"),
    }
}

/// What one call produced, as the JSON field names of `expect`.
fn observed(result: Result<Decision, Error>) -> Value {
    match result {
        Ok(d) => json!({
            "allowed": d.is_allowed(),
            "limit": d.limit(),
            "remaining": d.remaining(),
            "retry_after_ns": d.retry_after_nanos(),
            "reset_after_ns": d.reset_after_nanos(),
        }),
        Err(e) => json!({ "error": e.code() }),
    }
}

fn compare(where_: &str, got: &Value, expect: &Value, failures: &mut Vec<String>) {
    for (field, want) in expect.as_object().expect("expect is an object") {
        let got = got.get(field).unwrap_or(&Value::Null);
        if got != want {
            failures.push(format!("{where_}: {field} = {got}, want {want}"));
        }
    }
}

fn replay(vector: &Value, failures: &mut Vec<String>) {
    let id = str_of(vector, "id");
    let clock = ManualClock::new();
    let built = match vector.get("limiter") {
        Some(spec) => build(spec, &clock),
        // token_bucket.json names only the quota.
        None => build(
            &json!({"algorithm": "token_bucket", "quota": vector["quota"]}),
            &clock,
        ),
    };
    let limiter = built.limiter();
    let mut reservations: Vec<Option<Reservation<'_>>> = Vec::new();
    let (mut admitted, mut refused) = (0u64, 0u64);

    for (i, step) in steps(vector) {
        if let Some(t) = u64_of(step, "set_time_ns") {
            clock.set_nanos(t);
        }
        if let Some(dt) = u64_of(step, "advance_ns") {
            clock.advance_nanos(dt);
        }
        let n = u64_of(step, "n").unwrap_or(1);
        for rep in 0..u64_of(step, "repeat").unwrap_or(1) {
            let got = match str_of(step, "call") {
                "check" => {
                    let result = limiter.check_n(n);
                    match &result {
                        Ok(d) if d.is_allowed() => admitted += 1,
                        Ok(_) => refused += 1,
                        Err(_) => {}
                    }
                    observed(result)
                }
                "available" => json!({ "available": limiter.available() }),
                "member_available" => {
                    let Built::Composite(c) = &built else {
                        panic!("{id}: not a composite")
                    };
                    let k = u64_of(step, "member").expect("member") as usize;
                    json!({ "available": c.members()[k].available() })
                }
                "reserve" => {
                    let max_wait =
                        Duration::from_nanos(u64_of(step, "max_wait_ns").expect("max_wait_ns"));
                    match built.reserve(n, max_wait) {
                        Ok(r) => {
                            let got = json!({ "delay_ns": r.delay().as_nanos() as u64 });
                            reservations.push(Some(r));
                            got
                        }
                        Err(e) => json!({ "error": e.code() }),
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
                    let Built::Bucket(b) = &built else {
                        panic!("{id}: set_quota needs a token bucket")
                    };
                    b.set_quota(Quota::parse(str_of(step, "quota")).expect("valid quota"));
                    Value::Null
                }
                other => panic!("{id} step {i}: unknown call {other}"),
            };
            if let Some(expect) = step.get("expect") {
                let where_ = if rep == 0 {
                    format!("{id} step {i}")
                } else {
                    format!("{id} step {i} (repeat {rep})")
                };
                compare(&where_, &got, expect, failures);
            }
        }
    }
    if let Some(totals) = vector.get("totals") {
        let got = json!({ "admitted": admitted, "refused": refused });
        compare(&format!("{id} totals"), &got, totals, failures);
    }
}

fn keyed_algorithm(spec: &Value) -> KeyedAlgorithm {
    let window = || Duration::from_nanos(u64_of(spec, "window_ns").expect("window_ns"));
    let limit = || u64_of(spec, "limit").expect("limit");
    match str_of(spec, "algorithm") {
        "token_bucket" => KeyedAlgorithm::TokenBucket(Quota::parse(str_of(spec, "quota")).unwrap()),
        "fixed_window" => KeyedAlgorithm::FixedWindow {
            limit: limit(),
            window: window(),
        },
        "sliding_window" => KeyedAlgorithm::SlidingWindow {
            limit: limit(),
            window: window(),
        },
        other => panic!("no keyed {other}"),
    }
}

fn replay_keyed(vector: &Value, failures: &mut Vec<String>) {
    let id = str_of(vector, "id");
    let spec = &vector["limiter"];
    let clock = ManualClock::new();
    let mut limiter = KeyedLimiter::<String>::new(keyed_algorithm(&spec["per_key"]))
        .unwrap()
        .with_clock(clock.clone());
    if let Some(max_keys) = u64_of(spec, "max_keys") {
        let overflow = match str_of(spec, "overflow") {
            "reject_new_keys" => Overflow::RejectNewKeys,
            "evict_least_recent" => Overflow::EvictLeastRecent,
            other => panic!("{id}: overflow {other}"),
        };
        limiter = limiter.with_max_keys(max_keys as usize, overflow).unwrap();
    }
    for (i, step) in steps(vector) {
        if let Some(dt) = u64_of(step, "advance_ns") {
            clock.advance_nanos(dt);
        }
        let key = || step["key"].as_str().expect("key").to_string();
        let got = match str_of(step, "call") {
            "check" => observed(limiter.check_n(&key(), u64_of(step, "n").unwrap_or(1))),
            "len" => json!({ "len": limiter.len() }),
            "available" => json!({ "available": limiter.available(&key()) }),
            "cleanup" => json!({ "removed": limiter.cleanup() }),
            "cleanup_idle" => {
                let idle = Duration::from_nanos(u64_of(step, "idle_ns").expect("idle_ns"));
                json!({ "removed": limiter.cleanup_idle(idle) })
            }
            "remove" => json!({ "removed": limiter.remove(&key()) }),
            other => panic!("{id} step {i}: unknown call {other}"),
        };
        if let Some(expect) = step.get("expect") {
            compare(&format!("{id} step {i}"), &got, expect, failures);
        }
    }
}

#[test]
fn keyed_vectors() {
    let spec = load("keyed.json");
    let vectors = spec["vectors"].as_array().expect("vectors");
    assert!(vectors.len() >= 4);
    let mut failures = Vec::new();
    for vector in vectors {
        replay_keyed(vector, &mut failures);
    }
    assert!(failures.is_empty(), "keyed.json:\n{}", failures.join("\n"));
}

fn replay_file(name: &str, at_least: usize) {
    let spec = load(name);
    let vectors = spec["vectors"].as_array().expect("vectors");
    assert!(
        vectors.len() >= at_least,
        "{name}: expected at least {at_least} vectors"
    );
    let mut failures = Vec::new();
    for vector in vectors {
        replay(vector, &mut failures);
    }
    assert!(failures.is_empty(), "{name}:\n{}", failures.join("\n"));
}

#[test]
fn token_bucket_vectors() {
    replay_file("token_bucket.json", 8);
}

#[test]
fn fixed_window_vectors() {
    replay_file("fixed_window.json", 1);
}

#[test]
fn sliding_window_vectors() {
    replay_file("sliding_window.json", 2);
}

#[test]
fn sliding_log_vectors() {
    replay_file("sliding_log.json", 1);
}

#[test]
fn leaky_bucket_vectors() {
    replay_file("leaky_bucket.json", 2);
}

#[test]
fn boundary_burst_vectors() {
    replay_file("boundary_burst.json", 4);
}

#[test]
fn all_of_vectors() {
    replay_file("all_of.json", 2);
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

#[test]
fn http_vectors() {
    use ratebound::http::{
        Cidr, Forwarding, Policy, TrustedProxies, client_ip, ip_key, ratelimit_policy,
        retry_after_secs,
    };
    let spec = load("http.json");
    let vectors = spec["vectors"].as_array().expect("vectors");
    // Every case in the file is replayed, and there are cases: a replay that
    // matched nothing fails.
    let in_file: usize = vectors
        .iter()
        .map(|v| v["cases"].as_array().map_or(0, Vec::len))
        .sum();
    let mut replayed = 0;
    let mut failures = Vec::new();
    for vector in vectors {
        let id = str_of(vector, "id");
        for (i, case) in vector["cases"]
            .as_array()
            .expect("cases")
            .iter()
            .enumerate()
        {
            let got = match str_of(vector, "kind") {
                "retry_after" => json!(retry_after_secs(Duration::from_nanos(
                    u64_of(case, "wait_ns").unwrap()
                ))),
                "ip_key" => {
                    let ip = str_of(case, "ip").parse().unwrap();
                    // Absent: the core's default; above 128: the whole address.
                    let prefix = match case.get("prefix") {
                        Some(p) => {
                            ratebound::any::ipv6_prefix("prefix", p.as_f64().unwrap()).unwrap()
                        }
                        None => ratebound::any::DEFAULT_IPV6_PREFIX,
                    };
                    json!(ip_key(ip, prefix).to_string())
                }
                "client_ip" => {
                    let trust = &case["trust"];
                    let trusted = if let Some(cidrs) = trust.get("cidrs") {
                        TrustedProxies::Cidrs(
                            cidrs
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|c| Cidr::parse(c.as_str().unwrap()).unwrap())
                                .collect(),
                        )
                    } else if let Some(hops) = u64_of(trust, "hops") {
                        TrustedProxies::Hops(hops as usize)
                    } else {
                        TrustedProxies::None
                    };
                    let peer = str_of(case, "peer").parse().unwrap();
                    let lines: Vec<(&str, &str)> = case["headers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|l| (l[0].as_str().unwrap(), l[1].as_str().unwrap()))
                        .collect();
                    let header = case["header"].as_str().unwrap_or("x-forwarded-for");
                    let forwarding = Forwarding::parse(header).unwrap();
                    let ip = client_ip(peer, &lines, &forwarding, &trusted);
                    json!(ip.to_string())
                }
                "ratelimit_policy" => {
                    let policies: Vec<Policy> = case["policies"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| {
                            Policy::for_quota(
                                str_of(p, "name"),
                                Quota::parse(str_of(p, "quota")).unwrap(),
                            )
                            .unwrap()
                        })
                        .collect();
                    json!(ratelimit_policy(&policies))
                }
                other => panic!("{id}: unknown kind {other}"),
            };
            compare(
                &format!("{id} case {i}"),
                &json!({ "want": got }),
                &json!({ "want": case["want"] }),
                &mut failures,
            );
            replayed += 1;
        }
    }
    assert!(failures.is_empty(), "http.json:\n{}", failures.join("\n"));
    assert_eq!(replayed, in_file, "http.json: cases replayed");
    assert!(
        vectors.len() >= 4 && replayed >= 20,
        "http.json: {} vectors, {replayed} cases replayed; expected at least 4 and 20",
        vectors.len()
    );
}
