//! The cost of one `check()`: ratebound's `TokenBucket` against governor's
//! direct `RateLimiter` and a mutex token bucket (Go `x/time/rate` style),
//! in the same run and the same criterion groups. See README.md.
//!
//! Every row measures one call per iteration and verifies what it measured:
//! the `allowed/*` rows assert that every timed check was admitted, the
//! `denied/*` rows that every one was refused. The `two_threads/*` rows run
//! two threads on one shared limiter and also record each thread's CPU time,
//! so a run on a busy machine (threads taking turns instead of running side
//! by side) shows up as CPU/wall well below 1.

mod common;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use governor::clock::{Clock as _, DefaultClock, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota as GQuota, RateLimiter};
use ratebound::{Clock as _, ManualClock, MonotonicClock, Quota, TokenBucket};
use ratebound_benches::{
    BaselineClock, ManualNanos, MutexBucket, PairStats, StdClock, run_pair, run_timed, write_stats,
};

/// One check, its result kept alive with `black_box`; true if admitted.
trait Limiter: Sync {
    fn check_once(&self) -> bool;
}

impl<C: ratebound::Clock> Limiter for TokenBucket<C> {
    #[inline(always)]
    fn check_once(&self) -> bool {
        black_box(self.check()).is_allowed()
    }
}

impl<C> Limiter for RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>
where
    C: governor::clock::Clock + Sync,
    C::Instant: Sync,
{
    #[inline(always)]
    fn check_once(&self) -> bool {
        black_box(self.check()).is_ok()
    }
}

impl<C: BaselineClock> Limiter for MutexBucket<C> {
    #[inline(always)]
    fn check_once(&self) -> bool {
        black_box(self.check())
    }
}

/// Slow enough that nothing refills during a sample, short enough that a
/// burst of a billion fits ratebound's 2^60 ns span.
const ALLOWED_PERIOD: Duration = Duration::from_secs(1);
/// The denied rows: one token, then one per hour.
const DENIED_PERIOD: Duration = Duration::from_secs(3600);

fn rb_quota(period: Duration, burst: u64) -> Quota {
    Quota::with_period(period)
        .and_then(|q| q.with_burst(burst))
        .unwrap_or_else(|e| panic!("ratebound quota {period:?} burst {burst}: {e}"))
}

fn gov_quota(period: Duration, burst: u64) -> GQuota {
    let burst = u32::try_from(burst)
        .ok()
        .and_then(NonZeroU32::new)
        .unwrap_or_else(|| panic!("governor burst {burst} does not fit a NonZeroU32"));
    GQuota::with_period(period)
        .expect("nonzero period")
        .allow_burst(burst)
}

fn mutex_rate(period: Duration) -> f64 {
    1.0 / period.as_secs_f64()
}

/// Which clock a row's limiters read.
#[derive(Clone, Copy)]
enum ClockKind {
    Default,
    Manual,
}

/// Builds the three limiters of a row and hands each to `run`, so every group
/// has the same three rows built the same way.
trait RowRunner {
    fn run<L: Limiter>(&mut self, name: &str, make: &dyn Fn(u64) -> L);
}

fn three_rows(
    clock: ClockKind,
    period: Duration,
    burst_for: fn(u64) -> u64,
    r: &mut impl RowRunner,
) {
    match clock {
        ClockKind::Default => {
            r.run("ratebound", &|iters| {
                TokenBucket::new(rb_quota(period, burst_for(iters)))
            });
            r.run("governor", &|iters| {
                RateLimiter::direct(gov_quota(period, burst_for(iters)))
            });
            r.run("mutex", &|iters| {
                MutexBucket::new(mutex_rate(period), burst_for(iters), StdClock)
            });
        }
        ClockKind::Manual => {
            r.run("ratebound", &|iters| {
                TokenBucket::with_clock(rb_quota(period, burst_for(iters)), ManualClock::new())
            });
            r.run("governor", &|iters| {
                RateLimiter::direct_with_clock(
                    gov_quota(period, burst_for(iters)),
                    FakeRelativeClock::default(),
                )
            });
            r.run("mutex", &|iters| {
                MutexBucket::new(mutex_rate(period), burst_for(iters), ManualNanos::default())
            });
        }
    }
}

/// Single-threaded rows: `iters` checks on a fresh limiter per sample.
struct Single<'a, 'c> {
    group: &'a mut BenchmarkGroup<'c, WallTime>,
    /// Every timed check must be admitted (true) or refused (false).
    expect_allowed: bool,
}

/// The row's limiter for `iters` timed checks; for a row of refusals, its
/// only token taken first.
fn row_limiter<L: Limiter>(
    make: &dyn Fn(u64) -> L,
    iters: u64,
    expect_allowed: bool,
    name: &str,
) -> L {
    let limiter = make(iters);
    if !expect_allowed {
        assert!(
            limiter.check_once(),
            "{name}: the first check takes the only token"
        );
    }
    limiter
}

