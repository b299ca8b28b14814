//! `ratebound simulate --service-time …`: the traffic sent to a server
//! model — `workers` requests served at a time, each for the service time,
//! the others waiting in a FIFO queue — behind no cap, a fixed concurrency
//! cap, or the adaptive limit, side by side.
//!
//! It is a discrete-event simulation on a [`ManualClock`]: the clock is set
//! to each arrival and each completion in time order (completions first at
//! the same instant), and every admission and release goes through the
//! core's [`ConcurrencyCap`] — the code a front door runs in production. A
//! request holds its place from its admission (before it queues for a
//! worker) to its completion, as a middleware holds it around a handler
//! that waits for a pool; its latency is queueing plus service. With a
//! `--priorities` mix, each request asks for its place as critical, normal
//! or background: a critical one refused a place is served without one,
//! as the front doors do.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound::http::{AdaptiveConcurrency, ConcurrencyCap, Priority};

use crate::traffic::{SplitMix, Traffic};
use crate::{CliError, MAX_SPAN, SECOND};

mod parse;
mod report;
#[cfg(test)]
mod tests;

pub use parse::{
    DEFAULT_VARIANTS, parse_background_fraction, parse_jitter, parse_priorities, parse_slowdown,
    parse_variants,
};
pub use report::{json, table};

/// The server: how many requests it serves at once and for how long.
#[derive(Clone, Debug, PartialEq)]
pub struct Server {
    /// Requests served at a time; the others wait in a FIFO queue.
    pub workers: usize,
    /// The service time of one request (ns), before slowdowns and jitter.
    pub service: u64,
    /// `(from, factor)`, in time order: a service that begins at or after
    /// `from` takes `factor` times as long.
    pub slowdown: Vec<(u64, f64)>,
    /// Each service time is scaled by a factor drawn uniformly from
    /// `[1 - jitter, 1 + jitter]`, the same for a request in every variant.
    pub jitter: f64,
    pub seed: u64,
    /// Requests arriving before this (ns) are left out of the latencies,
    /// and completions before it out of the goodput.
    pub warmup: u64,
    /// The requests' priorities (`None`: all normal, and no breakdown).
    pub mix: Option<Mix>,
    /// The share of the limit background requests may fill (the core's
    /// default, ½, when `None`).
    pub background_fraction: Option<f64>,
}

/// Which share of the requests is critical and which background (the rest
/// is normal); each request draws its priority from the seed, the same in
/// every variant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mix {
    pub critical: f64,
    pub background: f64,
}

/// The priorities in the order they are reported.
pub const PRIORITIES: [Priority; 3] = [Priority::Critical, Priority::Normal, Priority::Background];

fn slot(p: Priority) -> usize {
    match p {
        Priority::Critical => 0,
        Priority::Normal => 1,
        Priority::Background => 2,
    }
}

impl Server {
    /// Requests per second the workers complete at the base service time.
    pub fn capacity(&self) -> f64 {
        self.workers as f64 * SECOND as f64 / self.service as f64
    }

    /// The service time (ns) of request `i` beginning at `t`.
    fn service_at(&self, i: usize, t: u64) -> u64 {
        let factor = self
            .slowdown
            .iter()
            .rev()
            .find(|&&(from, _)| from <= t)
            .map_or(1.0, |&(_, f)| f);
        let jitter = if self.jitter > 0.0 {
            // One draw per request, independent of the order of service.
            let mut rng = SplitMix::new(self.seed ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407));
            1.0 + self.jitter * (2.0 * rng.unit() - 1.0)
        } else {
            1.0
        };
        (self.service as f64 * factor * jitter).clamp(1.0, MAX_SPAN as f64) as u64
    }

    /// The priority of request `i`.
    pub fn priority(&self, i: usize) -> Priority {
        let Some(mix) = self.mix else {
            return Priority::Normal;
        };
        // A draw of its own, independent of the jitter's.
        let mut rng = SplitMix::new(
            (self.seed ^ 0x6A09_E667_F3BC_C908)
                .wrapping_add((i as u64).wrapping_mul(0x9FB2_1C65_1E98_DF25)),
        );
        let u = rng.unit();
        if u <= mix.critical {
            Priority::Critical
        } else if u <= mix.critical + mix.background {
            Priority::Background
        } else {
            Priority::Normal
        }
    }
}

/// What guards the server.
#[derive(Clone, Debug, PartialEq)]
pub enum Cap {
    /// Every request is admitted.
    None,
    /// At most this many in flight.
    Fixed(usize),
    /// The adaptive limit with this tuning.
    Auto(AdaptiveConcurrency),
}

