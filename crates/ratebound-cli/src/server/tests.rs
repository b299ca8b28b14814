//! The server model's own tests (the binary's are in tests/server.rs).

use super::*;
use crate::traffic::Event;

/// `parse` refuses each `(bad, needle)` case with an error naming `needle`.
fn refuses<T: std::fmt::Debug>(parse: fn(&str) -> Result<T, CliError>, cases: &[(&str, &str)]) {
    for (bad, needle) in cases {
        let e = parse(bad).unwrap_err().to_string();
        assert!(e.contains(needle), "{bad}: {e}");
    }
}

fn steady(rate: u64, secs: u64) -> Traffic {
    let gap = SECOND / rate;
    Traffic {
        events: (0..rate * secs)
            .map(|i| Event {
                t: i * gap,
                key: 0,
                n: 1,
            })
            .collect(),
        keys: vec!["-".into()],
        duration: secs * SECOND,
        name: format!("steady:{rate}/s"),
    }
}

fn server(workers: usize, service_ms: u64) -> Server {
    Server {
        workers,
        service: service_ms * 1_000_000,
        slowdown: vec![],
        jitter: 0.0,
        seed: 1,
        warmup: 0,
        mix: None,
        background_fraction: None,
    }
}

fn variant(spec: &str) -> Variant {
    parse_variants(spec).unwrap().remove(0)
}

#[test]
fn an_idle_server_answers_in_the_service_time() {
    let t = steady(10, 2);
    for v in ["none", "fixed:1", "auto"] {
        let r = run(&server(1, 20), &variant(v), &t).unwrap();
        assert_eq!((r.admitted, r.shed, r.queue_max), (20, 0, 0), "{v}");
        assert_eq!((r.p50, r.max), (Some(20_000_000), Some(20_000_000)), "{v}");
        assert_eq!(r.served, 20, "{v}");
    }
}

#[test]
fn requests_queue_for_a_worker_in_fifo_order() {
    // Three at once on one worker of 10 ms: 10, 20, 30 ms.
    let t = Traffic {
        events: vec![Event { t: 0, key: 0, n: 1 }; 3],
        keys: vec!["-".into()],
        duration: SECOND,
        name: "burst".into(),
    };
    let r = run(&server(1, 10), &variant("none"), &t).unwrap();
    assert_eq!(r.queue_max, 2);
    assert_eq!((r.p50, r.max), (Some(20_000_000), Some(30_000_000)));
    // A cap of 2 sheds the third.
    let r = run(&server(1, 10), &variant("fixed:2"), &t).unwrap();
    assert_eq!((r.admitted, r.shed, r.max), (2, 1, Some(20_000_000)));
}

#[test]
fn a_slowdown_scales_services_that_begin_after_it() {
    let mut s = server(1, 10);
    s.slowdown = parse_slowdown("1s:3x").unwrap();
    assert_eq!(s.service_at(0, SECOND - 1), 10_000_000);
    assert_eq!(s.service_at(0, SECOND), 30_000_000);
    s.jitter = 0.5;
    let a: Vec<u64> = (0..50).map(|i| s.service_at(i, 0)).collect();
    assert!(a.iter().all(|&x| (5_000_000..=15_000_000).contains(&x)));
    assert!(a.iter().any(|&x| x != a[0]), "{a:?}");
    assert_eq!(a, (0..50).map(|i| s.service_at(i, 0)).collect::<Vec<_>>());
}

#[test]
fn variants_parse_with_their_tuning() {
    let v = parse_variants("none, fixed:4,auto:max=50,tolerance=2,auto").unwrap();
    let names: Vec<&str> = v.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        ["none", "fixed:4", "auto:max=50,tolerance=2", "auto"]
    );
    let Cap::Auto(c) = v[2].cap else {
        panic!("{v:?}")
    };
    assert_eq!((c.max_limit, c.tolerance), (50, 2.0));
    refuses(
        parse_variants,
        &[
            ("fixed:0", "fixed cap \"fixed:0\""),
            ("fixed", "fixed cap \"fixed\""),
            ("adaptive", "unknown variant \"adaptive\""),
            ("none,max=5", "\"max=5\" tunes no auto"),
            ("auto:speed=2", "unknown setting \"speed=2\""),
            ("auto:tolerance=NaN", "tolerance=\"NaN\""),
            ("auto:tolerance=0.5", "tolerance 0.5"),
            ("auto:min=0", "min_limit"),
            ("", "unknown variant \"\""),
        ],
    );
}

#[test]
fn slowdown_and_jitter_refuse_bad_values() {
    assert_eq!(
        parse_slowdown("4s:2x, 8s:1").unwrap(),
        vec![(4 * SECOND, 2.0), (8 * SECOND, 1.0)]
    );
    refuses(
        parse_slowdown,
        &[
            ("4s", "\"4s\" is not TIME:FACTOR"),
            ("4s:-2x", "factor \"-2x\""),
            ("4s:NaNx", "factor \"NaNx\""),
            ("4s:0", "factor \"0\""),
            ("soon:2x", "\"soon\" is not a duration"),
            ("4s:2x,2s:1x", "\"2s:1x\" must come after"),
        ],
    );
    assert_eq!(parse_jitter("0.25").unwrap(), 0.25);
    for bad in ["1", "-0.1", "NaN", "lots"] {
        let e = parse_jitter(bad).unwrap_err().to_string();
        assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
    }
}

#[test]
fn priorities_are_drawn_in_their_shares_from_the_seed() {
    let mut s = server(1, 10);
    assert_eq!(s.priority(3), Priority::Normal);
    s.mix = Some(parse_priorities("critical=10%,background=0.3").unwrap());
    let count = |s: &Server, p: Priority| (0..10_000).filter(|&i| s.priority(i) == p).count();
    let critical = count(&s, Priority::Critical);
    let background = count(&s, Priority::Background);
    assert!((900..1100).contains(&critical), "{critical}");
    assert!((2800..3200).contains(&background), "{background}");
    let first: Vec<Priority> = (0..64).map(|i| s.priority(i)).collect();
    s.seed = 2;
    let other: Vec<Priority> = (0..64).map(|i| s.priority(i)).collect();
    assert_ne!(first, other);
}

#[test]
fn the_limit_is_shown_at_round_times() {
    assert_eq!(super::report::round_step(1), 1);
    assert_eq!(super::report::round_step(400_000_000), 400_000_000);
    assert_eq!(super::report::round_step(1_200_000_000), 2_000_000_000);
    assert_eq!(super::report::round_step(49_992_000_000), 50_000_000_000);
    assert_eq!(super::report::round_step(u64::MAX), u64::MAX);
}
