//! A keyed limiter keeps, per key, what outbound adapters learn of a
//! partner's limit: the key decides at the learned share of its quota,
//! other keys are untouched, fifty proposals from one word apply once, and
//! the words live and die with their keys (bounded, cleanup-safe).

use std::sync::Arc;
use std::time::Duration;

use ratebound::any::{AnyClock, AnyKeyed, Key};
use ratebound::outbound::{FULL, Learned};
use ratebound::{Error, KeyedAlgorithm, KeyedLimiter, ManualClock, Overflow, Quota};

const MS: u64 = 1_000_000;

fn bucket(spec: &str) -> KeyedAlgorithm {
    KeyedAlgorithm::TokenBucket(Quota::parse(spec).unwrap())
}

/// 10/s burst 10 per key on a clock at 10 s.
fn ten_per_second() -> (KeyedLimiter<&'static str, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    clock.set_nanos(10_000 * MS);
    let limiter = KeyedLimiter::new(bucket("10/s burst 10"))
        .unwrap()
        .with_clock(clock.clone());
    (limiter, clock)
}

/// How many of `tries` checks of `key` are admitted now.
fn admitted<C: ratebound::Clock>(
    limiter: &KeyedLimiter<&'static str, C>,
    key: &'static str,
    tries: usize,
) -> usize {
    (0..tries)
        .filter(|_| limiter.check(&key).unwrap().is_allowed())
        .count()
}

fn half(at_ms: u64) -> Learned {
    Learned::new(FULL / 2, at_ms).with_cut(true)
}

#[test]
fn a_learned_half_halves_that_keys_burst_and_rate_and_no_other_keys() {
    let (limiter, clock) = ten_per_second();
    assert_eq!(limiter.learned(&"partner"), Learned::fresh());
    assert!(
        limiter
            .adapt(&"partner", Learned::fresh(), half(1))
            .unwrap()
    );
    assert_eq!(limiter.learned(&"partner"), half(1));
    // 5/s burst 5 for the partner's key; 10 for another.
    assert_eq!(limiter.available(&"partner"), 5);
    assert_eq!(admitted(&limiter, "partner", 20), 5);
    assert_eq!(admitted(&limiter, "other", 20), 10);
    // One token every 200 ms (not 100).
    clock.advance(Duration::from_millis(100));
    assert_eq!(admitted(&limiter, "partner", 3), 0);
    assert_eq!(admitted(&limiter, "other", 3), 1);
    clock.advance(Duration::from_millis(100));
    assert_eq!(admitted(&limiter, "partner", 3), 1);
    let refused = limiter.check(&"partner").unwrap();
    assert_eq!(refused.retry_after(), Duration::from_millis(200));
    // Back at the whole quota: 10/s again, the schedule kept.
    assert!(
        limiter
            .adapt(&"partner", half(1), Learned::new(FULL, 2))
            .unwrap()
    );
    clock.advance(Duration::from_millis(100));
    assert_eq!(admitted(&limiter, "partner", 3), 1);
}

#[test]
fn fifty_proposals_from_one_word_apply_once_across_threads() {
    let (limiter, _) = ten_per_second();
    let limiter = Arc::new(limiter);
    let wins: usize = (0..50u64)
        .map(|i| {
            let limiter = Arc::clone(&limiter);
            // Each proposes its own cut from the fresh word.
            std::thread::spawn(move || {
                let next = Learned::new(FULL / 2 + i as u32, 7).with_cut(true);
                usize::from(limiter.adapt(&"partner", Learned::fresh(), next).unwrap())
            })
        })
        .map(|t| t.join().unwrap())
        .sum();
    assert_eq!(wins, 1);
    let held = limiter.learned(&"partner");
    assert!(held.fraction_units() >= FULL / 2 && held.fraction_units() < FULL / 2 + 50);
    // A stale proposal (from the fresh word) is dropped; one from the word
    // held applies.
    assert!(
        !limiter
            .adapt(&"partner", Learned::fresh(), half(8))
            .unwrap()
    );
    assert!(limiter.adapt(&"partner", held, half(8)).unwrap());
    assert_eq!(limiter.len(), 1);
}

