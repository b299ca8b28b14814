//! The cost of one check for each of the five algorithms and `AllOf`, side
//! by side with the token bucket in the same run (issue: every O(1)
//! algorithm within 1.5× of the token bucket; the sliding log's cost stated
//! against its limit).
//!
//! The single-thread rows call `check_at(t)` with an explicit time, so they
//! measure the algorithm, not the clock, and every algorithm sees the same
//! times. The allowed rows use one realistic configuration for all — 1000
//! per second (a 1 s window, or one token per ms), with calls 2 ms apart, so
//! each limiter settles at half its limit and admits every call. Every row verifies what it measured: all
//! admitted on `allowed/*`, all refused on `denied/*`. The two-thread rows use
//! the default clock and one shared limiter.

mod common;

use std::cell::Cell;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use ratebound::{
    AllOf, FixedWindow, LeakyBucket, Limiter, MonotonicClock, Quota, SlidingLog, SlidingWindow,
    TokenBucket,
};
use ratebound_benches::{run_pair, run_timed};

/// A window long enough that no timed run reaches its end (2^50 ns ≈ 13 days).
const LONG: Duration = Duration::from_nanos(1 << 50);

fn quota(period: Duration, burst: u64) -> Quota {
    Quota::with_period(period)
        .and_then(|q| q.with_burst(burst))
        .expect("valid quota")
}

/// A row's `limiter`, ready for its timed checks: on a row of refusals
/// (`expect` false) its one token is taken first, by `take`.
fn prepared<L: Limiter>(name: &str, expect: bool, limiter: L, take: impl Fn(&L) -> bool) -> L {
    if !expect {
        assert!(take(&limiter), "{name}: the one token");
    }
    limiter
}

/// Times `iters` checks at t = step, 2·step, 3·step, … ns and asserts every
/// one came out as `expect`.
fn row<L: Limiter>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    expect: bool,
    step: u64,
    make: impl Fn(u64) -> L,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let limiter = prepared(name, expect, make(iters), |l| l.check_at(0).is_allowed());
            let t = Cell::new(step);
            let (elapsed, allowed) = run_timed(iters, || {
                let now = t.get();
                t.set(now + step);
                black_box(black_box(&limiter).check_at(now)).is_allowed()
            });
            let want = if expect { iters } else { 0 };
            assert_eq!(allowed, want, "{name}: {allowed} of {iters} admitted");
            elapsed
        })
    });
}

fn allowed(c: &mut Criterion) {
    let mut g = c.benchmark_group("algorithms/allowed");
    let ms = Duration::from_millis(1);
    let second = Duration::from_secs(1);
    // A call every 2 ms against 1000 per second: half the limit, all admitted.
    let step = 2_000_000;
    row(&mut g, "token_bucket", true, step, |_| {
        TokenBucket::with_clock(quota(ms, 1000), MonotonicClock::new())
    });
    row(&mut g, "fixed_window", true, step, |_| {
        FixedWindow::with_clock(1000, second, MonotonicClock::new()).expect("valid")
    });
    row(&mut g, "sliding_window", true, step, |_| {
        SlidingWindow::with_clock(1000, second, MonotonicClock::new()).expect("valid")
    });
    row(&mut g, "leaky_bucket", true, step, |_| {
        LeakyBucket::with_clock(quota(ms, 1), second, MonotonicClock::new()).expect("valid")
    });
    // The log holds about limit/2 entries; every call drops the oldest and
    // appends one.
    for limit in [10u64, 1_000, 100_000] {
        row(
            &mut g,
            &format!("sliding_log/limit_{limit}"),
            true,
            step,
            move |_| {
                SlidingLog::with_clock(limit, ms * limit as u32, MonotonicClock::new())
                    .expect("valid")
            },
        );
    }
    row(&mut g, "all_of/bucket_and_window", true, step, |_| {
        let bucket = TokenBucket::with_clock(quota(ms, 1000), MonotonicClock::new());
        let window = FixedWindow::with_clock(1000, second, MonotonicClock::new()).expect("valid");
        AllOf::new(vec![Arc::new(bucket), Arc::new(window)]).expect("two members")
    });
    g.finish();
}

