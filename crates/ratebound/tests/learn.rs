//! The learning rule's pieces one by one: the word's layout and bounds,
//! each transition, the compare-and-swap that makes fifty proposals one
//! cut, hostile words and instants, and the configuration's errors. The
//! fleet simulation is `learn_fleet.rs`.
#![cfg(not(ratebound_loom))]

use std::time::Duration;

use proptest::prelude::*;
use ratebound::outbound::{FULL, Learned, Learning, MAX_INSTANT_MS};
use ratebound::{ErrorKind, MAX_SPAN_NANOS, Quota};

fn learning() -> Learning {
    Learning::new(Quota::parse("30/s burst 30").unwrap())
}

/// Applies `proposal` to `store` by a compare-and-swap from `seen`, as a
/// store does; whether it took.
fn cas(store: &mut u64, seen: Learned, proposal: Option<Learned>) -> bool {
    match proposal {
        Some(p) if *store == seen.to_bits() => {
            *store = p.to_bits();
            true
        }
        _ => false,
    }
}

#[test]
fn the_word_has_the_documented_layout() {
    let fresh = Learned::from_bits(0);
    assert_eq!(fresh, Learned::fresh());
    assert!(fresh.is_fresh() && !fresh.was_cut());
    assert_eq!((fresh.fraction_units(), fresh.changed_ms()), (FULL, 0));
    let half = Learned::new(FULL / 2, 1234).with_cut(true);
    assert_eq!(
        half.to_bits(),
        (1 << 61) | (u64::from(FULL / 2) << 44) | 1234
    );
    assert_eq!(Learned::from_bits(half.to_bits()), half);
    // Bounds: a fraction above the ceiling and an instant past the word's.
    let big = Learned::new(u32::MAX, u64::MAX);
    assert_eq!(
        (big.fraction_units(), big.changed_ms()),
        (FULL, MAX_INSTANT_MS)
    );
    assert_eq!(Learned::from_bits(big.to_bits()), big);
}

#[test]
fn a_refusal_cuts_by_the_factor_and_marks_the_cut() {
    let l = learning();
    let cut = l.refused(Learned::fresh(), 5_000).unwrap();
    assert_eq!(cut.fraction_units(), (u64::from(FULL) * 7 / 10) as u32);
    assert_eq!(cut.changed_ms(), 5_000);
    assert!(cut.was_cut());
    assert!((l.rate(cut) - 21.0).abs() < 0.01, "{}", l.rate(cut));
}

#[test]
fn cuts_stop_at_the_floor() {
    let l = learning();
    let mut state = Learned::fresh();
    let mut now = 0;
    let mut cuts = 0;
    while let Some(next) = l.refused(state, now) {
        assert!(next.fraction_units() < state.fraction_units());
        state = next;
        now += 1_000;
        cuts += 1;
    }
    // 0.7^9 ≈ 0.04 < 1/20: nine cuts reach the floor, the tenth is none.
    assert_eq!(cuts, 9);
    assert_eq!(l.fraction(state), l.floor());
    assert!((l.rate(state) - 1.5).abs() < 0.01);
    assert_eq!(l.refused(state, now + 10_000), None);
}

#[test]
fn a_refusal_within_the_gap_after_a_cut_is_no_evidence() {
    let l = learning();
    let cut = l.refused(Learned::fresh(), 1_000).unwrap();
    assert_eq!(l.refused(cut, 1_000), None);
    assert_eq!(l.refused(cut, 1_249), None);
    assert!(l.refused(cut, 1_250).is_some());
    // After a step up there is no gap: its first refusal cuts.
    let up = l.answered(cut, 1_500).unwrap();
    assert!(!up.was_cut());
    assert!(l.refused(up, 1_501).is_some());
}

