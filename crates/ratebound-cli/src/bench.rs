//! `ratebound bench`: how long one check takes on this machine — one thread,
//! two threads on one bucket, and a keyed limiter — in nanoseconds.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratebound::{KeyedAlgorithm, KeyedLimiter, Quota, TokenBucket};

use crate::CliError;

/// Runs `check` in batches until `span` has passed: ns per call.
fn measure(span: Duration, mut check: impl FnMut() -> bool) -> f64 {
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < span {
        for _ in 0..1024 {
            black_box(check());
        }
        calls += 1024;
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

pub fn run(span: Duration) -> Result<String, CliError> {
    // A quota no loop can exhaust: the admitted path is measured.
    let quota = Quota::per_second(1_000_000_000)?.with_burst(1_000_000_000)?;
    let bucket = Arc::new(TokenBucket::new(quota));
    let one = measure(span, || bucket.check().is_allowed());

    let other = bucket.clone();
    let helper = std::thread::spawn(move || measure(span, || other.check().is_allowed()));
    let mine = measure(span, || bucket.check().is_allowed());
    let theirs = helper
        .join()
        .map_err(|_| CliError::new("the second bench thread failed"))?;

    let keyed: KeyedLimiter<u64> = KeyedLimiter::new(KeyedAlgorithm::TokenBucket(quota))?;
    let mut key = 0u64;
    let per_key = measure(span, || {
        key = (key + 1) % 1000;
        keyed.check(&key).is_ok_and(|d| d.is_allowed())
    });
    Ok(format!(
        "ratebound bench ({} per row, {} CPUs, clock {})\n\
         {:<36} {:>8.1} ns per check\n\
         {:<36} {:>8.1} ns per check (each thread: {:.1}, {:.1})\n\
         {:<36} {:>8.1} ns per check\n",
        crate::show_duration(u64::try_from(span.as_nanos()).unwrap_or(u64::MAX)),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        ratebound::MonotonicClock::source(),
        "token bucket, 1 thread",
        one,
        "token bucket, 2 threads, one bucket",
        (mine + theirs) / 2.0,
        mine,
        theirs,
        "keyed token bucket, 1000 keys",
        per_key,
    ))
}