impl RowRunner for Single<'_, '_> {
    fn run<L: Limiter>(&mut self, name: &str, make: &dyn Fn(u64) -> L) {
        let expect_allowed = self.expect_allowed;
        self.group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let limiter = row_limiter(make, iters, expect_allowed, name);
                let (elapsed, allowed) = run_timed(iters, || black_box(&limiter).check_once());
                let want = if expect_allowed { iters } else { 0 };
                assert_eq!(
                    allowed, want,
                    "{name}: {allowed} of {iters} timed checks admitted"
                );
                elapsed
            })
        });
    }
}

/// Two threads on one shared limiter: wall time per check per thread.
struct Pair<'a, 'c> {
    group: &'a mut BenchmarkGroup<'c, WallTime>,
    group_name: &'static str,
    expect_allowed: bool,
    /// One line per row for `ci/bench`'s table.
    stats_out: Vec<String>,
}

impl RowRunner for Pair<'_, '_> {
    fn run<L: Limiter>(&mut self, name: &str, make: &dyn Fn(u64) -> L) {
        let expect_allowed = self.expect_allowed;
        let mut stats = PairStats::default();
        self.group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let limiter = row_limiter(make, iters, expect_allowed, name);
                let run = run_pair(iters, || black_box(&limiter).check_once());
                let want = if expect_allowed { 2 * iters } else { 0 };
                stats.add_checked(name, iters, want, &run)
            })
        });
        self.stats_out.extend(stats.report(self.group_name, name));
    }
}

fn allowed(c: &mut Criterion) {
    // Burst ≥ iters + 1: every timed check finds a token, whatever the clock says.
    single_rows(c, "allowed", true, ALLOWED_PERIOD, |iters| iters + 1);
}

fn denied(c: &mut Criterion) {
    // Burst 1, one token per hour, taken before timing: every timed check is refused.
    single_rows(c, "denied", false, DENIED_PERIOD, |_| 1);
}

/// The three rows of one thread, on each clock, in the groups
/// `<what>/default_clock` and `<what>/manual_clock`.
fn single_rows(
    c: &mut Criterion,
    what: &str,
    expect_allowed: bool,
    period: Duration,
    burst_for: fn(u64) -> u64,
) {
    for (clock_name, clock) in [
        ("default_clock", ClockKind::Default),
        ("manual_clock", ClockKind::Manual),
    ] {
        let mut group = c.benchmark_group(format!("{what}/{clock_name}"));
        let mut rows = Single {
            group: &mut group,
            expect_allowed,
        };
        three_rows(clock, period, burst_for, &mut rows);
        group.finish();
    }
}

fn two_threads(c: &mut Criterion) {
    let mut lines = Vec::new();
    for (group_name, expect_allowed) in [
        ("two_threads/allowed_default_clock", true),
        ("two_threads/denied_default_clock", false),
    ] {
        let mut group = c.benchmark_group(group_name);
        let mut rows = Pair {
            group: &mut group,
            group_name,
            expect_allowed,
            stats_out: Vec::new(),
        };
        if expect_allowed {
            three_rows(
                ClockKind::Default,
                ALLOWED_PERIOD,
                |iters| 2 * iters + 1,
                &mut rows,
            );
        } else {
            three_rows(ClockKind::Default, DENIED_PERIOD, |_| 1, &mut rows);
        }
        lines.append(&mut rows.stats_out);
        group.finish();
    }
    write_stats(&lines);
}

fn clock(c: &mut Criterion) {
    let source = MonotonicClock::source();
    println!("ratebound MonotonicClock::source() = {source}");
    write_stats(&[format!("{{\"monotonic_clock_source\":\"{source}\"}}")]);
    let mut group = c.benchmark_group("clock");
    group.bench_function("instant_now", |b| b.iter(std::time::Instant::now));
    let monotonic = MonotonicClock::new();
    group.bench_function("ratebound_monotonic", |b| {
        b.iter(|| black_box(&monotonic).now())
    });
    let governor_clock = DefaultClock::default();
    group.bench_function("governor_quanta", |b| {
        b.iter(|| black_box(&governor_clock).now())
    });
    let quanta_clock = quanta::Clock::new();
    group.bench_function("quanta_raw", |b| b.iter(|| black_box(&quanta_clock).raw()));
    group.finish();
}

// 40 samples × (1 s warm-up + 2.5 s measurement) per row, no plots: about
// 4 s a row, 22 rows, ~1.5 min of benchmarking in all.
criterion_group! {
    name = benches;
    config = common::config(40, Duration::from_secs(1), Duration::from_millis(2500));
    targets = clock, allowed, denied, two_threads
}
criterion_main!(benches);
