//! The engine's decisions, on a manual clock set to Unix time: the
//! reference server's fixed window (aligned windows, what is left, until
//! the reset), its special rules (no match, unlimited, a limit of 0,
//! replaces, shadow mode, hits_addend), ratebound's algorithms over the
//! boundary burst, stacked limits all or nothing, the headers, and the
//! requests refused before any decision.

mod common;
use common::DecideNow;

use std::collections::BTreeMap;
use std::time::Duration;

use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound_server::api::{Code, Request, RequestDescriptor};
use ratebound_server::engine::{Engine, Options, RequestError};
use ratebound_server::model::{
    Algorithm, Config, Descriptor, Domain, Limit, Place, Rule, Unit, Value, Window,
};

/// 2026-12-06 00:00:00 UTC, in ns: a multiple of every unit up to a day.
const MIDNIGHT: u64 = 1_796_515_200 * 1_000_000_000;
const SEC: u64 = 1_000_000_000;

fn limit(algorithm: Algorithm, requests: u64, unit: Unit) -> Limit {
    Limit {
        name: None,
        algorithm,
        requests_per_unit: requests,
        window: Window {
            unit,
            length: unit.length(),
        },
        burst: None,
        place: Place::default(),
    }
}

fn node(key: &str, value: Option<&str>, rule: Option<Rule>) -> Descriptor {
    Descriptor {
        key: key.to_string(),
        value: value.map(|v| Value::Exact(v.to_string())),
        rule,
        replaces: Vec::new(),
        shadow_mode: false,
        detailed_metric: false,
        value_to_metric: false,
        share_threshold: false,
        children: Vec::new(),
        place: Place::default(),
    }
}

fn limits(l: Vec<Limit>) -> Option<Rule> {
    Some(Rule::Limits(l))
}

/// An engine over one domain `d` of `descriptors`, on a clock at `at`.
fn engine(descriptors: Vec<Descriptor>, at: u64) -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    clock.set_nanos(at);
    let mut domains = BTreeMap::new();
    domains.insert(
        "d".to_string(),
        Domain {
            name: "d".to_string(),
            descriptors,
            place: Place::default(),
        },
    );
    let options = Options {
        clock: AnyClock::Manual(clock.clone()),
        max_keys: 1000,
        ..Options::default()
    };
    let engine = Engine::with_options(Config { domains }, options).expect("engine");
    (engine, clock)
}

fn request(descriptors: &[&[(&str, &str)]], hits: u64) -> Request {
    Request {
        domain: "d".to_string(),
        descriptors: descriptors
            .iter()
            .map(|entries| RequestDescriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                hits_addend: None,
                limit: None,
            })
            .collect(),
        hits_addend: hits,
    }
}

/// The remaining counts of `n` requests of one descriptor (None: over).
fn remaining(e: &Engine, entries: &[(&str, &str)], n: usize) -> Vec<Option<u32>> {
    (0..n)
        .map(|_| {
            let r = e.decide_now(&request(&[entries], 0)).expect("decide");
            let s = &r.statuses[0];
            assert_eq!(r.overall_code, s.code);
            (s.code == Code::Ok).then_some(s.limit_remaining)
        })
        .collect()
}

/// The reference README's example 3: a limit per IP, and one IP refused.
fn per_ip() -> Vec<Descriptor> {
    vec![
        node(
            "remote_address",
            None,
            limits(vec![limit(Algorithm::FixedWindow, 10, Unit::Second)]),
        ),
        node(
            "remote_address",
            Some("50.0.0.5"),
            limits(vec![limit(Algorithm::FixedWindow, 0, Unit::Second)]),
        ),
    ]
}

