//! `resume` on the local limiters (token bucket, keyed, `AnyLimiter` /
//! `AnyKeyed`) and on a word with pause words (`WordRule`), on a
//! ManualClock or at explicit instants.
#![cfg(not(ratebound_loom))]

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use ratebound::any::{AnyClock, AnyKeyed, AnyLimiter, Key, Rate};
use ratebound::pause::Words;
use ratebound::{
    KeyedAlgorithm, KeyedLimiter, ManualClock, Overflow, Quota, Resumed, TokenBucket, WordRule,
};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

fn quota(q: &str) -> Quota {
    Quota::parse(q).expect("quota")
}

/// The answers of checks of one token every 100 ms from `from` for `span`.
fn admitted(bucket: &TokenBucket<ManualClock>, from: u64, span: u64) -> Vec<u64> {
    (0..=span / (100 * MS))
        .map(|i| from + i * 100 * MS)
        .filter(|&t| bucket.check_at(t).is_allowed())
        .collect()
}

#[test]
fn a_lifted_pause_leaves_the_bucket_as_if_it_had_ended_then() {
    // Paused for 10 s at 0, resumed at 1 s: from then on it decides
    // exactly as a bucket paused at 0 for 1 s.
    let resumed = TokenBucket::with_clock(quota("2/s burst 3"), ManualClock::new());
    resumed.pause_at(Duration::from_secs(10), 0);
    assert!(!resumed.check_at(S).is_allowed());
    assert_eq!(resumed.resume_at(S), Resumed::Lifted);
    let short = TokenBucket::with_clock(quota("2/s burst 3"), ManualClock::new());
    short.pause_at(Duration::from_secs(1), 0);
    // Empty at 1 s, one token 0.5 s later, not before.
    assert!(!resumed.check_at(S + 499 * MS).is_allowed());
    assert_eq!(
        resumed.check_at(S).retry_after(),
        Duration::from_millis(500)
    );
    let (a, b) = (admitted(&resumed, S, 4 * S), admitted(&short, S, 4 * S));
    assert_eq!(a, b);
    assert_eq!(a[0], S + 500 * MS);
    // Its end is now: a second resume finds no pause, and a give-back is
    // not held at the old end.
    assert_eq!(resumed.resume_at(2 * S), Resumed::NotPaused);
}

#[test]
fn a_reservation_behind_the_pause_keeps_it_queued_until_its_end() {
    let bucket = TokenBucket::with_clock(quota("2/s burst 3"), ManualClock::new());
    bucket.pause_at(Duration::from_secs(10), 0);
    let r = bucket
        .reserve_n_at(1, Duration::from_secs(60), S)
        .expect("reserved behind the pause");
    assert_eq!(r.delay(), Duration::from_millis(9_500));
    assert_eq!(bucket.resume_at(2 * S), Resumed::Queued);
    // Nothing changed: refused until the pause's end, and the slot after
    // the reserved one is where it was.
    for t in [2 * S, 5 * S, 10 * S, 10 * S + 999 * MS] {
        assert!(!bucket.check_at(t).is_allowed(), "at {t}");
    }
    assert_eq!(bucket.check_at(2 * S).retry_after(), Duration::from_secs(9));
    assert!(bucket.check_at(11 * S).is_allowed());
    drop(r);
}

#[test]
fn a_reservation_moved_by_the_pause_keeps_it_queued() {
    let bucket = TokenBucket::with_clock(quota("1/s burst 1"), ManualClock::new());
    assert!(bucket.check_at(0).is_allowed());
    // Due at 1 s; the pause at 0 moves it to 6 s.
    let r = bucket
        .reserve_n_at(1, Duration::from_secs(2), 0)
        .expect("reserved");
    bucket.pause_at(Duration::from_secs(5), 0);
    assert_eq!(bucket.resume_at(2 * S), Resumed::Queued);
    assert_eq!(bucket.check_at(2 * S).retry_after(), Duration::from_secs(5));
    drop(r);
}

#[test]
fn a_cancelled_reservation_behind_the_pause_lets_it_lift() {
    let bucket = TokenBucket::with_clock(quota("1/s burst 1"), ManualClock::new());
    bucket.clock().set_nanos(S);
    bucket.pause_at(Duration::from_secs(10), S);
    let r = bucket
        .reserve_n(1, Duration::from_secs(60))
        .expect("reserved");
    r.cancel();
    assert_eq!(bucket.resume_at(2 * S), Resumed::Lifted);
    assert!(bucket.check_at(3 * S).is_allowed());
}

