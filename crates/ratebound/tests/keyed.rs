//! Keyed limiters: isolation between keys, concurrent first use, tiers, and
//! cleanup never changing a later decision.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use ratebound::{Clock, KeyedAlgorithm, KeyedLimiter, ManualClock, Overflow, Quota};

fn bucket(spec: &str) -> KeyedAlgorithm {
    KeyedAlgorithm::TokenBucket(Quota::parse(spec).unwrap())
}

/// `algorithm` per key, on `clock`.
fn on_clock<K: Hash + Eq + Clone>(
    algorithm: KeyedAlgorithm,
    clock: &ManualClock,
) -> KeyedLimiter<K, ManualClock> {
    KeyedLimiter::new(algorithm)
        .unwrap()
        .with_clock(clock.clone())
}

/// 10/s burst 3 per key, on `clock`.
fn burst_of_3(clock: &ManualClock) -> KeyedLimiter<String, ManualClock> {
    on_clock(bucket("10/s burst 3"), clock)
}

/// A fixed window of two per `seconds`.
fn two_per(seconds: u64) -> KeyedAlgorithm {
    KeyedAlgorithm::FixedWindow {
        limit: 2,
        window: Duration::from_secs(seconds),
    }
}

#[test]
fn a_noisy_neighbour_does_not_eat_the_quiet_keys_quota() {
    // 10/s burst 10 per key. Over 10 s in 10 ms steps, "noisy" asks 10 times
    // a step (1000/s); "quiet-1" and "quiet-2" ask once every 200 ms (5/s).
    let clock = ManualClock::new();
    let limiter = on_clock(bucket("10/s burst 10"), &clock);
    let (mut noisy, mut quiet_asked, mut quiet_admitted) = (0u64, 0u64, 0u64);
    for step in 0..1_000u64 {
        for _ in 0..10 {
            noisy += u64::from(limiter.check(&"noisy").unwrap().is_allowed());
        }
        if step % 20 == 0 {
            for key in ["quiet-1", "quiet-2"] {
                quiet_asked += 1;
                quiet_admitted += u64::from(limiter.check(&key).unwrap().is_allowed());
            }
        }
        clock.advance(Duration::from_millis(10));
    }
    assert_eq!(
        quiet_admitted, quiet_asked,
        "every quiet request is within its own quota"
    );
    // The noisy key gets its own burst plus its rate, and no more.
    assert!(noisy <= 10 + 10 * 10, "noisy admitted {noisy}");
    assert!(noisy >= 100, "noisy still gets its own quota: {noisy}");
}

