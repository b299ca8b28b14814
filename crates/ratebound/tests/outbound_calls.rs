//! Replays `spec/outbound_calls.json` through the core's call machine on a
//! virtual clock (the adapters of every language replay the same file).
#![cfg(not(ratebound_loom))]

use std::time::Duration;

use ratebound::Quota;
use ratebound::outbound::{Call, Caller, Learned, Outbound, Reach, Sending, Step, Target};
use serde_json::{Value, json};

#[path = "support/spec.rs"]
mod spec;

fn spec() -> Value {
    spec::load("outbound_calls.json")
}

/// The adapter's rules from a vector's `config`, through the loose readers
/// every binding uses.
pub fn caller(config: &Value) -> Caller {
    let f = |name: &str| config.get(name).and_then(Value::as_f64);
    let statuses = spec::numbers(config, "statuses");
    let outbound = Outbound::from_loose(
        f("retries"),
        f("max_pause_s"),
        statuses.as_deref(),
        config.get("any_method").and_then(Value::as_bool),
        f("backoff_s"),
    )
    .expect("outbound");
    let sending = Sending::from_loose(f("n"), f("timeout_s")).expect("sending");
    let key = config
        .get("key")
        .and_then(Value::as_str)
        .map(str::to_string);
    let caller = Caller::new("token_bucket", outbound, sending, key).expect("caller");
    // A learning adapter (off unless the vector says so): its limiter's
    // configured quota is the ceiling.
    let adaptive = config
        .get("adaptive")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let ceiling = config
        .get("quota")
        .and_then(Value::as_str)
        .map_or_else(|| Quota::parse("30/s burst 30"), Quota::parse)
        .expect("quota");
    caller
        .with_adaptive(Some(adaptive), true, ceiling)
        .expect("adaptive")
}

/// The learned word a sending went under (`learned`: its fraction in
/// 65536ths, the instant `at_ms` it changed, `cut`); fresh when absent.
pub fn learned(s: &Value) -> Learned {
    word(s.get("learned"))
}

/// The learned word when a sending's first wait began (`learned_before`;
/// null: fresh; absent: as [`learned`]).
pub fn learned_before(s: &Value) -> Learned {
    match s.get("learned_before") {
        Some(w) => word(Some(w)),
        None => learned(s),
    }
}

fn word(w: Option<&Value>) -> Learned {
    w.filter(|l| !l.is_null()).map_or_else(Learned::fresh, |l| {
        let units = u32::try_from(l["units"].as_u64().expect("units")).expect("u32");
        Learned::new(units, l["at_ms"].as_u64().unwrap_or(0))
            .with_cut(l.get("cut").and_then(Value::as_bool).unwrap_or(false))
    })
}

/// scheme, host, port of a URL of the vectors (`scheme://host[:port]/...`).
fn target(url: &str) -> (String, String, Option<u16>) {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let authority = rest.split('/').next().expect("authority");
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, p) = v6.split_once(']').expect("]");
            (format!("[{h}]"), p.strip_prefix(':'))
        }
        None => match authority.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        },
    };
    let port = port.map(|p| p.parse().expect("port"));
    (scheme.to_string(), host.to_ascii_lowercase(), port)
}

fn secs(d: Duration) -> Value {
    json!(d.as_secs_f64())
}

fn opt_secs(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, secs)
}

