//! `ratebound simulate`: replays traffic against the algorithms on a manual
//! clock — the same core that enforces the limit — and sums up each.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::Duration;

use ratebound::{
    FixedWindow, LeakyBucket, Limiter, ManualClock, Quota, SlidingLog, SlidingWindow, TokenBucket,
};

use crate::traffic::Traffic;
use crate::{CliError, Shown, show_duration};

/// The algorithms, in the order they are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    TokenBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    LeakyBucket,
}

impl Algo {
    pub const ALL: [Algo; 5] = [
        Algo::TokenBucket,
        Algo::FixedWindow,
        Algo::SlidingWindow,
        Algo::SlidingLog,
        Algo::LeakyBucket,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algo::TokenBucket => "token-bucket",
            Algo::FixedWindow => "fixed-window",
            Algo::SlidingWindow => "sliding-window",
            Algo::SlidingLog => "sliding-log",
            Algo::LeakyBucket => "leaky-bucket",
        }
    }

    /// `--algorithm`: one name or `all`.
    pub fn parse(spec: &str) -> Result<Vec<Algo>, CliError> {
        if spec == "all" {
            return Ok(Algo::ALL.to_vec());
        }
        Algo::ALL
            .into_iter()
            .find(|a| a.name() == spec || a.name().replace('-', "_") == spec)
            .map(|a| vec![a])
            .ok_or_else(|| {
                CliError::new(format!(
                    "unknown algorithm {}: use token-bucket, fixed-window, sliding-window, \
                     sliding-log, leaky-bucket or all",
                    Shown(spec)
                ))
            })
    }
}

/// The limit every algorithm is given, in its own terms.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Token and leaky bucket: one token every `T`, `burst` at once.
    pub quota: Quota,
    /// The windows: `limit` per `window`.
    pub limit: u64,
    pub window: Duration,
    /// The leaky bucket's longest queueing delay.
    pub max_delay: Duration,
}

/// One limiter of any algorithm on a manual clock.
enum One {
    Plain(Box<dyn Limiter>),
    Leaky(Box<LeakyBucket<ManualClock>>),
}

impl One {
    fn new(algo: Algo, l: &Limits) -> Result<One, CliError> {
        let c = ManualClock::new();
        Ok(match algo {
            Algo::TokenBucket => One::Plain(Box::new(TokenBucket::with_clock(l.quota, c))),
            Algo::FixedWindow => {
                One::Plain(Box::new(FixedWindow::with_clock(l.limit, l.window, c)?))
            }
            Algo::SlidingWindow => {
                One::Plain(Box::new(SlidingWindow::with_clock(l.limit, l.window, c)?))
            }
            Algo::SlidingLog => One::Plain(Box::new(SlidingLog::with_clock(l.limit, l.window, c)?)),
            Algo::LeakyBucket => {
                One::Leaky(Box::new(LeakyBucket::with_clock(l.quota, l.max_delay, c)?))
            }
        })
    }

    /// Admitted or not, and the queueing delay (leaky bucket).
    fn take(&self, n: u64, t: u64, max_delay: Duration) -> (bool, u64) {
        match self {
            One::Plain(l) => (l.check_n_at(n, t).is_ok_and(|d| d.is_allowed()), 0),
            One::Leaky(l) => match l.reserve_n_at(n, max_delay, t) {
                Ok(r) => {
                    let delay = u64::try_from(r.delay().as_nanos()).unwrap_or(u64::MAX);
                    // Dropping a reservation keeps it (only `cancel` gives
                    // back): the request is queued.
                    drop(r);
                    (true, delay)
                }
                Err(_) => (false, 0),
            },
        }
    }

    /// Tokens (or places) left at `t`.
    fn level(&self, t: u64) -> u64 {
        match self {
            One::Plain(l) => l.available_at(t),
            One::Leaky(l) => l.available_at(t),
        }
    }
}

/// Per time bin: requests admitted and refused, and the level at its end
/// (of the first key's limiter, or the global one).
#[derive(Clone, Copy, Debug, Default)]
pub struct Bin {
    pub admitted: u64,
    pub refused: u64,
    pub level: u64,
}

/// What one algorithm did with the traffic.
#[derive(Debug)]
pub struct Outcome {
    pub algo: Algo,
    /// One limiter for all keys (a global limit) rather than one per key.
    pub global: bool,
    pub admitted: u64,
    pub refused: u64,
    /// The most requests admitted in any window of `window`.
    pub max_in_window: u64,
    pub window: Duration,
    /// Leaky bucket: added delay of admitted requests, p50 and p99 (ns).
    pub delay_p50: Option<u64>,
    pub delay_p99: Option<u64>,
    pub keys: usize,
    pub bins: Vec<Bin>,
    pub bin_width: u64,
}

/// Bins in the plot's time axis.
pub const BINS: usize = 240;

