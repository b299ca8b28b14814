//! The other limiters' models: the window algorithms, the leaky bucket,
//! `AllOf`, keyed limiters, the concurrency cap (fixed, adaptive, queued).

use super::*;

/// Runs `f` on a new thread with its own clone of `shared` (an `Arc`).
fn spawn_with<T: Clone + Send + 'static, R: Send + 'static>(
    shared: &T,
    f: impl FnOnce(T) -> R + Send + 'static,
) -> thread::JoinHandle<R> {
    let shared = shared.clone();
    thread::spawn(move || f(shared))
}

/// Concurrent checks (only) on any limiter that, on a frozen clock, admits
/// exactly `limit` in all — the window algorithms — checked for
/// linearizability against the same token-counting model.
fn model_check_counting(
    limit: u64,
    make: fn(ManualClock) -> Box<dyn Limiter>,
    plans: &'static [&'static [Op]],
) {
    loom::model(move || {
        let clock = ManualClock::new();
        clock.set_nanos(10 * T + 7);
        let limiter: Arc<Box<dyn Limiter>> = Arc::new(make(clock));
        let results = run_plans(&limiter, plans, |limiter, ops| {
            ops.iter()
                .map(|op| match *op {
                    Op::Check(n) => limiter.check_n(n).map_or(Seen::TooMany, seen),
                    other => panic!("{other:?} is for token buckets"),
                })
                .collect()
        });
        let available = limiter.available();
        assert!(
            linearizable(limit, &results, available),
            "no sequential order explains {results:?} ending with {available} available"
        );
    });
}

const PLANS_3: &[&[Op]] = &[&[Op::Check(1), Op::Check(2)], &[Op::Check(2), Op::Check(1)]];

#[test]
fn fixed_window_checks_are_linearizable() {
    model_check_counting(
        3,
        |c| Box::new(FixedWindow::with_clock(3, Duration::from_secs(60), c).unwrap()),
        PLANS_3,
    );
}

#[test]
fn sliding_window_checks_are_linearizable() {
    model_check_counting(
        3,
        |c| Box::new(SlidingWindow::with_clock(3, Duration::from_secs(60), c).unwrap()),
        PLANS_3,
    );
}

#[test]
fn sliding_log_checks_are_linearizable() {
    model_check_counting(
        3,
        |c| Box::new(SlidingLog::with_clock(3, Duration::from_secs(60), c).unwrap()),
        PLANS_3,
    );
}

#[test]
fn leaky_bucket_hands_out_each_slot_once() {
    // Two threads reserve, one checks, on a frozen clock: the check may only
    // pass if it came first; the reservations get distinct slots exactly T
    // apart; cancelling the last one frees exactly its slot.
    loom::model(|| {
        let clock = ManualClock::new();
        let quota = Quota::with_period(Duration::from_nanos(T)).unwrap();
        let pacer =
            Arc::new(LeakyBucket::with_clock(quota, Duration::from_nanos(5 * T), clock).unwrap());
        let reservers: Vec<_> = (0..2)
            .map(|_| {
                let pacer = pacer.clone();
                thread::spawn(move || {
                    pacer
                        .reserve_n(1, Duration::MAX)
                        .unwrap()
                        .delay()
                        .as_nanos() as u64
                })
            })
            .collect();
        let checked = pacer.check().is_allowed();
        let mut delays: Vec<u64> = reservers.into_iter().map(|h| h.join().unwrap()).collect();
        delays.sort();
        let first = delays[0];
        assert!(first == 0 || first == T, "{delays:?}");
        assert_eq!(delays[1], first + T, "{delays:?}");
        assert_eq!(
            checked,
            first == T,
            "the check passes iff it took the first slot"
        );
        assert_eq!(pacer.available(), 6 - 3 + u64::from(!checked));
    });
}

#[test]
fn all_of_rolls_back_under_contention() {
    // A composite of a bucket (burst 2) and a window (limit 1) races a direct
    // check on the window. The window admits one in all; the bucket keeps
    // exactly what the composite kept.
    loom::model(|| {
        let clock = ManualClock::new();
        let bucket = std::sync::Arc::new(TokenBucket::with_clock(
            Quota::with_period(Duration::from_nanos(T))
                .unwrap()
                .with_burst(2)
                .unwrap(),
            clock.clone(),
        ));
        let window = std::sync::Arc::new(
            FixedWindow::with_clock(1, Duration::from_secs(60), clock).unwrap(),
        );
        let both = Arc::new(AllOf::new(vec![bucket.clone(), window.clone()]).unwrap());
        let composite = spawn_with(&both, move |both| {
            (0..2).filter(|_| both.check().is_allowed()).count() as u64
        });
        let direct = window.check().is_allowed();
        let through = composite.join().unwrap();
        assert_eq!(
            through + u64::from(direct),
            1,
            "the window admits exactly one"
        );
        assert_eq!(
            bucket.available(),
            2 - through,
            "refused composite checks gave the token back"
        );
    });
}

