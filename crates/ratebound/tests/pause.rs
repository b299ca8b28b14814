//! `pause` on the local limiters (token bucket, keyed, `AnyLimiter` /
//! `AnyKeyed`), on a ManualClock, and the waiter driving a shared word.
#![cfg(not(ratebound_loom))]

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use ratebound::any::{Acquire, AnyClock, AnyKeyed, AnyLimiter, Key, Rate, Waiter};
use ratebound::wait::Step;
use ratebound::{
    Error, KeyedAlgorithm, KeyedLimiter, Limiter, ManualClock, Overflow, Quota, TokenBucket,
    WordRule,
};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

fn quota(q: &str) -> Quota {
    Quota::parse(q).expect("quota")
}

/// A token bucket of 10/s, burst 1, on a manual clock.
fn ten_a_second() -> (ManualClock, AnyLimiter) {
    let clock = ManualClock::new();
    let tb = AnyLimiter::token_bucket(
        Rate::Text("10/s"),
        Some(1.0),
        AnyClock::Manual(clock.clone()),
    )
    .expect("bucket");
    (clock, tb)
}

#[test]
fn a_pause_empties_the_bucket_until_its_end_then_refills_at_the_rate() {
    let clock = ManualClock::new();
    clock.set_nanos(10 * S);
    let bucket = TokenBucket::with_clock(quota("2/s burst 3"), clock.clone());
    bucket.pause_at(Duration::from_secs(1), 10 * S);
    // Empty until 11 s: nothing at 11 s itself, one token 0.5 s later.
    assert_eq!(bucket.available_at(10 * S), 0);
    assert_eq!(bucket.available_at(11 * S), 0);
    assert!(!bucket.check_at(11 * S + 499 * MS).is_allowed());
    assert_eq!(
        bucket.check_at(10 * S).retry_after(),
        Duration::from_millis(1_500)
    );
    assert!(bucket.check_at(11 * S + 500 * MS).is_allowed());
    // Full again τ after the pause's end, plus the token taken.
    assert_eq!(bucket.available_at(12 * S + 500 * MS), 2);
    assert_eq!(bucket.available_at(13 * S), 3);
}

#[test]
fn a_pause_ending_earlier_changes_nothing_and_a_later_one_extends() {
    let bucket = TokenBucket::with_clock(quota("2/s burst 3"), ManualClock::new());
    bucket.pause_at(Duration::from_secs(2), 0);
    let after_first = bucket.check_at(0).retry_after();
    bucket.pause_at(Duration::from_secs(1), 0);
    bucket.pause_at(Duration::from_millis(1_500), 500 * MS);
    assert_eq!(bucket.check_at(0).retry_after(), after_first);
    bucket.pause_at(Duration::from_secs(3), 0);
    assert_eq!(
        bucket.check_at(0).retry_after(),
        after_first + Duration::from_secs(1)
    );
    // A zero pause changes nothing.
    let fresh = TokenBucket::with_clock(quota("2/s burst 3"), ManualClock::new());
    fresh.pause_at(Duration::ZERO, 0);
    assert_eq!(fresh.available_at(0), 3);
}

#[test]
fn a_pause_moves_queued_reservations_past_it_in_their_order() {
    let bucket = TokenBucket::with_clock(quota("1/s burst 3"), ManualClock::new());
    let now = 5 * S;
    let held = bucket
        .reserve_n_at(3, Duration::ZERO, now)
        .expect("the burst");
    let queued = bucket
        .reserve_n_at(3, Duration::from_secs(10), now)
        .expect("queued");
    assert_eq!(queued.delay(), Duration::from_secs(3));
    // A 2 s pause moves the whole queue 2 s later: the next taker is due
    // 4 + 2 s from now, not 4 s.
    bucket.pause_at(Duration::from_secs(2), now);
    let next = bucket
        .reserve_n_at(1, Duration::from_secs(10), now)
        .expect("queued");
    assert_eq!(next.delay(), Duration::from_secs(6));
    // A pause until 13 s starts where the first ends (7 s): 6 s more
    // (the queue then ends at 14 + 6 s).
    bucket.pause_at(Duration::from_secs(8), now);
    let late = bucket
        .reserve_n_at(1, Duration::from_secs(20), now)
        .expect("queued");
    assert_eq!(late.delay(), Duration::from_secs(13));
    // Obeying the same Retry-After again changes nothing.
    bucket.pause_at(Duration::from_secs(8), now);
    bucket.pause_at(Duration::from_secs(7), now + S);
    assert_eq!(bucket.pause_shifted(), 8 * S);
    let _ = (held, queued, next, late);
}