#[test]
fn a_fixed_window_counts_down_then_refuses_until_the_next_aligned_window() {
    let (e, clock) = engine(per_ip(), MIDNIGHT + 300 * 1_000_000);
    let ip = [("remote_address", "50.0.0.1")];
    let want: Vec<Option<u32>> = (0..10).rev().map(Some).chain([None, None]).collect();
    assert_eq!(remaining(&e, &ip, 12), want);
    // Another IP has its own window.
    assert_eq!(
        remaining(&e, &[("remote_address", "50.0.0.2")], 1),
        vec![Some(9)]
    );
    let r = e.decide_now(&request(&[&ip], 0)).expect("decide");
    let s = &r.statuses[0];
    assert_eq!(s.duration_until_reset, Some(Duration::from_secs(1)));
    let limit = s.current_limit.as_ref().expect("limit");
    assert_eq!((limit.requests_per_unit, limit.unit), (10, Unit::Second));
    // 700 ms later the next second begins: whole again.
    clock.set_nanos(MIDNIGHT + SEC);
    assert_eq!(remaining(&e, &ip, 1), vec![Some(9)]);
}

#[test]
fn a_minute_window_is_aligned_to_the_epoch_and_says_the_whole_seconds_left() {
    let rule = node(
        "user",
        None,
        limits(vec![limit(Algorithm::FixedWindow, 2, Unit::Minute)]),
    );
    let (e, clock) = engine(vec![rule], MIDNIGHT + 42 * SEC + 500_000_000);
    let user = [("user", "alice")];
    assert_eq!(remaining(&e, &user, 3), vec![Some(1), Some(0), None]);
    let r = e.decide_now(&request(&[&user], 0)).expect("decide");
    // 42.5 s into the minute: the reference says 60 − 42 = 18 s.
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_secs(18))
    );
    assert_eq!(
        r.headers
            .iter()
            .find(|(k, _)| k == "Retry-After")
            .map(|(_, v)| v.as_str()),
        Some("18")
    );
    clock.set_nanos(MIDNIGHT + 60 * SEC);
    assert_eq!(remaining(&e, &user, 1), vec![Some(1)]);
}

#[test]
fn a_limit_of_zero_an_unmatched_descriptor_an_unknown_domain_and_unlimited() {
    let mut rules = per_ip();
    rules.push(node("ldap", None, Some(Rule::Unlimited)));
    let (e, _) = engine(rules, MIDNIGHT);
    let r = e
        .decide_now(&request(
            &[
                &[("remote_address", "50.0.0.5")],
                &[("nothing", "here")],
                &[("ldap", "x")],
            ],
            0,
        ))
        .expect("decide");
    assert_eq!(r.overall_code, Code::OverLimit);
    let [blocked, unmatched, unlimited] = &r.statuses[..] else {
        panic!("three statuses: {r:?}");
    };
    assert_eq!(
        (blocked.code, blocked.limit_remaining),
        (Code::OverLimit, 0)
    );
    assert_eq!(
        (
            unmatched.code,
            unmatched.limit_remaining,
            &unmatched.current_limit
        ),
        (Code::Ok, 0, &None)
    );
    assert_eq!(
        (unlimited.code, unlimited.limit_remaining),
        (Code::Ok, u32::MAX)
    );
    // A longer request than any path of the tree matches nothing (the
    // reference README's example 4).
    let r = e
        .decide_now(&request(
            &[&[("remote_address", "1.2.3.4"), ("path", "/")]],
            0,
        ))
        .expect("decide");
    assert_eq!(
        (r.statuses[0].code, &r.statuses[0].current_limit),
        (Code::Ok, &None)
    );
    let mut other = request(&[&[("remote_address", "50.0.0.5")]], 0);
    other.domain = "unknown".to_string();
    assert_eq!(e.decide_now(&other).expect("decide").overall_code, Code::Ok);
}

#[test]
fn hits_addend_counts_per_request_or_per_descriptor_and_too_many_count_nothing() {
    let rule = node(
        "k",
        None,
        limits(vec![limit(Algorithm::FixedWindow, 10, Unit::Hour)]),
    );
    let (e, _) = engine(vec![rule], MIDNIGHT);
    let k: &[(&str, &str)] = &[("k", "v")];
    let r = e.decide_now(&request(&[k], 3)).expect("decide");
    assert_eq!(r.statuses[0].limit_remaining, 7);
    // Per descriptor: 0 is a query (nothing counted), 2 counts 2.
    let mut q = request(&[k, k], 3);
    q.descriptors[0].hits_addend = Some(0);
    q.descriptors[1].hits_addend = Some(2);
    let r = e.decide_now(&q).expect("decide");
    assert_eq!(
        (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
        (7, 5)
    );
    // 2^32 hits: over the limit, nothing taken.
    let r = e.decide_now(&request(&[k], 1 << 32)).expect("decide");
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        e.decide_now(&request(&[k], 1)).expect("decide").statuses[0].limit_remaining,
        4
    );
    // A refused fixed window stays refused for its window (the reference's
    // counter is past the limit): 4 left, 5 asked — refused; then 1 too.
    let r = e.decide_now(&request(&[k], 5)).expect("decide");
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        e.decide_now(&request(&[k], 1))
            .expect("decide")
            .overall_code,
        Code::OverLimit
    );
}

