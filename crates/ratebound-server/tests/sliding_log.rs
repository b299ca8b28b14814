//! `algorithm: sliding_log` per descriptor, in this process: exact over
//! every window (the boundary burst a fixed window lets through is
//! refused), stacked all-or-nothing, its keys bounded by its memory; a
//! shared backend (which has no log) refuses it at start, naming where.

mod common;

use std::time::Duration;

use common::DecideNow;
use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound_server::api::{Code, Request, RequestDescriptor, Response};
use ratebound_server::backend::Backend;
use ratebound_server::engine::{Engine, Options, RequestError};
use ratebound_server::model::Config;

/// 2026-12-06 00:00:00 UTC, in ns.
const MIDNIGHT: u64 = 1_796_515_200 * 1_000_000_000;
const SEC: u64 = 1_000_000_000;

fn engine(yaml: &str, clock: &ManualClock, max_keys: usize) -> Engine {
    let options = Options {
        clock: AnyClock::Manual(clock.clone()),
        max_keys,
        ..Options::default()
    };
    Engine::with_options(Config::parse(yaml, "log.yaml").unwrap(), options).unwrap()
}

fn ask(e: &Engine, user: &str) -> Result<Response, RequestError> {
    e.decide_now(&Request {
        domain: "api".to_string(),
        descriptors: vec![RequestDescriptor {
            entries: vec![("user".to_string(), user.to_string())],
            hits_addend: None,
            limit: None,
        }],
        hits_addend: 1,
    })
}

fn codes(e: &Engine, user: &str, n: usize) -> Vec<Code> {
    (0..n)
        .map(|_| ask(e, user).expect("decided").overall_code)
        .collect()
}

const LOG: &str = "\
domain: api
descriptors:
  - key: user
    rate_limit:
      algorithm: sliding_log
      unit: minute
      requests_per_unit: 3
";

#[test]
fn a_log_refuses_the_boundary_burst_and_says_the_exact_wait() {
    let clock = ManualClock::new();
    clock.set_nanos(MIDNIGHT + 59 * SEC);
    let log = engine(LOG, &clock, 100);
    let fixed = engine(&LOG.replace("sliding_log", "fixed_window"), &clock, 100);
    use Code::{Ok, OverLimit as Over};
    assert_eq!(codes(&log, "ann", 3), [Ok, Ok, Ok]);
    assert_eq!(codes(&fixed, "ann", 3), [Ok, Ok, Ok]);
    // Two seconds later, in the fixed window's next minute: it admits 3
    // more (6 in 2 s); the log, exact over every minute, none.
    clock.set_nanos(MIDNIGHT + 61 * SEC);
    assert_eq!(codes(&fixed, "ann", 3), [Ok, Ok, Ok]);
    let r = ask(&log, "ann").unwrap();
    assert_eq!(r.overall_code, Over);
    // The three leave at 00:01:59: 58 s from now, exactly.
    let retry = r.headers.iter().find(|(k, _)| k == "Retry-After").unwrap();
    assert_eq!(retry.1, "58");
    assert_eq!(r.statuses[0].limit_remaining, 0);
    clock.set_nanos(MIDNIGHT + 119 * SEC - 1);
    assert_eq!(codes(&log, "ann", 1), [Over]);
    clock.set_nanos(MIDNIGHT + 119 * SEC);
    let r = ask(&log, "ann").unwrap();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Ok, 2));
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_secs(60))
    );
    // Another user has a log of its own.
    assert_eq!(codes(&log, "bob", 4), [Ok, Ok, Ok, Over]);
}

#[test]
fn a_log_stacked_with_a_window_is_all_or_nothing() {
    let yaml = "\
domain: api
descriptors:
  - key: user
    rate_limits:
      - name: per_minute
        algorithm: sliding_log
        unit: minute
        requests_per_unit: 2
      - name: per_hour
        unit: hour
        requests_per_unit: 5
";
    let clock = ManualClock::new();
    let e = engine(yaml, &clock, 100);
    use Code::{Ok, OverLimit as Over};
    let mut seen = Vec::new();
    for minute in 0..4 {
        clock.set_nanos(MIDNIGHT + minute * 60 * SEC);
        seen.push(codes(&e, "ann", 3));
    }
    // The log's refusals charge nothing to the hour.
    assert_eq!(
        seen,
        [
            [Ok, Ok, Over],
            [Ok, Ok, Over],
            [Ok, Over, Over],
            [Over, Over, Over]
        ]
    );
    let r = ask(&e, "ann").unwrap();
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().name,
        "per_hour"
    );
}

#[test]
fn a_log_tracks_a_bounded_number_of_keys_and_forgets_only_empty_logs() {
    let clock = ManualClock::new();
    clock.set_nanos(MIDNIGHT);
    // 16 keys at most (one per shard).
    let e = engine(LOG, &clock, 16);
    let mut refused = 0;
    for i in 0..200 {
        match ask(&e, &format!("user-{i}")) {
            Ok(r) => assert_eq!(r.overall_code, Code::Ok),
            Err(RequestError::Unavailable { reason }) => {
                assert!(reason.contains("16"), "{reason}");
                refused += 1;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    // Never more than 16 logs held: the rest refused, not admitted
    // without a limit.
    assert!(refused >= 200 - 16, "{refused}");
    // A minute later every log is empty: new keys take their places.
    clock.set_nanos(MIDNIGHT + 60 * SEC);
    assert_eq!(ask(&e, "late").unwrap().overall_code, Code::Ok);
}

#[test]
fn a_full_log_table_sweeps_at_most_once_per_sixty_fourth_of_its_window() {
    let clock = ManualClock::new();
    clock.set_nanos(MIDNIGHT);
    let e = engine(LOG, &clock, 16);
    // Every shard full of logs made at midnight (1 000 random-hashed keys
    // leave one of the 16 shards empty with odds under 10^-27).
    for i in 0..1000 {
        let _ = ask(&e, &format!("user-{i}"));
    }
    // One new key, so one shard. 59.5 s: the logs still hold their
    // request; a sweep frees nothing, and the next may run 60 s / 64 =
    // 937.5 ms later.
    clock.set_nanos(MIDNIGHT + 59_500_000_000);
    assert!(matches!(
        ask(&e, "newcomer"),
        Err(RequestError::Unavailable { .. })
    ));
    // 60 s: the logs are empty, but no sweep yet: still refused (never
    // let through).
    clock.set_nanos(MIDNIGHT + 60 * SEC);
    assert!(matches!(
        ask(&e, "newcomer"),
        Err(RequestError::Unavailable { .. })
    ));
    // 59.5 s + 937.5 ms: swept, a new key is decided.
    clock.set_nanos(MIDNIGHT + 59_500_000_000 + 937_500_000);
    assert_eq!(ask(&e, "newcomer").unwrap().overall_code, Code::Ok);
}

#[test]
fn a_shared_backend_refuses_a_log_at_start_naming_where() {
    let dir = std::env::temp_dir().join(format!("ratebound-log-{}", std::process::id()));
    let options = Options {
        backend: Backend::Shared { dir: dir.clone() },
        ..Options::default()
    };
    let err = Engine::with_options(Config::parse(LOG, "log.yaml").unwrap(), options)
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(text.starts_with("log.yaml:5:"), "{text}");
    assert!(
        text.contains("sliding_log") && text.contains("in this process only"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