#[test]
fn fifty_instances_hearing_one_burst_cut_once() {
    let l = learning();
    let mut store = 0u64;
    let seen = Learned::from_bits(store);
    // Fifty 429s of requests sent under the fresh state arrive over 80 ms.
    let applied = (0..50)
        .filter(|i| cas(&mut store, seen, l.refused(seen, 1_000 + i * 80 / 50)))
        .count();
    assert_eq!(applied, 1);
    let now = Learned::from_bits(store);
    assert!((l.rate(now) - 21.0).abs() < 0.01);
    // Fifty 200s after the probe period: one step, not fifty.
    let applied = (0..50)
        .filter(|i| cas(&mut store, now, l.answered(now, 2_000 + i)))
        .count();
    assert_eq!(applied, 1);
    assert!((l.rate(Learned::from_bits(store)) - 21.5).abs() < 0.01);
}

#[test]
fn an_answer_steps_up_after_the_probe_period_only() {
    let l = learning();
    let cut = l.refused(Learned::fresh(), 1_000).unwrap();
    assert_eq!(l.answered(cut, 1_499), None);
    let up = l.answered(cut, 1_500).unwrap();
    assert_eq!(up.fraction_units(), cut.fraction_units() + FULL / 60);
    assert_eq!(up.changed_ms(), 1_500);
    // At the ceiling nothing changes; near it the step stops there.
    assert_eq!(l.answered(Learned::fresh(), 100_000), None);
    let near = Learned::new(FULL - 10, 0).with_cut(true);
    assert_eq!(l.answered(near, 1_000).unwrap().fraction_units(), FULL);
}

#[test]
fn every_transition_moves_the_instant_forward() {
    // A clock behind the word (another sharer's, or a reading that went
    // back): the change is still after the last, so the bits never come
    // back to a word someone saw (no ABA for the compare-and-swap).
    let l = learning();
    let seen = Learned::new(FULL / 2, 10_000);
    assert_eq!(l.refused(seen, 500).unwrap().changed_ms(), 10_001);
    assert_eq!(
        l.answered(seen.with_cut(true), 50_000)
            .unwrap()
            .changed_ms(),
        50_000
    );
    let late = Learned::new(FULL / 2, MAX_INSTANT_MS);
    let cut = l.refused(late, u64::MAX).unwrap();
    assert_eq!(cut.changed_ms(), MAX_INSTANT_MS);
    assert_ne!(cut.to_bits(), late.to_bits());
}

#[test]
fn a_hostile_word_reads_within_floor_and_ceiling() {
    let l = learning();
    for bits in [u64::MAX, 1 << 63, 0x1FFFF << 44, (FULL as u64 + 1) << 44] {
        let state = Learned::from_bits(bits);
        let f = l.fraction(state);
        assert!((l.floor()..=1.0).contains(&f), "{bits:#x}: {f}");
        assert!(l.rate(state).is_finite() && l.rate(state) > 0.0);
        let q = l.quota(state);
        assert!(q.rate_per_second() <= l.rate(state) + 1e-9, "{bits:#x}");
        if let Some(up) = l.answered(state, u64::MAX) {
            assert!(up.fraction_units() > state.fraction_units());
            assert!(l.fraction(up) <= 1.0);
        }
        assert!(
            l.refused(state, u64::MAX)
                .is_none_or(|c| l.fraction(c) >= l.floor())
        );
    }
}

#[test]
fn the_quota_follows_the_fraction() {
    let l = learning();
    let fresh = l.quota(Learned::fresh());
    assert_eq!(fresh, Quota::parse("30/s burst 30").unwrap());
    let floor = l.quota(Learned::from_bits(u64::MAX));
    assert_eq!(floor.burst(), 1);
    assert!((floor.rate_per_second() - 1.5).abs() < 0.01);
    let cut = l.quota(l.refused(Learned::fresh(), 0).unwrap());
    assert_eq!(cut.burst(), 20);
    assert!(cut.rate_per_second() <= 21.0 + 1e-9);
    // A tiny ceiling at the smallest floor: no overflow, the longest quota.
    let tiny = Learning::new(Quota::per_hour(1).unwrap())
        .with_floor(1.0 / 65536.0)
        .unwrap();
    assert!(tiny.quota(Learned::from_bits(u64::MAX)).rate_per_second() > 0.0);
    // A ceiling near the longest quota: the learned period is the longest
    // one and the burst shrinks to fit it, never the ceiling in its place.
    let ceiling = Quota::with_period(Duration::from_nanos(MAX_SPAN_NANOS / 4))
        .and_then(|q| q.with_burst(4))
        .unwrap();
    let longest = Learning::new(ceiling).with_floor(1.0 / 65536.0).unwrap();
    let q = longest.quota(Learned::from_bits(u64::MAX));
    assert_eq!(q.emission_interval_nanos(), MAX_SPAN_NANOS);
    assert_eq!(q.burst(), 1);
}