#[test]
fn concurrent_first_use_creates_one_state_and_loses_nothing() {
    for _round in 0..20 {
        let limiter = Arc::new(on_clock(bucket("1/s burst 50"), &ManualClock::new()));
        let admitted = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (limiter, admitted) = (limiter.clone(), admitted.clone());
                std::thread::spawn(move || {
                    for _ in 0..40 {
                        if limiter
                            .check(&"shared-key".to_string())
                            .unwrap()
                            .is_allowed()
                        {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(limiter.len(), 1);
        assert_eq!(admitted.load(Ordering::Relaxed), 50);
        assert_eq!(limiter.available(&"shared-key".to_string()), 0);
    }
}

#[test]
fn tiers_give_keys_their_own_quota_and_can_change() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::new(bucket("1/s burst 2"))
        .unwrap()
        .with_tiers(vec![bucket("10/s burst 10")], |key: &String| {
            usize::from(key.starts_with("paid:"))
        })
        .unwrap()
        .with_clock(clock.clone());
    let free = "free:1".to_string();
    let paid = "paid:1".to_string();
    let admitted = |key: &String| {
        (0..20)
            .filter(|_| limiter.check(key).unwrap().is_allowed())
            .count()
    };
    assert_eq!(admitted(&free), 2);
    assert_eq!(admitted(&paid), 10);
    assert_eq!(limiter.check(&free).unwrap().limit(), 2);
    assert_eq!(limiter.check(&paid).unwrap().limit(), 10);
    // Upgrading keeps the (zero) tokens and switches the rate: 100 ms later
    // one token is back, where the free tier would need a second.
    limiter.set_tier(&free, 1).unwrap();
    clock.advance(Duration::from_millis(100));
    let d = limiter.check(&free).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.limit(), 10);
    // Downgrading caps the tokens at the new burst.
    clock.advance(Duration::from_secs(5));
    limiter.set_tier(&paid, 0).unwrap();
    assert_eq!(limiter.available(&paid), 2);
    assert_eq!(
        limiter.set_tier(&paid, 4).unwrap_err().code(),
        "invalid_tier"
    );
    // Tiers must share the algorithm.
    let mixed = KeyedLimiter::<String>::new(bucket("1/s"))
        .unwrap()
        .with_tiers(
            vec![KeyedAlgorithm::FixedWindow {
                limit: 5,
                window: Duration::from_secs(1),
            }],
            |_| 0,
        );
    assert_eq!(mixed.unwrap_err().code(), "invalid_tier");
}

#[test]
fn bad_input_is_an_error_and_creates_no_state() {
    let limiter = on_clock(bucket("1/s burst 2"), &ManualClock::new());
    assert_eq!(
        limiter.check_n(&7u64, 3).unwrap_err().code(),
        "insufficient_capacity"
    );
    assert_eq!(limiter.len(), 0);
    let wild = KeyedLimiter::new(bucket("1/s"))
        .unwrap()
        .with_tiers(vec![], |_: &u64| 9)
        .unwrap();
    assert_eq!(wild.check(&1).unwrap_err().code(), "invalid_tier");
    assert_eq!(
        KeyedLimiter::<u64>::new(bucket("1/s"))
            .unwrap()
            .with_max_keys(0, Overflow::RejectNewKeys)
            .unwrap_err()
            .code(),
        "invalid_limit"
    );
}

#[test]
fn the_cap_holds_under_concurrent_floods() {
    for overflow in [Overflow::RejectNewKeys, Overflow::EvictLeastRecent] {
        let limiter = Arc::new(
            KeyedLimiter::new(bucket("1/s burst 3"))
                .unwrap()
                .with_max_keys(1_000, overflow)
                .unwrap(),
        );
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let limiter = limiter.clone();
                std::thread::spawn(move || {
                    let mut max_len = 0;
                    for k in 0..20_000u64 {
                        let _ = limiter.check(&(t * 1_000_000 + k));
                        if k % 1_000 == 0 {
                            max_len = max_len.max(limiter.len());
                        }
                    }
                    max_len
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().unwrap() <= 1_000);
        }
        assert!(limiter.len() <= 1_000, "{overflow:?}: {}", limiter.len());
        if overflow == Overflow::EvictLeastRecent {
            assert!(limiter.len() > 900, "eviction keeps the table nearly full");
        }
    }
}

#[derive(Clone, Debug)]
enum Step {
    Check { advance: u64, key: u8, n: u64 },
    Cleanup,
    CleanupIdle,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            8 => (prop_oneof![Just(0u64), 0u64..3_000_000_000], 0u8..6, 0u64..=3)
                .prop_map(|(advance, key, n)| Step::Check { advance, key, n }),
            1 => Just(Step::Cleanup),
            1 => Just(Step::CleanupIdle),
        ],
        1..120,
    )
}

