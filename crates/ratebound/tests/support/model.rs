//! A discrete-event model of a server on a manual clock (a FIFO queue in
//! front of `workers` that each take `service` per request) under scripted
//! open-loop arrivals, driving a real `ConcurrencyCap`. Shared by the
//! adaptive-limit tests (included by path).

#![allow(dead_code)] // each test target uses its part

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound::http::{AdaptiveConcurrency, ConcurrencyCap, Priority};

pub const MS: u64 = 1_000_000;

/// One phase of load: `burst` requests arriving together every `gap` (±
/// half of it, seeded) until `until`, each taking `service` once one of
/// `workers` has it.
#[derive(Clone, Copy)]
pub struct Phase {
    pub until: u64,
    pub gap: u64,
    pub burst: u32,
    pub service: u64,
    pub workers: usize,
}

/// 500/s offered to 4 workers × 20 ms (200/s) for 5 s.
pub const OVERLOAD: Phase = Phase {
    until: 5_000 * MS,
    gap: 2 * MS,
    burst: 1,
    service: 20 * MS,
    workers: 4,
};

/// The limit and baseline as one window closed.
#[derive(Clone, Copy, Debug)]
pub struct Closed {
    pub at: u64,
    pub limit: usize,
    pub baseline_ms: f64,
}

#[derive(Default)]
pub struct Run {
    /// (arrival, latency) of every admitted request, in completion order.
    pub served: Vec<(u64, u64)>,
    pub shed: Vec<u64>,
    /// (time, limit) after each completion.
    pub limits: Vec<(u64, usize)>,
    /// Each window as it closed (an adaptive cap only).
    pub windows: Vec<Closed>,
}

impl Run {
    pub fn p99_after(&self, from: u64, to: u64) -> u64 {
        let mut l: Vec<u64> = self
            .served
            .iter()
            .filter(|(t, _)| (from..to).contains(t))
            .map(|&(_, l)| l)
            .collect();
        l.sort_unstable();
        l[(l.len() - 1) * 99 / 100]
    }

    pub fn goodput(&self, from: u64, to: u64) -> f64 {
        let n = self
            .served
            .iter()
            .filter(|(t, _)| (from..to).contains(t))
            .count();
        n as f64 / ((to - from) as f64 / 1e9)
    }

    /// Requests shed per second within `from..to`.
    pub fn shed_rate(&self, from: u64, to: u64) -> f64 {
        let n = self.shed.iter().filter(|t| (from..to).contains(*t)).count();
        n as f64 / ((to - from) as f64 / 1e9)
    }

    pub fn limit_at(&self, t: u64) -> usize {
        self.limits
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map_or(0, |&(_, l)| l)
    }

    /// The windows that closed within `from..to`.
    pub fn windows_in(&self, from: u64, to: u64) -> impl Iterator<Item = &Closed> {
        self.windows
            .iter()
            .filter(move |w| (from..to).contains(&w.at))
    }
}

/// The arrivals of `phases`: (time, service) in time order.
pub fn arrivals(phases: &[Phase]) -> Vec<(u64, u64)> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut t = 0;
    let mut out = Vec::new();
    for p in phases {
        while t < p.until {
            for _ in 0..p.burst {
                out.push((t, p.service));
            }
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            t += p.gap / 2 + seed % p.gap;
        }
    }
    out
}

/// `arrivals` with each service time varied by up to ±`percent` % (seeded,
/// uniform).
pub fn jittered(arrivals: &[(u64, u64)], percent: u64) -> Vec<(u64, u64)> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    arrivals
        .iter()
        .map(|&(t, service)| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let j = service * percent / 100;
            (t, service - j + seed % (2 * j + 1))
        })
        .collect()
}

/// `phases` served by their workers.
pub fn serve(cap: &ConcurrencyCap, clock: &ManualClock, phases: &[Phase]) -> Run {
    let workers = |now| {
        phases
            .iter()
            .find(|p| now < p.until)
            .unwrap_or(&phases[phases.len() - 1])
            .workers
    };
    serve_arrivals(cap, clock, &arrivals(phases), workers)
}

/// Scripted `arrivals` ((time, service), in time order) served by
/// `workers(now)` workers.
pub fn serve_arrivals(
    cap: &ConcurrencyCap,
    clock: &ManualClock,
    arrivals: &[(u64, u64)],
    workers: impl Fn(u64) -> usize,
) -> Run {
    // Events: (time, id); id 0 is an arrival, others a completion.
    let mut events: BinaryHeap<_> = arrivals
        .iter()
        .map(|&(t, service)| Reverse((t, 0u64, service)))
        .collect();
    let mut queue = VecDeque::new();
    let mut running = HashMap::new();
    let (mut busy, mut next) = (0, 1u64);
    let mut run = Run::default();
    while let Some(Reverse((now, id, service))) = events.pop() {
        clock.set(Duration::from_nanos(now));
        if id == 0 {
            match cap.try_enter_as(|| Priority::Normal) {
                Ok(before) => queue.push_back((now, cap.start(), before, service)),
                Err(_) => run.shed.push(now),
            }
        } else {
            let (arrived, start, before) = running.remove(&id).unwrap();
            cap.leave_after(start, before);
            busy -= 1;
            run.served.push((arrived, now - arrived));
            run.limits.push((now, cap.limit()));
            if let Some(state) = cap.state()
                && state.windows as usize > run.windows.len()
            {
                run.windows.push(Closed {
                    at: now,
                    limit: state.limit,
                    baseline_ms: state.baseline_us / 1e3,
                });
            }
        }
        while busy < workers(now) {
            let Some((arrived, start, before, service)) = queue.pop_front() else {
                break;
            };
            busy += 1;
            running.insert(next, (arrived, start, before));
            events.push(Reverse((now + service, next, service)));
            next += 1;
        }
    }
    run
}

/// The default adaptive limit on `clock`.
/// A fresh adaptive cap (the default tuning) on its own manual clock,
/// serving `phases`; the cap is returned for what it holds after.
pub fn serve_adaptive(phases: &[Phase]) -> (ConcurrencyCap, Run) {
    let clock = ManualClock::new();
    let cap = adaptive(&clock);
    let run = serve(&cap, &clock, phases);
    (cap, run)
}

pub fn adaptive(clock: &ManualClock) -> ConcurrencyCap {
    tuned(clock, AdaptiveConcurrency::default())
}

pub fn tuned(clock: &ManualClock, tuning: AdaptiveConcurrency) -> ConcurrencyCap {
    ConcurrencyCap::adaptive(tuning, AnyClock::Manual(clock.clone())).unwrap()
}
