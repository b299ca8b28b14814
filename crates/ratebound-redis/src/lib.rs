//! Global rate limits in Redis, shared by every instance of a service.
//!
//! Local buckets on N instances make N limits: fifty pods with a local
//! 10/s bucket each send up to 500/s to a partner that allows 10. A limit
//! that every instance shares has to live in one place; here that place is
//! Redis (Redis Cluster when one node is not enough).
//!
//! - **One round trip per decision.** One Lua script per algorithm
//!   (`lua/gcra.lua`, `lua/fixed_window.lua`, `lua/sliding_window.lua` —
//!   the single source of truth, run unchanged by the Python and Node
//!   drivers) reads and updates one key with `EVALSHA`; a `NOSCRIPT` reply
//!   (restart, failover, `SCRIPT FLUSH`, another cluster node) loads it
//!   with `EVAL`. One key per limit: no `CROSSSLOT` in a cluster.
//! - **Redis' clock.** Each script reads `TIME` as integer microseconds, so
//!   instances' clocks never skew the limit. A key expires (`PX`, rounded
//!   up) when its state is fresh again: idle keys vanish exactly when
//!   forgetting them changes nothing.
//! - **Sans-I/O.** [`Engine`] builds each [`Call`], turns each reply into a
//!   [`RedisDecision`] (with its [`Source`]), applies the fail policy and keeps
//!   the lease bookkeeping; it performs no I/O. [`plan`] is the driver's
//!   core, sans-I/O too: the batching rule, hash-slot groups, the wire
//!   layout of a send and the reading of its reply, for every driver (this
//!   crate's, the Python and Node bindings'). [`RedisLimiter`] (feature
//!   `tokio`) runs the calls with the `redis` crate, over any connection:
//!   one node, a cluster, or the primary Sentinel names
//!   ([`SentinelConnection`], which follows a failover).
//! - **An explicit fail policy** ([`OnError`]): open, closed, or a local
//!   share of the limit. Every call has a deadline (50 ms by default); a
//!   circuit breaker stops calling a dead Redis and probes it once its
//!   cool-down is over, so recovery needs no restart. A call that timed out
//!   may still have run in Redis: its tokens may be spent.
//! - **Token leasing** (`lease = k`): one round trip takes up to `k`
//!   tokens (at least the `n` asked for) and the instance spends the rest
//!   locally for up to `lease_ttl`. Leased tokens are already counted in
//!   Redis, so the global bound holds: from any starting point, admissions
//!   never exceed `burst + rate × elapsed`. What it costs: up to `k − 1`
//!   tokens per instance can sit unused (until returned by `shutdown` or
//!   lapsed), so another instance may be refused while they do; and tokens
//!   spent up to `lease_ttl` after they were taken can bunch up within a
//!   shorter window than Redis saw them in.
//!
//! Units: Redis keeps microseconds, so a bucket's token period is rounded
//! **up** to whole µs (never more than the stated rate; at most 1 000 000
//! tokens per second per key) and windows are whole µs.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The sans-I/O engine (`engine/`: decisions), the sans-I/O driver core
// (`plan/`: how calls go out) and the tokio driver over redis-rs
// (`driver/`: a pump over `plan`); the engine's modules are re-exported
// here under their old paths.
mod engine;
pub use engine::script;
pub(crate) use engine::{
    acquisition, algorithm, breaker, call, config, decision, health, learn, lease, misconfig, news,
    reserve,
};

pub mod plan;

#[cfg(feature = "tokio")]
mod driver;
#[cfg(feature = "tokio")]
pub(crate) use driver::sentinel;

pub use acquisition::{Acquisition, Step};
pub use algorithm::Algorithm;
pub use call::{BatchCall, Begin, Call, CallKind, CallOutcome, HINTED, REPLY_LEN};
pub use config::{Config, OnError};
pub use decision::{RedisDecision, Source};
pub use engine::Engine;
pub use health::{Notice, Stats};
pub use misconfig::misconfiguration;
pub use ratebound::Error;
pub use reserve::{ReserveBegin, Reserved, given_back};

#[cfg(feature = "connect")]
pub use driver::connect;
#[cfg(feature = "tokio")]
pub use driver::{Pump, RedisLimiter, RedisReservation, failure_text};
#[cfg(feature = "tokio")]
pub use sentinel::SentinelConnection;

/// The README's examples, compiled (and run where they can) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
