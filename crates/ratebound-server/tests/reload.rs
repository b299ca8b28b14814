//! Hot reload: a limit raised and lowered by rewriting the file, a broken
//! file written mid-run (reported with its line and column, the rules in
//! force kept), a directory gaining a domain, and reloads under load (each
//! decision reads one configuration; no hit lost or counted twice).

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

/// Two descriptors' limits named after the configuration (`a` or `b`) and
/// the limit `per_hour`.
fn named(tag: &str, per_hour: u64) -> Config {
    let text = format!(
        "domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      name: {tag}_address
      unit: hour
      requests_per_unit: {per_hour}
  - key: path
    rate_limit:
      name: {tag}_path
      unit: hour
      requests_per_unit: {per_hour}
"
    );
    Config::parse(&text, "edge.yaml").expect("rules")
}

#[test]
fn under_load_each_decision_reads_one_configuration_and_nothing_is_lost() {
    let clock = ManualClock::new();
    clock.set_nanos(NOON);
    let options = Options {
        clock: AnyClock::Manual(clock),
        max_keys: 1000,
        ..Options::default()
    };
    // The same limits (one counter each) under two names: reloads swap the
    // names and keep the counts.
    let e = Engine::with_options(named("a", 1_000_000), options).expect("engine");
    let threads = 4;
    let per_thread = 2_000;
    let request = Request {
        domain: "edge".to_string(),
        descriptors: vec![
            RequestDescriptor {
                entries: vec![("remote_address".into(), "192.0.2.1".into())],
                hits_addend: None,
                limit: None,
            },
            RequestDescriptor {
                entries: vec![("path".into(), "/login".into())],
                hits_addend: None,
                limit: None,
            },
        ],
        hits_addend: 0,
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let reloads = std::thread::scope(|s| {
        let deciders: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..per_thread {
                        let r = e.decide_now(&request).expect("decided");
                        assert_eq!(r.overall_code, Code::Ok);
                        let names: Vec<&str> = r
                            .statuses
                            .iter()
                            .map(|s| s.current_limit.as_ref().expect("a limit").name.as_str())
                            .collect();
                        // One configuration from start to end: never a mix.
                        assert!(
                            names == ["a_address", "a_path"] || names == ["b_address", "b_path"],
                            "{names:?}"
                        );
                    }
                })
            })
            .collect();
        let mut reloads = 0;
        let reloader = s.spawn(|| {
            let mut n = 0u32;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let tag = if n.is_multiple_of(2) { "b" } else { "a" };
                e.reload(named(tag, 1_000_000)).expect("reload");
                n += 1;
                std::thread::yield_now();
            }
            n
        });
        for d in deciders {
            d.join().expect("decider");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        reloads += reloader.join().expect("reloader");
        reloads
    });
    assert!(reloads > 0);
    // Every hit counted once, whatever the reloads: the next one sees
    // exactly threads × per_thread + 1 spent.
    let r = e.decide_now(&request).expect("decided");
    let spent = 1_000_000 - u64::from(r.statuses[0].limit_remaining);
    assert_eq!(spent, (threads * per_thread + 1) as u64);
    assert_eq!(r.statuses[1].limit_remaining, r.statuses[0].limit_remaining);
}
