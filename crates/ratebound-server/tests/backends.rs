//! The engine over a shared backend, at explicit instants: two engines (two
//! servers) over one shared-memory directory keep one count, and stacked
//! limits stay all-or-nothing (a refusal by one limit charges none).
//! Several server processes over Redis, a cluster and shared memory are
//! tested in `crates/ratebound-cli/tests/serve_shared.rs`.

use std::path::PathBuf;

use futures_util::FutureExt;
use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound_server::api::{Code, Request, RequestDescriptor, Response};
use ratebound_server::backend::Backend;
use ratebound_server::engine::{Engine, Options, RequestError};
use ratebound_server::model::Config;

/// 2026-12-06 00:00:00 UTC, in ns: a multiple of every unit up to a day.
const MIDNIGHT: u64 = 1_796_515_200 * 1_000_000_000;
const MINUTE: u64 = 60 * 1_000_000_000;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ratebound-backends-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// An engine of `yaml` keeping its state in shared memory under `dir`.
fn engine(yaml: &str, dir: &std::path::Path, clock: &ManualClock) -> Engine {
    std::fs::create_dir_all(dir).unwrap();
    let options = Options {
        clock: AnyClock::Manual(clock.clone()),
        max_keys: 100,
        backend: Backend::Shared {
            dir: dir.to_path_buf(),
        },
        ..Options::default()
    };
    Engine::with_options(Config::parse(yaml, "shared.yaml").expect("rules"), options)
        .expect("engine")
}

fn ask(e: &Engine, user: &str) -> Result<Response, RequestError> {
    let request = Request {
        domain: "api".to_string(),
        descriptors: vec![RequestDescriptor {
            entries: vec![("user".to_string(), user.to_string())],
            hits_addend: None,
            limit: None,
        }],
        hits_addend: 0,
    };
    // Shared memory answers at once: no I/O to wait for.
    e.decide(&request).now_or_never().expect("ready")
}

/// Two per minute and five per hour on each user, together.
const STACKED: &str = "\
domain: api
descriptors:
  - key: user
    rate_limits:
      - name: per_minute
        unit: minute
        requests_per_unit: 2
      - name: per_hour
        unit: hour
        requests_per_unit: 5
";

#[test]
fn two_engines_over_one_directory_share_stacked_limits_all_or_nothing() {
    let dir = scratch("stacked");
    let clock = ManualClock::new();
    clock.set_nanos(MIDNIGHT);
    let (a, b) = (engine(STACKED, &dir, &clock), engine(STACKED, &dir, &clock));
    let code = |e: &Engine| ask(e, "ann").expect("decided").overall_code;
    let mut seen = Vec::new();
    for minute in 0..4 {
        clock.set_nanos(MIDNIGHT + minute * MINUTE);
        // Three asks a minute, alternating servers.
        seen.push([code(&a), code(&b), code(&a)]);
    }
    use Code::{Ok, OverLimit as Over};
    // Each minute's third ask is refused by the minute limit and charges
    // nothing to the hour's: the hour's five go to the first five admitted.
    // Charged on refusal, the hour would be spent in the second minute.
    assert_eq!(
        seen,
        vec![
            [Ok, Ok, Over],
            [Ok, Ok, Over],
            [Ok, Over, Over],
            [Over, Over, Over]
        ]
    );
    // The answer names the limit that refused.
    let r = ask(&b, "ann").expect("decided");
    let limit = r.statuses[0].current_limit.as_ref().expect("a limit");
    assert_eq!(limit.name, "per_hour");
    // Another user is untouched.
    assert_eq!(code(&a), Over);
    assert_eq!(ask(&a, "bob").expect("decided").overall_code, Ok);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn one_limit_is_one_file_shared_by_every_engine_and_says_what_is_left() {
    let dir = scratch("single");
    let clock = ManualClock::new();
    clock.set_nanos(MIDNIGHT + 10 * 1_000_000_000);
    let yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 4\n";
    let engines: Vec<Engine> = (0..3).map(|_| engine(yaml, &dir, &clock)).collect();
    let mut remaining = Vec::new();
    for e in engines.iter().cycle().take(6) {
        let r = ask(e, "ann").expect("decided");
        let s = &r.statuses[0];
        remaining.push((r.overall_code, s.limit_remaining));
        // Fixed windows are aligned to the epoch, as in this process.
        assert_eq!(
            s.duration_until_reset,
            Some(std::time::Duration::from_secs(50))
        );
    }
    assert_eq!(
        remaining,
        vec![
            (Code::Ok, 3),
            (Code::Ok, 2),
            (Code::Ok, 1),
            (Code::Ok, 0),
            (Code::OverLimit, 0),
            (Code::OverLimit, 0)
        ]
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_refused_fixed_window_stays_refused_until_it_ends_as_in_this_process() {
    let dir = scratch("filled");
    let clock = ManualClock::new();
    clock.set_nanos(MIDNIGHT);
    let yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n";
    let e = engine(yaml, &dir, &clock);
    let ask_n = |hits: u64| {
        let request = Request {
            domain: "api".to_string(),
            descriptors: vec![RequestDescriptor {
                entries: vec![("user".to_string(), "ann".to_string())],
                hits_addend: None,
                limit: None,
            }],
            hits_addend: hits,
        };
        let r = e.decide(&request).now_or_never().expect("ready").unwrap();
        (r.overall_code, r.statuses[0].limit_remaining)
    };
    assert_eq!(ask_n(3), (Code::Ok, 2));
    // Three more do not fit: refused, and the window is then spent, as the
    // reference server's count past the limit.
    assert_eq!(ask_n(3), (Code::OverLimit, 0));
    assert_eq!(ask_n(1), (Code::OverLimit, 0));
    clock.set_nanos(MIDNIGHT + MINUTE);
    assert_eq!(ask_n(1), (Code::Ok, 4));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_directory_that_cannot_hold_the_files_is_refused_at_start() {
    let file = scratch("not-a-dir");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "a file, not a directory").unwrap();
    let clock = ManualClock::new();
    let options = Options {
        clock: AnyClock::Manual(clock),
        max_keys: 100,
        backend: Backend::Shared { dir: file.clone() },
        ..Options::default()
    };
    let err = Engine::with_options(Config::parse(STACKED, "shared.yaml").unwrap(), options)
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(text.starts_with("shared.yaml:"), "{text}");
    assert!(text.contains("not-a-dir"), "{text}");
    let _ = std::fs::remove_file(file);
}
