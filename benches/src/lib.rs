//! Support code for ratebound's benchmarks (`benches/*.rs` and
//! `src/bin/keyed_memory.rs`; see README.md): the mutex token bucket used as
//! a baseline, the clocks it reads, the timed loops, per-thread CPU time for
//! the two-thread rows, the shuffled key orders of the keyed rows, and the
//! HTTP layer rows' setup ([`http_layer`]).

pub mod http_layer;

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A time source for [`MutexBucket`].
pub trait BaselineClock: Send + Sync {
    /// One reading.
    type Instant: Copy + Send;
    /// The current reading.
    fn now(&self) -> Self::Instant;
    /// Seconds from `earlier` to `later`; 0 when `later` is not after `earlier`.
    fn secs_between(earlier: Self::Instant, later: Self::Instant) -> f64;
}

/// `std::time::Instant::now()`, as Go's `time.Now()` is for `x/time/rate`.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdClock;

impl BaselineClock for StdClock {
    type Instant = Instant;

    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }

    #[inline]
    fn secs_between(earlier: Instant, later: Instant) -> f64 {
        later.saturating_duration_since(earlier).as_secs_f64()
    }
}

/// A manual clock of the same kind as `ratebound::ManualClock` and governor's
/// `FakeRelativeClock`: nanoseconds in an `Arc<AtomicU64>`, read Relaxed.
#[derive(Clone, Debug, Default)]
pub struct ManualNanos(Arc<AtomicU64>);

impl ManualNanos {
    /// Moves the clock forward by `nanos`.
    pub fn advance_nanos(&self, nanos: u64) {
        self.0.fetch_add(nanos, Ordering::Relaxed);
    }
}

impl BaselineClock for ManualNanos {
    type Instant = u64;

    #[inline]
    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    #[inline]
    fn secs_between(earlier: u64, later: u64) -> f64 {
        later.saturating_sub(earlier) as f64 * 1e-9
    }
}

#[derive(Debug)]
struct Tokens<I> {
    tokens: f64,
    last: I,
}

/// The textbook token bucket behind a mutex, as Go's `x/time/rate.Limiter`
/// does it: float tokens, refilled by `elapsed × rate` capped at the burst,
/// one taken if at least one is there. The clock is read before locking and
/// a refusal writes nothing (as `Limiter.Allow`).
#[derive(Debug)]
pub struct MutexBucket<C: BaselineClock> {
    state: Mutex<Tokens<C::Instant>>,
    rate: f64,
    burst: f64,
    clock: C,
}

impl<C: BaselineClock> MutexBucket<C> {
    /// A full bucket of `burst` tokens refilled at `rate` tokens per second.
    pub fn new(rate: f64, burst: u64, clock: C) -> Self {
        let burst = burst as f64;
        MutexBucket {
            state: Mutex::new(Tokens {
                tokens: burst,
                last: clock.now(),
            }),
            rate,
            burst,
            clock,
        }
    }

    /// Takes one token now if there is one.
    #[inline]
    pub fn check(&self) -> bool {
        let now = self.clock.now();
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = C::secs_between(s.last, now);
        let tokens = (s.tokens + elapsed * self.rate).min(self.burst);
        if tokens >= 1.0 {
            s.tokens = tokens - 1.0;
            s.last = now;
            true
        } else {
            false
        }
    }
}

/// Calls `op` `iters` times; returns the wall time of the loop and how many
/// calls returned true.
#[inline]
pub fn run_timed(iters: u64, mut op: impl FnMut() -> bool) -> (Duration, u64) {
    let mut allowed = 0u64;
    let start = Instant::now();
    for _ in 0..iters {
        allowed += u64::from(op());
    }
    (start.elapsed(), allowed)
}

/// What one run of [`run_pair`] measured.
#[derive(Clone, Copy, Debug)]
pub struct PairRun {
    /// From the first thread's start to the last thread's finish.
    pub wall: Duration,
    /// CPU time each thread spent in its loop (zero where the OS does not say).
    pub cpu: [Duration; 2],
    /// Calls that returned true, both threads together.
    pub allowed: u64,
}

/// Runs `op` `iters` times on each of two threads released together, and
/// measures the wall time of the pair and each thread's CPU time.
///
/// The threads meet at a spinning barrier, not a sleeping one: waking a
/// sleeping thread (an idle vCPU, on a VM) takes tens to hundreds of
/// microseconds, which would show up as one thread starting late.
pub fn run_pair<F: Fn() -> bool + Sync>(iters: u64, op: F) -> PairRun {
    run_pair_each(iters, &op, &op)
}

