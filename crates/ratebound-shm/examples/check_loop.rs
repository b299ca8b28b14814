//! A quick loop: ns per admitted check of a `SharedLimiter` and a
//! `SharedKeyedLimiter` (1000 keys), with nothing learned (the hot path)
//! and with a learned word (each check scales the ceiling); median of 7
//! runs of 2 000 000 calls, as benches' `shm_check`.
//!
//! Run: `cargo run --release -p ratebound-shm --example check_loop`.
use std::hint::black_box;
use std::time::Instant;

use ratebound::any::Key;
use ratebound::outbound::{FULL, Learned};
use ratebound::{KeyedAlgorithm, Quota};
use ratebound_shm::{SharedKeyedLimiter, SharedLimiter};

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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quota = Quota::per_second(1_000_000_000)?.with_burst(1_000_000_000)?;
    let algorithm = KeyedAlgorithm::TokenBucket(quota);
    let dir = std::env::temp_dir().join(format!("rb-shm-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let one = SharedLimiter::open(dir.join("one.limit"), algorithm)?;
    let (m, lo, hi) = median_ns(|_| one.check().is_ok_and(|d| d.is_allowed()));
    println!("SharedLimiter fresh word: {m:.1} ns ({lo:.1}-{hi:.1})");
    let keyed = SharedKeyedLimiter::open(dir.join("keyed.limit"), algorithm, 1000)?;
    let keys: Vec<String> = (0..1000).map(|i| format!("key-{i}")).collect();
    let (m, lo, hi) = median_ns(|i| {
        keyed
            .check(Key::Text(&keys[(i % 1000) as usize]))
            .is_ok_and(|d| d.is_allowed())
    });
    println!("SharedKeyedLimiter 1000 keys fresh words: {m:.1} ns ({lo:.1}-{hi:.1})");
    learned_rows(&one, &keyed, &keys);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// The same checks once every word holds a learned half of the ceiling.
fn learned_rows(one: &SharedLimiter, keyed: &SharedKeyedLimiter, keys: &[String]) {
    let half = Learned::new(FULL / 2, 1);
    assert!(one.adapt(Learned::fresh(), half).unwrap_or(false));
    let (m, lo, hi) = median_ns(|_| one.check().is_ok_and(|d| d.is_allowed()));
    println!("SharedLimiter learned word: {m:.1} ns ({lo:.1}-{hi:.1})");
    for k in keys {
        let key = Key::Text(k);
        assert!(keyed.adapt(key, Learned::fresh(), half).unwrap_or(false));
    }
    let (m, lo, hi) = median_ns(|i| {
        keyed
            .check(Key::Text(&keys[(i % 1000) as usize]))
            .is_ok_and(|d| d.is_allowed())
    });
    println!("SharedKeyedLimiter 1000 keys learned words: {m:.1} ns ({lo:.1}-{hi:.1})");
}