fn replay(v: &Value) -> (String, Vec<Value>) {
    let caller = caller(v.get("config").unwrap_or(&json!({})));
    let r = &v["request"];
    let (scheme, host, port) = target(r["url"].as_str().expect("url"));
    let timeout = r
        .get("timeout_s")
        .map(|t| t.as_f64().map(Duration::from_secs_f64));
    let mut call: Call = caller
        .call(
            r["method"].as_str().expect("method"),
            Target {
                scheme: &scheme,
                host: &host,
                port,
            },
            r.get("key").and_then(Value::as_str).map(str::to_string),
            r.get("n").and_then(Value::as_u64),
            timeout,
            r["body"] != "stream",
        )
        .expect("call");
    let key = call.key().to_string();
    let sendings = v["sendings"].as_array().expect("sendings");
    let mut now = Duration::from_secs(1000);
    let mut steps = Vec::new();
    let mut i = 0;
    // The sending whose first wait has begun.
    let mut waited = None;
    // The asks for tokens the limiter refused (`beyond_s`) so far.
    let mut refused = (0, 0);
    loop {
        let s = &sendings[i];
        let step = match call.next(&caller, now) {
            Ok(step) => step,
            Err(ratebound::Error::DeadlineExceeded { wait, max_wait }) => {
                steps.push(json!(["exceeded", secs(wait), secs(max_wait)]));
                return (key, steps);
            }
            Err(e) => panic!("{}: step: {e}", v["id"]),
        };
        match step {
            Step::Hold(d) => {
                steps.push(json!(["hold", secs(d)]));
                now += d;
            }
            Step::Acquire { n, timeout } => {
                steps.push(json!(["acquire", n, opt_secs(timeout)]));
                if refused.0 != i {
                    refused = (i, 0);
                }
                let beyond = s.get("beyond_s").and_then(Value::as_array);
                if let Some(w) = beyond.and_then(|b| b.get(refused.1)) {
                    refused.1 += 1;
                    call.beyond(Duration::from_secs_f64(w.as_f64().expect("beyond_s")));
                    continue;
                }
                now += Duration::from_secs_f64(
                    s.get("acquire_s").and_then(Value::as_f64).unwrap_or(0.0),
                );
                call.reserving(if waited == Some(i) {
                    learned(s)
                } else {
                    learned_before(s)
                });
                waited = Some(i);
                call.saw(learned(s));
            }
            Step::Send => {
                steps.push(json!(["send"]));
                let headers = spec::headers(s);
                let status = u16::try_from(s["status"].as_u64().expect("status")).expect("u16");
                call.answered(&caller, status, headers, 1_800_000_000.0);
            }
            Step::Adapt { seen, next } => {
                steps.push(json!([
                    "adapt",
                    seen.fraction_units(),
                    next.fraction_units(),
                    next.was_cut()
                ]));
                call.adapted(s.get("adapt").and_then(Value::as_str) != Some("kept"));
            }
            Step::Pause(d) => {
                steps.push(json!(["pause", secs(d)]));
                let reach = match s.get("pause").and_then(Value::as_str).unwrap_or("shared") {
                    "shared" => Some(Reach::Shared),
                    "local" => Some(Reach::Local),
                    "failed" => None,
                    other => panic!("pause {other}"),
                };
                call.paused(&caller, reach, now);
            }
            Step::Report(e) => steps.push(json!([
                "event",
                e.outcome.as_str(),
                opt_secs(e.duration),
                e.status,
                e.attempt,
                e.capped,
                e.local
            ])),
            Step::Retry => {
                steps.push(json!(["retry"]));
                i += 1;
            }
            Step::Done => {
                steps.push(json!(["done"]));
                assert_eq!(i + 1, sendings.len(), "{}: every sending is used", v["id"]);
                return (key, steps);
            }
        }
    }
}

#[test]
fn every_vector_replays_through_the_machine() {
    let spec = spec();
    let vectors = spec::list(&spec, "vectors", 15);
    for v in vectors {
        let (key, steps) = replay(v);
        assert_eq!(key, v["expect"]["key"], "{}", v["id"]);
        let want = &v["expect"]["steps"];
        assert!(
            // Numbers compared as seconds to the nanosecond.
            spec::same(&Value::Array(steps.clone()), want, 1e-9),
            "{}:\n got {steps:?}\nwant {want}",
            v["id"]
        );
    }
}

#[test]
fn a_hold_longer_than_the_timeout_fails_at_once() {
    let caller = caller(&json!({"timeout_s": 1}));
    let t = Target {
        scheme: "http",
        host: "p",
        port: None,
    };
    let mut call = caller.call("GET", t, None, None, None, true).expect("call");
    let now = Duration::from_secs(5);
    assert!(matches!(call.next(&caller, now), Ok(Step::Acquire { .. })));
    assert_eq!(call.next(&caller, now).expect("send"), Step::Send);
    call.answered(&caller, 429, [("Retry-After", "3")], 0.0);
    assert_eq!(
        call.next(&caller, now).expect("pause"),
        Step::Pause(Duration::from_secs(3))
    );
    call.paused(&caller, Some(Reach::Local), now);
    // Every later call for the key is held: beyond its 1 s timeout it fails.
    let mut other = caller.call("GET", t, None, None, None, true).expect("call");
    let e = other
        .next(&caller, now)
        .expect_err("held beyond the timeout");
    assert_eq!(e.code(), "deadline_exceeded");
}

