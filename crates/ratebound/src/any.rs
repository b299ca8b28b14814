//! Limiters chosen at run time, from loosely typed options: the one surface
//! the Python and Node bindings wrap, so that they only convert types and
//! errors and every language makes the same decisions.
//!
//! - [`AnyClock`]: the monotonic clock or a [`ManualClock`], picked at run
//!   time.
//! - [`seconds`] and [`whole`]: numbers as a dynamic language passes them
//!   (a float), checked and named in the error.
//! - [`AnyLimiter`]: one of the five algorithms (or an [`AllOf`]) behind one
//!   type, with [`acquire_step`](AnyLimiter::acquire_step) — the one step of
//!   a wait that any event loop can drive.
//! - [`AnyKeyed`]: a [`KeyedLimiter`] over [`Key`]s (text, bytes or
//!   integers) stored as 128-bit keyed fingerprints, so a key costs the same
//!   few bytes whatever its length, and none of it lives on a script
//!   engine's heap.
//! - [`Gate`]: an HTTP middleware's whole decision (key, all-or-nothing
//!   policies, status, `Retry-After`, quota fields, body), for the Python and
//!   Node middleware.
//!
//! # Examples
//! ```
//! use ratebound::any::{AnyClock, AnyLimiter, Acquire, Rate};
//! use ratebound::{Limiter, ManualClock};
//!
//! let clock = ManualClock::new();
//! let tb = AnyLimiter::token_bucket(Rate::Text("2/s"), Some(3.0), AnyClock::Manual(clock.clone()))?;
//! assert!(tb.try_acquire());
//! let d = tb.check_n(2)?;
//! assert_eq!(d.remaining(), 0);
//! // A wait of 0.5 s is within the deadline: the tokens are reserved now.
//! let step = tb.acquire_step(1, Some(1_000_000_000), tb.now())?;
//! assert!(matches!(step, Acquire::Reserved { wait_nanos: 500_000_000, .. }));
//! # Ok::<(), ratebound::Error>(())
//! ```

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    AllOf, Clock, Decision, Error, FixedWindow, KeyedAlgorithm, KeyedLimiter, LeakyBucket, Limiter,
    MAX_SPAN_NANOS, ManualClock, MonotonicClock, Overflow, Permit, Quota, SlidingLog,
    SlidingWindow, TokenBucket,
};

/// The monotonic clock or a manual one, chosen at run time.
#[derive(Clone, Debug)]
pub enum AnyClock {
    /// The process's monotonic clock.
    Monotonic(MonotonicClock),
    /// A clock moved only by hand, for tests.
    Manual(ManualClock),
    /// Any other clock.
    Shared(Arc<dyn Clock>),
}

impl std::fmt::Debug for dyn Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

impl Default for AnyClock {
    fn default() -> Self {
        AnyClock::Monotonic(MonotonicClock::new())
    }
}

impl Clock for AnyClock {
    #[inline]
    fn now(&self) -> u64 {
        match self {
            AnyClock::Monotonic(c) => c.now(),
            AnyClock::Manual(c) => c.now(),
            AnyClock::Shared(c) => c.now(),
        }
    }
}