#[test]
fn waiters_holding_reservations_move_past_a_later_pause_in_their_order() {
    let (clock, tb) = ten_a_second();
    assert!(tb.try_acquire());
    // Three waiters hold slots 100, 200 and 300 ms ahead.
    let mut waiters: Vec<Waiter> = (0..3)
        .map(|_| tb.waiter(1, None, u64::MAX).expect("waiter"))
        .collect();
    for w in &mut waiters {
        assert!(matches!(tb.wait_step(w), Ok(Step::Sleep(_))));
    }
    // At 50 ms a partner says: not for 1 s.
    clock.advance_nanos(50 * MS);
    tb.pause(1.0).expect("pause");
    // Each wakes at its old time and is told to sleep on, to its slot
    // moved 1 s later; they go in their order, none inside the pause.
    let mut done_at = Vec::new();
    let mut t = 50 * MS;
    while done_at.len() < 3 && t < 3 * S {
        t += MS;
        clock.set_nanos(t);
        for (i, w) in waiters.iter_mut().enumerate() {
            if !w.is_over() && tb.wait_step(w).expect("step") == Step::Done(()) {
                done_at.push((i, t));
            }
        }
    }
    assert_eq!(
        done_at,
        vec![(0, 1_100 * MS), (1, 1_200 * MS), (2, 1_300 * MS)]
    );
    // A newcomer queues after them: due 100 ms after the third.
    assert!(matches!(
        tb.acquire_step(1, None, t),
        Ok(Acquire::Reserved { wait_nanos, .. }) if wait_nanos == 100 * MS
    ));
}

#[test]
fn an_abandoned_moved_waiter_gives_back_its_moved_slot_never_into_the_pause() {
    let (clock, tb) = ten_a_second();
    assert!(tb.try_acquire());
    let mut w = tb.waiter(1, None, u64::MAX).expect("waiter");
    assert!(matches!(tb.wait_step(&mut w), Ok(Step::Sleep(_))));
    tb.pause(1.0).expect("pause");
    clock.advance_nanos(100 * MS);
    assert!(matches!(tb.wait_step(&mut w), Ok(Step::Sleep(_))), "moved");
    tb.abandon(&mut w).expect("abandon");
    // Its slot (1.1 s) came back, but nothing inside the pause did: the
    // next waiter is due when the pause ends plus one period.
    assert!(matches!(
        tb.acquire_step(1, None, 100 * MS),
        Ok(Acquire::Reserved { wait_nanos, .. }) if wait_nanos == 1_000 * MS
    ));
}

#[test]
fn a_waiter_after_a_pause_sleeps_past_it() {
    let (clock, tb) = ten_a_second();
    tb.pause(0.5).expect("pause");
    let mut w = tb.waiter(1, Some(0.55), u64::MAX).expect("waiter");
    // Reserved 0.6 s ahead, within the timeout? No: 0.6 > 0.55, at once.
    assert_eq!(
        tb.wait_step(&mut w).expect_err("deadline").code(),
        "deadline_exceeded"
    );
    let mut w = tb.waiter(1, Some(0.6), u64::MAX).expect("waiter");
    assert!(matches!(tb.wait_step(&mut w), Ok(Step::Sleep(_))));
    clock.advance_nanos(600 * MS - 1);
    assert_eq!(
        tb.wait_step(&mut w).expect("step"),
        Step::Sleep(Duration::from_nanos(1))
    );
    clock.advance_nanos(1);
    assert_eq!(tb.wait_step(&mut w).expect("step"), Step::Done(()));
}

