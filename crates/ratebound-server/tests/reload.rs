//! Hot reload: a limit raised and lowered by rewriting the file, a broken
//! file written mid-run (reported with its line and column, the rules in
//! force kept), and a directory gaining a domain.

mod common;
use common::DecideNow;

use std::path::PathBuf;

use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound_server::api::{Code, Request, RequestDescriptor};
use ratebound_server::engine::{Engine, Options};
use ratebound_server::model::Config;
use ratebound_server::reload::{Polled, Watcher};

const NOON: u64 = 1_796_558_400 * 1_000_000_000;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ratebound-reload-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn limits(per_hour: i64) -> String {
    format!(
        "domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: {per_hour}
"
    )
}

fn admitted(e: &Engine, domain: &str, tries: usize) -> usize {
    let req = Request {
        domain: domain.to_string(),
        descriptors: vec![RequestDescriptor {
            entries: vec![("remote_address".into(), "192.0.2.1".into())],
            hits_addend: None,
            limit: None,
        }],
        hits_addend: 0,
    };
    (0..tries)
        .filter(|_| e.decide_now(&req).expect("decide").overall_code == Code::Ok)
        .count()
}

#[test]
fn a_limit_raised_and_lowered_by_rewriting_the_file_takes_hold_at_the_next_poll() {
    let d = dir("file");
    let file = d.join("edge.yaml");
    std::fs::write(&file, limits(2)).expect("write");
    let clock = ManualClock::new();
    clock.set_nanos(NOON);
    let options = Options {
        clock: AnyClock::Manual(clock),
        max_keys: 100,
        ..Options::default()
    };
    let e = Engine::with_options(Config::load(&file).expect("load"), options).expect("engine");
    let mut w = Watcher::new(&file);
    assert_eq!(w.poll(&e), Polled::Unchanged);
    assert_eq!(admitted(&e, "edge", 5), 2);
    // Raised: a new limit counts from nothing.
    std::fs::write(&file, limits(4)).expect("write");
    assert_eq!(
        w.poll(&e),
        Polled::Reloaded {
            domains: vec!["edge".to_string()]
        }
    );
    assert_eq!(w.poll(&e), Polled::Unchanged);
    assert_eq!(admitted(&e, "edge", 5), 4);
    // A broken file mid-run: said with its line and column; the rules in
    // force (4 per hour, spent) stay.
    std::fs::write(&file, limits(-3)).expect("write");
    let Polled::Refused { error } = w.poll(&e) else {
        panic!("a negative limit is refused");
    };
    assert!(
        error.contains("edge.yaml:6:26") && error.contains("-3"),
        "{error}"
    );
    assert_eq!(
        w.poll(&e),
        Polled::Unchanged,
        "the same broken content is said once"
    );
    assert_eq!(admitted(&e, "edge", 2), 0);
    // Lowered back to 2 (the first limit's counters are still there, spent).
    std::fs::write(&file, limits(2)).expect("write");
    assert!(matches!(w.poll(&e), Polled::Reloaded { .. }));
    assert_eq!(admitted(&e, "edge", 2), 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_directory_gaining_a_domain_and_a_file_that_does_not_parse() {
    let d = dir("dir");
    std::fs::write(d.join("10-edge.yaml"), limits(1)).expect("write");
    let e = Engine::new(Config::load(&d).expect("load")).expect("engine");
    let mut w = Watcher::new(&d);
    assert_eq!(admitted(&e, "api", 3), 3, "no rules for api yet");
    std::fs::write(d.join("20-api.yaml"), limits(1).replace("edge", "api")).expect("write");
    assert_eq!(
        w.poll(&e),
        Polled::Reloaded {
            domains: vec!["api".to_string(), "edge".to_string()]
        }
    );
    assert_eq!(admitted(&e, "api", 3), 1);
    std::fs::write(d.join("30-bad.yaml"), "domain: bad\ndescriptors: [\n").expect("write");
    let Polled::Refused { error } = w.poll(&e) else {
        panic!("a YAML error is refused");
    };
    assert!(error.contains("30-bad.yaml:"), "{error}");
    assert_eq!(admitted(&e, "api", 1), 0, "api's rules stay in force");
    let _ = std::fs::remove_dir_all(&d);
}
