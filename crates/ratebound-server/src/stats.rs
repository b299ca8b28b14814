//! What the engine decided, counted per domain and descriptor (the
//! reference's metric key), for Prometheus: hits, requests within the
//! limit, near it (80 % of it spent, as the reference's default), over it,
//! and over it but let through by shadow mode.
//!
//! The series are bounded: a metric key may carry a request's values
//! (`detailed_metric`, `value_to_metric`), so past [`MAX_SERIES`] new keys
//! are counted under one `descriptor="_other"` series of their domain.
//! A decision takes a read lock and a few atomic additions; only a new
//! series takes the write lock.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// The most series (domain, descriptor) counted apart.
pub const MAX_SERIES: usize = 10_000;

/// The descriptor of the series that counts the keys past [`MAX_SERIES`].
pub const OTHER: &str = "_other";

/// One series' counts.
#[derive(Debug, Default)]
struct Counts {
    hits: AtomicU64,
    within: AtomicU64,
    near: AtomicU64,
    over: AtomicU64,
    shadow: AtomicU64,
}

/// How one descriptor was decided, for the counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Within the limit; `near`: 80 % of it or more is spent.
    Within {
        /// 80 % or more of the limit spent.
        near: bool,
    },
    /// Over the limit (`shadow`: let through by shadow mode).
    Over {
        /// Let through by shadow mode.
        shadow: bool,
    },
}

/// The engine's counts.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Domain → descriptor → counts: looked up by `&str`, so a decision
    /// on a known series allocates nothing.
    series: RwLock<HashMap<String, HashMap<String, Arc<Counts>>>>,
}

impl Stats {
    /// Counts `hits` of `(domain, descriptor)` decided as `seen`.
    pub(crate) fn count(&self, domain: &str, descriptor: &str, hits: u64, seen: Seen) {
        let counts = self.counts(domain, descriptor);
        // Ordering: Relaxed — counters read on their own.
        counts.hits.fetch_add(hits, Ordering::Relaxed);
        let which = match seen {
            Seen::Within { near: false } => &counts.within,
            Seen::Within { near: true } => {
                counts.within.fetch_add(hits, Ordering::Relaxed);
                &counts.near
            }
            Seen::Over { shadow: false } => &counts.over,
            Seen::Over { shadow: true } => {
                counts.over.fetch_add(hits, Ordering::Relaxed);
                &counts.shadow
            }
        };
        which.fetch_add(hits, Ordering::Relaxed);
    }

    fn counts(&self, domain: &str, descriptor: &str) -> Arc<Counts> {
        if let Some(c) = self
            .series
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(domain)
            .and_then(|d| d.get(descriptor))
        {
            return Arc::clone(c);
        }
        let mut all = self.series.write().unwrap_or_else(|e| e.into_inner());
        let total: usize = all.values().map(HashMap::len).sum();
        let known = all.get(domain).is_some_and(|d| d.contains_key(descriptor));
        let descriptor = if total >= MAX_SERIES && !known {
            OTHER
        } else {
            descriptor
        };
        let series = all.entry(domain.to_string()).or_default();
        Arc::clone(series.entry(descriptor.to_string()).or_default())
    }

    /// The counts in Prometheus' text format, series in name order.
    pub(crate) fn render(&self, out: &mut String) {
        let all = self.series.read().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<(&String, &String, &Arc<Counts>)> = all
            .iter()
            .flat_map(|(d, s)| s.iter().map(move |(k, c)| (d, k, c)))
            .collect();
        keys.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let metrics: [Metric; 5] = [
            (
                "ratebound_descriptor_hits_total",
                "Hits counted against a descriptor's limit.",
                |c| &c.hits,
            ),
            (
                "ratebound_descriptor_within_limit_total",
                "Hits within the limit.",
                |c| &c.within,
            ),
            (
                "ratebound_descriptor_near_limit_total",
                "Hits within the limit with 80 % of it or more spent.",
                |c| &c.near,
            ),
            (
                "ratebound_descriptor_over_limit_total",
                "Hits over the limit (shadow mode's too).",
                |c| &c.over,
            ),
            (
                "ratebound_descriptor_shadow_mode_total",
                "Hits over the limit let through by shadow mode.",
                |c| &c.shadow,
            ),
        ];
        for (name, help, field) in metrics {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (domain, descriptor, counts) in &keys {
                let value = field(counts).load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{name}{{domain=\"{}\",descriptor=\"{}\"}} {value}",
                    label(domain),
                    label(descriptor)
                );
            }
        }
    }
}

/// A metric's name, help and the count of a series it reads.
type Metric = (&'static str, &'static str, fn(&Counts) -> &AtomicU64);

/// `value` as a Prometheus label value: `\`, `"` and line feeds escaped.
pub fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}
