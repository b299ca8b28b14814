//! A flood of random keys against a capped keyed limiter, and memory given
//! back by cleanup. One test in its own binary, so that the process's RSS is
//! this test's.

use std::time::Duration;

use ratebound::{KeyedAlgorithm, KeyedLimiter, ManualClock, Overflow, Quota};

/// Resident set size in bytes (Linux), or None elsewhere.
fn rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// A small, fast, deterministic generator for the flood's keys.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

const MAX_KEYS: usize = 100_000;
const FLOOD: u64 = 10_000_000;
/// The stated bound on what a capped limiter may add to the process's RSS:
/// 100 000 keys at well under 100 bytes each, plus the allocator's slack.
const RSS_BOUND: u64 = 32 << 20;

#[test]
fn a_flood_of_random_keys_stays_within_the_cap_and_memory_comes_back() {
    let clock = ManualClock::new();
    let quota = Quota::parse("1/s burst 5").unwrap();
    let limiter = KeyedLimiter::new(KeyedAlgorithm::TokenBucket(quota))
        .unwrap()
        .with_max_keys(MAX_KEYS, Overflow::RejectNewKeys)
        .unwrap()
        .with_clock(clock.clone());
    let before = rss();

    // 1 000 legitimate keys use 3 of their 5 before the flood.
    for key in 0..1_000u64 {
        for _ in 0..3 {
            assert!(limiter.check(&key).unwrap().is_allowed());
        }
    }
    // The flood: 10 million random keys, one request each, with the
    // legitimate keys checked now and then.
    let mut rng = SplitMix(7);
    let (mut admitted, mut rejected) = (0u64, 0u64);
    for i in 0..FLOOD {
        match limiter.check(&(rng.next() | 1 << 63)) {
            Ok(d) => admitted += u64::from(d.is_allowed()),
            Err(e) => {
                assert_eq!(e.code(), "too_many_keys");
                rejected += 1;
            }
        }
        if i % 1_000_000 == 0 {
            assert!(limiter.len() <= MAX_KEYS, "len {} at {i}", limiter.len());
            clock.advance(Duration::from_millis(100));
        }
    }
    assert!(limiter.len() <= MAX_KEYS);
    assert!(admitted + rejected == FLOOD && rejected > FLOOD - MAX_KEYS as u64);
    // The legitimate keys are still limited exactly: each had 2 left plus
    // what one second (10 × 100 ms) earned, capped at the burst of 5.
    clock.advance(Duration::ZERO);
    for key in 0..1_000u64 {
        assert_eq!(limiter.available(&key), 3, "key {key}");
        assert!(limiter.check_n(&key, 3).unwrap().is_allowed());
        assert!(!limiter.check(&key).unwrap().is_allowed());
    }
    let flooded = rss();
    if let (Some(a), Some(b)) = (before, flooded) {
        let grown = b.saturating_sub(a);
        assert!(
            grown < RSS_BOUND,
            "RSS grew by {grown} bytes under the flood"
        );
        println!(
            "flood: RSS grew by {} KiB for {} keys",
            grown / 1024,
            limiter.len()
        );
    }

    // Later, every bucket is full again: cleanup drops them all and gives the
    // tables' memory back.
    clock.advance(Duration::from_secs(10));
    let dropped = limiter.cleanup();
    assert_eq!(limiter.len(), 0, "dropped {dropped}");
    if let (Some(a), Some(b)) = (flooded, rss()) {
        println!("cleanup: RSS {} KiB -> {} KiB", a / 1024, b / 1024);
        assert!(b < a, "cleanup gave no memory back: {a} -> {b}");
    }
}