/// [`run_pair`] with its own `op` on each thread (the first runs `op_a`, the
/// second `op_b`), for rows where each thread walks its own sequence, e.g.
/// its own shuffled order of keys ([`KeyWalk`]).
pub fn run_pair_each(
    iters: u64,
    op_a: impl FnMut() -> bool + Send,
    op_b: impl FnMut() -> bool + Send,
) -> PairRun {
    let arrived = AtomicUsize::new(0);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| pair_worker(&arrived, iters, op_a));
        let b = s.spawn(|| pair_worker(&arrived, iters, op_b));
        (
            a.join().expect("bench thread panicked"),
            b.join().expect("bench thread panicked"),
        )
    });
    PairRun {
        wall: a.1.max(b.1) - a.0.min(b.0),
        cpu: [a.2, b.2],
        allowed: a.3 + b.3,
    }
}

/// One thread of [`run_pair_each`]: waits for the other at the spinning
/// barrier, then runs `op` `iters` times; returns start, end, CPU time and
/// how many calls returned true.
fn pair_worker(
    arrived: &AtomicUsize,
    iters: u64,
    mut op: impl FnMut() -> bool,
) -> (Instant, Instant, Duration, u64) {
    arrived.fetch_add(1, Ordering::AcqRel);
    while arrived.load(Ordering::Acquire) < 2 {
        std::hint::spin_loop();
    }
    let cpu0 = thread_cpu_time();
    let start = Instant::now();
    let mut allowed = 0u64;
    for _ in 0..iters {
        allowed += u64::from(op());
    }
    let end = Instant::now();
    let cpu = match (cpu0, thread_cpu_time()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => Duration::ZERO,
    };
    (start, end, cpu, allowed)
}

/// The keys `0..n` in a random order fixed by `seed`, walked round and round:
/// the keyed rows precompute their order so that the timed loop reads the
/// next key from a sequential array instead of calling an RNG.
#[derive(Clone, Debug)]
pub struct KeyWalk {
    order: Vec<u64>,
    pos: usize,
}

impl KeyWalk {
    /// A permutation of `0..n` (Fisher–Yates on SplitMix64 from `seed`).
    ///
    /// # Panics
    /// For `n == 0`.
    pub fn shuffled(n: u64, seed: u64) -> KeyWalk {
        assert!(n > 0, "KeyWalk of no keys");
        let mut order: Vec<u64> = (0..n).collect();
        let mut rng = SplitMix64(seed);
        for i in (1..order.len()).rev() {
            // The multiply-shift reduction of a 64-bit draw to 0..=i.
            let j = ((u128::from(rng.next()) * (i as u128 + 1)) >> 64) as usize;
            order.swap(i, j);
        }
        KeyWalk { order, pos: 0 }
    }

    /// The keys, in walking order.
    pub fn keys(&self) -> &[u64] {
        &self.order
    }

    /// The next key, from where the previous call left off (after the last
    /// key, the first again).
    #[inline(always)]
    pub fn next_key(&mut self) -> &u64 {
        let i = self.pos;
        self.pos = if i + 1 == self.order.len() { 0 } else { i + 1 };
        &self.order[i]
    }
}

