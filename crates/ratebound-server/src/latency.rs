//! How long the server took to answer, per transport, as a Prometheus
//! histogram: `ratebound_request_duration_seconds` (from the request read
//! to the answer made; the transport's own time aside). Observing takes no
//! lock and allocates nothing: three atomic additions.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::metrics::Transport;

/// The buckets' upper bounds, in µs: from 25 µs to Envoy's default 20 ms
/// filter timeout, then 100 ms.
pub const BUCKETS_US: [u64; 12] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 20_000, 50_000, 100_000,
];

#[derive(Default)]
struct One {
    /// Per bucket (not cumulative), and one past the last for `+Inf`.
    counts: [AtomicU64; BUCKETS_US.len() + 1],
    sum_ns: AtomicU64,
}

/// The histogram of each transport.
#[derive(Default)]
pub struct Latency([One; 2]);

impl Latency {
    /// Counts one answer of `transport` that took `took`.
    pub fn observe(&self, transport: Transport, took: Duration) {
        let one = &self.0[transport as usize];
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKETS_US.partition_point(|&b| b < us);
        one.counts[i].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        one.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Appends the histograms in Prometheus' text format.
    pub fn render(&self, out: &mut String) {
        out.push_str(
            "# HELP ratebound_request_duration_seconds Time from a request read to its answer made, by transport.\n\
             # TYPE ratebound_request_duration_seconds histogram\n",
        );
        for transport in [Transport::Grpc, Transport::Json] {
            let one = &self.0[transport as usize];
            let name = transport.name();
            let mut total = 0;
            for (i, count) in one.counts.iter().enumerate() {
                total += count.load(Ordering::Relaxed);
                let le = BUCKETS_US
                    .get(i)
                    .map_or_else(|| "+Inf".to_string(), |us| format!("{}", *us as f64 / 1e6));
                let _ = writeln!(
                    out,
                    "ratebound_request_duration_seconds_bucket{{transport=\"{name}\",le=\"{le}\"}} {total}"
                );
            }
            let sum = one.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                out,
                "ratebound_request_duration_seconds_sum{{transport=\"{name}\"}} {sum}\n\
                 ratebound_request_duration_seconds_count{{transport=\"{name}\"}} {total}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_bounds_inclusive() {
        let l = Latency::default();
        for us in [10, 25, 26, 900, 1_000_000] {
            l.observe(Transport::Grpc, Duration::from_micros(us));
        }
        let mut out = String::new();
        l.render(&mut out);
        let line = |le: &str| {
            let series = format!(
                "ratebound_request_duration_seconds_bucket{{transport=\"grpc\",le=\"{le}\"}} "
            );
            out.lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .unwrap_or_else(|| panic!("{series} in {out}"))
                .to_string()
        };
        // 10 and 25 µs in the first bucket (≤ 25 µs), 26 in the second.
        assert_eq!(line("0.000025"), "2");
        assert_eq!(line("0.00005"), "3");
        assert_eq!(line("0.001"), "4");
        assert_eq!(line("0.1"), "4");
        assert_eq!(line("+Inf"), "5");
        assert!(out.contains("ratebound_request_duration_seconds_count{transport=\"grpc\"} 5\n"));
        assert!(out.contains("ratebound_request_duration_seconds_count{transport=\"json\"} 0\n"));
        assert!(
            out.contains("ratebound_request_duration_seconds_sum{transport=\"grpc\"} 1.000961\n"),
            "{out}"
        );
    }
}
