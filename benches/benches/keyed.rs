//! The cost of one check on an existing key: ratebound's `KeyedLimiter`
//! (token bucket per key) against governor's keyed `RateLimiter`
//! (`RateLimiter::keyed`: a `DashMap` store), in the same run and the same
//! criterion groups. See README.md.
//!
//! Each row builds its limiter once (on the default clocks: ratebound
//! `MonotonicClock`, governor `DefaultClock`), checks every key `0..n` once
//! so that all are tracked, then times checks that walk a precomputed
//! shuffled order of those keys ([`KeyWalk`]) round and round, carrying on
//! from sample to sample, so every timed check is on an existing key and, for
//! 10^6 keys, on a table far bigger than the caches. Both implementations of a
//! group walk the same order. The quota (1 token/s, burst 2^30) admits every
//! check any run can make, and every row asserts that all its timed checks
//! were admitted. The `two_threads/*` rows share one limiter between two
//! threads released together, each walking its own shuffled order: wall time
//! per check per thread, and each thread's CPU time as in check.rs.

mod common;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use governor::{DefaultKeyedRateLimiter, Quota as GQuota, RateLimiter};
use ratebound::{KeyedAlgorithm, KeyedLimiter, Quota};
use ratebound_benches::{KeyWalk, PairStats, run_pair_each, run_timed, write_stats};

/// 1 token per second: nothing to speak of refills during a run.
const PERIOD: Duration = Duration::from_secs(1);
/// 2^30 checks per key before a refusal (a run makes at most ~10^8 in all);
/// 2^30 × 1 s fits ratebound's 2^60 ns span and governor's `NonZeroU32`.
const BURST: u32 = 1 << 30;
/// The shuffled orders: the same for both implementations of a group; the
/// second thread of a two-thread row walks the second.
const SEEDS: [u64; 2] = [0x5eed_0001, 0x5eed_0002];

/// One check of `key`, its whole result kept alive with `black_box`; true if
/// admitted.
trait Keyed: Sync {
    fn check_once(&self, key: &u64) -> bool;
    fn tracked(&self) -> usize;
}

impl Keyed for KeyedLimiter<u64> {
    #[inline(always)]
    fn check_once(&self, key: &u64) -> bool {
        black_box(self.check(key)).is_ok_and(|d| d.is_allowed())
    }

    fn tracked(&self) -> usize {
        self.len()
    }
}

impl Keyed for DefaultKeyedRateLimiter<u64> {
    #[inline(always)]
    fn check_once(&self, key: &u64) -> bool {
        black_box(self.check_key(key)).is_ok()
    }

    fn tracked(&self) -> usize {
        self.len()
    }
}

fn ratebound_limiter() -> KeyedLimiter<u64> {
    let quota = Quota::with_period(PERIOD)
        .and_then(|q| q.with_burst(u64::from(BURST)))
        .expect("valid ratebound quota");
    KeyedLimiter::new(KeyedAlgorithm::TokenBucket(quota)).expect("valid keyed limiter")
}

fn governor_limiter() -> DefaultKeyedRateLimiter<u64> {
    let burst = NonZeroU32::new(BURST).expect("nonzero burst");
    RateLimiter::keyed(
        GQuota::with_period(PERIOD)
            .expect("nonzero period")
            .allow_burst(burst),
    )
}

/// `make()` with every key `0..keys` checked once (admitted) and tracked.
fn filled<L: Keyed>(name: &str, keys: u64, make: fn() -> L) -> L {
    let limiter = make();
    for key in 0..keys {
        assert!(limiter.check_once(&key), "{name}: first check of key {key}");
    }
    assert_eq!(
        limiter.tracked(),
        keys as usize,
        "{name}: keys tracked after filling"
    );
    limiter
}

/// A group's rows: the same setup for each implementation.
trait RowRunner {
    fn run<L: Keyed>(&mut self, name: &str, make: fn() -> L);
}