#[test]
fn keyed_first_use_creates_one_state() {
    // Two threads take from the same, new key at once (burst 1): exactly one
    // state is created and exactly one of them is admitted.
    use ratebound::{KeyedAlgorithm, KeyedLimiter};
    loom::model(|| {
        let quota = Quota::with_period(Duration::from_nanos(T)).unwrap();
        let limiter = Arc::new(
            KeyedLimiter::<u32>::new(KeyedAlgorithm::TokenBucket(quota))
                .unwrap()
                .with_clock(ManualClock::new()),
        );
        let other = spawn_with(&limiter, move |limiter| {
            limiter.check(&7).unwrap().is_allowed()
        });
        let mine = limiter.check(&7).unwrap().is_allowed();
        let theirs = other.join().unwrap();
        assert!(mine != theirs, "exactly one admitted: {mine} {theirs}");
        assert_eq!(limiter.len(), 1);
    });
}

#[test]
fn keyed_adapts_from_one_word_apply_once_and_checks_see_a_whole_rate() {
    // Two adapters propose different cuts of a new key from the fresh word
    // (each may be the one creating the key and its word) while the main
    // thread checks the key twice (burst 2, frozen clock): exactly one
    // proposal wins, the word held is the winner's, one key is tracked, and
    // the checks admit as the whole quota (2) or a halved one (1) would.
    use ratebound::outbound::{FULL, Learned};
    use ratebound::{KeyedAlgorithm, KeyedLimiter};
    loom::model(|| {
        let quota = Quota::with_period(Duration::from_nanos(T))
            .unwrap()
            .with_burst(2)
            .unwrap();
        let clock = ManualClock::new();
        clock.set_nanos(10 * T);
        let limiter = Arc::new(
            KeyedLimiter::<u32>::new(KeyedAlgorithm::TokenBucket(quota))
                .unwrap()
                .with_clock(clock),
        );
        let cut = |units| Learned::new(units, 1).with_cut(true);
        let adapter = |units| {
            spawn_with(&limiter, move |limiter| {
                limiter.adapt(&7, Learned::fresh(), cut(units)).unwrap()
            })
        };
        let (a, b) = (adapter(FULL / 2), adapter(FULL / 2 + 1));
        let admitted = (0..2)
            .filter(|_| limiter.check(&7).unwrap().is_allowed())
            .count();
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert!(a != b, "exactly one proposal applies: {a} {b}");
        let winner = if a { FULL / 2 } else { FULL / 2 + 1 };
        assert_eq!(limiter.learned(&7), cut(winner));
        assert_eq!(limiter.len(), 1);
        assert!(admitted == 1 || admitted == 2, "admitted {admitted}");
    });
}

#[test]
fn concurrency_cap_never_lets_more_in_than_its_limit() {
    // Cap 1, two threads each trying twice: whoever holds the place is
    // alone inside (a separate counter checks it), a place given back can
    // be taken again, and at the end nothing is held.
    use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use ratebound::http::ConcurrencyCap;
    loom::model(|| {
        let cap = Arc::new(ConcurrencyCap::new(1).unwrap());
        let inside = Arc::new(AtomicUsize::new(0));
        let attempt = |cap: &ConcurrencyCap, inside: &AtomicUsize| -> usize {
            let mut admitted = 0;
            for _ in 0..2 {
                if cap.try_enter() {
                    admitted += 1;
                    assert_eq!(inside.fetch_add(1, SeqCst), 0, "two inside a cap of 1");
                    inside.fetch_sub(1, SeqCst);
                    cap.leave();
                }
            }
            admitted
        };
        let other = {
            let (cap, inside) = (cap.clone(), inside.clone());
            thread::spawn(move || attempt(&cap, &inside))
        };
        let mine = attempt(&cap, &inside);
        let theirs = other.join().unwrap();
        assert!(
            mine + theirs >= 2,
            "a free place was refused: {mine} + {theirs}"
        );
        assert_eq!(cap.in_flight(), 0);
    });
}