/// One variant to compare: its name as the user wrote it, and its cap.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    pub name: String,
    pub cap: Cap,
}

/// Bins of the chart's time axis.
pub const BINS: usize = 50;

/// One bin of the chart: requests arriving in it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bin {
    /// Latency p99 of the admitted ones (ns).
    pub p99: Option<u64>,
    pub admitted: u64,
    pub shed: u64,
    /// Requests in flight (queued or served) at the bin's end.
    pub in_flight: u64,
    /// The limit at the bin's end (`None` without a cap).
    pub limit: Option<usize>,
}

/// What one variant did with the traffic.
#[derive(Debug)]
pub struct Run {
    pub name: String,
    pub admitted: u64,
    pub shed: u64,
    /// Requests completed from the end of the warm-up to the end of the
    /// traffic (the server's throughput then), and that period (ns).
    pub served: u64,
    pub measured: u64,
    /// Latency (queueing + service, ns) of the admitted requests that
    /// arrived after the warm-up: p50, p99, max (`None`: none).
    pub p50: Option<u64>,
    pub p99: Option<u64>,
    pub max: Option<u64>,
    /// The longest the queue for a worker grew.
    pub queue_max: u64,
    /// `(t, limit)`: the limit at the start and each time it moved.
    pub limits: Vec<(u64, usize)>,
    pub bins: Vec<Bin>,
    pub bin_width: u64,
    /// Per priority (critical, normal, background), with a `--priorities`
    /// mix.
    pub by_priority: Option<[Tally; 3]>,
}

/// The requests of one priority: how many came, were admitted (critical:
/// with a place or without) and shed, and the latency p50/p99 of those
/// admitted after the warm-up.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tally {
    pub requests: u64,
    pub admitted: u64,
    pub shed: u64,
    pub p50: Option<u64>,
    pub p99: Option<u64>,
}

impl Run {
    /// Requests per second served within the measured period.
    pub fn goodput(&self) -> f64 {
        self.served as f64 * SECOND as f64 / self.measured.max(1) as f64
    }

    /// The lowest and highest limit of the run.
    pub fn limit_range(&self) -> Option<(usize, usize)> {
        let min = self.limits.iter().map(|l| l.1).min()?;
        let max = self.limits.iter().map(|l| l.1).max()?;
        Some((min, max))
    }
}

/// The nearest-rank quantile `q` of sorted `xs`.
fn pick(xs: &[u64], q: f64) -> Option<u64> {
    if xs.is_empty() {
        return None;
    }
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    Some(xs[rank - 1])
}

/// A request in the queue or being served: its index, arrival, the cap's
/// start reading and how many were in flight before it — or no place (a
/// critical request the cap was full for, or no cap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Job {
    i: usize,
    arrival: u64,
    place: Option<(u64, usize)>,
}

/// Marks a shed request in the latencies.
const SHED: u64 = u64::MAX;

