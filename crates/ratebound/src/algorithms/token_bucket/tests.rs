//! The token bucket's unit tests.

use super::*;
use crate::ManualClock;

fn quota(periods: u64, burst: u64) -> Quota {
    Quota::with_period(Duration::from_secs(periods))
        .and_then(|q| q.with_burst(burst))
        .expect("valid quota")
}

/// A word of another generation than the epoch loaded (a quota change
/// whose exchange is done and whose epoch is not yet stored) is never
/// decided on by the one-token path, whether its TAT would admit or
/// refuse: the path gives up, and the word's own slot decides.
#[test]
fn the_one_token_path_gives_up_on_a_word_of_another_generation() {
    let bucket = TokenBucket::with_clock(quota(1, 4), ManualClock::new());
    let now = 10_000_000_000;
    assert!(bucket.check_latest(now).is_some_and(|one| one.allowed));
    for (generation, tat) in [(1, 0), (1, now), (2, now + 1), (3, MAX_TAT)] {
        bucket.state.update(|_| Some(pack(generation, tat)));
        assert!(
            bucket.check_latest(now).is_none(),
            "generation {generation}, TAT {tat}"
        );
    }
}

/// A check at a time past `MAX_TIME_NANOS` answers as one at that
/// time (the one-token path tests the time by a branch, not a clamp).
#[test]
fn a_check_after_the_last_time_counts_as_at_it() {
    let late = TokenBucket::with_clock(quota(1, 2), ManualClock::new());
    let last = TokenBucket::with_clock(quota(1, 2), ManualClock::new());
    for now in [u64::MAX, MAX_TIME_NANOS + 1, u64::MAX, u64::MAX] {
        assert_eq!(late.check_at(now), last.check_at(MAX_TIME_NANOS));
    }
    assert!(!late.check_at(u64::MAX).is_allowed());
}

/// A check that loaded its word and then stalled while four quota
/// changes brought the word's slot back into use must not pair that
/// word with the slot's new quota (the old code read the slot blindly).
#[test]
fn a_word_from_four_quota_changes_ago_gets_no_quota() {
    let bucket = TokenBucket::with_clock(quota(1, 4), ManualClock::new());
    let floor = bucket.epoch.load(Ordering::Acquire);
    let stale = bucket.state.load();
    assert_eq!(
        bucket.quota_of(stale, floor).map(|(p, e)| (p.burst, e)),
        Some((4, 0))
    );

    for (periods, burst) in [(2, 3), (1, 2), (3, 5), (1, 6)] {
        bucket.set_quota_at(quota(periods, burst), 0);
    }
    assert_eq!(generation(bucket.state.load()), generation(stale));
    assert_eq!(bucket.quota_of(stale, floor), None);

    let floor = bucket.epoch.load(Ordering::Acquire);
    let word = bucket.state.load();
    let (p, epoch) = bucket.quota_of(word, floor).expect("current quota");
    assert_eq!((p.period, p.burst, epoch), (1_000_000_000, 6, 4));
}

/// The learned word and the quota change together, once per word seen: a
/// proposal from a word no longer held is dropped, and the ceiling set by
/// `set_quota` is what a later word scales.
#[test]
fn adapt_scales_the_ceiling_by_the_word_once_per_word_seen() {
    use crate::outbound::{FULL, Learned};
    let clock = ManualClock::new();
    let ceiling = Quota::per_second(30).unwrap().with_burst(30).unwrap();
    let b = TokenBucket::with_clock(ceiling, clock.clone());
    assert!(b.learned().is_fresh());
    let half = Learned::new(FULL / 2, 1_000).with_cut(true);
    assert!(b.adapt(Learned::fresh(), half));
    assert_eq!(b.quota(), half.scale(ceiling));
    assert_eq!(b.quota().burst(), 15);
    // Another instance proposing from the fresh word is too late.
    let other = Learned::new(FULL / 4, 1_000).with_cut(true);
    assert!(!b.adapt(Learned::fresh(), other));
    assert_eq!(b.learned(), half);
    // The ceiling survives, and a new one is scaled by the word held.
    assert_eq!(b.ceiling(), ceiling);
    let lower = Quota::per_second(10).unwrap().with_burst(10).unwrap();
    b.set_quota(lower);
    assert_eq!((b.ceiling(), b.quota()), (lower, half.scale(lower)));
    // The word back at the ceiling: the quota set, exactly.
    assert!(b.adapt(half, Learned::new(FULL, 2_000)));
    assert_eq!(b.quota(), lower);
}

/// A cut drops the queue beyond an empty bucket (the waiters holding those
/// slots wait again: `Learned::cut_since`), never a pause on; a step up
/// keeps the schedule.
#[test]
fn a_cut_drops_the_queue_but_not_a_pause_and_a_step_up_keeps_it() {
    use crate::outbound::{FULL, Learned};
    let ceiling = Quota::per_second(10).unwrap().with_burst(2).unwrap();
    let b = TokenBucket::with_clock(ceiling, ManualClock::new());
    // Two at once, then eight queued: the last slot 800 ms out.
    for _ in 0..10 {
        let _held = b.reserve_n_at(1, Duration::MAX, 0).unwrap();
    }
    let half = Learned::new(FULL / 2, 1).with_cut(true);
    assert!(b.adapt_at(Learned::fresh(), half, 0));
    // 5/s burst 1, from an empty bucket now: the next slot 200 ms out, not
    // behind the 800 ms of dropped slots.
    let next = b.reserve_n_at(1, Duration::MAX, 0).unwrap();
    assert_eq!(next.delay(), Duration::from_millis(200));
    // A step up keeps the schedule: the next slot follows that one.
    let up = Learned::new(FULL, 2);
    assert!(b.adapt_at(half, up, 0));
    let after = b.reserve_n_at(1, Duration::MAX, 0).unwrap();
    assert_eq!(after.delay(), Duration::from_millis(300));
    // A pause on stays through a cut: nothing before its end.
    b.pause_at(Duration::from_secs(5), 0);
    let cut = Learned::new(FULL / 2, 3).with_cut(true);
    assert!(b.adapt_at(up, cut, 0));
    let paused = b.reserve_n_at(1, Duration::MAX, 0).unwrap();
    assert!(
        paused.delay() >= Duration::from_secs(5),
        "{:?}",
        paused.delay()
    );
}
