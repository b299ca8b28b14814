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
//! that waits for a pool; its latency is queueing plus service.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt::Write as _;

use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound::http::{AdaptiveConcurrency, ConcurrencyCap, Priority};

use crate::traffic::{SplitMix, Traffic};
use crate::{CliError, MAX_SPAN, SECOND, Shown, show_duration};

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

/// The `--concurrency` text that is the default: no cap against the
/// adaptive limit.
pub const DEFAULT_VARIANTS: &str = "none,auto";

const VARIANTS_HELP: &str = "none, fixed:N, auto, or auto:KEY=VALUE,… \
                             (initial, min, max, tolerance, smoothing)";

/// `--concurrency`: a comma-separated list of `none`, `fixed:N` and `auto`,
/// each `auto` optionally tuned, `auto:max=200,tolerance=2` (a `KEY=VALUE`
/// after an `auto` tunes it).
///
/// # Errors
/// An unknown variant, a fixed cap that is not a whole number ≥ 1, an
/// unknown tuning key or a bad tuning value, each named.
pub fn parse_variants(spec: &str) -> Result<Vec<Variant>, CliError> {
    let mut out: Vec<Variant> = Vec::new();
    for item in spec.split(',').map(str::trim) {
        let (head, tail) = item.split_once(':').unwrap_or((item, ""));
        match head {
            "none" | "off" if tail.is_empty() => out.push(Variant {
                name: "none".into(),
                cap: Cap::None,
            }),
            "fixed" => {
                let n = tail.parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                    CliError::new(format!(
                        "--concurrency: fixed cap {} must be fixed:N with N a whole number of at \
                         least 1",
                        Shown(item)
                    ))
                })?;
                out.push(Variant {
                    name: format!("fixed:{n}"),
                    cap: Cap::Fixed(n),
                });
            }
            "auto" => {
                let mut v = Variant {
                    name: "auto".into(),
                    cap: Cap::Auto(AdaptiveConcurrency::default()),
                };
                if !tail.is_empty() {
                    tune(&mut v, tail)?;
                }
                out.push(v);
            }
            _ if item.contains('=') && !item.contains(':') => match out.last_mut() {
                Some(v) if matches!(v.cap, Cap::Auto(_)) => tune(v, item)?,
                _ => {
                    return Err(CliError::new(format!(
                        "--concurrency: {} tunes no auto variant (write auto:{item})",
                        Shown(item)
                    )));
                }
            },
            _ => {
                return Err(CliError::new(format!(
                    "--concurrency: unknown variant {}: use {VARIANTS_HELP}",
                    Shown(item)
                )));
            }
        }
    }
    for v in &out {
        if let Cap::Auto(config) = &v.cap {
            config
                .check()
                .map_err(|e| CliError::new(format!("--concurrency {}: {e}", Shown(&v.name))))?;
        }
    }
    Ok(out)
}

/// `KEY=VALUE` into an auto variant's tuning (and its name).
fn tune(v: &mut Variant, pair: &str) -> Result<(), CliError> {
    let Cap::Auto(config) = &mut v.cap else {
        return Ok(());
    };
    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
    let (key, value) = (key.trim(), value.trim());
    let whole = || {
        value.parse::<usize>().map_err(|_| {
            CliError::new(format!(
                "--concurrency auto: {key}={} must be a whole number",
                Shown(value)
            ))
        })
    };
    let real = || {
        value
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| {
                CliError::new(format!(
                    "--concurrency auto: {key}={} must be a finite number",
                    Shown(value)
                ))
            })
    };
    match key {
        "initial" => config.initial_limit = whole()?,
        "min" => config.min_limit = whole()?,
        "max" => config.max_limit = whole()?,
        "tolerance" => config.tolerance = real()?,
        "smoothing" => config.smoothing = real()?,
        _ => {
            return Err(CliError::new(format!(
                "--concurrency auto: unknown setting {} (initial, min, max, tolerance, smoothing)",
                Shown(pair)
            )));
        }
    }
    v.name.push(if v.name == "auto" { ':' } else { ',' });
    v.name.push_str(&format!("{key}={value}"));
    Ok(())
}

