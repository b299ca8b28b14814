//! A tower [`Layer`](tower_layer::Layer) that rate-limits HTTP requests per key with ratebound:
//! refusals are `429 Too Many Requests` with an honest `Retry-After` (whole
//! seconds, rounded **up**) and the IETF `RateLimit-Policy` / `RateLimit`
//! fields; an optional concurrency cap sheds load with `503` before the inner
//! service runs. Works with axum (`Router::layer`, `Router::route_layer`),
//! hyper services and tonic (gRPC calls get a gRPC status, see below).
//!
//! The whole decision — key, proxies, policies, status, headers, body — is
//! made by the core's [`ratebound::gate::Gate`], the same one the Python and
//! Node middleware call; this crate only moves a request's parts in and the
//! verdict out, and `spec/gate.json` is replayed against it over HTTP.
//!
//! # Examples
//! ```
//! use axum::{Router, routing::get};
//! use ratebound::Quota;
//! use ratebound_http::{RequestKey, RateLimitLayer};
//!
//! let layer = RateLimitLayer::builder()
//!     .policy("burst", Quota::parse("10/s burst 20")?)
//!     .policy("hourly", Quota::parse("1000/hour")?)
//!     .key(RequestKey::header("x-api-key")?)
//!     .build()?;
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(layer);
//! # Ok::<(), ratebound::Error>(())
//! ```
//!
//! # gRPC
//! A request whose content type is `application/grpc…` is refused the gRPC
//! way, since a gRPC client cannot read an HTTP 429: HTTP 200 with no body,
//! `grpc-status` `RESOURCE_EXHAUSTED` (a policy refused) or `UNAVAILABLE`
//! (shed), and a `google.rpc.Status` in `grpc-status-details-bin` whose
//! `google.rpc.RetryInfo` holds the wait — the same whole seconds, rounded
//! up, as `Retry-After`, which comes along as metadata with the RateLimit
//! fields. With the `tonic` feature the peer address is read from tonic's
//! `TcpConnectInfo`. A tonic server takes the layer as it is:
//! ```
//! # #[cfg(feature = "tonic")] fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ratebound::Quota;
//! use ratebound_http::{RequestKey, RateLimitLayer};
//!
//! let layer = RateLimitLayer::builder()
//!     .policy("calls", Quota::parse("2/minute")?)
//!     .key(RequestKey::header("x-api-key")?) // gRPC metadata are headers
//!     .build()?;
//! let server = tonic::transport::Server::builder().layer(layer);
//! # let _ = server; Ok(()) }
//! # #[cfg(not(feature = "tonic"))] fn main() {}
//! ```
//!
//! # Keys
//! [`RequestKey`] picks the key: a header, the client IP, or a closure over
//! the request. A key header counts only when the request has exactly one
//! line of it, not empty and without a comma; otherwise the request has no
//! valid key (a client that adds a second line, hoping the first wins, gets
//! nothing from it). A request without a valid key follows [`MissingKey`]:
//! by default it falls back to the client IP — one shared bucket for every
//! keyless client would let one of them lock all the others out. Keys are
//! stored as 128-bit keyed hashes of their bytes (one pass of
//! SipHash-2-4-128 with a random key), so a 64 KiB or non-UTF-8 header costs
//! what a short key does and no key is copied.
//!
//! # Remote policies: one limit for the fleet, or for the host
//! [`Builder::remote`] adds a policy kept outside the layer, by name: a
//! global limit in Redis that every instance shares (feature `redis`:
//! `ratebound_redis::RedisLimiter`, whose own fail policy answers while
//! Redis is down), a limit shared by the host's processes (feature `shm`:
//! `ratebound_shm::SharedKeyedLimiter`; a full table answers 503, never
//! 500), or your own [`ratebound::KeyedLimit`]. Each request that gets a place and a
//! key asks every remote policy at once for its key as every instance
//! derives it (`key:…`, `ip:…` or `anonymous`), then the local policies
//! decide; a remote refusal is a 429 whose `RateLimit` field lists the
//! remote policy, and gives the concurrency place back at once. A check
//! that fails beyond its fail policy ([`RemoteAnswer::Failed`]) is a 503
//! with [`Builder::store_error_retry_after`] (default 1 s), reported as
//! [`Outcome::StoreError`] and logged once per episode — the rule of every
//! front door, Python's and Node's too. The inner
//! service is then called from the response future, so the service must be
//! `Clone` (see [`RateLimit`]).
//! ```
//! # #[cfg(feature = "shm")] fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ratebound::{KeyedAlgorithm, Quota};
//! use ratebound_http::{RequestKey, RateLimitLayer};
//! use ratebound_shm::SharedKeyedLimiter;
//!
//! # let dir = std::env::temp_dir().join(format!("rb-http-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let path = dir.join("api.limit");
//! // Every worker process opens the same file: one limit per key for all.
//! let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("100/minute")?);
//! let host = SharedKeyedLimiter::open(&path, algorithm, 10_000)?;
//! let layer = RateLimitLayer::builder()
//!     .remote("host", host)
//!     .key(RequestKey::header("x-api-key")?)
//!     .build()?;
//! # drop(layer); std::fs::remove_dir_all(&dir)?;
//! # Ok(()) }
//! # #[cfg(not(feature = "shm"))] fn main() {}
//! ```
//!
//! # Client addresses behind proxies
//! The peer address comes from axum's `ConnectInfo<SocketAddr>` or a
//! [`PeerAddr`] extension. Forwarding headers are ignored unless
//! [`trusted_proxies`](Builder::trusted_proxies) says whose to believe, and
//! then only the one header [`client_ip_header`](Builder::client_ip_header)
//! names is read (default `X-Forwarded-For`) — never a header the request
//! happens to carry, since a proxy passes on whatever else the client sent.
//! IPv6 addresses are grouped by a prefix (default /64, so one host cannot
//! rotate through its addresses).
//!
//! Behind nginx (`proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`)
//! on the same host:
//! ```
//! # use ratebound::{Quota, http::{Cidr, TrustedProxies}};
//! # use ratebound_http::RateLimitLayer;
//! let layer = RateLimitLayer::builder()
//!     .policy("default", Quota::parse("10/s burst 20")?)
//!     .trusted_proxies(TrustedProxies::Cidrs(vec![Cidr::parse("127.0.0.1/32")?]))
//!     .build()?;
//! # Ok::<(), ratebound::Error>(())
//! ```
//! Behind Cloudflare, which overwrites `CF-Connecting-IP` (trust only
//! Cloudflare's published ranges, so that no one else can set it):
//! ```
//! # use ratebound::{Quota, http::{Cidr, Forwarding, TrustedProxies}};
//! # use ratebound_http::RateLimitLayer;
//! let cloudflare = ["173.245.48.0/20", "103.21.244.0/22", "2400:cb00::/32"]; // ...
//! let layer = RateLimitLayer::builder()
//!     .policy("default", Quota::parse("10/s burst 20")?)
//!     .trusted_proxies(TrustedProxies::Cidrs(
//!         cloudflare.iter().map(|c| Cidr::parse(c)).collect::<Result<_, _>>()?,
//!     ))
//!     .client_ip_header(Forwarding::parse("CF-Connecting-IP")?)
//!     .build()?;
//! # Ok::<(), ratebound::Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// In layers, each using only those above it: `options` (what the user
// hands the builder), `remote` (remote policies), `state` (what a layer
// holds), `future` (a request's response future, and its wait in the
// queue), `layer` (the service), `builder`; `grpc` stands alone.
mod builder;
mod future;
mod grpc;
mod layer;
mod options;
mod remote;
mod state;

pub use builder::Builder;
pub use future::{ResponseBody, ResponseFuture};
pub use layer::{RateLimit, RateLimitLayer};
pub use options::{DecisionEvent, RequestKey};
pub use ratebound::gate::{MissingKey, Outcome, QuotaHeaders, RefusalBody, RemoteAnswer};
pub use ratebound::http::{AdaptiveConcurrency, AdaptiveState, Priority};

use std::net::SocketAddr;

/// The peer's socket address, for servers that are not axum: insert it into
/// the request's extensions (axum's `ConnectInfo<SocketAddr>` is read too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The README's examples, compiled (and run where they can) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
