//! Keys as a dynamic language gives them ([`Key`]: text, bytes, integers),
//! stored as 128-bit keyed fingerprints ([`Fingerprinter`]), and
//! [`AnyKeyed`], a keyed limiter over them.

use std::net::IpAddr;
use std::time::Duration;

use super::numbers::{MAX_EXACT, Rate, quota, window_args};
use super::{Acquire, AnyClock, Waiter};
use crate::error::show;
use crate::outbound::Learned;
use crate::wait::Step;
use crate::{Clock, Decision, Error, KeyedAlgorithm, KeyedLimiter, Overflow};

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

impl Key<'static> {
    /// An integer key from a number as JavaScript passes it (a double): a
    /// whole number of magnitude at most 2^53, as every whole number a
    /// binding takes (see [`whole`](super::whole)). `1.0` is the key `1`,
    /// the same key as Python's `1`.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `key` for NaN, an infinity, a
    /// fraction or a magnitude above 2^53.
    ///
    /// # Examples
    /// ```
    /// use ratebound::any::Key;
    /// assert_eq!(Key::from_f64(-7.0)?, Key::Int(-7));
    /// assert_eq!(Key::from_f64(2f64.powi(53))?, Key::Int(1 << 53));
    /// assert!(Key::from_f64(0.5).is_err());
    /// assert!(Key::from_f64(2f64.powi(54)).is_err());
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn from_f64(value: f64) -> Result<Key<'static>, Error> {
        let reason = if !value.is_finite() {
            "must be a finite whole number"
        } else if value.fract() != 0.0 {
            "must be a whole number"
        } else if value.abs() > MAX_EXACT {
            "must be at most 2^53 in magnitude"
        } else {
            // Whole and within 2^53: the conversion is exact.
            return Ok(Key::Int(value as i128));
        };
        Err(Error::InvalidNumber {
            name: "key",
            value: show(value),
            reason,
        })
    }
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

    /// Fingerprints under a given seed (processes sharing state share it).
    pub fn with_seed(seed: Seed) -> Fingerprinter {
        Fingerprinter { seed }
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

/// The algorithm of a per-key limiter (and a middleware policy) when none
/// is named.
pub const DEFAULT_ALGORITHM: &str = "token_bucket";

/// The per-key algorithm from loosely typed options: `"token_bucket"` (the
/// default, [`DEFAULT_ALGORITHM`], for `None`) with a rate (and optional
/// burst), `"fixed_window"` / `"sliding_window"` with a limit and a window
/// in seconds.
///
/// # Errors
/// [`Error::Parse`] for an unknown algorithm name; [`Error::InvalidNumber`]
/// for a missing or unusable number; the algorithms' own errors.
pub fn keyed_algorithm<'n>(
    algorithm: impl Into<Option<&'n str>>,
    rate: Option<Rate<'_>>,
    burst: Option<f64>,
    limit: Option<f64>,
    window: Option<f64>,
) -> Result<KeyedAlgorithm, Error> {
    let missing = |name| Error::Missing { name };
    let algorithm = algorithm.into().unwrap_or(DEFAULT_ALGORITHM);
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

/// The overflow policy by name: `"evict"` / `"evict_least_recent"` (the
/// default, for `None`) or `"reject"` / `"reject_new_keys"`.
///
/// # Errors
/// [`Error::Parse`] for any other name.
pub fn overflow<'n>(name: impl Into<Option<&'n str>>) -> Result<Overflow, Error> {
    match name.into().unwrap_or("evict") {
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
    algorithm: KeyedAlgorithm,
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
            algorithm,
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
    /// As [`AnyLimiter::acquire_step`](super::AnyLimiter::acquire_step).
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

    /// A wait for `n` tokens of any key starting now (see
    /// [`AnyLimiter::waiter`](super::AnyLimiter::waiter)).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for a bad `timeout`.
    pub fn waiter(
        &self,
        n: u64,
        timeout: Option<f64>,
        host_max_sleep: u64,
    ) -> Result<Waiter, Error> {
        let max_sleep = host_max_sleep.min(self.limiter.clock().max_sleep());
        Waiter::new(n, timeout, self.now(), max_sleep)
    }

    /// Advances `waiter` for `key` at the clock's time. A keyed limiter does
    /// not reserve (a key's state may be evicted), so a waiter on it holds
    /// nothing and needs no abandoning.
    ///
    /// # Errors
    /// As [`acquire_step`](Self::acquire_step).
    pub fn wait_step(&self, waiter: &mut Waiter, key: Key<'_>) -> Result<Step, Error> {
        let now = self.now();
        waiter.step(now, |n, deadline| self.acquire_step(key, n, deadline, now))
    }

    /// Empties `key`'s bucket for `seconds` from now (see
    /// [`KeyedLimiter::pause_at`]).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for `seconds` that are not a finite number
    /// from 0 to a day ([`MAX_PAUSE`](super::MAX_PAUSE)); as
    /// [`KeyedLimiter::pause_at`] ([`Error::Unsupported`] for the windows).
    pub fn pause(&self, key: Key<'_>, seconds: f64) -> Result<(), Error> {
        let d = super::numbers::pause_seconds(seconds)?;
        self.limiter.pause_at(&self.fingerprint(key), d, self.now())
    }

    /// Lifts `key`'s pause now (see [`KeyedLimiter::resume_at`]).
    ///
    /// # Errors
    /// As [`KeyedLimiter::resume_at`] ([`Error::Unsupported`] for the
    /// windows).
    pub fn resume(&self, key: Key<'_>) -> Result<crate::Resumed, Error> {
        self.limiter.resume_at(&self.fingerprint(key), self.now())
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

    /// The algorithm's name (`"token_bucket"`, `"fixed_window"` or
    /// `"sliding_window"`).
    pub fn algorithm(&self) -> &'static str {
        self.limiter.algorithm()
    }

    /// The algorithm and its parameters, as configured: a token bucket's
    /// quota is the ceiling of what outbound adapters learn.
    pub fn keyed_algorithm(&self) -> KeyedAlgorithm {
        self.algorithm
    }

    /// What outbound adapters learned of `key`'s partner (see
    /// [`KeyedLimiter::learned`]).
    pub fn learned(&self, key: Key<'_>) -> Learned {
        self.limiter.learned(&self.fingerprint(key))
    }

    /// Replaces `key`'s learned word `seen` with `next` (see
    /// [`KeyedLimiter::adapt`]); whether it did.
    ///
    /// # Errors
    /// As [`KeyedLimiter::adapt`] ([`Error::Unsupported`] for the windows).
    pub fn adapt(&self, key: Key<'_>, seen: Learned, next: Learned) -> Result<bool, Error> {
        self.limiter
            .adapt_at(&self.fingerprint(key), seen, next, self.now())
    }
}