#[test]
fn a_window_does_not_learn_and_says_so() {
    let limiter = KeyedLimiter::<&str>::new(KeyedAlgorithm::FixedWindow {
        limit: 5,
        window: Duration::from_secs(1),
    })
    .unwrap();
    let err = limiter.adapt(&"k", Learned::fresh(), half(1)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unsupported {
                algorithm: "fixed_window",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(limiter.learned(&"k"), Learned::fresh());
    assert!(limiter.is_empty(), "a refused adapt creates no key");
}

#[test]
fn cleanup_keeps_a_key_that_learned_a_lower_rate_and_forgets_one_back_at_its_quota() {
    let (limiter, clock) = ten_per_second();
    assert!(limiter.adapt(&"cut", Learned::fresh(), half(1)).unwrap());
    assert!(limiter.adapt(&"back", Learned::fresh(), half(1)).unwrap());
    assert!(
        limiter
            .adapt(&"back", half(1), Learned::new(FULL, 2))
            .unwrap()
    );
    assert!(limiter.check(&"plain").unwrap().is_allowed());
    clock.advance(Duration::from_secs(5));
    // Every bucket is full: "plain" and "back" decide as fresh keys would;
    // "cut" would decide at 10/s again if dropped.
    assert_eq!(limiter.cleanup(), 2);
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.learned(&"cut"), half(1));
    assert_eq!(limiter.learned(&"back"), Learned::fresh());
    assert_eq!(limiter.available(&"cut"), 5);
    // Idle keys go with what they learned (as a Redis key expiring).
    assert_eq!(limiter.cleanup_idle(Duration::from_secs(1)), 1);
    assert!(limiter.is_empty());
    assert_eq!(limiter.learned(&"cut"), Learned::fresh());
    assert_eq!(limiter.available(&"cut"), 10);
    // Removing a key forgets its word too.
    assert!(limiter.adapt(&"cut", Learned::fresh(), half(3)).unwrap());
    assert!(limiter.remove(&"cut"));
    assert_eq!(limiter.learned(&"cut"), Learned::fresh());
}

#[test]
fn words_are_bounded_by_the_keys_an_evicted_key_takes_its_word() {
    let clock = ManualClock::new();
    clock.set_nanos(10_000 * MS);
    let limiter = KeyedLimiter::<u32, _>::new(bucket("10/s burst 10"))
        .unwrap()
        .with_max_keys(64, Overflow::EvictLeastRecent)
        .unwrap()
        .with_clock(clock.clone());
    // 1 000 keys each learn something: never more than 64 tracked, and the
    // words of the keys evicted are gone with them.
    for k in 0..1_000u32 {
        assert!(limiter.check(&k).unwrap().is_allowed());
        assert!(limiter.adapt(&k, Learned::fresh(), half(1)).unwrap());
        assert!(limiter.len() <= 64);
    }
    let learning = (0..1_000u32)
        .filter(|k| limiter.learned(k) != Learned::fresh())
        .count();
    assert_eq!(learning, limiter.len());
    // Under RejectNewKeys a full table refuses to learn for a new key.
    let full = KeyedLimiter::<u32, _>::new(bucket("10/s burst 10"))
        .unwrap()
        .with_max_keys(1, Overflow::RejectNewKeys)
        .unwrap()
        .with_clock(clock);
    assert!(full.check(&1).unwrap().is_allowed());
    let err = full.adapt(&2, Learned::fresh(), half(1)).unwrap_err();
    assert!(matches!(err, Error::TooManyKeys { max_keys: 1 }), "{err:?}");
}

#[test]
fn a_damaged_or_extreme_word_stays_within_the_floor_and_the_quota() {
    let (limiter, _) = ten_per_second();
    // Fraction 0 (a damaged word's): the rate never reaches 0 — one
    // 65536th of the quota, a burst of 1.
    assert!(
        limiter
            .adapt(&"k", Learned::fresh(), Learned::from_bits(u64::MAX))
            .unwrap()
    );
    assert_eq!(limiter.available(&"k"), 1);
    assert!(limiter.check(&"k").unwrap().is_allowed());
    let refused = limiter.check(&"k").unwrap();
    assert!(!refused.is_allowed());
    let wait = refused.retry_after();
    assert!(
        wait > Duration::from_secs(6_000) && wait < Duration::from_secs(7_000),
        "{wait:?}"
    );
}

#[test]
fn the_any_keyed_limiter_reads_and_learns_per_key_as_the_bindings_call_it() {
    let clock = ManualClock::new();
    clock.set_nanos(10_000 * MS);
    let any = AnyKeyed::new(
        bucket("10/s burst 10"),
        None,
        Overflow::RejectNewKeys,
        AnyClock::Manual(clock.clone()),
    )
    .unwrap();
    assert_eq!(any.keyed_algorithm(), bucket("10/s burst 10"));
    let key = Key::Text("api.partner.test");
    assert!(any.adapt(key, Learned::fresh(), half(1)).unwrap());
    assert_eq!(any.learned(key), half(1));
    assert_eq!(
        any.learned(Key::Bytes(b"api.partner.test")),
        Learned::fresh()
    );
    assert_eq!(any.available(key), 5);
}
