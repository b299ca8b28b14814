//! `ratebound serve`: a rate limit service for Envoy-based gateways.
//!
//! Envoy, Istio, Envoy Gateway, Contour, Emissary and Gloo ask a global
//! rate limit service over gRPC (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`)
//! whether a request may pass. This crate answers that protocol from the
//! reference server's YAML configuration (envoyproxy/ratelimit's, read
//! unchanged), with ratebound's algorithms behind it: sliding windows,
//! token buckets, windows of any length and several limits on one
//! descriptor, decided in this process, in shared memory or in Redis.
//!
//! - [`model`]: the rules a configuration holds.
//! - [`api`]: a request and its answer, without the wire.
//! - [`engine`]: decides a request against the rules.
//! - [`backend`]: where the limits' state lives when several servers share it.
//! - [`config`]: reads the YAML into a [`Config`](model::Config).
//! - [`matching`]: the rule a request descriptor falls under.
//! - [`reload`]: the configuration watched and swapped when it changes.
//! - [`stats`]: what the engine decided, for Prometheus.
//! - [`rls`]: RLS v3 over gRPC, converted to and from [`api`].
//! - [`json`]: the reference server's `POST /json` request and answer.
//! - [`http`]: `POST /json`, `GET /healthcheck`, `GET /metrics`.
//! - [`metrics`]: the wire's counters.
//! - [`latency`]: the answers' latency histogram.
//! - [`serve`]: the runner (both listeners, health, graceful shutdown).

pub mod api;
pub mod backend;
pub mod config;
pub mod engine;
pub mod http;
pub mod json;
pub mod latency;
mod log_table;
pub mod matching;
pub mod metrics;
pub mod model;
pub mod reload;
pub mod rls;
pub mod serve;
pub mod stats;
mod store;

pub use config::{ConfigError, ConfigErrorKind, Summary, check};
pub use matching::{Match, Rules, apply_replaces};
pub use store::UnixClock;
