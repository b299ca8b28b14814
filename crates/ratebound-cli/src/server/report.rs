//! The server model's results: the table and the JSON.

use std::fmt::Write as _;

use super::{PRIORITIES, Run, Server};
use crate::show_duration;
use crate::traffic::Traffic;

/// Milliseconds with one decimal, or `-`.
fn ms(nanos: Option<u64>) -> String {
    nanos.map_or("-".to_string(), |n| format!("{:.1}", n as f64 / 1e6))
}

/// About `n` evenly spaced readings of a run's limit: `(t, limit)`
/// (a round step: 1, 2, 4 or 5 × 10^k ns).
pub fn limit_samples(run: &Run, span: u64, n: u64) -> Vec<(u64, usize)> {
    let step = round_step(span.div_ceil(n.max(1)).max(1));
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

/// The smallest of 1, 2, 4 or 5 × 10^k that is at least `raw`.
pub(super) fn round_step(raw: u64) -> u64 {
    let mut power: u64 = 1;
    // 10^19 is the last power of ten in a u64: at most 20 rounds.
    for _ in 0..20 {
        for m in [1, 2, 4, 5] {
            let step = power.saturating_mul(m);
            if step >= raw {
                return step;
            }
        }
        power = power.saturating_mul(10);
    }
    raw
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
    if let Some(mix) = server.mix {
        let _ = writeln!(
            out,
            "\nby priority ({:.0} % critical, {:.0} % background, the rest normal; background \
             admitted below {} of the limit):",
            mix.critical * 100.0,
            mix.background * 100.0,
            server.background_fraction.unwrap_or(0.5)
        );
        let _ = writeln!(
            out,
            "{:<width$} {:<10} {:>9} {:>9} {:>9} {:>8} {:>8}",
            "concurrency", "priority", "requests", "admitted", "shed", "p50 ms", "p99 ms",
        );
        for r in runs {
            for (p, t) in PRIORITIES.iter().zip(r.by_priority.iter().flatten()) {
                let _ = writeln!(
                    out,
                    "{:<width$} {:<10} {:>9} {:>9} {:>9} {:>8} {:>8}",
                    r.name,
                    p.as_str(),
                    t.requests,
                    t.admitted,
                    t.shed,
                    ms(t.p50),
                    ms(t.p99),
                );
            }
        }
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
            "priorities": server.mix.map(|m| serde_json::json!({
                "critical": m.critical,
                "background": m.background,
            })),
            "background_fraction": server.background_fraction.unwrap_or(0.5),
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
            "by_priority": r.by_priority.map(|tallies| {
                PRIORITIES.iter().zip(tallies).map(|(p, t)| (p.as_str().to_string(), serde_json::json!({
                    "requests": t.requests,
                    "admitted": t.admitted,
                    "shed": t.shed,
                    "latency_p50_s": secs(t.p50),
                    "latency_p99_s": secs(t.p99),
                }))).collect::<serde_json::Map<_, _>>()
            }),
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