/// `--slowdown 4s:2x[,8s:1x]`: from each time on, services take that many
/// times the service time (`1x` ends a slowdown).
///
/// # Errors
/// A step that is not `TIME:FACTOR`, a bad time, a factor that is not a
/// positive finite number up to 1000, or steps out of time order.
pub fn parse_slowdown(spec: &str) -> Result<Vec<(u64, f64)>, CliError> {
    let mut steps: Vec<(u64, f64)> = Vec::new();
    for step in spec.split(',').map(str::trim) {
        let (at, factor) = step.split_once(':').ok_or_else(|| {
            CliError::new(format!(
                "--slowdown: {} is not TIME:FACTOR, e.g. 4s:2x",
                Shown(step)
            ))
        })?;
        let at = crate::parse_duration(at, "--slowdown")?;
        let text = factor.trim();
        let f = text
            .strip_suffix(['x', 'X'])
            .unwrap_or(text)
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f > 0.0 && *f <= 1000.0)
            .ok_or_else(|| {
                CliError::new(format!(
                    "--slowdown: factor {} must be a number more than 0 and at most 1000, e.g. 2x",
                    Shown(factor)
                ))
            })?;
        if steps.last().is_some_and(|&(before, _)| before >= at) {
            return Err(CliError::new(format!(
                "--slowdown: {} must come after the step before it",
                Shown(step)
            )));
        }
        steps.push((at, f));
    }
    Ok(steps)
}

/// `--jitter F`: a fraction from 0 up to (not including) 1.
pub fn parse_jitter(text: &str) -> Result<f64, CliError> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|j| (0.0..1.0).contains(j))
        .ok_or_else(|| {
            CliError::new(format!(
                "--jitter: {} must be a number from 0 up to 1 (0.2: service times vary by ±20 %)",
                Shown(text)
            ))
        })
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
/// start reading and how many were in flight before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Job {
    i: usize,
    arrival: u64,
    start: u64,
    before: usize,
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
            if let Some(c) = &cap {
                c.leave_after(job.start, job.before);
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
        let entered = match &cap {
            None => Ok(0),
            Some(c) => c.try_enter_as(|| Priority::Normal),
        };
        let Ok(before) = entered else {
            shed += 1;
            bin.shed += 1;
            continue;
        };
        admitted += 1;
        bin.admitted += 1;
        in_flight += 1;
        let job = Job {
            i,
            arrival: now,
            start: cap.as_ref().map_or(0, ConcurrencyCap::start),
            before,
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
    })
}

/// Milliseconds with one decimal, or `-`.
fn ms(nanos: Option<u64>) -> String {
    nanos.map_or("-".to_string(), |n| format!("{:.1}", n as f64 / 1e6))
}

/// About `n` evenly spaced readings of a run's limit: `(t, limit)`.
pub fn limit_samples(run: &Run, span: u64, n: u64) -> Vec<(u64, usize)> {
    let step = span.div_ceil(n.max(1)).max(1);
    let mut out = Vec::new();
    let mut t = 0;
    let mut k = 0;
    while t <= span && !run.limits.is_empty() {
        while k + 1 < run.limits.len() && run.limits[k + 1].0 <= t {
            k += 1;
        }
        out.push((t, run.limits[k].1));
        t = t.saturating_add(step);
    }
    out
}