fn denied(c: &mut Criterion) {
    let mut g = c.benchmark_group("algorithms/denied");
    let hour = Duration::from_secs(3600);
    row(&mut g, "token_bucket", false, 1, |_| {
        TokenBucket::with_clock(quota(hour, 1), MonotonicClock::new())
    });
    row(&mut g, "fixed_window", false, 1, |_| {
        FixedWindow::with_clock(1, LONG, MonotonicClock::new()).expect("valid")
    });
    row(&mut g, "sliding_window", false, 1, |_| {
        SlidingWindow::with_clock(1, LONG, MonotonicClock::new()).expect("valid")
    });
    row(&mut g, "leaky_bucket", false, 1, |_| {
        LeakyBucket::with_clock(quota(hour, 1), Duration::ZERO, MonotonicClock::new())
            .expect("valid")
    });
    for limit in [10u64, 1_000, 100_000] {
        row(
            &mut g,
            &format!("sliding_log/limit_{limit}"),
            false,
            1,
            move |_| {
                let log =
                    SlidingLog::with_clock(limit, LONG, MonotonicClock::new()).expect("valid");
                // Fill it (the row's own first check then finds it full too).
                log.check_n_at(limit - 1, 0).expect("n within limit");
                log
            },
        );
    }
    g.finish();
}

/// Two threads, default clock, one shared limiter: ns per call per thread.
fn pair<L: Limiter>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    expect: bool,
    make: impl Fn(u64) -> L,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let limiter = prepared(name, expect, make(iters), |l| l.check().is_allowed());
            let run = run_pair(iters, || {
                black_box(black_box(&limiter).check()).is_allowed()
            });
            let want = if expect { 2 * iters } else { 0 };
            assert_eq!(
                run.allowed, want,
                "{name}: {} of 2×{iters} admitted",
                run.allowed
            );
            run.wall
        })
    });
}

fn two_threads(c: &mut Criterion) {
    let hour = Duration::from_secs(3600);
    let cap = |iters: u64| (2 * iters + 1).min(u64::from(u32::MAX));
    let mut g = c.benchmark_group("algorithms/two_threads_allowed");
    pair(&mut g, "token_bucket", true, |iters| {
        TokenBucket::new(quota(Duration::from_secs(1), 2 * iters + 1))
    });
    pair(&mut g, "fixed_window", true, |iters| {
        FixedWindow::new(cap(iters), LONG).expect("valid")
    });
    pair(&mut g, "sliding_window", true, |iters| {
        SlidingWindow::new(cap(iters), LONG).expect("valid")
    });
    // 10^6 per millisecond is far more than two threads can ask for.
    pair(&mut g, "sliding_log/limit_1000000", true, |_| {
        SlidingLog::new(1_000_000, Duration::from_millis(1)).expect("valid")
    });
    g.finish();
    let mut g = c.benchmark_group("algorithms/two_threads_denied");
    pair(&mut g, "token_bucket", false, |_| {
        TokenBucket::new(quota(hour, 1))
    });
    pair(&mut g, "fixed_window", false, |_| {
        FixedWindow::new(1, LONG).expect("valid")
    });
    pair(&mut g, "sliding_window", false, |_| {
        SlidingWindow::new(1, LONG).expect("valid")
    });
    pair(&mut g, "leaky_bucket", false, |_| {
        LeakyBucket::new(quota(hour, 1), Duration::ZERO).expect("valid")
    });
    pair(&mut g, "sliding_log/limit_1000", false, |_| {
        let log = SlidingLog::new(1_000, LONG).expect("valid");
        log.check_n(999).expect("n within limit");
        log
    });
    g.finish();
}

// 30 samples × (0.5 s warm-up + 1.5 s measurement): ~2.2 s a row, 27 rows,
// about 1 min in all.
criterion_group! {
    name = benches;
    config = common::config(30, Duration::from_millis(500), Duration::from_millis(1500));
    targets = allowed, denied, two_threads
}
criterion_main!(benches);