fn both_rows(r: &mut impl RowRunner) {
    r.run("ratebound", ratebound_limiter);
    r.run("governor", governor_limiter);
}

/// One thread walking its shuffled order over a filled limiter.
struct Single<'a, 'c> {
    group: &'a mut BenchmarkGroup<'c, WallTime>,
    keys: u64,
}

impl RowRunner for Single<'_, '_> {
    fn run<L: Keyed>(&mut self, name: &str, make: fn() -> L) {
        let keys = self.keys;
        // Built at the row's first sample (so a filtered-out row costs
        // nothing) and kept for the rest: 10^6 keys take ~0.5 s to insert.
        let mut setup: Option<(L, KeyWalk)> = None;
        self.group.bench_function(name, |b| {
            let (limiter, walk) = setup.get_or_insert_with(|| {
                (filled(name, keys, make), KeyWalk::shuffled(keys, SEEDS[0]))
            });
            let limiter = &*limiter;
            b.iter_custom(|iters| {
                let (elapsed, allowed) =
                    run_timed(iters, || black_box(limiter).check_once(walk.next_key()));
                assert_eq!(
                    allowed, iters,
                    "{name}: {allowed} of {iters} timed checks admitted"
                );
                elapsed
            })
        });
    }
}

/// Two threads on one shared filled limiter, each walking its own order.
struct Pair<'a, 'c> {
    group: &'a mut BenchmarkGroup<'c, WallTime>,
    group_name: &'static str,
    keys: u64,
    /// One line per row for `ci/bench`'s table.
    stats_out: Vec<String>,
}

impl RowRunner for Pair<'_, '_> {
    fn run<L: Keyed>(&mut self, name: &str, make: fn() -> L) {
        let keys = self.keys;
        let mut setup: Option<(L, KeyWalk, KeyWalk)> = None;
        let mut stats = PairStats::default();
        self.group.bench_function(name, |b| {
            let (limiter, walk_a, walk_b) = setup.get_or_insert_with(|| {
                (
                    filled(name, keys, make),
                    KeyWalk::shuffled(keys, SEEDS[0]),
                    KeyWalk::shuffled(keys, SEEDS[1]),
                )
            });
            let limiter = &*limiter;
            b.iter_custom(|iters| {
                let run = run_pair_each(
                    iters,
                    || black_box(limiter).check_once(walk_a.next_key()),
                    || black_box(limiter).check_once(walk_b.next_key()),
                );
                stats.add_checked(name, iters, 2 * iters, &run)
            })
        });
        self.stats_out.extend(stats.report(self.group_name, name));
    }
}

fn single_thread(c: &mut Criterion) {
    for (group_name, keys) in [("keyed/1k_keys", 1_000), ("keyed/1m_keys", 1_000_000)] {
        let mut group = c.benchmark_group(group_name);
        both_rows(&mut Single {
            group: &mut group,
            keys,
        });
        group.finish();
    }
}

fn two_threads(c: &mut Criterion) {
    let mut lines = Vec::new();
    for (group_name, keys) in [
        ("keyed/two_threads_1k_keys", 1_000),
        ("keyed/two_threads_1m_keys", 1_000_000),
    ] {
        let mut group = c.benchmark_group(group_name);
        let mut rows = Pair {
            group: &mut group,
            group_name,
            keys,
            stats_out: Vec::new(),
        };
        both_rows(&mut rows);
        lines.append(&mut rows.stats_out);
        group.finish();
    }
    write_stats(&lines);
}

// 30 samples × (0.5 s warm-up + 1.5 s measurement), no plots: ~2.2 s a
// row plus ~0.5 s to fill each 10^6-key limiter, 8 rows, ~20 s in all.
criterion_group! {
    name = benches;
    config = common::config(30, Duration::from_millis(500), Duration::from_millis(1500));
    targets = single_thread, two_threads
}
criterion_main!(benches);
