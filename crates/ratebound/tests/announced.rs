//! Following the quota a partner announces: reading it from any answer
//! (both header styles and the IETF field, hostile values bounded), the
//! rule's fraction (`burst·f + rate·f·t ≤ R`, within [floor, 1]), its
//! thresholds, and the call machine asking it in place of the quiet
//! probe. The fleet in virtual time is `learn_fleet.rs`.
#![cfg(not(ratebound_loom))]

use std::time::Duration;

use proptest::prelude::*;
use ratebound::Quota;
use ratebound::outbound::{
    Announced, Caller, FULL, Learned, Learning, MAX_WINDOWS, Outbound, Sending, Step, Target,
    announced, pause_asked, read_answer,
};

const NOW: f64 = 1_800_000_000.0;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn windows(headers: &[(&str, &str)]) -> Vec<(u64, Duration)> {
    announced(headers.iter().copied(), NOW).map_or_else(Vec::new, |a| a.windows().to_vec())
}

fn learning() -> Learning {
    Learning::new(Quota::parse("30/s burst 30").unwrap())
}

#[test]
fn every_header_style_announces_a_quota() {
    assert_eq!(
        windows(&[("RateLimit-Remaining", "12"), ("RateLimit-Reset", "4")]),
        [(12, secs(4))]
    );
    assert_eq!(
        windows(&[("x-ratelimit-remaining", "12"), ("X-RateLimit-Reset", "4")]),
        [(12, secs(4))]
    );
    // A reset above 10⁹ is a Unix time.
    assert_eq!(
        windows(&[
            ("X-RateLimit-Remaining", "7"),
            ("X-RateLimit-Reset", "1800000010")
        ]),
        [(7, secs(10))]
    );
    // The IETF field: every item with r and t (several policies).
    assert_eq!(
        windows(&[("RateLimit", r#""default";r=50;t=30, "burst";r=5;t=1"#)]),
        [(50, secs(30)), (5, secs(1))]
    );
    // Its older draft.
    assert_eq!(
        windows(&[("RateLimit", "limit=100, remaining=40, reset=9")]),
        [(40, secs(9))]
    );
    // The first form that announces one: the field over the others.
    assert_eq!(
        windows(&[
            ("RateLimit-Remaining", "1"),
            ("RateLimit-Reset", "1"),
            ("RateLimit", r#""q";r=80;t=8"#),
        ]),
        [(80, secs(8))]
    );
    // A count of 0 is announced too (its pause is the rule there).
    let (pause, quota) = read_answer(
        [("RateLimit-Remaining", "0"), ("RateLimit-Reset", "3")],
        NOW,
    );
    assert_eq!(pause, Some(secs(3)));
    assert_eq!(quota.unwrap().windows(), [(0, secs(3))]);
    // Nothing announced: a lone count, a lone reset, no fields.
    assert!(windows(&[("RateLimit-Remaining", "12")]).is_empty());
    assert!(windows(&[("X-RateLimit-Reset", "4")]).is_empty());
    assert!(windows(&[("Retry-After", "4")]).is_empty());
}

#[test]
fn hostile_values_are_ignored_or_bounded() {
    let pair = |r: &str, t: &str| windows(&[("RateLimit-Remaining", r), ("RateLimit-Reset", t)]);
    for (r, t) in [
        ("-1", "4"),
        ("12", "-4"),
        ("2.5", "4"),
        ("12", "1.5"),
        ("twelve", "4"),
        ("12", ""),
        ("1e3", "4"),
        // A reset in the past (a Unix time before now), now, a year away,
        // a Unix time so far it is a misread (milliseconds).
        ("12", "1799999990"),
        ("12", "0"),
        ("12", "31536000"),
        ("12", "999999999999"),
        ("12", "1800000000000"),
        ("12", "99999999999999999999999999999"),
    ] {
        assert!(pair(r, t).is_empty(), "{r} / {t}: {:?}", pair(r, t));
    }
    // A count too large to hold is the most there is.
    assert_eq!(pair("99999999999999999999999", "4"), [(u64::MAX, secs(4))]);
    assert_eq!(pair("999999999999", "4"), [(999_999_999_999, secs(4))]);
    // A day is the longest window followed.
    assert_eq!(pair("12", "86400"), [(12, secs(86_400))]);
    assert!(pair("12", "86401").is_empty());
    // An overlong value is not read.
    let long = "1".repeat(2000);
    assert!(pair(&long, "4").is_empty());
    // A hostile field: items without r or t, garbage, too many items.
    assert!(windows(&[("RateLimit", r#""a";r=-1;t=4, "b";r=1;t=x, ;;, =, "c""#)]).is_empty());
    let many = (1..50)
        .map(|i| format!(r#""p{i}";r={i};t=5"#))
        .collect::<Vec<_>>()
        .join(", ");
    assert_eq!(windows(&[("RateLimit", &many)]).len(), MAX_WINDOWS);
    // The pause read is unchanged by the quota read.
    assert_eq!(
        pause_asked(
            [("RateLimit", r#""default";r=0;t=30, "burst";r=5;t=1"#)],
            NOW
        ),
        Some(secs(30))
    );
}

#[test]
fn the_fraction_spends_no_more_than_the_count_before_the_reset() {
    let l = learning();
    let fresh = Learned::fresh();
    for (r, t) in [(99, 10), (12, 4), (300, 60), (1000, 3600), (40, 1)] {
        let quota = Announced::new(r, secs(t)).unwrap();
        let next = l
            .announced(fresh, &quota, 1_000)
            .expect("below the ceiling");
        let q = l.quota(next);
        // What the fleet may spend before the reset: its (scaled) burst
        // at once, then the rate.
        let spend = q.burst() as f64 + q.rate_per_second() * t as f64;
        let floor_spend = {
            let fq = l.quota(Learned::new(1, 1));
            fq.burst() as f64 + fq.rate_per_second() * t as f64
        };
        assert!(
            spend <= r as f64 + 1e-9 || spend <= floor_spend + 1e-9,
            "{r} per {t} s: spends {spend}"
        );
        assert!(next.was_cut(), "a lower fraction is a cut");
    }
    // 99 left for 10 s at 30/s burst 30: 0.3 of the ceiling.
    let next = l
        .announced(fresh, &Announced::new(99, secs(10)).unwrap(), 1_000)
        .unwrap();
    assert!((l.rate(next) - 9.0).abs() < 0.01, "{}", l.rate(next));
    // Several windows: the tightest.
    let two = Announced::new(1000, secs(10)).unwrap().with(33, secs(1));
    let next = l.announced(fresh, &two, 1_000).unwrap();
    assert!((l.rate(next) - 16.5).abs() < 0.01, "{}", l.rate(next));
    // Far more than the ceiling spends: nothing to change at the ceiling...
    let plenty = Announced::new(999_999_999_999, secs(4)).unwrap();
    assert_eq!(l.announced(fresh, &plenty, 1_000), None);
    // ...and back to it from below.
    let low = Learned::new(FULL / 4, 500).with_cut(true);
    let up = l.announced(low, &plenty, 1_000).unwrap();
    assert_eq!(up.fraction_units(), FULL);
    assert!(!up.was_cut());
    // A tiny count: the floor, not below.
    let tiny = Announced::new(1, secs(86_400)).unwrap();
    let down = l.announced(fresh, &tiny, 1_000).unwrap();
    assert!((l.fraction(down) - l.floor()).abs() < 1e-4);
    assert_eq!(l.announced(down, &tiny, 2_000), None);
    // A count of 0: the pause does it, no word proposed.
    assert_eq!(
        l.announced(fresh, &Announced::new(0, secs(5)).unwrap(), 1_000),
        None
    );
}

#[test]
fn small_differences_cost_no_store_call() {
    let l = learning();
    let at = |units: u32| Learned::new(units, 1_000);
    // The fraction 99/330 = 0.3 in 65536ths: 19660.
    let quota = Announced::new(99, secs(10)).unwrap();
    let target = 19_660;
    // Down: only from 1/32 above it.
    assert_eq!(l.announced(at(target + 600), &quota, 5_000), None);
    let p = l.announced(at(target + 700), &quota, 5_000).unwrap();
    assert_eq!(p.fraction_units(), target);
    // A small drop is not marked a cut (no gap after it); a drop of 1/8
    // or more is.
    assert!(!p.was_cut());
    assert!(
        l.announced(at(target + 3_000), &quota, 5_000)
            .unwrap()
            .was_cut()
    );
    // Up: only from 1/8 below it.
    assert_eq!(l.announced(at(target - 2_000), &quota, 5_000), None);
    let p = l.announced(at(target - 2_500), &quota, 5_000).unwrap();
    assert_eq!(p.fraction_units(), target);
    // Steady spending at the pace given announces the same fraction:
    // 9 of burst, then 9/s; at 4 s left, 9 + 36 = 45 are left.
    let seen = l.announced(Learned::fresh(), &quota, 1_000).expect("first");
    for (r, t) in [(90, 9), (63, 6), (45, 4), (18, 1)] {
        assert_eq!(
            l.announced(seen, &Announced::new(r, secs(t)).unwrap(), 5_000),
            None,
            "{r} left for {t} s"
        );
    }
}

fn caller() -> Caller {
    Caller::new("token_bucket", Outbound::new(), Sending::default(), None)
        .unwrap()
        .with_adaptive(None, true, Quota::parse("30/s burst 30").unwrap())
        .unwrap()
}

/// The machine's step after one answer sent under `seen`.
fn after(seen: Learned, status: u16, headers: &[(&str, &str)]) -> Step {
    let c = caller();
    let t = Target {
        scheme: "http",
        host: "p",
        port: None,
    };
    let mut call = c.call("GET", t, None, None, None, true).unwrap();
    let now = Duration::ZERO;
    assert!(matches!(call.next(&c, now), Ok(Step::Acquire { .. })));
    call.saw(seen);
    assert_eq!(call.next(&c, now).unwrap(), Step::Send);
    call.answered(&c, status, headers.iter().copied(), NOW);
    call.next(&c, now).unwrap()
}

#[test]
fn an_announced_quota_replaces_the_quiet_probe() {
    // Cut long ago: a bare 200 steps up.
    let old = Learned::new(FULL / 2, 1_000).with_cut(true);
    assert!(matches!(after(old, 200, &[]), Step::Adapt { .. }));
    // The same 200 announcing a quota that allows about what is in force:
    // no step up above what the partner announced.
    let half = [("RateLimit-Remaining", "165"), ("RateLimit-Reset", "10")];
    assert_eq!(after(old, 200, &half), Step::Done);
    // One announcing less: down to it, on any answer (a 404 too).
    let less = [("X-RateLimit-Remaining", "99"), ("X-RateLimit-Reset", "10")];
    for status in [200, 404] {
        let Step::Adapt { seen, next } = after(Learned::fresh(), status, &less) else {
            panic!("{status}: no adapt");
        };
        assert_eq!((seen, next.fraction_units()), (Learned::fresh(), 19_660));
    }
    // A refusal cuts by the factor, announced quota or not.
    let Step::Adapt { next, .. } = after(Learned::fresh(), 429, &less) else {
        panic!("no cut");
    };
    assert_eq!(next.fraction_units(), 45_875);
    // A count of 0 on a 200: the pause, no step up, no word.
    let spent = [("RateLimit-Remaining", "0"), ("RateLimit-Reset", "3")];
    assert_eq!(after(old, 200, &spent), Step::Pause(secs(3)));
}

proptest! {
    #[test]
    fn any_announcement_stays_within_floor_and_ceiling(
        bits in any::<u64>(),
        remaining in any::<u64>(),
        reset_ms in 1u64..=86_400_000,
        now in any::<u64>(),
        second in proptest::option::of((any::<u64>(), 1u64..=86_400_000)),
    ) {
        let l = learning();
        let mut quota = Announced::new(remaining, Duration::from_millis(reset_ms)).unwrap();
        if let Some((r, t)) = second {
            quota = quota.with(r, Duration::from_millis(t));
        }
        let seen = Learned::from_bits(bits);
        if let Some(next) = l.announced(seen, &quota, now) {
            let f = l.fraction(next);
            prop_assert!(f >= l.floor() && f <= 1.0 && f.is_finite());
            prop_assert!(next.fraction_units() <= FULL);
            prop_assert_ne!(next.to_bits(), seen.to_bits());
            // Applied, the same announcement proposes nothing more.
            prop_assert_eq!(l.announced(next, &quota, now), None);
        }
    }

    #[test]
    fn any_header_values_read_without_panic(r in ".{0,40}", t in ".{0,40}", field in ".{0,80}") {
        let headers = [
            ("RateLimit-Remaining", r.as_str()),
            ("RateLimit-Reset", t.as_str()),
            ("X-RateLimit-Remaining", r.as_str()),
            ("X-RateLimit-Reset", t.as_str()),
            ("RateLimit", field.as_str()),
        ];
        let (_, quota) = read_answer(headers, NOW);
        if let Some(q) = quota {
            prop_assert!(!q.windows().is_empty() && q.windows().len() <= MAX_WINDOWS);
            for (_, reset) in q.windows() {
                prop_assert!(!reset.is_zero() && *reset <= secs(86_400));
            }
            let _ = learning().announced(Learned::fresh(), &q, 1);
        }
    }
}