/// Admitted of `n` at the end of one window then of `n` at the start of
/// the next (20 ms apart) under `algorithm`, 10 per second.
fn boundary_burst(algorithm: Algorithm) -> usize {
    let rule = node("k", None, limits(vec![limit(algorithm, 10, Unit::Second)]));
    let (e, clock) = engine(vec![rule], MIDNIGHT + 990_000_000);
    let k = [("k", "v")];
    let mut admitted = remaining(&e, &k, 10).iter().flatten().count();
    clock.set_nanos(MIDNIGHT + 1_010_000_000);
    admitted += remaining(&e, &k, 10).iter().flatten().count();
    admitted
}

#[test]
fn over_the_boundary_the_fixed_window_admits_twice_the_limit_and_the_others_do_not() {
    assert_eq!(boundary_burst(Algorithm::FixedWindow), 20);
    let sliding = boundary_burst(Algorithm::SlidingWindow);
    assert!((10..=11).contains(&sliding), "sliding window: {sliding}");
    // A token bucket of 10/s burst 10: 10, then what 20 ms earned.
    assert_eq!(boundary_burst(Algorithm::TokenBucket), 10);
}

#[test]
fn stacked_limits_admit_all_or_nothing() {
    let mut burst = limit(Algorithm::TokenBucket, 2, Unit::Second);
    burst.name = Some("burst".to_string());
    let mut daily = limit(Algorithm::FixedWindow, 3, Unit::Day);
    daily.name = Some("daily".to_string());
    let rule = node("user", None, limits(vec![burst, daily]));
    let (e, clock) = engine(vec![rule], MIDNIGHT + SEC);
    let user = [("user", "alice")];
    assert_eq!(remaining(&e, &user, 3), vec![Some(1), Some(0), None]);
    let r = e.decide_now(&request(&[&user], 0)).expect("decide");
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.name.as_str()),
        Some("burst")
    );
    // A second later: one more of the day's 3, then the day refuses — and
    // the burst's token is not spent by the refusal.
    clock.set_nanos(MIDNIGHT + 2 * SEC);
    assert_eq!(remaining(&e, &user, 2), vec![Some(0), None]);
    let r = e.decide_now(&request(&[&user], 0)).expect("decide");
    let s = &r.statuses[0];
    assert_eq!(
        s.current_limit.as_ref().map(|l| l.name.as_str()),
        Some("daily")
    );
    assert_eq!(
        s.duration_until_reset,
        Some(Duration::from_secs(86_400 - 2))
    );
    let rate_limit = r
        .headers
        .iter()
        .find(|(k, _)| k == "RateLimit")
        .map(|(_, v)| v.clone());
    assert!(
        rate_limit
            .as_deref()
            .is_some_and(|v| v.contains("\"burst\";r=1") && v.contains("\"daily\";r=0")),
        "{rate_limit:?}"
    );
}

