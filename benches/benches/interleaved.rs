//! The single-thread rows of `check.rs` in interleaved rounds: each round
//! times 5·10^6 checks of ratebound's `TokenBucket` and of governor's direct
//! `RateLimiter` back to back (alternating which goes first), on a fresh
//! limiter each, for every {allowed, denied} × {default, manual clock} row,
//! and prints the medians over the rounds and the median of the per-round
//! ratios. On a shared, busy machine a load change between two criterion
//! rows (run seconds apart) moves their ratio; here both sides of a ratio
//! ran within a few tens of milliseconds of each other. Same setups as
//! `check.rs` (see README.md); every timed check is asserted admitted or
//! refused. A control times governor a second time in each round (after
//! both, or before both, alternating): the median of governor ÷ governor is
//! how far this harness moves a ratio of identical code — a ratio nearer
//! 1 than that is parity. Run: `cargo bench -p ratebound-benches --bench
//! interleaved --locked -- [rounds]` (default 21 rounds, ~15 s).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use governor::clock::{DefaultClock, FakeRelativeClock};
use governor::{Quota as GQuota, RateLimiter};
use ratebound::{ManualClock, Quota, TokenBucket};

/// Checks per timed run.
const N: u64 = 5_000_000;

const ROWS: [(&str, bool, bool); 4] = [
    ("allowed/default_clock", true, false),
    ("allowed/manual_clock", true, true),
    ("denied/default_clock", false, false),
    ("denied/manual_clock", false, true),
];

/// Allowed rows: 1 token/s, burst N + 1; denied rows: 1 token/hour, burst 1,
/// the token taken before timing.
fn setup(allowed: bool) -> (Duration, u64) {
    if allowed {
        (Duration::from_secs(1), N + 1)
    } else {
        (Duration::from_secs(3600), 1)
    }
}

/// One check, its result kept with `black_box`; true if admitted. Inlined
/// into [`time`]'s loop for every implementation alike.
trait Check {
    fn check_once(&self) -> bool;
}

impl<C: ratebound::Clock> Check for TokenBucket<C> {
    #[inline(always)]
    fn check_once(&self) -> bool {
        black_box(self.check()).is_allowed()
    }
}

impl<C> Check
    for RateLimiter<
        governor::state::NotKeyed,
        governor::state::InMemoryState,
        C,
        governor::middleware::NoOpMiddleware<C::Instant>,
    >
where
    C: governor::clock::Clock,
{
    #[inline(always)]
    fn check_once(&self) -> bool {
        black_box(self.check()).is_ok()
    }
}

/// ns per check over N checks, asserting every one was admitted or refused.
#[inline(never)]
fn time(name: &str, allowed: bool, limiter: &impl Check) -> f64 {
    if !allowed {
        assert!(
            limiter.check_once(),
            "{name}: the first check takes the only token"
        );
    }
    let start = Instant::now();
    let mut admitted = 0u64;
    for _ in 0..N {
        admitted += u64::from(black_box(limiter).check_once());
    }
    let elapsed = start.elapsed();
    let want = if allowed { N } else { 0 };
    assert_eq!(admitted, want, "{name}: {admitted} of {N} admitted");
    elapsed.as_nanos() as f64 / N as f64
}

fn ratebound_row(allowed: bool, manual: bool) -> f64 {
    let (period, burst) = setup(allowed);
    let quota = Quota::with_period(period)
        .and_then(|q| q.with_burst(burst))
        .expect("valid quota");
    if manual {
        time(
            "ratebound",
            allowed,
            &TokenBucket::with_clock(quota, ManualClock::new()),
        )
    } else {
        time("ratebound", allowed, &TokenBucket::new(quota))
    }
}

fn governor_row(allowed: bool, manual: bool) -> f64 {
    let (period, burst) = setup(allowed);
    let burst = NonZeroU32::new(u32::try_from(burst).expect("burst fits u32")).expect("burst ≥ 1");
    let quota = GQuota::with_period(period)
        .expect("nonzero period")
        .allow_burst(burst);
    if manual {
        let clock = FakeRelativeClock::default();
        time(
            "governor",
            allowed,
            &RateLimiter::direct_with_clock(quota, clock),
        )
    } else {
        let clock = DefaultClock::default();
        time(
            "governor",
            allowed,
            &RateLimiter::direct_with_clock(quota, clock),
        )
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; the first number is the round count.
    let rounds = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(21);
    let mut ours = vec![Vec::new(); ROWS.len()];
    let mut theirs = vec![Vec::new(); ROWS.len()];
    let mut control = vec![Vec::new(); ROWS.len()];
    for round in 0..rounds {
        for (i, &(_, allowed, manual)) in ROWS.iter().enumerate() {
            if round % 2 == 0 {
                ours[i].push(ratebound_row(allowed, manual));
                theirs[i].push(governor_row(allowed, manual));
                control[i].push(governor_row(allowed, manual));
            } else {
                control[i].push(governor_row(allowed, manual));
                theirs[i].push(governor_row(allowed, manual));
                ours[i].push(ratebound_row(allowed, manual));
            }
        }
    }
    println!("{rounds} rounds of {N} checks per row and implementation; medians over the rounds");
    println!(
        "| row | ratebound ns | governor ns | median of the rounds' ratios | control: governor ÷ governor |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (i, &(name, _, _)) in ROWS.iter().enumerate() {
        let ratio =
            |a: &[f64], b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(x, y)| x / y).collect() };
        let mut ratios = ratio(&ours[i], &theirs[i]);
        let mut same = ratio(&control[i], &theirs[i]);
        let (a, b, r, c) = (
            median(&mut ours[i]),
            median(&mut theirs[i]),
            median(&mut ratios),
            median(&mut same),
        );
        println!("| {name} | {a:.2} | {b:.2} | {r:.3}× | {c:.3}× |");
    }
}
