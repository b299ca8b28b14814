//! Bytes per key of ratebound's `KeyedLimiter` and governor's keyed
//! `RateLimiter` (`RateLimiter::keyed`, a `DashMap` store), and whether
//! dropping fresh keys gives the memory back.
//!
//! `cargo run --release -p ratebound-benches --bin keyed_memory` runs every
//! measurement ({ratebound, governor} × {10^6 `u64` keys, 10^6 strings
//! `user:{i}`}) 3 times, each in a fresh child process (this binary again,
//! with `--child IMPL KEYS`), so one measurement's heap does not pollute the
//! next, and prints a markdown table of the medians.
//!
//! A child reads its resident set size from `/proc/self/statm` after building
//! an empty limiter (the baseline) and after checking each key once (every
//! check admitted; a string key is formatted just before its check and
//! dropped after it, so only the limiter's own copy stays). Bytes per key =
//! (RSS after − baseline) / keys. Both limiters run on their default clocks
//! with 1 token per ms (burst 1), so 20 ms after the last check every key is
//! fresh again (a full bucket). Then ratebound calls `cleanup()` (which drops
//! fresh keys and shrinks a mostly empty table); governor calls
//! `retain_recent()` and then `shrink_to_fit()`, and the RSS is read after
//! each. RSS counts pages; memory freed to the allocator but kept by it (the
//! glibc heap keeps small freed chunks, such as the strings' buffers) still
//! counts.

use std::process::Command;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota as GQuota, RateLimiter};
use ratebound::{KeyedAlgorithm, KeyedLimiter, Quota};