/// A number as an error message shows it: plain decimals for ordinary
/// values, scientific notation for huge or tiny ones (`1e300`, not 301
/// digits).
fn show(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude != 0.0 && !(1e-4..1e16).contains(&magnitude) {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

/// `value` seconds as a [`Duration`] (rounded to the nearest nanosecond).
///
/// # Errors
/// [`Error::InvalidNumber`] naming `name` for NaN, an infinity, a negative
/// value or more than 2^60 ns (about 36 years).
///
/// # Examples
/// ```
/// use ratebound::any::seconds;
/// assert_eq!(seconds("window", 0.25)?.as_nanos(), 250_000_000);
/// assert_eq!(seconds("window", -1.0).unwrap_err().to_string(),
///            "invalid window -1: must be a finite number of seconds, at least 0");
/// # Ok::<(), ratebound::Error>(())
/// ```
pub fn seconds(name: &'static str, value: f64) -> Result<Duration, Error> {
    if !value.is_finite() || value < 0.0 {
        return Err(Error::InvalidNumber {
            name,
            value: show(value),
            reason: "must be a finite number of seconds, at least 0",
        });
    }
    let nanos = (value * 1e9).round();
    if nanos > MAX_SPAN_NANOS as f64 {
        return Err(Error::InvalidNumber {
            name,
            value: show(value),
            reason: "must be at most 2^60 ns (about 36 years)",
        });
    }
    // In range and whole: the conversion is exact.
    Ok(Duration::from_nanos(nanos as u64))
}

/// `value` as a whole number of at least `min` and at most 2^53 (the largest
/// integer a double holds exactly).
///
/// # Errors
/// [`Error::InvalidNumber`] naming `name` for NaN, an infinity, a fraction
/// or a value out of range.
pub fn whole(name: &'static str, value: f64, min: u64) -> Result<u64, Error> {
    const MAX_EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    let reason = if !value.is_finite() {
        "must be a finite whole number"
    } else if value.fract() != 0.0 {
        "must be a whole number"
    } else if value < min as f64 {
        if min == 0 {
            "must not be negative"
        } else {
            "must be at least 1"
        }
    } else if value > MAX_EXACT {
        "must be at most 2^53"
    } else {
        return Ok(value as u64);
    };
    Err(Error::InvalidNumber {
        name,
        value: show(value),
        reason,
    })
}

/// A rate as a dynamic language gives it.
#[derive(Clone, Copy, Debug)]
pub enum Rate<'a> {
    /// Tokens per second.
    PerSecond(f64),
    /// A quota string for [`Quota::parse`], e.g. `"100/minute"` or
    /// `"10/s burst 20"`.
    Text(&'a str),
}

/// The quota for `rate`, with `burst` (a whole number ≥ 1) replacing the
/// rate's own burst when given.
///
/// # Errors
/// The [`Quota`] constructors' errors; [`Error::InvalidNumber`] for a burst
/// that is not a whole number ≥ 1.
pub fn quota(rate: Rate<'_>, burst: Option<f64>) -> Result<Quota, Error> {
    let q = match rate {
        Rate::PerSecond(r) => Quota::per_second(r)?,
        Rate::Text(t) => Quota::parse(t)?,
    };
    match burst {
        Some(b) => q.with_burst(whole("burst", b, 1)?),
        None => Ok(q),
    }
}

/// One of the algorithms, chosen at run time. Every call is a `match` and a
/// direct call: no dynamic dispatch on the hot path.
pub enum AnyLimiter {
    /// See [`TokenBucket`].
    TokenBucket(TokenBucket<AnyClock>),
    /// See [`FixedWindow`].
    FixedWindow(FixedWindow<AnyClock>),
    /// See [`SlidingWindow`].
    SlidingWindow(SlidingWindow<AnyClock>),
    /// See [`SlidingLog`].
    SlidingLog(SlidingLog<AnyClock>),
    /// See [`LeakyBucket`].
    LeakyBucket(LeakyBucket<AnyClock>),
    /// See [`AllOf`].
    AllOf(AllOf),
}

macro_rules! each {
    ($self:expr, $l:ident => $e:expr) => {
        match $self {
            AnyLimiter::TokenBucket($l) => $e,
            AnyLimiter::FixedWindow($l) => $e,
            AnyLimiter::SlidingWindow($l) => $e,
            AnyLimiter::SlidingLog($l) => $e,
            AnyLimiter::LeakyBucket($l) => $e,
            AnyLimiter::AllOf($l) => $e,
        }
    };
}

/// What one step of an acquisition found (see [`AnyLimiter::acquire_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// Taken now: go ahead.
    Admitted,
    /// Taken ahead of time: go ahead after `wait_nanos`. If the waiter is
    /// cancelled before then, [`release`](Limiter::release) the permit.
    Reserved {
        /// How long to wait.
        wait_nanos: u64,
        /// What to give back if the waiter gives up.
        permit: Permit,
    },
    /// Nothing taken (the algorithm cannot reserve): sleep `wait_nanos`,
    /// then take another step.
    Retry {
        /// How long to sleep, at least 1 ns.
        wait_nanos: u64,
    },
}

fn window_args(limit: f64, window: f64) -> Result<(u64, Duration), Error> {
    Ok((whole("limit", limit, 1)?, seconds("window", window)?))
}

impl AnyLimiter {
    /// A token bucket: `rate` per second (or a quota string), `burst`
    /// replacing the rate's own burst when given.
    ///
    /// # Errors
    /// As [`quota`].
    pub fn token_bucket(
        rate: Rate<'_>,
        burst: Option<f64>,
        clock: AnyClock,
    ) -> Result<AnyLimiter, Error> {
        Ok(AnyLimiter::TokenBucket(TokenBucket::with_clock(
            quota(rate, burst)?,
            clock,
        )))
    }

    /// A fixed window of `limit` per `window` seconds.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for a limit or window that is not a number
    /// of the right kind; [`FixedWindow::new`]'s errors.
    pub fn fixed_window(limit: f64, window: f64, clock: AnyClock) -> Result<AnyLimiter, Error> {
        let (limit, window) = window_args(limit, window)?;
        FixedWindow::with_clock(limit, window, clock).map(AnyLimiter::FixedWindow)
    }

    /// A sliding window counter of `limit` per `window` seconds.
    ///
    /// # Errors
    /// As [`fixed_window`](Self::fixed_window), with [`SlidingWindow::new`].
    pub fn sliding_window(limit: f64, window: f64, clock: AnyClock) -> Result<AnyLimiter, Error> {
        let (limit, window) = window_args(limit, window)?;
        SlidingWindow::with_clock(limit, window, clock).map(AnyLimiter::SlidingWindow)
    }

    /// A sliding log of `limit` per `window` seconds.
    ///
    /// # Errors
    /// As [`fixed_window`](Self::fixed_window), with [`SlidingLog::new`].
    pub fn sliding_log(limit: f64, window: f64, clock: AnyClock) -> Result<AnyLimiter, Error> {
        let (limit, window) = window_args(limit, window)?;
        SlidingLog::with_clock(limit, window, clock).map(AnyLimiter::SlidingLog)
    }

    /// A leaky bucket (a queue): one departure per `1/rate` s, admitting a
    /// request only if it leaves within `max_delay` seconds.
    ///
    /// # Errors
    /// As [`quota`] and [`seconds`]; [`LeakyBucket::new`]'s errors.
    pub fn leaky_bucket(
        rate: Rate<'_>,
        max_delay: f64,
        clock: AnyClock,
    ) -> Result<AnyLimiter, Error> {
        let q = quota(rate, None)?;
        LeakyBucket::with_clock(q, seconds("max_delay", max_delay)?, clock)
            .map(AnyLimiter::LeakyBucket)
    }

    /// All of `members` at once (see [`AllOf`]).
    ///
    /// # Errors
    /// [`Error::NoLimiters`] for an empty list.
    pub fn all_of(members: Vec<Arc<AnyLimiter>>) -> Result<AnyLimiter, Error> {
        let members = members.into_iter().map(|m| m as Arc<dyn Limiter>).collect();
        AllOf::new(members).map(AnyLimiter::AllOf)
    }

    /// The algorithm's name: `"token_bucket"`, `"fixed_window"`,
    /// `"sliding_window"`, `"sliding_log"`, `"leaky_bucket"` or `"all_of"`.
    pub fn algorithm(&self) -> &'static str {
        match self {
            AnyLimiter::TokenBucket(_) => "token_bucket",
            AnyLimiter::FixedWindow(_) => "fixed_window",
            AnyLimiter::SlidingWindow(_) => "sliding_window",
            AnyLimiter::SlidingLog(_) => "sliding_log",
            AnyLimiter::LeakyBucket(_) => "leaky_bucket",
            AnyLimiter::AllOf(_) => "all_of",
        }
    }

    /// One token now or not: the decision without building a [`Decision`].
    #[inline]
    pub fn try_acquire(&self) -> bool {
        each!(self, l => l.check_at(l.now()).is_allowed())
    }

    /// Takes `n` tokens at `now` even if they are not there yet, as long as
    /// they will be within `max_wait` (`None`: any wait): the wait and the
    /// permit that [`release`](Limiter::release) gives back.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the algorithms that cannot reserve (the
    /// windows and the log); otherwise as [`TokenBucket::reserve_n_at`].
    pub fn reserve_n_at(
        &self,
        n: u64,
        max_wait: Option<Duration>,
        now: u64,
    ) -> Result<(u64, Permit), Error> {
        let max_wait = max_wait.unwrap_or(Duration::MAX);
        let r = match self {
            AnyLimiter::TokenBucket(b) => b.reserve_n_at(n, max_wait, now)?,
            AnyLimiter::LeakyBucket(b) => b.reserve_n_at(n, max_wait, now)?,
            other => {
                return Err(Error::Unsupported {
                    operation: "reservations",
                    algorithm: other.algorithm(),
                });
            }
        };
        // The tokens stay taken: the caller holds the permit now.
        Ok((r.wait, r.permit))
    }

    /// One step of waiting for `n` tokens at `now`, to be admitted no later
    /// than the clock time `deadline` (`None`: no deadline). A bucket
    /// reserves, so the caller sleeps once and goes; the windows and the log
    /// cannot, so the caller sleeps until they would admit and steps again.
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] at once, taking nothing, when the wait
    /// would end after the deadline; [`Error::InsufficientCapacity`] /
    /// [`Error::InvalidLimit`]-style errors for an `n` that can never pass.
    pub fn acquire_step(&self, n: u64, deadline: Option<u64>, now: u64) -> Result<Acquire, Error> {
        let max_wait = deadline.map(|d| Duration::from_nanos(d.saturating_sub(now)));
        match self {
            AnyLimiter::TokenBucket(_) | AnyLimiter::LeakyBucket(_) => {
                let (wait_nanos, permit) = self.reserve_n_at(n, max_wait, now)?;
                Ok(if wait_nanos == 0 {
                    Acquire::Admitted
                } else {
                    Acquire::Reserved { wait_nanos, permit }
                })
            }
            _ => {
                let d = self.check_n_at(n, now)?;
                if d.is_allowed() {
                    return Ok(Acquire::Admitted);
                }
                let wait = d.retry_after_nanos().max(1);
                match max_wait {
                    Some(max) if u128::from(wait) > max.as_nanos() => {
                        Err(Error::DeadlineExceeded {
                            wait: Duration::from_nanos(wait),
                            max_wait: max,
                        })
                    }
                    _ => Ok(Acquire::Retry { wait_nanos: wait }),
                }
            }
        }
    }

    /// Replaces a token bucket's quota (see [`TokenBucket::set_quota_at`]).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the other algorithms.
    pub fn set_quota_at(&self, quota: Quota, now: u64) -> Result<(), Error> {
        match self {
            AnyLimiter::TokenBucket(b) => {
                b.set_quota_at(quota, now);
                Ok(())
            }
            other => Err(Error::Unsupported {
                operation: "changing the quota",
                algorithm: other.algorithm(),
            }),
        }
    }
}

