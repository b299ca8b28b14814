//! Protocol-neutral pieces of an HTTP front door, shared by the tower layer
//! and the Python and Node middleware so that every language answers alike:
//! `Retry-After` rounding, the `RateLimit-Policy` / `RateLimit` field values,
//! IP normalisation with IPv6 prefix grouping, and the client address from
//! the one configured forwarding header (`X-Forwarded-For`, `Forwarded` or a
//! single-address header) of trusted proxies. No HTTP library: strings and `IpAddr`s in,
//! strings and `IpAddr`s out.

mod adaptive;
pub mod base64;
mod client_ip;
mod concurrency;
mod fields;
mod queue;
#[cfg(test)]
mod tests;

pub use adaptive::{AdaptiveConcurrency, AdaptiveState, Priority};
pub use client_ip::{
    Cidr, Forwarding, Headers, NoHeaders, TrustedProxies, client_ip, field_name, ip_key,
};
pub(crate) use concurrency::concurrency_share_check;
pub use concurrency::{ConcurrencyCap, DEFAULT_BACKGROUND_FRACTION, MAX_QUEUE_WAIT, PlaceWait};
pub use fields::{
    Policy, legacy_headers, ratelimit, ratelimit_bytes, ratelimit_policy, ratelimit_policy_of,
    retry_after_secs,
};