#[test]
fn resume_with_no_pause_changes_nothing() {
    let bucket = TokenBucket::with_clock(quota("2/s burst 3"), ManualClock::new());
    assert_eq!(bucket.resume_at(0), Resumed::NotPaused);
    assert_eq!(bucket.available_at(0), 3);
    // Nor after the pause ended.
    bucket.pause_at(Duration::from_secs(1), 0);
    assert_eq!(bucket.resume_at(S), Resumed::NotPaused);
    assert_eq!(bucket.available_at(S + 500 * MS), 1);
}

#[test]
fn a_pause_after_a_resume_works_and_can_be_lifted_again() {
    let bucket = TokenBucket::with_clock(quota("2/s burst 3"), ManualClock::new());
    bucket.pause_at(Duration::from_secs(10), 0);
    assert_eq!(bucket.resume_at(S), Resumed::Lifted);
    // A pause shorter than the lifted one now counts: its end is 1 s.
    bucket.pause_at(Duration::from_secs(2), 2 * S);
    assert!(!bucket.check_at(4 * S + 499 * MS).is_allowed());
    assert!(bucket.check_at(4 * S + 500 * MS).is_allowed());
    bucket.pause_at(Duration::from_secs(20), 5 * S);
    assert_eq!(bucket.resume_at(6 * S), Resumed::Lifted);
    assert_eq!(
        bucket.check_at(6 * S).retry_after(),
        Duration::from_millis(500)
    );
}

#[test]
fn a_pause_extending_one_on_is_lifted_whole() {
    let bucket = TokenBucket::with_clock(quota("1/s burst 2"), ManualClock::new());
    bucket.pause_at(Duration::from_secs(5), 0);
    bucket.pause_at(Duration::from_secs(10), S);
    assert_eq!(bucket.resume_at(2 * S), Resumed::Lifted);
    assert_eq!(bucket.check_at(2 * S).retry_after(), Duration::from_secs(1));
}

#[test]
fn a_quota_changed_during_the_pause_is_queued() {
    let bucket = TokenBucket::with_clock(quota("1/s burst 1"), ManualClock::new());
    bucket.pause_at(Duration::from_secs(10), 0);
    bucket.set_quota_at(quota("2/s burst 4"), S);
    let before = bucket.check_at(2 * S).retry_after();
    assert_eq!(bucket.resume_at(2 * S), Resumed::Queued);
    assert_eq!(bucket.check_at(2 * S).retry_after(), before);
}

#[test]
fn keyed_resume_lifts_a_key_and_leaves_the_others() {
    let keyed = KeyedLimiter::new(KeyedAlgorithm::TokenBucket(quota("2/s burst 3")))
        .expect("keyed")
        .with_clock(ManualClock::new());
    assert_eq!(
        keyed.resume_at(&"alice", 0).expect("resume"),
        Resumed::NotPaused
    );
    assert!(keyed.is_empty(), "an untracked key is not created");
    keyed
        .pause_at(&"alice", Duration::from_secs(10), 0)
        .expect("pause");
    keyed
        .pause_at(&"bob", Duration::from_secs(10), 0)
        .expect("pause");
    assert_eq!(
        keyed.resume_at(&"alice", S).expect("resume"),
        Resumed::Lifted
    );
    assert_eq!(
        keyed.check_at(&"alice", S).expect("check").retry_after(),
        Duration::from_millis(500)
    );
    assert!(
        keyed
            .check_at(&"alice", S + 500 * MS)
            .expect("check")
            .is_allowed()
    );
    assert!(!keyed.check_at(&"bob", 9 * S).expect("check").is_allowed());
    // A drained key is not paused.
    let drained = keyed.check_at(&"carol", 0).expect("check");
    assert!(drained.is_allowed());
    assert_eq!(
        keyed.resume_at(&"carol", 0).expect("resume"),
        Resumed::NotPaused
    );
    assert_eq!(keyed.available_at(&"carol", 0), 2);
    // Paused again after the lift.
    keyed
        .pause_at(&"alice", Duration::from_secs(5), 2 * S)
        .expect("pause");
    assert!(!keyed.check_at(&"alice", 7 * S).expect("check").is_allowed());
    assert_eq!(
        keyed.resume_at(&"alice", 3 * S).expect("resume"),
        Resumed::Lifted
    );
}