impl Limiter for AnyLimiter {
    #[inline]
    fn now(&self) -> u64 {
        each!(self, l => l.now())
    }
    fn limit(&self) -> u64 {
        each!(self, l => l.limit())
    }
    #[inline]
    fn check_at(&self, now: u64) -> Decision {
        each!(self, l => l.check_at(now))
    }
    #[inline]
    fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        each!(self, l => l.check_n_at(n, now))
    }
    fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        each!(self, l => l.peek_n_at(n, now))
    }
    fn acquire_n_at(&self, n: u64, now: u64) -> Result<(Decision, Option<Permit>), Error> {
        each!(self, l => l.acquire_n_at(n, now))
    }
    fn release(&self, permit: Permit) {
        each!(self, l => l.release(permit))
    }
    fn available_at(&self, now: u64) -> u64 {
        each!(self, l => l.available_at(now))
    }
}

/// A key as a dynamic language gives it. The three kinds never collide:
/// `"1"`, `b"1"` and `1` are three keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key<'a> {
    /// A string.
    Text(&'a str),
    /// A byte string.
    Bytes(&'a [u8]),
    /// An integer.
    Int(i128),
}

pub use crate::fingerprint::Fingerprint;
use crate::fingerprint::Seed;

/// Makes [`Fingerprint`]s (one SipHash-2-4-128 pass) with a random key of
/// its own: distinct keys collide with probability about n²/2^129 for n
/// keys, which an outsider cannot steer without the key; a 64 KiB key is
/// stored in 16 bytes.
#[derive(Clone, Copy, Debug)]
pub struct Fingerprinter {
    seed: Seed,
}

impl Default for Fingerprinter {
    fn default() -> Self {
        Fingerprinter {
            seed: Seed::random(),
        }
    }
}

impl Fingerprinter {
    /// A new random key.
    pub fn new() -> Fingerprinter {
        Fingerprinter::default()
    }

    /// The fingerprint of `bytes` in the namespace `kind`.
    #[inline(always)]
    pub fn of(&self, kind: u8, bytes: &[u8]) -> Fingerprint {
        self.seed.fingerprint(kind, bytes)
    }

    /// The fingerprint of a [`Key`].
    pub fn key(&self, key: Key<'_>) -> Fingerprint {
        match key {
            Key::Text(s) => self.of(0, s.as_bytes()),
            Key::Bytes(b) => self.of(1, b),
            Key::Int(i) => self.of(2, &i.to_le_bytes()),
        }
    }

    /// The fingerprint of an address (its own namespace, so no header value
    /// can name one).
    pub fn ip(&self, ip: IpAddr) -> Fingerprint {
        match ip {
            IpAddr::V4(v4) => self.of(3, &v4.octets()),
            IpAddr::V6(v6) => self.of(3, &v6.octets()),
        }
    }
}

/// The per-key algorithm from loosely typed options: `"token_bucket"` with a
/// rate (and optional burst), `"fixed_window"` / `"sliding_window"` with a
/// limit and a window in seconds.
///
/// # Errors
/// [`Error::Parse`] for an unknown algorithm name; [`Error::InvalidNumber`]
/// for a missing or unusable number; the algorithms' own errors.
pub fn keyed_algorithm(
    algorithm: &str,
    rate: Option<Rate<'_>>,
    burst: Option<f64>,
    limit: Option<f64>,
    window: Option<f64>,
) -> Result<KeyedAlgorithm, Error> {
    let missing = |name| Error::Missing { name };
    match algorithm {
        "token_bucket" => Ok(KeyedAlgorithm::TokenBucket(quota(
            rate.ok_or(missing("rate"))?,
            burst,
        )?)),
        "fixed_window" | "sliding_window" => {
            let (limit, window) = window_args(
                limit.ok_or(missing("limit"))?,
                window.ok_or(missing("window"))?,
            )?;
            Ok(if algorithm == "fixed_window" {
                KeyedAlgorithm::FixedWindow { limit, window }
            } else {
                KeyedAlgorithm::SlidingWindow { limit, window }
            })
        }
        other => Err(Error::Parse {
            input: other.to_string(),
            reason: "a keyed algorithm is token_bucket, fixed_window or sliding_window",
        }),
    }
}

/// The overflow policy by name: `"evict"` / `"evict_least_recent"` or
/// `"reject"` / `"reject_new_keys"`.
///
/// # Errors
/// [`Error::Parse`] for any other name.
pub fn overflow(name: &str) -> Result<Overflow, Error> {
    match name {
        "evict" | "evict_least_recent" => Ok(Overflow::EvictLeastRecent),
        "reject" | "reject_new_keys" => Ok(Overflow::RejectNewKeys),
        other => Err(Error::Parse {
            input: other.to_string(),
            reason: "overflow is \"evict\" or \"reject\"",
        }),
    }
}

/// A [`KeyedLimiter`] over [`Key`]s, stored as [`Fingerprint`]s: about
/// 36 bytes per tracked key whatever the key's length.
pub struct AnyKeyed {
    limiter: KeyedLimiter<Fingerprint, AnyClock>,
    fingerprints: Fingerprinter,
}

impl AnyKeyed {
    /// A keyed limiter applying `algorithm` to every key, with at most
    /// `max_keys` keys (`None`: no cap) handled by `overflow` at the cap.
    ///
    /// # Errors
    /// [`KeyedLimiter::new`]'s and [`KeyedLimiter::with_max_keys`]'s errors.
    pub fn new(
        algorithm: KeyedAlgorithm,
        max_keys: Option<usize>,
        overflow: Overflow,
        clock: AnyClock,
    ) -> Result<AnyKeyed, Error> {
        let mut limiter = KeyedLimiter::new(algorithm)?.with_clock(clock);
        if let Some(max) = max_keys {
            limiter = limiter.with_max_keys(max, overflow)?;
        }
        Ok(AnyKeyed {
            limiter,
            fingerprints: Fingerprinter::new(),
        })
    }

    /// The limiter underneath, for the rest of its API.
    pub fn inner(&self) -> &KeyedLimiter<Fingerprint, AnyClock> {
        &self.limiter
    }

    /// The stored form of `key`.
    #[inline]
    pub fn fingerprint(&self, key: Key<'_>) -> Fingerprint {
        self.fingerprints.key(key)
    }

    /// The clock reading the limiter decides with.
    #[inline]
    pub fn now(&self) -> u64 {
        self.limiter.clock().now()
    }

    /// `n` for `key` now (see [`KeyedLimiter::check_n_at`]).
    ///
    /// # Errors
    /// As [`KeyedLimiter::check_n_at`].
    #[inline]
    pub fn check_n(&self, key: Key<'_>, n: u64) -> Result<Decision, Error> {
        self.limiter
            .check_n_at(&self.fingerprint(key), n, self.now())
    }

    /// `n` for `key` at `now`.
    ///
    /// # Errors
    /// As [`KeyedLimiter::check_n_at`].
    pub fn check_n_at(&self, key: Key<'_>, n: u64, now: u64) -> Result<Decision, Error> {
        self.limiter.check_n_at(&self.fingerprint(key), n, now)
    }

    /// One for `key` now, the decision only.
    ///
    /// # Errors
    /// As [`KeyedLimiter::check_n_at`] ([`Error::TooManyKeys`]).
    #[inline]
    pub fn try_acquire(&self, key: Key<'_>) -> Result<bool, Error> {
        self.check_n(key, 1).map(|d| d.is_allowed())
    }

    /// One step of waiting for `n` tokens for `key`; nothing is reserved
    /// (per-key state may be evicted): sleep `Retry::wait_nanos` and step
    /// again.
    ///
    /// # Errors
    /// As [`AnyLimiter::acquire_step`].
    pub fn acquire_step(
        &self,
        key: Key<'_>,
        n: u64,
        deadline: Option<u64>,
        now: u64,
    ) -> Result<Acquire, Error> {
        let d = self.check_n_at(key, n, now)?;
        if d.is_allowed() {
            return Ok(Acquire::Admitted);
        }
        let wait = d.retry_after_nanos().max(1);
        match deadline {
            Some(deadline) if now.saturating_add(wait) > deadline => Err(Error::DeadlineExceeded {
                wait: Duration::from_nanos(wait),
                max_wait: Duration::from_nanos(deadline.saturating_sub(now)),
            }),
            _ => Ok(Acquire::Retry { wait_nanos: wait }),
        }
    }

    /// Tokens `key` could take now.
    pub fn available(&self, key: Key<'_>) -> u64 {
        self.limiter.available(&self.fingerprint(key))
    }

    /// Forgets `key`; whether it was tracked.
    pub fn remove(&self, key: Key<'_>) -> bool {
        self.limiter.remove(&self.fingerprint(key))
    }

    /// Gives `key` a fresh state.
    pub fn reset(&self, key: Key<'_>) {
        self.limiter.reset(&self.fingerprint(key));
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.limiter.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.limiter.is_empty()
    }

    /// Drops the keys whose state is fresh (see [`KeyedLimiter::cleanup`]).
    pub fn cleanup(&self) -> usize {
        self.limiter.cleanup()
    }

    /// Drops the keys idle for at least `idle` (see
    /// [`KeyedLimiter::cleanup_idle`]).
    pub fn cleanup_idle(&self, idle: Duration) -> usize {
        self.limiter.cleanup_idle(idle)
    }

    /// The cap on tracked keys.
    pub fn max_keys(&self) -> usize {
        self.limiter.max_keys()
    }
}

pub use crate::gate::{
    DEFAULT_MAX_KEYS, Decisions, Field, Fields, Gate, GateOptions, KeySource, Loose, MissingKey,
    QuotaHeaders, RefusalBody, Request, Verdict,
};