fn algorithms() -> impl Strategy<Value = (KeyedAlgorithm, Duration)> {
    // Each with its refill time: cleanup_idle at that idle time is safe.
    prop_oneof![
        (1u64..2_000, 1u64..=4).prop_map(|(ms, burst)| (
            KeyedAlgorithm::TokenBucket(
                Quota::with_period(Duration::from_millis(ms))
                    .unwrap()
                    .with_burst(burst)
                    .unwrap()
            ),
            Duration::from_millis(ms * burst)
        )),
        (1u64..=4, 1u64..3_000).prop_map(|(limit, ms)| (
            KeyedAlgorithm::FixedWindow {
                limit,
                window: Duration::from_millis(ms)
            },
            Duration::from_millis(ms)
        )),
        (1u64..=4, 1u64..3_000).prop_map(|(limit, ms)| (
            KeyedAlgorithm::SlidingWindow {
                limit,
                window: Duration::from_millis(ms)
            },
            Duration::from_millis(2 * ms)
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn cleanup_never_changes_a_later_decision((algorithm, refill) in algorithms(), steps in steps()) {
        let clock = ManualClock::new();
        let cleaned = KeyedLimiter::<u8>::new(algorithm).unwrap().with_clock(clock.clone());
        let untouched = KeyedLimiter::<u8>::new(algorithm).unwrap().with_clock(clock.clone());
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                Step::Check { advance, key, n } => {
                    clock.advance_nanos(advance);
                    let n = n.min(4);
                    let (a, b) = (cleaned.check_n(&key, n), untouched.check_n(&key, n));
                    prop_assert_eq!(a, b, "step {} key {} n {} at {}", i, key, n, clock.now());
                }
                Step::Cleanup => { cleaned.cleanup(); }
                Step::CleanupIdle => { cleaned.cleanup_idle(refill); }
            }
            prop_assert!(cleaned.len() <= untouched.len());
        }
    }
}

#[test]
fn acquire_and_release_give_an_admission_back() {
    let clock = ManualClock::new();
    let burst = burst_of_3(&clock);
    let hourly = on_clock(two_per(3600), &clock);
    let key = "k".to_string();
    let now = clock.now();
    // Two requests pass both policies; the third is refused by the hourly
    // one, and the burst policy's token is given back.
    for _ in 0..3 {
        let (a, permit) = burst.acquire_n_at(&key, 1, now).unwrap();
        assert!(a.is_allowed());
        let b = hourly.check_at(&key, now).unwrap();
        if !b.is_allowed() {
            burst.release(&key, permit.unwrap()).unwrap();
        }
    }
    assert_eq!(
        burst.available(&key),
        1,
        "3 - 2 admitted; the refused one's token came back"
    );
    assert_eq!(hourly.available(&key), 0);
    let (_, permit) = hourly.acquire_n_at(&key, 0, now).unwrap();
    hourly.release(&key, permit.unwrap()).unwrap();
    assert_eq!(hourly.available(&key), 0, "releasing nothing gives nothing");
}

#[test]
fn check_all_is_all_or_nothing_and_rolls_back_on_errors() {
    let clock = ManualClock::new();
    let burst = burst_of_3(&clock);
    let daily = on_clock(two_per(86_400), &clock)
        .with_max_keys(1, Overflow::RejectNewKeys)
        .unwrap();
    let (a, b) = ("a".to_string(), "b".to_string());
    let now = clock.now();
    let all = |key: &String| KeyedLimiter::check_all_at([&burst, &daily], key, 1, now);
    assert!(all(&a).unwrap().iter().all(|d| d.is_allowed()));
    assert!(all(&a).unwrap().iter().all(|d| d.is_allowed()));
    let refused = all(&a).unwrap();
    assert!(refused[0].is_allowed() && !refused[1].is_allowed());
    assert_eq!(burst.available(&a), 1, "the burst policy's token came back");
    // "daily" tracks one key: "b" is an error there, and "burst" gives back.
    assert_eq!(all(&b).unwrap_err().code(), "too_many_keys");
    assert_eq!(burst.available(&b), 3);
}

/// All or nothing whichever limiter refuses: an earlier one refusing, the
/// later ones that admitted give back (before, they kept their tokens).
#[test]
fn check_all_gives_back_what_later_limiters_took_when_an_earlier_one_refuses() {
    let clock = ManualClock::new();
    let burst = on_clock::<&str>(bucket("1/s burst 1"), &clock);
    let daily = on_clock::<&str>(two_per(86_400), &clock);
    let both = || KeyedLimiter::check_all_at([&burst, &daily], &"alice", 1, 0).unwrap();
    assert!(both().iter().all(|d| d.is_allowed()));
    // The burst refuses first: the day's window is not charged.
    let refused = both();
    assert!(!refused[0].is_allowed() && refused[1].is_allowed());
    assert_eq!(daily.available_at(&"alice", 0), 1);
    assert_eq!(
        refused[1].remaining(),
        1,
        "the later decision tells the state after the give-back"
    );
    for _ in 0..5 {
        assert!(!both()[0].is_allowed());
    }
    assert_eq!(daily.available_at(&"alice", 0), 1);
}