const KEYS: u64 = 1_000_000;
const RUNS: usize = 3;
/// The quota's period: every key is fresh again this long after its check.
const PERIOD: Duration = Duration::from_millis(1);
/// How long to wait after the last check before dropping fresh keys: well
/// past the period (governor keeps a key until one period after it refills).
const SETTLE: Duration = Duration::from_millis(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Impl {
    Ratebound,
    Governor,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Ratebound => "ratebound",
            Impl::Governor => "governor",
        }
    }

    fn parse(s: &str) -> Option<Impl> {
        [Impl::Ratebound, Impl::Governor]
            .into_iter()
            .find(|i| i.name() == s)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keys {
    U64,
    Strings,
}

impl Keys {
    fn name(self) -> &'static str {
        match self {
            Keys::U64 => "u64",
            Keys::Strings => "string",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Keys::U64 => "10^6 u64",
            Keys::Strings => "10^6 strings \"user:{i}\"",
        }
    }

    fn parse(s: &str) -> Option<Keys> {
        [Keys::U64, Keys::Strings]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// Resident set size in bytes, from `/proc/self/statm` (its second field, in
/// pages).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("resident pages in /proc/self/statm: {statm:?}"));
    pages * page_size()
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// What one child measured; RSS in bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    baseline: u64,
    filled: u64,
    /// After ratebound's `cleanup()` or governor's `retain_recent()`.
    dropped: u64,
    /// After governor's `shrink_to_fit()` (ratebound: the same as `dropped`).
    shrunk: u64,
    /// Keys left after the drop.
    left: u64,
}

impl Sample {
    fn to_line(self) -> String {
        format!(
            "sample {} {} {} {} {}",
            self.baseline, self.filled, self.dropped, self.shrunk, self.left
        )
    }

    fn from_line(line: &str) -> Option<Sample> {
        let mut f = line.strip_prefix("sample ")?.split(' ');
        let mut next = || f.next()?.parse::<u64>().ok();
        Some(Sample {
            baseline: next()?,
            filled: next()?,
            dropped: next()?,
            shrunk: next()?,
            left: next()?,
        })
    }
}

/// The limiter operations a child needs, for any key type.
trait Memory<K> {
    fn check_once(&self, key: &K) -> bool;
    fn tracked(&self) -> usize;
}

impl<K: std::hash::Hash + Eq + Clone> Memory<K> for KeyedLimiter<K> {
    fn check_once(&self, key: &K) -> bool {
        self.check(key).is_ok_and(|d| d.is_allowed())
    }

    fn tracked(&self) -> usize {
        self.len()
    }
}

impl<K: std::hash::Hash + Eq + Clone> Memory<K> for DefaultKeyedRateLimiter<K> {
    fn check_once(&self, key: &K) -> bool {
        self.check_key(key).is_ok()
    }

    fn tracked(&self) -> usize {
        self.len()
    }
}

/// Checks `KEYS` keys made by `key(i)` once each, all admitted; returns the
/// RSS before and after.
fn fill<K, L: Memory<K>>(limiter: &L, key: impl Fn(u64) -> K) -> (u64, u64) {
    let baseline = rss_bytes();
    for i in 0..KEYS {
        assert!(limiter.check_once(&key(i)), "first check of key {i}");
    }
    let filled = rss_bytes();
    assert_eq!(limiter.tracked(), KEYS as usize, "keys tracked");
    (baseline, filled)
}

fn ratebound_sample<K: std::hash::Hash + Eq + Clone>(key: impl Fn(u64) -> K) -> Sample {
    let quota = Quota::with_period(PERIOD).expect("valid quota");
    let limiter =
        KeyedLimiter::<K>::new(KeyedAlgorithm::TokenBucket(quota)).expect("valid keyed limiter");
    let (baseline, filled) = fill(&limiter, key);
    std::thread::sleep(SETTLE);
    let removed = limiter.cleanup();
    let dropped = rss_bytes();
    let left = limiter.len() as u64;
    assert_eq!(removed as u64 + left, KEYS, "cleanup's count");
    Sample {
        baseline,
        filled,
        dropped,
        shrunk: dropped,
        left,
    }
}

fn governor_sample<K: std::hash::Hash + Eq + Clone>(key: impl Fn(u64) -> K) -> Sample {
    let limiter: DefaultKeyedRateLimiter<K> =
        RateLimiter::keyed(GQuota::with_period(PERIOD).expect("nonzero period"));
    let (baseline, filled) = fill(&limiter, key);
    std::thread::sleep(SETTLE);
    limiter.retain_recent();
    let dropped = rss_bytes();
    let left = limiter.len() as u64;
    limiter.shrink_to_fit();
    let shrunk = rss_bytes();
    Sample {
        baseline,
        filled,
        dropped,
        shrunk,
        left,
    }
}

fn child(which: Impl, keys: Keys) -> Sample {
    match (which, keys) {
        (Impl::Ratebound, Keys::U64) => ratebound_sample(|i| i),
        (Impl::Ratebound, Keys::Strings) => ratebound_sample(|i| format!("user:{i}")),
        (Impl::Governor, Keys::U64) => governor_sample(|i| i),
        (Impl::Governor, Keys::Strings) => governor_sample(|i| format!("user:{i}")),
    }
}

/// Runs one measurement in a fresh process.
fn spawn(which: Impl, keys: Keys) -> Sample {
    let exe = std::env::current_exe().expect("path of this binary");
    let out = Command::new(exe)
        .args(["--child", which.name(), keys.name()])
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {} {} failed ({}): {stdout}{}",
        which.name(),
        keys.name(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(Sample::from_line)
        .unwrap_or_else(|| panic!("no sample line from the child: {stdout:?}"))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn mib(bytes: f64) -> String {
    format!("{:.1}", bytes / (1024.0 * 1024.0))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, which, keys] = args.as_slice()
        && flag == "--child"
    {
        let which = Impl::parse(which).unwrap_or_else(|| panic!("no implementation {which}"));
        let keys = Keys::parse(keys).unwrap_or_else(|| panic!("no key type {keys}"));
        println!("{}", child(which, keys).to_line());
        return;
    }
    if !args.is_empty() {
        eprintln!("usage: keyed_memory (no arguments)");
        std::process::exit(2);
    }

    let configs = [
        (Impl::Ratebound, Keys::U64),
        (Impl::Governor, Keys::U64),
        (Impl::Ratebound, Keys::Strings),
        (Impl::Governor, Keys::Strings),
    ];
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); configs.len()];
    // Round-robin, so that a slow or odd moment is spread over all of them.
    for run in 0..RUNS {
        for (i, &(which, keys)) in configs.iter().enumerate() {
            let s = spawn(which, keys);
            println!(
                "run {}/{RUNS} {} {}: {:.1} bytes/key (RSS {} → {} MiB; after drop {} MiB, {} keys left; after shrink {} MiB)",
                run + 1,
                which.name(),
                keys.name(),
                (s.filled - s.baseline) as f64 / KEYS as f64,
                mib(s.baseline as f64),
                mib(s.filled as f64),
                mib(s.dropped as f64),
                s.left,
                mib(s.shrunk as f64),
            );
            samples[i].push(s);
        }
    }

    println!();
    println!(
        "Median of {RUNS} fresh processes each; RSS from /proc/self/statm ({} B pages), \
         Δ = RSS − RSS of the process with the empty limiter.",
        page_size()
    );
    println!();
    println!(
        "| implementation | keys | bytes/key (RSS Δ / keys) | RSS Δ filled (MiB) \
         | RSS Δ after cleanup / retain_recent (MiB) | keys left | RSS Δ after shrink_to_fit (MiB) | given back |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut per_key = Vec::new();
    for (&(which, keys), runs) in configs.iter().zip(&samples) {
        let delta = |f: fn(&Sample) -> u64| {
            median(
                runs.iter()
                    .map(|s| f(s) as f64 - s.baseline as f64)
                    .collect(),
            )
        };
        let filled = delta(|s| s.filled);
        let dropped = delta(|s| s.dropped);
        let shrunk = delta(|s| s.shrunk);
        let left = median(runs.iter().map(|s| s.left as f64).collect());
        let bytes_per_key = filled / KEYS as f64;
        per_key.push((which, keys, bytes_per_key));
        let shrink_cell = match which {
            Impl::Ratebound => "— (cleanup shrinks)".to_string(),
            Impl::Governor => mib(shrunk),
        };
        let final_delta = if which == Impl::Governor {
            shrunk
        } else {
            dropped
        };
        println!(
            "| {} | {} | {bytes_per_key:.1} | {} | {} | {left:.0} | {shrink_cell} | {:.0}% |",
            which.name(),
            keys.describe(),
            mib(filled),
            mib(dropped),
            100.0 * (1.0 - final_delta / filled),
        );
    }
    println!();
    for keys in [Keys::U64, Keys::Strings] {
        let get = |w: Impl| {
            per_key
                .iter()
                .find(|&&(i, k, _)| i == w && k == keys)
                .map_or(f64::NAN, |&(_, _, b)| b)
        };
        let (rb, gov) = (get(Impl::Ratebound), get(Impl::Governor));
        let verdict = if rb <= gov { "≤" } else { ">" };
        println!(
            "{} keys: ratebound {rb:.2} bytes/key {verdict} governor {gov:.2} ({:.3}×).",
            keys.describe(),
            rb / gov
        );
    }
}