#[test]
fn bad_settings_are_typed_errors_naming_the_value() {
    let l = learning();
    for (err, text) in [
        (
            l.with_floor(1.5).unwrap_err(),
            "invalid floor 1.5: must be above 0 and at most 1 (the ceiling)",
        ),
        (
            l.with_floor(0.0).unwrap_err(),
            "invalid floor 0: must be above 0 and at most 1 (the ceiling)",
        ),
        (
            l.with_floor(f64::NAN).unwrap_err(),
            "invalid floor NaN: must be above 0 and at most 1 (the ceiling)",
        ),
        (
            l.with_floor(1e-9).unwrap_err(),
            "invalid floor 1e-9: must be at least 1/65536",
        ),
        (
            l.with_factor(1.0).unwrap_err(),
            "invalid factor 1: must be strictly between 0 and 1 (a cut)",
        ),
        (
            l.with_factor(-0.5).unwrap_err(),
            "invalid factor -0.5: must be strictly between 0 and 1 (a cut)",
        ),
        (
            l.with_factor(f64::INFINITY).unwrap_err(),
            "invalid factor inf: must be strictly between 0 and 1 (a cut)",
        ),
        (
            l.with_probe(Duration::ZERO, 0.1).unwrap_err(),
            "invalid probe 0ns: must be at least 1 ms and at most 2^44 − 1 ms",
        ),
        (
            l.with_probe(Duration::from_millis(100), 0.1).unwrap_err(),
            "invalid probe 100ms: must be at least the gap (a rate would step up before its refusals counted)",
        ),
        (
            l.with_probe(Duration::from_secs(1), 0.0).unwrap_err(),
            "invalid step 0: must be above 0 and at most 1 (the ceiling)",
        ),
        (
            l.with_gap(Duration::from_secs(1)).unwrap_err(),
            "invalid gap 1s: must be at most the probe period",
        ),
    ] {
        assert_eq!(err.to_string(), text);
        assert_eq!(
            (err.code(), err.kind()),
            ("invalid_number", ErrorKind::Range)
        );
    }
    let tuned = l
        .with_floor(0.1)
        .and_then(|l| l.with_factor(0.5))
        .and_then(|l| l.with_gap(Duration::ZERO))
        .and_then(|l| l.with_probe(Duration::from_millis(1), 1.0))
        .unwrap();
    // Kept in 65536ths of the ceiling.
    assert!((tuned.floor() - 0.1).abs() < 1.0 / 65536.0);
    // No gap: a refusal right after a cut counts.
    let cut = tuned.refused(Learned::fresh(), 7).unwrap();
    assert!(tuned.refused(cut, 7).is_some());
}

proptest! {
    /// Any word, any instants: every transition stays in [floor, ceiling],
    /// changes the bits (so a compare-and-swap from the word it saw is
    /// never a no-op), and nothing read from it is NaN or infinite.
    #[test]
    fn transitions_stay_in_bounds(bits in any::<u64>(), now in any::<u64>()) {
        let l = learning();
        let seen = Learned::from_bits(bits);
        for next in [l.refused(seen, now), l.answered(seen, now)].into_iter().flatten() {
            prop_assert_ne!(next.to_bits(), seen.to_bits());
            prop_assert!(next.fraction_units() >= 3277 && next.fraction_units() <= FULL);
            prop_assert!(next.changed_ms() <= MAX_INSTANT_MS);
            prop_assert!(next.changed_ms() >= seen.changed_ms());
        }
        let f = l.fraction(seen);
        prop_assert!(f >= l.floor() && f <= 1.0);
        prop_assert!(l.rate(seen).is_finite());
    }
}