/// Replays `traffic` against `algo`: one limiter per key, or one for all
/// (`global`).
///
/// Besides the traffic, it holds one limiter per key, the admitted requests
/// of the last `window` (for the most admitted in any window) and, for the
/// leaky bucket, one delay per admitted request (for exact percentiles).
pub fn run(
    algo: Algo,
    limits: &Limits,
    traffic: &Traffic,
    global: bool,
) -> Result<Outcome, CliError> {
    let slots = if global { 1 } else { traffic.keys.len().max(1) };
    let mut limiters: Vec<Option<One>> = (0..slots).map(|_| None).collect();
    let bin_width = traffic.duration.div_ceil(BINS as u64).max(1);
    let mut bins = vec![Bin::default(); BINS];
    let (mut admitted, mut refused) = (0u64, 0u64);
    let span = u64::try_from(limits.window.as_nanos()).unwrap_or(u64::MAX);
    let mut in_window = MostInWindow::new(span);
    let mut delays = Vec::new();
    let mut sampled = 0;
    let first_key = traffic.events.first().map_or(0, |e| e.key as usize);
    let watched = if global { 0 } else { first_key };
    let sample_until = |limiters: &[Option<One>], bins: &mut [Bin], sampled: &mut usize, t: u64| {
        // The level at the end of every bin that ends before `t`.
        while *sampled < BINS && (*sampled as u64 + 1) * bin_width <= t {
            let end = (*sampled as u64 + 1) * bin_width;
            bins[*sampled].level = limiters[watched].as_ref().map_or(0, |l| l.level(end));
            *sampled += 1;
        }
    };
    for e in &traffic.events {
        sample_until(&limiters, &mut bins, &mut sampled, e.t);
        let slot = if global { 0 } else { e.key as usize };
        let limiter = match &mut limiters[slot] {
            Some(l) => l,
            empty => empty.insert(One::new(algo, limits)?),
        };
        let (ok, delay) = limiter.take(e.n, e.t, limits.max_delay);
        let bin = &mut bins[((e.t / bin_width) as usize).min(BINS - 1)];
        if ok {
            admitted += 1;
            bin.admitted += 1;
            in_window.admit(e.t);
            if algo == Algo::LeakyBucket {
                delays.push(delay);
            }
        } else {
            refused += 1;
            bin.refused += 1;
        }
    }
    sample_until(&limiters, &mut bins, &mut sampled, u64::MAX);
    delays.sort_unstable();
    let pick = |q: f64| -> Option<u64> {
        if delays.is_empty() {
            return None;
        }
        let rank = ((q * delays.len() as f64).ceil() as usize).clamp(1, delays.len());
        Some(delays[rank - 1])
    };
    Ok(Outcome {
        algo,
        global,
        admitted,
        refused,
        max_in_window: in_window.most,
        window: limits.window,
        delay_p50: pick(0.50),
        delay_p99: pick(0.99),
        keys: limiters.iter().filter(|l| l.is_some()).count(),
        bins,
        bin_width,
    })
}

/// The most requests admitted within any `span` ns, counted as they are
/// admitted in time order: it keeps only the times of the last `span`.
struct MostInWindow {
    span: u64,
    times: VecDeque<u64>,
    most: u64,
}

impl MostInWindow {
    fn new(span: u64) -> MostInWindow {
        MostInWindow {
            span,
            times: VecDeque::new(),
            most: 0,
        }
    }

    /// One more admitted at `t` (no earlier than the one before).
    fn admit(&mut self, t: u64) {
        while self
            .times
            .front()
            .is_some_and(|&first| t - first >= self.span)
        {
            self.times.pop_front();
        }
        self.times.push_back(t);
        self.most = self.most.max(self.times.len() as u64);
    }
}

/// The summary table.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>6} {:>10} {:>10} {:>14} {:>10} {:>10} {:>6}",
        "algorithm",
        "scope",
        "admitted",
        "refused",
        "most in window",
        "p50 delay",
        "p99 delay",
        "keys"
    );
    for o in outcomes {
        let delay = |d: Option<u64>| d.map_or("-".to_string(), show_duration);
        let _ = writeln!(
            out,
            "{:<16} {:>6} {:>10} {:>10} {:>14} {:>10} {:>10} {:>6}",
            o.algo.name(),
            if o.global { "global" } else { "key" },
            o.admitted,
            o.refused,
            format!("{} / {}", o.max_in_window, show_duration(nanos(o.window))),
            delay(o.delay_p50),
            delay(o.delay_p99),
            o.keys,
        );
    }
    out
}

pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The outcomes as JSON.
pub fn json(traffic: &Traffic, limits: &Limits, outcomes: &[Outcome]) -> serde_json::Value {
    serde_json::json!({
        "traffic": traffic.name,
        "requests": traffic.events.len(),
        "duration_s": traffic.duration as f64 / 1e9,
        "limits": {
            "quota": limits.quota.to_string(),
            "limit": limits.limit,
            "window_s": limits.window.as_secs_f64(),
            "max_delay_s": limits.max_delay.as_secs_f64(),
        },
        "algorithms": outcomes.iter().map(|o| serde_json::json!({
            "algorithm": o.algo.name(),
            "scope": if o.global { "global" } else { "key" },
            "admitted": o.admitted,
            "refused": o.refused,
            "most_in_window": o.max_in_window,
            "window_s": o.window.as_secs_f64(),
            "delay_p50_s": o.delay_p50.map(|d| d as f64 / 1e9),
            "delay_p99_s": o.delay_p99.map(|d| d as f64 / 1e9),
            "keys": o.keys,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::MostInWindow;

    fn most(span: u64, times: &[u64]) -> (u64, usize) {
        let mut w = MostInWindow::new(span);
        let mut held = 0;
        for &t in times {
            w.admit(t);
            held = held.max(w.times.len());
        }
        (w.most, held)
    }

    #[test]
    fn the_most_in_any_window_keeps_only_that_window() {
        // [t - span + 1, t]: 0, 1 and 2 within 3 ns; 10..=13 within 5.
        assert_eq!(most(3, &[0, 1, 2, 3, 10]), (3, 3));
        assert_eq!(most(5, &[0, 1, 2, 10, 11, 12, 13]), (4, 4));
        assert_eq!(most(1, &[5, 5, 5, 6]), (3, 3));
        assert_eq!(most(u64::MAX, &[0, 1, u64::MAX - 1]), (3, 3));
        assert_eq!(most(10, &[]), (0, 0));
    }
}