/// The header and the summary table.
pub fn table(traffic: &Traffic, server: &Server, runs: &[Run]) -> String {
    let mut out = String::new();
    let secs = traffic.duration as f64 / 1e9;
    let _ = writeln!(
        out,
        "traffic {}: {} requests over {} ({:.1}/s)",
        traffic.name,
        traffic.events.len(),
        show_duration(traffic.duration),
        traffic.events.len() as f64 / secs,
    );
    let mut model = format!(
        "server: {} workers, service time {} (capacity {:.1}/s)",
        server.workers,
        show_duration(server.service),
        server.capacity()
    );
    if server.jitter > 0.0 {
        let _ = write!(
            model,
            ", jitter ±{:.0} % (seed {})",
            server.jitter * 100.0,
            server.seed
        );
    }
    for &(at, f) in &server.slowdown {
        let _ = write!(model, ", x{f} from {}", show_duration(at));
    }
    let _ = writeln!(out, "{model}");
    let _ = writeln!(
        out,
        "measured: latency of requests arriving from {} on; served/s: completions from then to {}\n",
        show_duration(server.warmup),
        show_duration(traffic.duration)
    );
    let width = runs.iter().map(|r| r.name.len()).max().unwrap_or(0).max(11);
    let _ = writeln!(
        out,
        "{:<width$} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>7} {:>9}",
        "concurrency",
        "admitted",
        "shed",
        "served/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "queue max",
        "limit",
        "min..max",
    );
    for r in runs {
        let (last, range) = match (r.limits.last(), r.limit_range()) {
            (Some(&(_, l)), Some((lo, hi))) => (l.to_string(), format!("{lo}..{hi}")),
            _ => ("-".to_string(), "-".to_string()),
        };
        let _ = writeln!(
            out,
            "{:<width$} {:>9} {:>9} {:>9.1} {:>8} {:>8} {:>8} {:>9} {:>7} {:>9}",
            r.name,
            r.admitted,
            r.shed,
            r.goodput(),
            ms(r.p50),
            ms(r.p99),
            ms(r.max),
            r.queue_max,
            last,
            range,
        );
    }
    for r in runs.iter().filter(|r| r.limits.len() > 1) {
        let samples = limit_samples(r, traffic.duration, 10);
        let _ = writeln!(out, "\n{} limit over time:", r.name);
        let mut times = String::from("  t    ");
        let mut values = String::from("  limit");
        for (t, l) in samples {
            let t = show_duration(t);
            let w = t.len().max(l.to_string().len()) + 1;
            let _ = write!(times, "{t:>w$}");
            let _ = write!(values, "{l:>w$}");
        }
        let _ = writeln!(out, "{times}\n{values}");
    }
    out
}

fn secs(nanos: Option<u64>) -> Option<f64> {
    nanos.map(|n| n as f64 / 1e9)
}