#[test]
fn keyed_pause_is_per_key_and_creates_the_key() {
    let clock = ManualClock::new();
    let keyed = KeyedLimiter::new(KeyedAlgorithm::TokenBucket(quota("2/s burst 3")))
        .expect("keyed")
        .with_clock(clock);
    keyed
        .pause_at(&"alice", Duration::from_secs(1), 0)
        .expect("pause");
    assert_eq!(keyed.len(), 1, "an untracked key is created, paused");
    let refused = keyed.check_at(&"alice", 0).expect("check");
    assert_eq!(refused.retry_after(), Duration::from_millis(1_500));
    assert!(keyed.check_at(&"bob", 0).expect("check").is_allowed());
    // Idempotent, as for the bucket.
    keyed
        .pause_at(&"alice", Duration::from_millis(500), 0)
        .expect("pause");
    assert_eq!(
        keyed.check_at(&"alice", 0).expect("check").retry_after(),
        Duration::from_millis(1_500)
    );
    // A paused key is not fresh, so cleanup keeps it.
    // Paused until 1 s, full at 2.5 s: cleanup keeps it while bob's goes.
    assert_eq!(keyed.cleanup_at(2 * S), 1);
    assert_eq!(keyed.len(), 1);
}

#[test]
fn keyed_pause_at_the_cap_under_reject_is_too_many_keys() {
    let keyed = KeyedLimiter::new(KeyedAlgorithm::TokenBucket(quota("1/h burst 1")))
        .expect("keyed")
        .with_clock(ManualClock::new())
        .with_max_keys(1, Overflow::RejectNewKeys)
        .expect("cap");
    assert!(keyed.check_at(&1, 0).expect("check").is_allowed());
    assert!(matches!(
        keyed.pause_at(&2, Duration::from_secs(1), 0),
        Err(Error::TooManyKeys { .. })
    ));
}

#[test]
fn pause_on_a_window_is_unsupported() {
    let clock = AnyClock::Manual(ManualClock::new());
    for lim in [
        AnyLimiter::fixed_window(10.0, 1.0, clock.clone()).expect("fixed"),
        AnyLimiter::sliding_window(10.0, 1.0, clock.clone()).expect("sliding"),
        AnyLimiter::sliding_log(10.0, 1.0, clock.clone()).expect("log"),
        AnyLimiter::leaky_bucket(Rate::PerSecond(10.0), 1.0, clock.clone()).expect("leaky"),
    ] {
        assert_eq!(
            lim.pause(1.0).expect_err("unsupported").code(),
            "unsupported"
        );
        assert_eq!(lim.available(), lim.limit(), "nothing changed");
    }
    for algorithm in [
        KeyedAlgorithm::FixedWindow {
            limit: 3,
            window: Duration::from_secs(1),
        },
        KeyedAlgorithm::SlidingWindow {
            limit: 3,
            window: Duration::from_secs(1),
        },
    ] {
        let keyed = KeyedLimiter::new(algorithm).expect("keyed");
        assert!(matches!(
            keyed.pause(&"k", Duration::from_secs(1)),
            Err(Error::Unsupported {
                operation: "pause",
                ..
            })
        ));
        assert!(keyed.is_empty(), "no key was created");
        let any = AnyKeyed::new(algorithm, None, Overflow::RejectNewKeys, clock.clone())
            .expect("any keyed");
        assert_eq!(
            any.pause(Key::Text("k"), 1.0)
                .expect_err("unsupported")
                .code(),
            "unsupported"
        );
    }
}