#[test]
fn shadow_mode_answers_ok_and_replaces_drops_the_named_limit() {
    // The reference README's examples 6 and 7.
    let mut a = node(
        "user",
        Some("user-a"),
        limits(vec![limit(Algorithm::FixedWindow, 1, Unit::Second)]),
    );
    a.shadow_mode = true;
    let mut specific = limit(Algorithm::FixedWindow, 5, Unit::Second);
    specific.name = Some("specific_limit".to_string());
    let mut k1 = node("key_1", Some("value_1"), None);
    k1.children = vec![node("user", Some("bkthomps"), limits(vec![specific]))];
    let mut replacing = node(
        "user",
        Some("bkthomps"),
        limits(vec![limit(Algorithm::FixedWindow, 10, Unit::Second)]),
    );
    replacing.replaces = vec!["specific_limit".to_string()];
    let mut k2 = node("key_2", Some("value_2"), None);
    k2.children = vec![replacing];
    let (e, _) = engine(vec![a, k1, k2], MIDNIGHT);
    assert_eq!(
        remaining(&e, &[("user", "user-a")], 3),
        vec![Some(0), Some(0), Some(0)]
    );
    let both: &[&[(&str, &str)]] = &[
        &[("key_1", "value_1"), ("user", "bkthomps")],
        &[("key_2", "value_2"), ("user", "bkthomps")],
    ];
    let r = e.decide_now(&request(both, 0)).expect("decide");
    assert_eq!(r.statuses[0].current_limit, None, "replaced: not applied");
    assert_eq!(r.statuses[1].limit_remaining, 9);
    // Alone, the first still applies its own 5.
    assert_eq!(remaining(&e, both[0], 1), vec![Some(4)]);
}

#[test]
fn wildcards_match_and_share_a_threshold_only_when_told() {
    let mut shared = node(
        "files",
        None,
        limits(vec![limit(Algorithm::FixedWindow, 2, Unit::Hour)]),
    );
    shared.value = Some(Value::Wildcard(vec!["files/".to_string(), String::new()]));
    shared.share_threshold = true;
    let mut own = node(
        "path",
        None,
        limits(vec![limit(Algorithm::FixedWindow, 1, Unit::Hour)]),
    );
    own.value = Some(Value::Wildcard(vec![
        "/api/".to_string(),
        "/action".to_string(),
    ]));
    let (e, _) = engine(vec![shared, own], MIDNIGHT);
    assert_eq!(remaining(&e, &[("files", "files/a.pdf")], 1), vec![Some(1)]);
    assert_eq!(
        remaining(&e, &[("files", "files/b.csv")], 2),
        vec![Some(0), None]
    );
    assert_eq!(
        remaining(&e, &[("path", "/api/1/action")], 2),
        vec![Some(0), None]
    );
    assert_eq!(
        remaining(&e, &[("path", "/api/2/action")], 1),
        vec![Some(0)]
    );
    let r = e
        .decide_now(&request(&[&[("path", "/api/2/other")]], 0))
        .expect("decide");
    assert_eq!(r.statuses[0].current_limit, None);
}

#[test]
fn requests_too_large_or_malformed_are_refused_before_any_decision() {
    let (e, _) = engine(per_ip(), MIDNIGHT);
    let mut empty = request(&[&[("remote_address", "1.1.1.1")]], 0);
    empty.domain.clear();
    assert!(
        matches!(e.decide_now(&empty), Err(RequestError::Invalid { reason }) if reason.contains("domain"))
    );
    assert!(
        matches!(e.decide_now(&request(&[], 0)), Err(RequestError::Invalid { reason }) if reason.contains("descriptor"))
    );
    let one: &[(&str, &str)] = &[("remote_address", "1.1.1.1")];
    let many = request(&vec![one; 257], 0);
    assert_eq!(
        e.decide_now(&many),
        Err(RequestError::TooLarge {
            what: "descriptors",
            size: 257,
            max: 256
        })
    );
    let big = "x".repeat(1 << 20);
    let huge = request(&[&[("remote_address", big.as_str())]], 0);
    assert_eq!(
        e.decide_now(&huge),
        Err(RequestError::TooLarge {
            what: "value",
            size: 1 << 20,
            max: 4096
        })
    );
    // Nothing was counted for 1.1.1.1.
    assert_eq!(remaining(&e, one, 1), vec![Some(9)]);
}