/// A keyed limiter on a frozen clock (10 T) with one shard: tier 0 is one
/// token per T with a burst of 1, tier 1 the same rate with a burst of 2;
/// new keys go to `tier`.
fn keyed_with_tiers(tier: usize) -> ratebound::KeyedLimiter<u32, ManualClock> {
    use ratebound::{KeyedAlgorithm, KeyedLimiter, Overflow};
    let burst = |b| {
        KeyedAlgorithm::TokenBucket(
            Quota::with_period(Duration::from_nanos(T))
                .unwrap()
                .with_burst(b)
                .unwrap(),
        )
    };
    let clock = ManualClock::new();
    clock.set_nanos(10 * T);
    KeyedLimiter::new(burst(1))
        .unwrap()
        // Under 128 keys: one shard, one lock.
        .with_max_keys(8, Overflow::RejectNewKeys)
        .unwrap()
        .with_tiers(vec![burst(2)], move |_| tier)
        .unwrap()
        .with_clock(clock)
}

#[test]
fn keyed_reset_races_checks_and_keeps_the_tier() {
    // A spent key of tier 1 (burst 2) is reset while another thread checks
    // it twice: the answers and the tokens left are those of the reset
    // coming before, between or after the checks — in tier 1 (a reset that
    // dropped the tier bits would leave tier 0's burst of 1).
    loom::model(|| {
        let limiter = Arc::new(keyed_with_tiers(1));
        assert!(limiter.check(&7).unwrap().is_allowed());
        assert!(limiter.check(&7).unwrap().is_allowed());
        let resetter = spawn_with(&limiter, move |limiter| limiter.reset(&7));
        let checks = [
            limiter.check(&7).unwrap().is_allowed(),
            limiter.check(&7).unwrap().is_allowed(),
        ];
        resetter.join().unwrap();
        let left = limiter.available(&7);
        assert!(
            [([true, true], 0), ([false, true], 1), ([false, false], 2)].contains(&(checks, left)),
            "checks {checks:?} leave {left}"
        );
    });
}

#[test]
fn keyed_reset_races_a_tier_change() {
    // A spent key of tier 0 is reset while another thread moves it to tier
    // 1 (keeping its count of tokens): reset then move leaves 1 token, move
    // then reset 2. Either way the key is in tier 1, as a full refill then
    // shows (2 tokens, not tier 0's 1): the reset's read-modify-write keeps
    // whatever tier it finds, and set_tier's write lock keeps the two apart.
    loom::model(|| {
        let limiter = Arc::new(keyed_with_tiers(0));
        assert!(limiter.check(&7).unwrap().is_allowed());
        assert_eq!(limiter.available(&7), 0);
        let resetter = spawn_with(&limiter, move |limiter| limiter.reset(&7));
        limiter.set_tier(&7, 1).unwrap();
        resetter.join().unwrap();
        let left = limiter.available(&7);
        assert!(left == 1 || left == 2, "{left} left");
        limiter.clock().advance_nanos(10 * T);
        assert_eq!(limiter.available(&7), 2, "the key is in tier 1");
    });
}

#[test]
fn keyed_release_races_a_check() {
    // One thread takes key 7's only token with a permit and gives it back;
    // another checks the key once. The check passes iff it comes first or
    // after the give-back, and the give-back returns exactly the permit's
    // token: never the other thread's, never lost to a concurrent exchange.
    loom::model(|| {
        let limiter = Arc::new(keyed_with_tiers(0));
        let now = 10 * T;
        let giver = spawn_with(&limiter, move |limiter| {
            let (d, permit) = limiter.acquire_n_at(&7, 1, now).unwrap();
            if let Some(permit) = permit {
                limiter.release(&7, permit).unwrap();
            }
            d.is_allowed()
        });
        let checked = limiter.check_at(&7, now).unwrap().is_allowed();
        let took = giver.join().unwrap();
        let left = limiter.available_at(&7, now);
        assert!(
            [(true, false, 1), (true, true, 0), (false, true, 0)].contains(&(took, checked, left)),
            "took {took}, checked {checked}, {left} left"
        );
    });
}

/// An adaptive cap on a manual clock (windows of two samples under loom).
fn adaptive_cap(
    clock: &ManualClock,
    initial: usize,
    max: usize,
    smoothing: f64,
) -> ratebound::http::ConcurrencyCap {
    use ratebound::any::AnyClock;
    use ratebound::http::{AdaptiveConcurrency, ConcurrencyCap};
    let tuning = AdaptiveConcurrency {
        initial_limit: initial,
        min_limit: 1,
        max_limit: max,
        smoothing,
        ..AdaptiveConcurrency::default()
    };
    ConcurrencyCap::adaptive(tuning, AnyClock::Manual(clock.clone())).unwrap()
}