#[test]
fn any_wrappers_resume_and_windows_are_unsupported() {
    let manual = ManualClock::new();
    let clock = AnyClock::Manual(manual.clone());
    let tb = AnyLimiter::token_bucket(Rate::Text("1/s"), None, clock.clone()).expect("bucket");
    tb.pause(10.0).expect("pause");
    manual.advance(Duration::from_secs(1));
    assert!(!tb.try_acquire());
    assert_eq!(tb.resume().expect("resume"), Resumed::Lifted);
    assert_eq!(tb.resume().expect("resume"), Resumed::NotPaused);
    manual.advance(Duration::from_secs(1));
    assert!(tb.try_acquire());
    let window = AnyLimiter::fixed_window(10.0, 1.0, clock.clone()).expect("fixed");
    assert_eq!(
        window.resume().expect_err("unsupported").code(),
        "unsupported"
    );
    let any = AnyKeyed::new(
        KeyedAlgorithm::TokenBucket(quota("1/s")),
        None,
        Overflow::RejectNewKeys,
        clock.clone(),
    )
    .expect("keyed");
    any.pause(Key::Text("k"), 10.0).expect("pause");
    assert_eq!(any.resume(Key::Text("k")).expect("resume"), Resumed::Lifted);
    assert_eq!(any.resume(Key::Int(2)).expect("resume"), Resumed::NotPaused);
    let windowed = AnyKeyed::new(
        KeyedAlgorithm::SlidingWindow {
            limit: 3,
            window: Duration::from_secs(1),
        },
        None,
        Overflow::RejectNewKeys,
        clock,
    )
    .expect("keyed window");
    let e = windowed.resume(Key::Text("k")).expect_err("unsupported");
    assert_eq!(e.code(), "unsupported");
    assert!(e.to_string().contains("resume"), "{e}");
    assert_eq!(Resumed::Lifted.as_str(), "lifted");
    assert_eq!(Resumed::NotPaused.to_string(), "not_paused");
    assert_eq!(Resumed::Queued.as_str(), "queued");
}

#[test]
fn a_word_rule_resumes_a_word_with_pause_words() {
    let rule = WordRule::new(KeyedAlgorithm::TokenBucket(quota("2/s burst 3"))).expect("rule");
    let (word, end, shifted) = (
        AtomicU64::new(WordRule::FRESH),
        AtomicU64::new(0),
        AtomicU64::new(0),
    );
    let pause = Words {
        end: &end,
        shifted: &shifted,
    };
    assert_eq!(
        rule.resume_at(&word, pause, 0).expect("resume"),
        Resumed::NotPaused
    );
    rule.pause_at(&word, pause, 10 * S, 0).expect("pause");
    assert_eq!(
        rule.resume_at(&word, pause, S).expect("resume"),
        Resumed::Lifted
    );
    assert!(
        !rule
            .check_n_at(&word, 1, S + 499 * MS)
            .expect("check")
            .0
            .is_allowed()
    );
    assert!(
        rule.check_n_at(&word, 1, S + 500 * MS)
            .expect("check")
            .0
            .is_allowed()
    );
    // Queued behind a second pause.
    rule.pause_at(&word, pause, 10 * S, 2 * S).expect("pause");
    rule.reserve_n_at(&word, 1, 60 * S, 3 * S)
        .expect("reserved");
    assert_eq!(
        rule.resume_at(&word, pause, 4 * S).expect("resume"),
        Resumed::Queued
    );
    assert!(
        !rule
            .check_n_at(&word, 1, 11 * S)
            .expect("check")
            .0
            .is_allowed()
    );
    let window = WordRule::new(KeyedAlgorithm::FixedWindow {
        limit: 3,
        window: Duration::from_secs(1),
    })
    .expect("rule");
    assert_eq!(
        window
            .resume_at(&word, pause, 0)
            .expect_err("unsupported")
            .code(),
        "unsupported"
    );
}
