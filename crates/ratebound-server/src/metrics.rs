//! The counters the wire can count, in Prometheus' text format for
//! `GET /metrics`: requests decided by transport, domain and code, and
//! requests refused by transport and reason.
//!
//! Counting takes no lock and allocates nothing: one counter set per
//! configured domain, in a map built once and only read after; a request for
//! a domain the configuration does not name counts under `domain=""` (so a
//! client cannot grow the label set).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::api::Code;
use crate::engine::RequestError;
use crate::latency::Latency;
use crate::model::Config;

/// Where a request came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// RLS v3 over gRPC.
    Grpc,
    /// `POST /json`.
    Json,
}

impl Transport {
    const ALL: [Transport; 2] = [Transport::Grpc, Transport::Json];

    /// The label value (`"grpc"`, `"json"`).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Json => "json",
        }
    }
}

/// Why a request was refused before or by the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Past a bound ([`RequestError::TooLarge`]).
    TooLarge,
    /// Malformed ([`RequestError::Invalid`]).
    Invalid,
    /// `POST /json`: a body that is not the request's JSON.
    BadJson,
    /// The limits' store could not decide ([`RequestError::Unavailable`]).
    Unavailable,
}

impl Refusal {
    const ALL: [Refusal; 4] = [
        Refusal::TooLarge,
        Refusal::Invalid,
        Refusal::BadJson,
        Refusal::Unavailable,
    ];

    /// The label value (`"too_large"`, `"invalid"`, `"bad_json"`,
    /// `"unavailable"`).
    pub fn name(self) -> &'static str {
        match self {
            Refusal::TooLarge => "too_large",
            Refusal::Invalid => "invalid",
            Refusal::BadJson => "bad_json",
            Refusal::Unavailable => "unavailable",
        }
    }
}

const CODES: [Code; 3] = [Code::Ok, Code::OverLimit, Code::Unknown];

fn code_index(code: Code) -> usize {
    match code {
        Code::Ok => 0,
        Code::OverLimit => 1,
        Code::Unknown => 2,
    }
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
        Code::Unknown => "UNKNOWN",
    }
}

/// One domain's counters: transport × code.
#[derive(Default)]
struct DomainCounters([[AtomicU64; 3]; 2]);

/// The wire's counters.
pub struct Metrics {
    /// Grown by [`know`](Metrics::know) when a reload adds a domain (a
    /// domain the rules no longer name keeps its series).
    domains: RwLock<HashMap<String, Arc<DomainCounters>>>,
    other: DomainCounters,
    refused: [[AtomicU64; Refusal::ALL.len()]; 2],
    latency: Latency,
}

impl Metrics {
    /// Counters for the domains `config` names.
    pub fn new(config: &Config) -> Metrics {
        Metrics {
            domains: RwLock::new(
                config
                    .domains
                    .keys()
                    .map(|name| (name.clone(), Arc::default()))
                    .collect(),
            ),
            other: DomainCounters::default(),
            refused: Default::default(),
            latency: Latency::default(),
        }
    }

    /// Counters for the domains of `config` too (a reload put it in
    /// force): their requests are then counted under their own label.
    pub fn know(&self, config: &Config) {
        let mut domains = self.domains.write().unwrap_or_else(|e| e.into_inner());
        for name in config.domains.keys() {
            domains.entry(name.clone()).or_default();
        }
    }

    /// Counts an answer (decided or refused) that took `took`.
    pub fn answered(&self, transport: Transport, took: std::time::Duration) {
        self.latency.observe(transport, took);
    }

    /// Counts a decided request.
    pub fn decided(&self, transport: Transport, domain: &str, code: Code) {
        let domains = self.domains.read().unwrap_or_else(|e| e.into_inner());
        let counters = domains.get(domain).map_or(&self.other, AsRef::as_ref);
        counters.0[transport as usize][code_index(code)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a refused request.
    pub fn refused(&self, transport: Transport, error: &RequestError) {
        let reason = match error {
            RequestError::TooLarge { .. } => Refusal::TooLarge,
            RequestError::Invalid { .. } => Refusal::Invalid,
            RequestError::Unavailable { .. } => Refusal::Unavailable,
        };
        self.refused_for(transport, reason);
    }

    /// Counts a request refused for `reason`.
    pub fn refused_for(&self, transport: Transport, reason: Refusal) {
        self.refused[transport as usize][reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the counters in Prometheus' text format (0.0.4) to `out`:
    /// `ratebound_requests_total{transport,domain,code}` and
    /// `ratebound_request_errors_total{transport,reason}`.
    pub fn render(&self, out: &mut String) {
        out.push_str(
            "# HELP ratebound_requests_total Rate limit requests decided, by transport, domain and overall code (domain=\"\": not a configured domain).\n\
             # TYPE ratebound_requests_total counter\n",
        );
        let domains = self.domains.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<&String> = domains.keys().collect();
        names.sort();
        let all = names
            .into_iter()
            .map(|n| (n.as_str(), domains[n].as_ref()))
            .chain(std::iter::once(("", &self.other)));
        for (domain, counters) in all {
            for transport in Transport::ALL {
                for code in CODES {
                    let n =
                        counters.0[transport as usize][code_index(code)].load(Ordering::Relaxed);
                    let _ = writeln!(
                        out,
                        "ratebound_requests_total{{transport=\"{}\",domain=\"{}\",code=\"{}\"}} {n}",
                        transport.name(),
                        Escaped(domain),
                        code_name(code)
                    );
                }
            }
        }
        out.push_str(
            "# HELP ratebound_request_errors_total Rate limit requests refused, by transport and reason.\n\
             # TYPE ratebound_request_errors_total counter\n",
        );
        for transport in Transport::ALL {
            for reason in Refusal::ALL {
                let n = self.refused[transport as usize][reason as usize].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "ratebound_request_errors_total{{transport=\"{}\",reason=\"{}\"}} {n}",
                    transport.name(),
                    reason.name()
                );
            }
        }
        self.latency.render(out);
    }
}

/// A label value escaped as Prometheus' text format wants (`\\`, `\"`, `\n`).
struct Escaped<'a>(&'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Domain, Place};

    fn config(names: &[&str]) -> Config {
        let mut config = Config::default();
        for name in names {
            config.domains.insert(
                name.to_string(),
                Domain {
                    name: name.to_string(),
                    descriptors: Vec::new(),
                    place: Place::default(),
                },
            );
        }
        config
    }

    #[test]
    fn unknown_domains_share_one_label_and_values_are_escaped() {
        let metrics = Metrics::new(&config(&["a\"b"]));
        metrics.decided(Transport::Grpc, "a\"b", Code::OverLimit);
        metrics.decided(Transport::Grpc, "nope-1", Code::Ok);
        metrics.decided(Transport::Grpc, "nope-2", Code::Ok);
        metrics.refused_for(Transport::Json, Refusal::BadJson);
        let mut out = String::new();
        metrics.render(&mut out);
        assert!(out.contains(
            "ratebound_requests_total{transport=\"grpc\",domain=\"a\\\"b\",code=\"OVER_LIMIT\"} 1\n"
        ));
        assert!(
            out.contains(
                "ratebound_requests_total{transport=\"grpc\",domain=\"\",code=\"OK\"} 2\n"
            )
        );
        assert!(out.contains(
            "ratebound_request_errors_total{transport=\"json\",reason=\"bad_json\"} 1\n"
        ));
        assert!(!out.contains("nope"));
    }
}
