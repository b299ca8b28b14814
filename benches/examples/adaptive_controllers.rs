//! Why ratebound's adaptive concurrency limit is the controller it is: the
//! core's `ConcurrencyCap::adaptive` beside two textbook controllers written
//! here from their published descriptions (Gradient2: a long-term average
//! latency as the baseline; Vegas: the minimum latency seen), each in front
//! of the same modelled server on a manual clock.
//!
//! ```text
//! cargo run --release -p ratebound-benches --example adaptive_controllers
//! ```
//!
//! The model: arrivals on a seeded jittered schedule, a FIFO queue in front
//! of `workers`, each request holding a worker for its service time. All
//! three controllers see the same latencies and update once per window of
//! `clamp(limit, 16, 256)` samples, as the core does.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound::http::{AdaptiveConcurrency, ConcurrencyCap, Priority};

const MS: u64 = 1_000_000;

/// What the model asks of a controller.
trait Controller {
    fn name(&self) -> &'static str;
    /// A place, or `None` (shed); the token is handed back at completion.
    fn enter(&mut self) -> Option<(u64, usize)>;
    fn done(&mut self, token: (u64, usize), latency: u64);
    fn limit(&self) -> usize;
}

/// The core's controller, run through its public API on the model's clock.
struct Core {
    cap: ConcurrencyCap,
}

impl Controller for Core {
    fn name(&self) -> &'static str {
        "ratebound"
    }
    fn enter(&mut self) -> Option<(u64, usize)> {
        let before = self.cap.try_enter_as(|| Priority::Normal).ok()?;
        Some((self.cap.start(), before))
    }
    fn done(&mut self, (start, before): (u64, usize), _: u64) {
        self.cap.leave_after(start, before);
    }
    fn limit(&self) -> usize {
        self.cap.limit()
    }
}

/// Samples in windows, as the core takes them.
#[derive(Default)]
struct Window {
    count: u64,
    sum: u64,
    min: u64,
}

impl Window {
    /// Adds a sample; the window's (mean, min) once it holds `size`.
    fn add(&mut self, latency: u64, size: u64) -> Option<(f64, u64)> {
        self.min = if self.count == 0 {
            latency
        } else {
            self.min.min(latency)
        };
        self.count += 1;
        self.sum += latency;
        if self.count < size {
            return None;
        }
        let out = (self.sum as f64 / self.count as f64, self.min);
        *self = Window::default();
        Some(out)
    }
}

fn window_size(limit: f64) -> u64 {
    (limit as u64).clamp(16, 256)
}

/// What a textbook controller does to its limit as each window closes.
trait Rule {
    const NAME: &'static str;
    /// Sets `limit` from the closed window's (mean, min) latency.
    fn update(&mut self, limit: &mut f64, mean: f64, min: u64);
}

/// A textbook controller: its requests in flight against its (real-valued)
/// limit, sampled in windows, the limit set by its rule `R`.
struct Textbook<R> {
    limit: f64,
    in_flight: usize,
    window: Window,
    rule: R,
}

impl<R: Rule> Textbook<R> {
    fn new(rule: R) -> Textbook<R> {
        Textbook {
            limit: 20.0,
            in_flight: 0,
            window: Window::default(),
            rule,
        }
    }
}

impl<R: Rule> Controller for Textbook<R> {
    fn name(&self) -> &'static str {
        R::NAME
    }
    fn enter(&mut self) -> Option<(u64, usize)> {
        (self.in_flight < self.limit()).then(|| {
            self.in_flight += 1;
            (0, 0)
        })
    }
    fn done(&mut self, _: (u64, usize), latency: u64) {
        self.in_flight -= 1;
        if let Some((mean, min)) = self.window.add(latency, window_size(self.limit)) {
            self.rule.update(&mut self.limit, mean, min);
        }
    }
    fn limit(&self) -> usize {
        self.limit.round() as usize
    }
}

/// Gradient2: baseline = an exponential average of window means over ~600
/// samples; new = limit · clamp(1.5 · long / short, ½, 1) + 4, smoothed by
/// 0.2; the long average decays when the short one falls below half of it.
struct Gradient2 {
    long: f64,
}

impl Rule for Gradient2 {
    const NAME: &'static str = "gradient2";
    fn update(&mut self, limit: &mut f64, short: f64, _: u64) {
        if self.long == 0.0 {
            self.long = short;
        }
        let weight = window_size(*limit) as f64 / 600.0;
        self.long += (short - self.long) * weight;
        if self.long / short > 2.0 {
            self.long *= 0.95;
        }
        let gradient = (1.5 * self.long / short).clamp(0.5, 1.0);
        let new = *limit * gradient + 4.0;
        *limit = (*limit * 0.8 + new * 0.2).clamp(2.0, 1000.0);
    }
}

/// Vegas: baseline = the minimum latency seen; queue = limit · (1 −
/// min / mean); below alpha = 3·log10(limit) the limit grows by
/// log10(limit), above beta = 6·log10(limit) it shrinks by as much.
struct Vegas {
    no_load: u64,
}

impl Rule for Vegas {
    const NAME: &'static str = "vegas";
    fn update(&mut self, limit: &mut f64, mean: f64, min: u64) {
        self.no_load = if self.no_load == 0 {
            min
        } else {
            self.no_load.min(min)
        };
        let queue = *limit * (1.0 - self.no_load as f64 / mean);
        let step = limit.log10().max(1.0);
        if queue < 3.0 * step {
            *limit += step;
        } else if queue > 6.0 * step {
            *limit -= step;
        }
        *limit = limit.clamp(2.0, 1000.0);
    }
}