#[test]
fn bad_pauses_are_invalid_numbers() {
    let clock = AnyClock::Manual(ManualClock::new());
    let tb = AnyLimiter::token_bucket(Rate::Text("1/s"), None, clock.clone()).expect("bucket");
    let any = AnyKeyed::new(
        KeyedAlgorithm::TokenBucket(quota("1/s")),
        None,
        Overflow::RejectNewKeys,
        clock,
    )
    .expect("keyed");
    for s in [
        -1.0,
        -0.0001,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e300,
    ] {
        assert_eq!(
            tb.pause(s).expect_err("bad").code(),
            "invalid_number",
            "{s}"
        );
        assert_eq!(
            any.pause(Key::Int(1), s).expect_err("bad").code(),
            "invalid_number",
            "{s}"
        );
    }
    assert!(tb.try_acquire(), "nothing was paused");
    any.pause(Key::Int(1), 2.0).expect("a good pause");
    assert_eq!(any.available(Key::Int(1)), 0);
}

#[test]
fn a_word_rule_drives_a_waiter_on_a_word_it_does_not_own() {
    let rule = WordRule::new(KeyedAlgorithm::TokenBucket(quota("10/s burst 1"))).expect("rule");
    let word = AtomicU64::new(WordRule::FRESH);
    let now = S;
    let mut first = Waiter::start(1, None, now, u64::MAX);
    let step = first
        .step(now, |n, d| {
            rule.acquire_step(&word, n, d, now, 7).map(|(s, _)| s)
        })
        .expect("step");
    assert_eq!(step, Step::Done(()));
    let mut second = Waiter::start(1, Some(Duration::from_secs(1)), now, u64::MAX);
    let step = second
        .step(now, |n, d| {
            rule.acquire_step(&word, n, d, now, 7).map(|(s, _)| s)
        })
        .expect("step");
    assert_eq!(step, Step::Sleep(Duration::from_nanos(100 * MS)));
    // Given back: the next waiter gets the same slot.
    let permit = second.abandon().expect("held");
    assert!(matches!(
        rule.release_permit(&word, rule.permit(1, 0, 0), 8),
        Err(Error::ForeignPermit)
    ));
    rule.release_permit(&word, permit, 7).expect("own permit");
    let (step, _) = rule
        .acquire_step(&word, 1, Some(now + 100 * MS), now, 7)
        .expect("step");
    assert!(matches!(step, Acquire::Reserved { wait_nanos, .. } if wait_nanos == 100 * MS));
    // Beyond the deadline: at once, taking nothing.
    assert!(matches!(
        rule.acquire_step(&word, 1, Some(now + 100 * MS), now, 7),
        Err(Error::DeadlineExceeded { .. })
    ));
    let state = || word.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(rule.available(state(), now + 100 * MS), 0);
    assert_eq!(rule.available(state(), now + 200 * MS), 1);
    // Pause on the word: empty until its end, then at the rate — and the
    // slot reserved at 200 ms moves to 1.2 s, as the words tell a waiter.
    let (end, shifted) = (AtomicU64::new(0), AtomicU64::new(0));
    let words = ratebound::pause::Words {
        end: &end,
        shifted: &shifted,
    };
    let mut third = Waiter::start(1, None, now, u64::MAX);
    let seen = words.shifted();
    let step = third
        .step_paused(now, seen, |n, d| {
            rule.acquire_step(&word, n, d, now, 7).map(|(s, _)| s)
        })
        .expect("step");
    assert_eq!(step, Step::Sleep(Duration::from_nanos(200 * MS)));
    assert_eq!(rule.pause_at(&word, words, S, now).expect("pause"), Some(S));
    assert_eq!(rule.pause_at(&word, words, S, now).expect("pause"), None);
    assert_eq!(rule.available(state(), now + S + 200 * MS), 0);
    assert_eq!(rule.available(state(), now + S + 300 * MS), 1);
    let at = now + 200 * MS;
    let step = third
        .step_paused(at, words.shifted(), |_, _| unreachable!("held"))
        .expect("step");
    assert_eq!(step, Step::Sleep(Duration::from_nanos(S)));
    // A window's rule refuses.
    let w = WordRule::new(KeyedAlgorithm::FixedWindow {
        limit: 1,
        window: Duration::from_secs(1),
    })
    .expect("rule");
    assert!(matches!(
        w.pause_at(&word, words, S, now),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        w.reserve_n_at(&word, 1, 0, now),
        Err(Error::Unsupported { .. })
    ));
}