/// The runs as JSON.
pub fn json(traffic: &Traffic, server: &Server, runs: &[Run]) -> serde_json::Value {
    serde_json::json!({
        "traffic": traffic.name,
        "requests": traffic.events.len(),
        "duration_s": traffic.duration as f64 / 1e9,
        "server": {
            "workers": server.workers,
            "service_time_s": server.service as f64 / 1e9,
            "capacity_per_s": server.capacity(),
            "slowdown": server.slowdown.iter().map(|&(at, f)| serde_json::json!({
                "from_s": at as f64 / 1e9,
                "factor": f,
            })).collect::<Vec<_>>(),
            "jitter": server.jitter,
            "seed": server.seed,
            "warmup_s": server.warmup as f64 / 1e9,
        },
        "variants": runs.iter().map(|r| serde_json::json!({
            "concurrency": r.name,
            "admitted": r.admitted,
            "shed": r.shed,
            "served": r.served,
            "goodput_per_s": r.goodput(),
            "latency_p50_s": secs(r.p50),
            "latency_p99_s": secs(r.p99),
            "latency_max_s": secs(r.max),
            "queue_max": r.queue_max,
            "limit": r.limits.last().map(|l| l.1),
            "limit_min": r.limit_range().map(|l| l.0),
            "limit_max": r.limit_range().map(|l| l.1),
            "limit_over_time": r.limits.iter()
                .map(|&(t, l)| serde_json::json!([t as f64 / 1e9, l]))
                .collect::<Vec<_>>(),
            "bins": r.bins.iter().enumerate().map(|(k, b)| serde_json::json!({
                "from_s": (k as u64 * r.bin_width) as f64 / 1e9,
                "admitted": b.admitted,
                "shed": b.shed,
                "latency_p99_s": secs(b.p99),
                "in_flight": b.in_flight,
                "limit": b.limit,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::Event;

    fn steady(rate: u64, secs: u64) -> Traffic {
        let gap = SECOND / rate;
        Traffic {
            events: (0..rate * secs)
                .map(|i| Event {
                    t: i * gap,
                    key: 0,
                    n: 1,
                })
                .collect(),
            keys: vec!["-".into()],
            duration: secs * SECOND,
            name: format!("steady:{rate}/s"),
        }
    }

    fn server(workers: usize, service_ms: u64) -> Server {
        Server {
            workers,
            service: service_ms * 1_000_000,
            slowdown: vec![],
            jitter: 0.0,
            seed: 1,
            warmup: 0,
        }
    }

    fn variant(spec: &str) -> Variant {
        parse_variants(spec).unwrap().remove(0)
    }

    #[test]
    fn an_idle_server_answers_in_the_service_time() {
        let t = steady(10, 2);
        for v in ["none", "fixed:1", "auto"] {
            let r = run(&server(1, 20), &variant(v), &t).unwrap();
            assert_eq!((r.admitted, r.shed, r.queue_max), (20, 0, 0), "{v}");
            assert_eq!((r.p50, r.max), (Some(20_000_000), Some(20_000_000)), "{v}");
            assert_eq!(r.served, 20, "{v}");
        }
    }

    #[test]
    fn requests_queue_for_a_worker_in_fifo_order() {
        // Three at once on one worker of 10 ms: 10, 20, 30 ms.
        let t = Traffic {
            events: vec![Event { t: 0, key: 0, n: 1 }; 3],
            keys: vec!["-".into()],
            duration: SECOND,
            name: "burst".into(),
        };
        let r = run(&server(1, 10), &variant("none"), &t).unwrap();
        assert_eq!(r.queue_max, 2);
        assert_eq!((r.p50, r.max), (Some(20_000_000), Some(30_000_000)));
        // A cap of 2 sheds the third.
        let r = run(&server(1, 10), &variant("fixed:2"), &t).unwrap();
        assert_eq!((r.admitted, r.shed, r.max), (2, 1, Some(20_000_000)));
    }

    #[test]
    fn a_slowdown_scales_services_that_begin_after_it() {
        let mut s = server(1, 10);
        s.slowdown = parse_slowdown("1s:3x").unwrap();
        assert_eq!(s.service_at(0, SECOND - 1), 10_000_000);
        assert_eq!(s.service_at(0, SECOND), 30_000_000);
        s.jitter = 0.5;
        let a: Vec<u64> = (0..50).map(|i| s.service_at(i, 0)).collect();
        assert!(a.iter().all(|&x| (5_000_000..=15_000_000).contains(&x)));
        assert!(a.iter().any(|&x| x != a[0]), "{a:?}");
        assert_eq!(a, (0..50).map(|i| s.service_at(i, 0)).collect::<Vec<_>>());
    }

    #[test]
    fn variants_parse_with_their_tuning() {
        let v = parse_variants("none, fixed:4,auto:max=50,tolerance=2,auto").unwrap();
        let names: Vec<&str> = v.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            ["none", "fixed:4", "auto:max=50,tolerance=2", "auto"]
        );
        let Cap::Auto(c) = v[2].cap else {
            panic!("{v:?}")
        };
        assert_eq!((c.max_limit, c.tolerance), (50, 2.0));
        for (bad, needle) in [
            ("fixed:0", "fixed cap \"fixed:0\""),
            ("fixed", "fixed cap \"fixed\""),
            ("adaptive", "unknown variant \"adaptive\""),
            ("none,max=5", "\"max=5\" tunes no auto"),
            ("auto:speed=2", "unknown setting \"speed=2\""),
            ("auto:tolerance=NaN", "tolerance=\"NaN\""),
            ("auto:tolerance=0.5", "tolerance 0.5"),
            ("auto:min=0", "min_limit"),
            ("", "unknown variant \"\""),
        ] {
            let e = parse_variants(bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn slowdown_and_jitter_refuse_bad_values() {
        assert_eq!(
            parse_slowdown("4s:2x, 8s:1").unwrap(),
            vec![(4 * SECOND, 2.0), (8 * SECOND, 1.0)]
        );
        for (bad, needle) in [
            ("4s", "\"4s\" is not TIME:FACTOR"),
            ("4s:-2x", "factor \"-2x\""),
            ("4s:NaNx", "factor \"NaNx\""),
            ("4s:0", "factor \"0\""),
            ("soon:2x", "\"soon\" is not a duration"),
            ("4s:2x,2s:1x", "\"2s:1x\" must come after"),
        ] {
            let e = parse_slowdown(bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
        assert_eq!(parse_jitter("0.25").unwrap(), 0.25);
        for bad in ["1", "-0.1", "NaN", "lots"] {
            let e = parse_jitter(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }
}
