//! Real threads on one bucket.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ratebound::{Clock, Limiter, ManualClock, MonotonicClock, Quota, TokenBucket};

/// Four threads each making `takes` takes from `limiter`, of 1, 2 or 3
/// (single and multi-token takes mixed): the tokens admitted in all.
fn four_threads_take<L: Limiter + ?Sized + 'static>(limiter: &Arc<L>, takes: u64) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            std::thread::spawn(move || {
                for k in 0..takes {
                    let n = 1 + (k + i) % 3;
                    if limiter.check_n(n).unwrap().is_allowed() {
                        admitted.fetch_add(n, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    admitted.load(Ordering::Relaxed)
}

#[test]
fn threads_on_a_frozen_clock_admit_exactly_the_burst() {
    let burst = 1_000;
    let quota = Quota::per_second(1).unwrap().with_burst(burst).unwrap();
    let bucket = Arc::new(TokenBucket::with_clock(quota, ManualClock::new()));
    let taken = four_threads_take(&bucket, 1_000);
    // Tokens are only ever taken whole: what is left is what no one took.
    assert_eq!(taken + bucket.available(), burst);
    assert!(
        taken >= burst - 2,
        "every thread stops only when < 3 tokens remain: took {taken}"
    );
}

#[test]
fn threads_on_the_real_clock_stay_within_burst_plus_rate_times_elapsed() {
    let quota = Quota::per_second(1_000).unwrap().with_burst(50).unwrap();
    let bucket = Arc::new(TokenBucket::new(quota));
    let clock = MonotonicClock::new();
    let start = clock.now();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let bucket = bucket.clone();
            std::thread::spawn(move || {
                let clock = MonotonicClock::new();
                let mut admitted = 0u64;
                // Bounded: at most ~0.5 s and 50 million calls.
                for _ in 0..50_000_000u64 {
                    if bucket.check().is_allowed() {
                        admitted += 1;
                    }
                    if clock.now() - start > 500_000_000 {
                        break;
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let elapsed = clock.now() - start;
    let bound = 50 + elapsed / quota.emission_interval_nanos();
    assert!(
        admitted <= bound,
        "{admitted} admitted in {elapsed} ns, bound {bound}"
    );
    assert!(
        admitted >= 50,
        "the first burst is always there: {admitted}"
    );
}

#[test]
fn concurrent_reservations_queue_one_token_apart() {
    // Frozen clock: 4 threads reserve 1 token each, 10 times. No slot is
    // handed out twice and none is skipped: sorted, the delays are the two
    // free tokens (0, 0) and then one per T.
    let quota = Quota::with_period(Duration::from_millis(1))
        .unwrap()
        .with_burst(2)
        .unwrap();
    let bucket = Arc::new(TokenBucket::with_clock(quota, ManualClock::new()));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let bucket = bucket.clone();
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| bucket.reserve_n(1, Duration::from_secs(1)).unwrap().delay())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut delays: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    delays.sort();
    let want: Vec<Duration> = (0..40u64)
        .map(|i| Duration::from_millis(i.saturating_sub(1)))
        .collect();
    assert_eq!(delays, want);
}

#[test]
fn window_algorithms_on_a_frozen_clock_admit_exactly_their_limit() {
    use ratebound::{FixedWindow, SlidingLog, SlidingWindow};
    let limit = 600;
    let minute = Duration::from_secs(60);
    let clock = ManualClock::new();
    let limiters: Vec<(&str, Arc<dyn Limiter>)> = vec![
        (
            "fixed",
            Arc::new(FixedWindow::with_clock(limit, minute, clock.clone()).unwrap()),
        ),
        (
            "sliding",
            Arc::new(SlidingWindow::with_clock(limit, minute, clock.clone()).unwrap()),
        ),
        (
            "log",
            Arc::new(SlidingLog::with_clock(limit, minute, clock.clone()).unwrap()),
        ),
    ];
    for (name, limiter) in limiters {
        let taken = four_threads_take(&limiter, 500);
        assert_eq!(taken + limiter.available(), limit, "{name}");
        assert!(taken >= limit - 2, "{name}: took only {taken}");
    }
}
