//! A check on a limit shared through memory (crate `ratebound-shm`) against
//! the same check in-process, the shared checks under a learned word (an
//! outbound adapter's), and several processes on one shared bucket:
//! wall nanoseconds per call, median of 7 runs of 2 000 000 calls.
//!
//! Run: `cargo run --release -p ratebound-benches --bin shm_check` (ci/bench).
//! Time: ~15 s.

use std::hint::black_box;
use std::process::{Command, Stdio};
use std::time::Instant;

use ratebound::any::Key;
use ratebound::outbound::{FULL, Learned};
use ratebound::{KeyedAlgorithm, KeyedLimiter, Quota, TokenBucket};
use ratebound_shm::{SharedKeyedLimiter, SharedLimiter, SystemClock};

const RUNS: usize = 7;
const CALLS: u64 = 2_000_000;

fn median_ns(mut f: impl FnMut(u64) -> bool) -> (f64, f64, f64) {
    let mut runs: Vec<f64> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            for i in 0..CALLS {
                black_box(f(i));
            }
            start.elapsed().as_nanos() as f64 / CALLS as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    (runs[RUNS / 2], runs[0], runs[RUNS - 1])
}

fn row(name: &str, (median, lo, hi): (f64, f64, f64)) -> f64 {
    println!("| {name} | {median:.1} | {lo:.1}–{hi:.1} |");
    median
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quota = Quota::per_second(1_000_000_000)?.with_burst(1_000_000_000)?;
    let algorithm = KeyedAlgorithm::TokenBucket(quota);
    let dir = std::env::temp_dir().join(format!("rb-shm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let one = dir.join("one.limit");

    // A child: one process's share of the multi-process row.
    if let Some(path) = std::env::args().nth(1) {
        let l = SharedLimiter::open(&path, algorithm)?;
        let (median, _, _) = median_ns(|_| l.check().is_ok_and(|d| d.is_allowed()));
        println!("{median:.1}");
        return Ok(());
    }

    println!("| check (admitted) | median ns | range of {RUNS} runs |");
    println!("| --- | ---: | ---: |");
    let local = TokenBucket::with_clock(quota, SystemClock);
    let a = row(
        "TokenBucket (in-process, CLOCK_MONOTONIC)",
        median_ns(|_| local.check().is_allowed()),
    );
    let shared = SharedLimiter::open(&one, algorithm)?;
    let b = row(
        "SharedLimiter (shared memory)",
        median_ns(|_| shared.check().is_ok_and(|d| d.is_allowed())),
    );
    let keyed: KeyedLimiter<u64, SystemClock> =
        KeyedLimiter::new(algorithm)?.with_clock(SystemClock);
    row(
        "KeyedLimiter, 1000 keys (in-process)",
        median_ns(|i| keyed.check(&(i % 1000)).is_ok_and(|d| d.is_allowed())),
    );
    let skeyed = SharedKeyedLimiter::open(dir.join("keyed.limit"), algorithm, 10_000)?;
    row(
        "SharedKeyedLimiter, 1000 keys (shared memory)",
        median_ns(|i| {
            skeyed
                .check(Key::Int(i128::from(i % 1000)))
                .is_ok_and(|d| d.is_allowed())
        }),
    );
    // A learned word (an outbound adapter's: half the ceiling) makes
    // every decision scale the configured quota.
    let half = Learned::new(FULL / 2, 1);
    shared.adapt(Learned::fresh(), half)?;
    row(
        "SharedLimiter, a learned word",
        median_ns(|_| shared.check().is_ok_and(|d| d.is_allowed())),
    );
    for i in 0..1000 {
        skeyed.adapt(Key::Int(i), Learned::fresh(), half)?;
    }
    row(
        "SharedKeyedLimiter, 1000 keys, learned words",
        median_ns(|i| {
            skeyed
                .check(Key::Int(i128::from(i % 1000)))
                .is_ok_and(|d| d.is_allowed())
        }),
    );
    println!();
    println!("shared / in-process (single key): {:.2}x", b / a);

    let exe = std::env::current_exe()?;
    for n in [2, 4] {
        // All started before any is waited for: they run side by side.
        let children: Vec<_> = (0..n)
            .map(|_| Command::new(&exe).arg(&one).stdout(Stdio::piped()).spawn())
            .collect::<Result<_, _>>()?;
        let mut per = Vec::new();
        for child in children {
            let out = child.wait_with_output()?;
            per.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
        }
        println!(
            "{n} processes on one SharedLimiter at once: ns per call in each: {}",
            per.join(", ")
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