/// Sebastiano Vigna's SplitMix64: enough randomness for a shuffle, no crate.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Appends JSON lines (the two-thread CPU/wall figures, the clock source) to
/// `$RATEBOUND_BENCH_THREAD_STATS` when it is set; `ci/bench` sets it and
/// puts them in its report.
pub fn write_stats(lines: &[String]) {
    let Some(path) = std::env::var_os("RATEBOUND_BENCH_THREAD_STATS") else {
        return;
    };
    if lines.is_empty() {
        return;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    for line in lines {
        writeln!(file, "{line}").unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}

/// CPU time consumed so far by the calling thread, where the OS tells
/// (`CLOCK_THREAD_CPUTIME_ID` on Linux).
pub fn thread_cpu_time() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Some(Duration::new(
            u64::try_from(ts.tv_sec).ok()?,
            u32::try_from(ts.tv_nsec).ok()?,
        ))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// [`PairRun`]s of one benchmark added up (warm-up runs included).
#[derive(Clone, Copy, Debug, Default)]
pub struct PairStats {
    /// Runs added.
    pub runs: u64,
    /// Checks per thread, all runs together.
    pub iters: u64,
    /// Wall time, all runs together.
    pub wall: Duration,
    /// CPU time of the first and the second thread, all runs together.
    pub cpu: [Duration; 2],
}

impl PairStats {
    /// Adds one run of `iters` checks per thread.
    pub fn add(&mut self, iters: u64, run: &PairRun) {
        self.runs += 1;
        self.iters += iters;
        self.wall += run.wall;
        self.cpu[0] += run.cpu[0];
        self.cpu[1] += run.cpu[1];
    }

    /// Checks that `want` of the run's 2 × `iters` timed checks were
    /// admitted (panicking with the row's `name` if not), adds the run, and
    /// returns its wall time, which Criterion divides by `iters`: wall time
    /// per check per thread.
    pub fn add_checked(&mut self, name: &str, iters: u64, want: u64, run: &PairRun) -> Duration {
        assert_eq!(
            run.allowed, want,
            "{name}: {} of 2×{iters} timed checks admitted",
            run.allowed
        );
        self.add(iters, run);
        run.wall
    }

    /// Wall nanoseconds per check per thread.
    pub fn wall_ns_per_call(&self) -> f64 {
        self.wall.as_nanos() as f64 / self.iters.max(1) as f64
    }

    /// Each thread's CPU time as a fraction of the wall time: near 1.0 when
    /// both threads really ran side by side, well below when they took turns.
    pub fn cpu_over_wall(&self) -> [f64; 2] {
        let wall = self.wall.as_secs_f64().max(f64::MIN_POSITIVE);
        [
            self.cpu[0].as_secs_f64() / wall,
            self.cpu[1].as_secs_f64() / wall,
        ]
    }

    /// Prints the CPU/wall figures of a two-thread row and returns its JSON
    /// line for `ci/bench`'s table; `None` if the row never ran.
    pub fn report(&self, group: &str, function: &str) -> Option<String> {
        if self.runs == 0 {
            return None;
        }
        let [a, b] = self.cpu_over_wall();
        println!(
            "{group}/{function}: CPU/wall per thread {a:.2} {b:.2} over {} runs (1.00 = both threads ran side by side)",
            self.runs
        );
        Some(self.to_json(group, function))
    }

    /// One JSON object (one line) for `ci/bench`'s table.
    pub fn to_json(&self, group: &str, function: &str) -> String {
        let [r0, r1] = self.cpu_over_wall();
        format!(
            "{{\"group\":\"{group}\",\"function\":\"{function}\",\"runs\":{},\"iters_per_thread\":{},\
             \"wall_ns\":{},\"cpu_ns\":[{},{}],\"wall_ns_per_call\":{:.3},\"cpu_over_wall\":[{r0:.3},{r1:.3}]}}",
            self.runs,
            self.iters,
            self.wall.as_nanos(),
            self.cpu[0].as_nanos(),
            self.cpu[1].as_nanos(),
            self.wall_ns_per_call(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutex_bucket_takes_the_burst_then_refills_at_the_rate() {
        let clock = ManualNanos::default();
        let bucket = MutexBucket::new(2.0, 3, clock.clone());
        let got: Vec<bool> = (0..4).map(|_| bucket.check()).collect();
        assert_eq!(got, [true, true, true, false]);
        clock.advance_nanos(499_999_999);
        assert!(!bucket.check());
        clock.advance_nanos(1);
        assert!(bucket.check());
        assert!(!bucket.check());
        // Refill is capped at the burst.
        clock.advance_nanos(100_000_000_000);
        assert_eq!((0..5).filter(|_| bucket.check()).count(), 3);
    }

    #[test]
    fn run_pair_counts_both_threads() {
        let bucket = MutexBucket::new(1e-3, 150, ManualNanos::default());
        let run = run_pair(100, || bucket.check());
        assert_eq!(run.allowed, 150);
        assert!(run.wall > Duration::ZERO);
        let (_, allowed) = run_timed(10, || bucket.check());
        assert_eq!(allowed, 0);
    }

    #[test]
    fn run_pair_each_runs_each_op_on_its_own_thread() {
        let (mut a, mut b) = (0u64, 0u64);
        let run = run_pair_each(
            7,
            || {
                a += 1;
                true
            },
            || {
                b += 1;
                b % 2 == 0
            },
        );
        assert_eq!((a, b, run.allowed), (7, 7, 7 + 3));
    }

    #[test]
    fn key_walk_is_a_permutation_walked_round_and_round() {
        let mut walk = KeyWalk::shuffled(1000, 1);
        let mut sorted = walk.keys().to_vec();
        assert_ne!(sorted, (0..1000).collect::<Vec<u64>>(), "shuffled");
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<u64>>());
        let first: Vec<u64> = (0..1000).map(|_| *walk.next_key()).collect();
        assert_eq!(first, walk.keys());
        let again = *walk.next_key();
        assert_eq!(again, walk.keys()[0]);
        assert_ne!(KeyWalk::shuffled(1000, 2).keys(), walk.keys());
    }

    #[test]
    fn thread_cpu_time_moves() {
        let Some(a) = thread_cpu_time() else { return };
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        let b = thread_cpu_time().unwrap();
        assert!(b > a, "{a:?} then {b:?}");
    }
}