/// Sends `traffic` to `server` behind `variant`'s cap.
///
/// Besides the traffic it holds one latency per request (8 bytes), the
/// queue, one entry per worker, and one entry per move of the limit.
///
/// # Errors
/// The core's, for a cap it refuses (checked when the variants are parsed).
pub fn run(server: &Server, variant: &Variant, traffic: &Traffic) -> Result<Run, CliError> {
    let clock = ManualClock::new();
    let cap = match &variant.cap {
        Cap::None => None,
        Cap::Fixed(n) => Some(ConcurrencyCap::new(*n)?),
        Cap::Auto(config) => Some(ConcurrencyCap::adaptive(
            *config,
            AnyClock::Manual(clock.clone()),
        )?),
    };
    let cap = match (cap, server.background_fraction) {
        (Some(c), Some(f)) => Some(
            c.with_background_fraction(f)
                .map_err(|e| CliError::new(format!("--background-fraction: {e}")))?,
        ),
        (c, _) => c,
    };
    let mut tally = [Tally::default(); 3];
    let events = &traffic.events;
    let bin_width = traffic.duration.div_ceil(BINS as u64).max(1);
    let mut bins = vec![Bin::default(); BINS];
    let mut sampled = 0;
    let mut latency = vec![SHED; events.len()];
    let mut queue: VecDeque<Job> = VecDeque::new();
    let mut busy: BinaryHeap<Reverse<(u64, Job)>> = BinaryHeap::new();
    let mut idle = server.workers;
    let (mut admitted, mut shed, mut served, mut queue_max) = (0u64, 0u64, 0u64, 0u64);
    let mut in_flight = 0u64;
    let mut limits: Vec<(u64, usize)> = cap.iter().map(|c| (0, c.limit())).collect();
    let measure_end = traffic.duration;
    let mut next = 0;
    loop {
        let arrival = events.get(next).map(|e| e.t);
        let done = busy.peek().map(|Reverse((end, _))| *end);
        let now = match (arrival, done) {
            (None, None) => break,
            (Some(a), Some(d)) => a.min(d),
            (Some(a), None) => a,
            (None, Some(d)) => d,
        };
        // Bins that end by now: what was in flight and the limit then.
        while sampled < BINS && (sampled as u64 + 1).saturating_mul(bin_width) <= now {
            bins[sampled].in_flight = in_flight;
            bins[sampled].limit = cap.as_ref().map(ConcurrencyCap::limit);
            sampled += 1;
        }
        clock.set_nanos(now);
        if done == Some(now) {
            // A completion (before an arrival at the same instant: it
            // frees a place and a worker).
            let Some(Reverse((end, job))) = busy.pop() else {
                break;
            };
            if let (Some(c), Some((start, before))) = (&cap, job.place) {
                c.leave_after(start, before);
                let limit = c.limit();
                if limits.last().is_some_and(|&(_, l)| l != limit) {
                    limits.push((end, limit));
                }
            }
            in_flight -= 1;
            latency[job.i] = end - job.arrival;
            if (server.warmup..measure_end).contains(&end) {
                served += 1;
            }
            idle += 1;
            if let Some(waiting) = queue.pop_front() {
                idle -= 1;
                busy.push(Reverse((
                    end.saturating_add(server.service_at(waiting.i, end)),
                    waiting,
                )));
            }
            continue;
        }
        let i = next;
        next += 1;
        let bin = &mut bins[((now / bin_width) as usize).min(BINS - 1)];
        let priority = server.priority(i);
        let counts = &mut tally[slot(priority)];
        counts.requests += 1;
        let place = match &cap {
            None => None,
            Some(c) => match c.try_enter_as(|| priority) {
                Ok(before) => Some((c.start(), before)),
                // Critical: served without a place.
                Err(Priority::Critical) => None,
                Err(_) => {
                    shed += 1;
                    bin.shed += 1;
                    counts.shed += 1;
                    continue;
                }
            },
        };
        admitted += 1;
        bin.admitted += 1;
        counts.admitted += 1;
        in_flight += 1;
        let job = Job {
            i,
            arrival: now,
            place,
        };
        if idle > 0 {
            idle -= 1;
            busy.push(Reverse((
                now.saturating_add(server.service_at(i, now)),
                job,
            )));
        } else {
            queue.push_back(job);
            queue_max = queue_max.max(queue.len() as u64);
        }
    }
    while sampled < BINS {
        bins[sampled].in_flight = in_flight;
        bins[sampled].limit = cap.as_ref().map(ConcurrencyCap::limit);
        sampled += 1;
    }
    // Latencies per bin (requests are in time order: a bin is a run of
    // them), then of every request after the warm-up.
    let mut from = 0;
    for (k, bin) in bins.iter_mut().enumerate() {
        let end = (k as u64 + 1).saturating_mul(bin_width);
        let to = if k + 1 == BINS {
            events.len()
        } else {
            from + events[from..].partition_point(|e| e.t < end)
        };
        let mut xs: Vec<u64> = latency[from..to]
            .iter()
            .copied()
            .filter(|&l| l != SHED)
            .collect();
        xs.sort_unstable();
        bin.p99 = pick(&xs, 0.99);
        from = to;
    }
    let first = events.partition_point(|e| e.t < server.warmup);
    if server.mix.is_some() {
        for (k, t) in tally.iter_mut().enumerate() {
            let mut xs: Vec<u64> = (first..events.len())
                .filter(|&i| latency[i] != SHED && slot(server.priority(i)) == k)
                .map(|i| latency[i])
                .collect();
            xs.sort_unstable();
            t.p50 = pick(&xs, 0.50);
            t.p99 = pick(&xs, 0.99);
        }
    }
    let mut measured: Vec<u64> = latency[first..]
        .iter()
        .copied()
        .filter(|&l| l != SHED)
        .collect();
    drop(latency);
    measured.sort_unstable();
    Ok(Run {
        name: variant.name.clone(),
        admitted,
        shed,
        served,
        measured: measure_end.saturating_sub(server.warmup),
        p50: pick(&measured, 0.50),
        p99: pick(&measured, 0.99),
        max: measured.last().copied(),
        queue_max,
        limits,
        bins,
        bin_width,
        by_priority: server.mix.map(|_| tally),
    })
}