/// From the YAML a gateway team already has (the reference README's
/// example 2) to answers: the nested rule and the flat one, each its own
/// counter, the day's window whole seconds to midnight.
#[test]
fn a_reference_yaml_file_decides_as_its_readme_says() {
    let config = Config::parse(common::EXAMPLE2, "messaging.yaml").expect("the reference's file");
    let clock = ManualClock::new();
    clock.set_nanos(MIDNIGHT + 3_600 * SEC);
    let options = Options {
        clock: AnyClock::Manual(clock),
        max_keys: 1000,
        ..Options::default()
    };
    let e = Engine::with_options(config, options).expect("engine");
    let marketing = RequestDescriptor {
        entries: vec![
            ("message_type".into(), "marketing".into()),
            ("to_number".into(), "2061111111".into()),
        ],
        hits_addend: None,
        limit: None,
    };
    let any = RequestDescriptor {
        entries: vec![("to_number".into(), "2061111111".into())],
        hits_addend: None,
        limit: None,
    };
    let req = Request {
        domain: "messaging".into(),
        descriptors: vec![marketing, any],
        hits_addend: 0,
    };
    let answers: Vec<(Code, u32)> = (0..6)
        .map(|_| {
            let r = e.decide_now(&req).expect("decide");
            (r.statuses[0].code, r.statuses[1].limit_remaining)
        })
        .collect();
    // Five marketing messages a day; the number's own 100 counts every
    // request (the reference counts each descriptor on its own).
    let codes: Vec<Code> = answers.iter().map(|a| a.0).collect();
    assert_eq!(
        codes,
        [
            Code::Ok,
            Code::Ok,
            Code::Ok,
            Code::Ok,
            Code::Ok,
            Code::OverLimit
        ]
    );
    let left: Vec<u32> = answers.iter().map(|a| a.1).collect();
    assert_eq!(left, [99, 98, 97, 96, 95, 94]);
    let r = e.decide_now(&req).expect("decide");
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_secs(86_400 - 3_600))
    );
    let limit = r.statuses[0].current_limit.as_ref().expect("limit");
    assert_eq!((limit.requests_per_unit, limit.unit), (5, Unit::Day));
}

/// A refusal that shadow mode lets through asks no wait: `Retry-After` is
/// the real refusal's (1 s), not the shadow one's (its day), and without a
/// real refusal there is none.
#[test]
fn retry_after_comes_from_a_real_refusal_never_a_shadow_one() {
    let mut shadow = node(
        "tenant",
        None,
        limits(vec![limit(Algorithm::FixedWindow, 1, Unit::Day)]),
    );
    shadow.shadow_mode = true;
    let real = node(
        "ip",
        None,
        limits(vec![limit(Algorithm::FixedWindow, 1, Unit::Second)]),
    );
    let (e, _) = engine(vec![shadow, real], MIDNIGHT + 7 * SEC);
    let both: &[&[(&str, &str)]] = &[&[("tenant", "t")], &[("ip", "1.2.3.4")]];
    let retry = |r: &ratebound_server::api::Response| {
        r.headers
            .iter()
            .find(|(k, _)| k == "Retry-After")
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        e.decide_now(&request(both, 0))
            .expect("decide")
            .overall_code,
        Code::Ok
    );
    let r = e.decide_now(&request(both, 0)).expect("decide");
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(retry(&r).as_deref(), Some("1"));
    let r = e.decide_now(&request(&[both[0]], 0)).expect("decide");
    assert_eq!((r.overall_code, retry(&r)), (Code::Ok, None));
}

#[test]
fn response_headers_can_be_turned_off_and_the_decision_is_the_same() {
    let yaml = "domain: d\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n";
    let make = |response_headers| {
        let options = Options {
            clock: AnyClock::Manual(ManualClock::new()),
            response_headers,
            ..Options::default()
        };
        Engine::with_options(Config::parse(yaml, "d.yaml").unwrap(), options).unwrap()
    };
    let (on, off) = (make(true), make(false));
    for _ in 0..2 {
        let (a, b) = (
            on.decide_now(&request(&[&[("user", "u")]], 0)).unwrap(),
            off.decide_now(&request(&[&[("user", "u")]], 0)).unwrap(),
        );
        assert_eq!(a.statuses, b.statuses);
        assert_eq!(a.overall_code, b.overall_code);
        assert!(!a.headers.is_empty());
        assert_eq!(b.headers, Vec::new());
    }
}