#[test]
fn adaptive_samples_racing_window_closes_are_each_counted_once() {
    // Two threads each time two requests: windows close at the 2nd and 4th
    // sample, possibly both at once (the second closer finds the controller
    // busy and gives its window back). Every sample is counted exactly once,
    // the limit stays in bounds and every place comes back.
    use ratebound::http::Priority;
    loom::model(|| {
        let clock = ManualClock::new();
        let cap = Arc::new(adaptive_cap(&clock, 2, 4, 0.2));
        let work = |cap: &ratebound::http::ConcurrencyCap| -> u64 {
            let mut timed = 0;
            for _ in 0..2 {
                if let Ok(before) = cap.try_enter_as(|| Priority::Normal) {
                    cap.leave_after(cap.start(), before);
                    timed += 1;
                }
            }
            timed
        };
        let other = spawn_with(&cap, move |cap| work(&cap));
        let mine = work(&cap);
        let theirs = other.join().unwrap();
        let state = cap.state().unwrap();
        assert_eq!(state.samples, mine + theirs, "{state:?}");
        assert!((1..=4).contains(&cap.limit()));
        assert_eq!(cap.in_flight(), 0);
    });
}

#[test]
fn a_lowered_adaptive_limit_races_an_admission() {
    // The limit is 2 (its maximum) and both places are held; a baseline of
    // 1 µs is known.
    // The holders leave after a second (a congested window: the limit drops
    // to 1 with smoothing 1) while another thread tries to enter: it may get
    // a place freed before the drop, never a third one, and at the end the
    // limit is 1 and nothing is held.
    use ratebound::http::Priority;
    loom::model(|| {
        let clock = ManualClock::new();
        let cap = Arc::new(adaptive_cap(&clock, 2, 2, 1.0));
        for _ in 0..2 {
            let before = cap.try_enter_as(|| Priority::Normal).unwrap();
            cap.leave_after(cap.start(), before);
        }
        let held: Vec<_> = (0..2)
            .map(|_| (cap.start(), cap.try_enter_as(|| Priority::Normal).unwrap()))
            .collect();
        clock.advance(Duration::from_secs(1));
        let other = spawn_with(&cap, move |cap| {
            let entered = cap.try_enter_as(|| Priority::Normal);
            assert!(cap.in_flight() <= 2, "a third place");
            if entered.is_ok() {
                cap.leave();
            }
            entered.is_ok()
        });
        for (start, before) in held {
            cap.leave_after(start, before);
        }
        let _ = other.join().unwrap();
        assert_eq!(cap.limit(), 1, "{:?}", cap.state());
        assert_eq!(cap.in_flight(), 0);
        assert_eq!(cap.state().unwrap().samples, 4);
    });
}

/// A cap of one with a short queue, its place held by the caller.
fn queued_cap() -> std::sync::Arc<ratebound::http::ConcurrencyCap> {
    use ratebound::any::AnyClock;
    use ratebound::http::ConcurrencyCap;
    let clock = ManualClock::new();
    let cap = ConcurrencyCap::new(1)
        .unwrap()
        .with_queue(Duration::from_millis(5), AnyClock::Manual(clock))
        .unwrap();
    let cap = std::sync::Arc::new(cap);
    assert!(cap.try_enter());
    cap
}

#[test]
fn a_place_given_back_while_a_waiter_queues_is_never_missed() {
    // The holder leaves while another request registers in the queue: the
    // place goes to the waiter (handed over, or taken on its last look),
    // never left free with the waiter asleep.
    loom::model(|| {
        let cap = queued_cap();
        let waiter = spawn_with(&cap, move |cap| cap.wait_for_place().unwrap());
        cap.leave();
        let waiter = waiter.join().unwrap();
        assert!(waiter.is_granted(), "a free place and a sleeping waiter");
        assert_eq!(cap.in_flight(), 1);
        assert!(waiter.finish());
        cap.leave();
        assert_eq!(cap.in_flight(), 0);
    });
}

#[test]
fn a_waiter_giving_up_races_a_hand_off() {
    // The waiter's time runs out as the place is handed to it: either it
    // leaves with the place (and gives it back) or without, and no place is
    // lost or counted twice.
    loom::model(|| {
        let cap = queued_cap();
        let gave_up = spawn_with(&cap, move |cap| {
            let waiter = cap.wait_for_place().unwrap();
            let held = waiter.finish();
            if held {
                cap.leave();
            }
            held
        });
        cap.leave();
        let _ = gave_up.join().unwrap();
        assert_eq!(cap.in_flight(), 0, "a place lost or counted twice");
    });
}