/// A cut while a sending waited: a limiter whose waits hold a slot priced
/// before the cut asks for the tokens again; one whose waits take their
/// tokens only when due (an in-process keyed limiter) has them priced at
/// the cut already, and sends — taking them twice would halve the rate.
#[test]
fn a_cut_while_waiting_asks_again_only_where_the_wait_held_a_slot() {
    let t = Target {
        scheme: "http",
        host: "p",
        port: None,
    };
    let cut = Learned::new(1 << 15, 1_000).with_cut(true);
    let second_step = |caller: &Caller| {
        let mut call = caller.call("GET", t, None, None, None, true).expect("call");
        let now = Duration::from_secs(5);
        assert!(matches!(call.next(caller, now), Ok(Step::Acquire { .. })));
        call.reserving(Learned::fresh());
        call.saw(cut);
        call.next(caller, now).expect("step")
    };
    let reserving = caller(&json!({"adaptive": true}));
    assert!(matches!(second_step(&reserving), Step::Acquire { .. }));
    let when_due = caller(&json!({"adaptive": true})).taking_when_due();
    assert_eq!(second_step(&when_due), Step::Send);
}

#[test]
fn the_hook_threw_is_told_once() {
    let caller = caller(&json!({}));
    assert!(caller.hook_threw());
    assert!(!caller.hook_threw());
}

#[test]
fn only_a_token_bucket_is_accepted() {
    for (algorithm, ok) in [
        ("token_bucket", true),
        ("fixed_window", false),
        ("sliding_log", false),
        ("x", false),
    ] {
        let got = Caller::new(algorithm, Outbound::new(), Sending::default(), None);
        assert_eq!(got.is_ok(), ok, "{algorithm}");
    }
    let e = Caller::new("x", Outbound::new(), Sending::default(), None).expect_err("x");
    assert_eq!(e.code(), "unsupported");
}

/// A limiter whose quota changed after the adapter was built
/// (`TokenBucket::set_quota`, 10/s → 20/s): an announced quota (100 left
/// for 10 s) is a share of the ceiling as it is now — 100 / (20 + 20·10),
/// 9.09/s once the bucket runs at it — not of the one the adapter was
/// built with (100 / (10 + 10·10) of the new ceiling would spend 18/s).
#[test]
fn an_announced_quota_is_a_share_of_the_ceiling_as_it_is_now() {
    use ratebound::{ManualClock, TokenBucket};
    use std::sync::Arc;
    let bucket = Arc::new(TokenBucket::with_clock(
        Quota::parse("10/s burst 10").unwrap(),
        ManualClock::new(),
    ));
    let built = |live: bool| {
        let c = Caller::new("token_bucket", Outbound::new(), Sending::default(), None)
            .unwrap()
            .with_adaptive(None, true, bucket.ceiling())
            .unwrap();
        if live {
            let b = Arc::clone(&bucket);
            c.with_live_ceiling(Arc::new(move || b.ceiling()))
        } else {
            c
        }
    };
    let (live, fixed) = (built(true), built(false));
    bucket.set_quota(Quota::parse("20/s burst 20").unwrap());
    let next_of = |caller: &Caller| {
        let t = Target {
            scheme: "http",
            host: "p",
            port: None,
        };
        let mut call = caller.call("GET", t, None, None, None, true).unwrap();
        let now = Duration::from_secs(1);
        assert!(matches!(call.next(caller, now), Ok(Step::Acquire { .. })));
        call.saw(Learned::fresh());
        assert_eq!(call.next(caller, now).unwrap(), Step::Send);
        let headers = [("RateLimit-Remaining", "100"), ("RateLimit-Reset", "10")];
        call.answered(caller, 200, headers, 1_800_000_000.0);
        match call.next(caller, now).unwrap() {
            Step::Adapt { next, .. } => next,
            other => panic!("{other:?}"),
        }
    };
    let (now_share, old_share) = (next_of(&live), next_of(&fixed));
    let rate = live.rate(now_share).unwrap();
    assert!((rate - 100.0 / 11.0).abs() < 0.01, "{rate}");
    // The bucket runs at the word's share of its quota as it is now.
    bucket.adapt(Learned::fresh(), now_share);
    assert!((bucket.quota().rate_per_second() - 100.0 / 11.0).abs() < 0.01);
    // Built once and never read again, the old ceiling's share: twice
    // what the partner announced, at the new quota.
    assert!((old_share.fraction_units() as f64 / 65536.0 * 20.0 - 200.0 / 11.0).abs() < 0.01);
}