/// A stretch of load: arrivals every `gap` (jittered ±½) until `until`, on
/// `workers`; `service(i)` is request i's time.
struct Phase {
    until: u64,
    gap: u64,
    workers: usize,
    service: fn(u64) -> u64,
}

struct Outcome {
    p99: f64,
    goodput: f64,
    shed: f64,
    limit: usize,
}

/// Runs `phases`, measuring requests that arrive within `measure`.
fn run(
    ctl: &mut dyn Controller,
    clock: &ManualClock,
    phases: &[Phase],
    measure: (u64, u64),
) -> Outcome {
    let mut events = BinaryHeap::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let (mut t, mut i) = (0, 0u64);
    for p in phases {
        while t < p.until {
            events.push(Reverse((t, 0u64, (p.service)(i))));
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            t += p.gap / 2 + seed % p.gap;
            i += 1;
        }
    }
    let (mut queue, mut running) = (VecDeque::new(), HashMap::new());
    let (mut busy, mut next) = (0, 1u64);
    let (mut latencies, mut offered, mut shed) = (Vec::new(), 0u64, 0u64);
    while let Some(Reverse((now, id, service))) = events.pop() {
        clock.set(Duration::from_nanos(now));
        let measured = (measure.0..measure.1).contains(&now);
        if id == 0 {
            offered += u64::from(measured);
            match ctl.enter() {
                Some(token) => queue.push_back((now, token, service)),
                None => shed += u64::from(measured),
            }
        } else {
            let (arrived, token) = running.remove(&id).expect("running");
            ctl.done(token, now - arrived);
            busy -= 1;
            if (measure.0..measure.1).contains(&arrived) {
                latencies.push(now - arrived);
            }
        }
        let workers = phases
            .iter()
            .find(|p| now < p.until)
            .map_or(phases[phases.len() - 1].workers, |p| p.workers);
        while busy < workers {
            let Some((arrived, token, service)) = queue.pop_front() else {
                break;
            };
            busy += 1;
            running.insert(next, (arrived, token));
            events.push(Reverse((now + service, next, service)));
            next += 1;
        }
    }
    latencies.sort_unstable();
    let secs = (measure.1 - measure.0) as f64 / 1e9;
    Outcome {
        p99: latencies[(latencies.len() - 1) * 99 / 100] as f64 / 1e6,
        goodput: latencies.len() as f64 / secs,
        shed: shed as f64 / offered.max(1) as f64 * 100.0,
        limit: ctl.limit(),
    }
}

fn controllers(clock: &ManualClock) -> Vec<Box<dyn Controller>> {
    let core = ConcurrencyCap::adaptive(
        AdaptiveConcurrency::default(),
        AnyClock::Manual(clock.clone()),
    )
    .expect("tuning");
    vec![
        Box::new(Core { cap: core }),
        Box::new(Textbook::new(Gradient2 { long: 0.0 })),
        Box::new(Textbook::new(Vegas { no_load: 0 })),
    ]
}

fn twenty(_: u64) -> u64 {
    20 * MS
}

fn forty(_: u64) -> u64 {
    40 * MS
}

/// Half the requests take 1 ms, half 100 ms.
fn mixed(i: u64) -> u64 {
    if i.is_multiple_of(2) { MS } else { 100 * MS }
}

fn main() {
    let s = 1_000 * MS;
    let scenarios: Vec<(&str, Vec<Phase>, (u64, u64))> = vec![
        (
            "overload: 4 workers x 20 ms (200/s) at 500/s, 60 s; the last 10 s",
            vec![Phase {
                until: 60 * s,
                gap: 2 * MS,
                workers: 4,
                service: twenty,
            }],
            (50 * s, 60 * s),
        ),
        (
            "slowdown: as above, 40 ms from 10 s (100/s); 20-30 s",
            vec![
                Phase {
                    until: 10 * s,
                    gap: 2 * MS,
                    workers: 4,
                    service: twenty,
                },
                Phase {
                    until: 30 * s,
                    gap: 2 * MS,
                    workers: 4,
                    service: forty,
                },
            ],
            (20 * s, 30 * s),
        ),
        (
            "healthy mix: 16 workers, half 1 ms, half 100 ms (317/s) at 160/s, 30 s",
            vec![Phase {
                until: 30 * s,
                gap: 6_250_000,
                workers: 16,
                service: mixed,
            }],
            (5 * s, 30 * s),
        ),
        (
            "overloaded mix: as above at 475/s, 30 s; after 5 s",
            vec![Phase {
                until: 30 * s,
                gap: 2_105_000,
                workers: 16,
                service: mixed,
            }],
            (5 * s, 30 * s),
        ),
    ];
    for (title, phases, measure) in scenarios {
        println!("{title}");
        println!("  controller    p99 ms   goodput/s   shed %   limit at end");
        // The core's controller reads the clock and runs first; the others
        // do not read it.
        let clock = ManualClock::new();
        for mut ctl in controllers(&clock) {
            let o = run(ctl.as_mut(), &clock, &phases, measure);
            println!(
                "  {:<12} {:>7.1} {:>11.0} {:>8.1} {:>14}",
                ctl.name(),
                o.p99,
                o.goodput,
                o.shed,
                o.limit
            );
        }
    }
}
