//! Lock-free rate limiting with exact answers.
//!
//! # The model
//!
//! A [`TokenBucket`] holds at most `b` tokens (the *burst*) and earns one back
//! every `T` (the *emission interval*, `1/rate`). It starts full. A request
//! for `n` tokens is admitted if `n` are there, and then takes them; otherwise
//! it is refused and told exactly how long until they will be.
//!
//! The bucket is kept as GCRA, the generic cell rate algorithm: instead of a
//! token count and a timestamp, it stores one number, the **theoretical
//! arrival time** (TAT) — the instant at which the bucket would be full again.
//! With the tolerance `τ = b·T`:
//!
//! - tokens at `now` = `(now + τ − max(TAT, now)) / T`, at most `b`;
//! - taking `n` moves TAT to `max(TAT, now) + n·T`, allowed iff that is at
//!   most `now + τ`;
//! - a refusal leaves TAT alone and says `retry_after = TAT' − τ − now`, exact
//!   to the nanosecond; `reset_after` is how long until full.
//!
//! All of it is integer nanoseconds in one `AtomicU64`, changed by a
//! compare-exchange loop: no locks, no allocation, no float drift, and a
//! refused check writes nothing. When `T` is not a whole number of
//! nanoseconds (3/s), it is rounded **up**, so the limiter never admits more
//! than the stated rate; the error is under 1 ns per token. Every concurrent
//! path is model-checked with loom.
//!
//! Time comes from a [`Clock`]: [`MonotonicClock`] by default (a fast TSC
//! read where the kernel vouches for the TSC, `Instant` elsewhere), or a
//! [`ManualClock`] that tests move by hand. Every call has an explicit-time
//! twin (`check()` is `check_at(clock.now())`), so simulations need no clock
//! at all. A clock reading that goes backwards never adds tokens.
//!
//! # Examples
//!
//! ```
//! use ratebound::{ManualClock, Quota, TokenBucket};
//! use std::time::Duration;
//!
//! // 2 per second, 3 at once.
//! let clock = ManualClock::new();
//! let bucket = TokenBucket::with_clock(Quota::parse("2/s burst 3")?, clock.clone());
//!
//! let decisions: Vec<bool> = (0..4).map(|_| bucket.check().is_allowed()).collect();
//! assert_eq!(decisions, [true, true, true, false]);
//!
//! let refused = bucket.check();
//! assert_eq!(refused.retry_after(), Duration::from_millis(500));
//! assert_eq!(refused.remaining(), 0);
//!
//! clock.advance(Duration::from_millis(500));
//! let d = bucket.check();
//! assert!(d.is_allowed());
//! assert_eq!(d.reset_after(), Duration::from_millis(1500)); // until full again
//!
//! // More than the burst can never succeed: that is an error, not a denial.
//! assert_eq!(bucket.check_n(4).unwrap_err().code(), "insufficient_capacity");
//! # Ok::<(), ratebound::Error>(())
//! ```
//!
//! # Five algorithms, one interface
//!
//! The [`Limiter`] trait gives every algorithm the same calls and the same
//! [`Decision`], so switching is a one-line change:
//!
//! | type | algorithm | state |
//! |---|---|---|
//! | [`TokenBucket`] | GCRA token bucket: rate r, burst b | one `AtomicU64` |
//! | [`FixedWindow`] | `limit` per aligned window (up to 2× across a boundary) | one `AtomicU64` |
//! | [`SlidingWindow`] | weighted two-window counter | one `AtomicU64` |
//! | [`SlidingLog`] | exact: one timestamp per request | `O(limit)` under a mutex |
//! | [`LeakyBucket`] | queue: departures exactly `T` apart, bounded wait | one `AtomicU64` |
//!
//! [`AllOf`] checks several as one, all or nothing. [`KeyedLimiter`] keeps
//! a token bucket, fixed window or sliding window per key (API key, user,
//! IP), with memory bounded by cleanup and a `max_keys` cap. `docs/algorithms.md` in
//! the repository compares them, with the boundary-burst numbers the test
//! vectors prove.
//!
//! # Modules for front doors
//!
//! - [`http`]: the protocol-neutral HTTP pieces — `Retry-After` rounding,
//!   the IETF `RateLimit` / `RateLimit-Policy` values, client IPs behind
//!   trusted proxies, IPv6 prefix grouping, a lock-free concurrency cap —
//!   fixed or learned from latency ([`http::AdaptiveConcurrency`]), with
//!   priorities and an optional short queue.
//! - [`any`]: limiters, keys and a whole HTTP middleware decision
//!   ([`gate::Gate`]) chosen at run time from loosely typed options — the
//!   surface the Python and Node bindings wrap, so they decide nothing
//!   themselves.
//! - [`fingerprint`]: 128-bit keyed fingerprints (SipHash-2-4-128) for
//!   storing keys of any length in 16 bytes.
//!
//! # The source, layer by layer
//!
//! Each folder of `src/` is one layer, built on the ones before it:
//!
//! | folder | what it holds |
//! |---|---|
//! | `sync/` | the loom shim (std or loom atomics), the one compare-exchange loop (`state`), and the body every one-word limiter shares (`word`) |
//! | `algorithms/` | the five algorithms and `AllOf`, each in its file (the capacity check every limiter shares is `error.rs`'s) |
//! | `keyed/` | `KeyedLimiter`: the per-key algorithm (`math`), the sharded table and eviction (`shards`, `keys`), several policies for one key (`all_of`), and `WordRule` for tables kept elsewhere (shared memory) |
//! | `http/` | the protocol pieces: quota fields, client IP and proxies, the concurrency cap (`concurrency`), its adaptive limit and priorities (`adaptive`) and its short queue (`queue`) |
//! | `any/` | the run-time surface the bindings wrap: loose numbers, limiters and waiters chosen by name (`AnyClock` is `clock.rs`', `Acquire` `limiter.rs`') |
//! | `gate/` | the top layer: a middleware's whole decision (its names are re-exported from `any`) |
//!
//! `gate/` is what every HTTP front door (tower, ASGI, WSGI, Django,
//! Express, Fastify) calls: `spec` parses a dynamic language's options by
//! name (every default and rule), `options` holds them typed, `request`
//! is what a request brings, the `Gate` decides, and
//! [`Gate::admit`](gate::Gate::admit) runs the request sequence (exempt →
//! concurrency place, by priority → critical → shed → key → decide →
//! report) and hands
//! back the verdict with the place as a guard. A front door only converts
//! its framework's request in and the verdict out.
//!
//! # Features
//!
//! - `tokio`: `until_ready`, `until_n_ready` and `wait_n`, which sleep on
//!   tokio's timer and give tokens back if the future is dropped;
//!   `wait::drive`, the async loop of every wait's steps; and
//!   `KeyedLimiter::spawn_cleanup`, an optional interval cleanup; and
//!   `TokioClock`, a clock over tokio's (in tests, paused) time.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod algorithms;
pub mod any;
mod clock;
mod decision;
mod error;
pub mod fingerprint;
pub mod gate;
pub mod http;
mod keyed;
mod limiter;
pub mod outbound;
pub mod pause;
mod quota;
mod sync;
#[cfg(feature = "tokio")]
mod tokio_wait;
pub mod wait;

pub use algorithms::{
    AllOf, FixedWindow, LeakyBucket, MAX_LOG_LIMIT, MAX_WINDOW_LIMIT, SlidingLog, SlidingWindow,
    TokenBucket,
};
pub use any::{BoxFuture, KeyedLimit, LimitCheck};
pub use clock::{Clock, MAX_TIME_NANOS, ManualClock, MonotonicClock};
pub use decision::Decision;
pub use error::{Error, ErrorKind};
pub use keyed::{KeyedAlgorithm, KeyedLimiter, Overflow, WordRule};
pub use limiter::{Limiter, Permit, Reservation};
pub use pause::Resumed;
pub use quota::{MAX_SPAN_NANOS, Quota};
#[cfg(feature = "tokio")]
pub use tokio_wait::{CleanupTask, TokioClock};

/// The examples of the READMEs and docs/, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
#[doc = include_str!("../../../README.md")]
#[doc = include_str!("../../../docs/algorithms.md")]
struct ReadmeDoctests;
