//! What a global limit counts ([`Algorithm`]) and how it maps to its
//! script in Redis and the script's fixed arguments.

use std::time::Duration;

use ratebound::{Error, KeyedAlgorithm, KeyedLimiter, Quota};

use crate::script::{FIXED_WINDOW, GCRA, SLIDING_WINDOW, Script};

/// The largest integer a double holds exactly: the scripts' arithmetic is
/// exact below it.
const MAX_EXACT: u128 = 1 << 53;

/// What a global limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// A GCRA token bucket: `rate` per second, bursts of `burst`.
    TokenBucket(Quota),
    /// At most `limit` per window, windows aligned to Redis' clock.
    FixedWindow {
        /// Requests per window.
        limit: u64,
        /// The window.
        window: Duration,
    },
    /// A sliding window counter of `limit` per `window`.
    SlidingWindow {
        /// Requests per window.
        limit: u64,
        /// The window.
        window: Duration,
    },
}

impl Algorithm {
    /// The most one key can take at once (burst, or limit).
    pub fn capacity(&self) -> u64 {
        match self {
            Algorithm::TokenBucket(q) => q.burst(),
            Algorithm::FixedWindow { limit, .. } | Algorithm::SlidingWindow { limit, .. } => *limit,
        }
    }

    /// The global limit for one of the core's per-key algorithms.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for an algorithm Redis has no script for.
    pub fn from_keyed(algorithm: KeyedAlgorithm) -> Result<Algorithm, Error> {
        match algorithm {
            KeyedAlgorithm::TokenBucket(q) => Ok(Algorithm::TokenBucket(q)),
            KeyedAlgorithm::FixedWindow { limit, window } => {
                Ok(Algorithm::FixedWindow { limit, window })
            }
            KeyedAlgorithm::SlidingWindow { limit, window } => {
                Ok(Algorithm::SlidingWindow { limit, window })
            }
            _ => Err(Error::Unsupported {
                operation: "a global limit in Redis",
                algorithm: "this algorithm",
            }),
        }
    }

    /// The same limit as the core's per-key algorithm — the shape a
    /// middleware advertises for it (`RateLimit-Policy`).
    pub fn keyed(&self) -> KeyedAlgorithm {
        match *self {
            Algorithm::TokenBucket(q) => KeyedAlgorithm::TokenBucket(q),
            Algorithm::FixedWindow { limit, window } => {
                KeyedAlgorithm::FixedWindow { limit, window }
            }
            Algorithm::SlidingWindow { limit, window } => {
                KeyedAlgorithm::SlidingWindow { limit, window }
            }
        }
    }

    /// Average tokens per second over the long run.
    pub(crate) fn rate(&self) -> f64 {
        match self {
            Algorithm::TokenBucket(q) => 1e9 / q.emission_interval_nanos() as f64,
            Algorithm::FixedWindow { limit, window }
            | Algorithm::SlidingWindow { limit, window } => *limit as f64 / window.as_secs_f64(),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Algorithm::TokenBucket(_) => "token_bucket",
            Algorithm::FixedWindow { .. } => "fixed_window",
            Algorithm::SlidingWindow { .. } => "sliding_window",
        }
    }

    /// The key space's name after the prefix: each algorithm keeps its
    /// state in a format of its own, so a token bucket and a window on the
    /// same key can never read each other's state. The limit's numbers are
    /// not part of it: a limiter whose rate, burst or limit changes (a
    /// redeploy) keeps its keys, and a state beyond the new limit is
    /// refused with the exact wait.
    pub fn tag(&self) -> &'static str {
        match self {
            Algorithm::TokenBucket(_) => "tb",
            Algorithm::FixedWindow { .. } => "fw",
            Algorithm::SlidingWindow { .. } => "sw",
        }
    }

    /// The script that runs this algorithm in Redis, and its fixed
    /// arguments after `now`, `n`, `mode`: a bucket's token period and
    /// burst tolerance in µs (`T`, `tau`), a window's limit and length in
    /// µs.
    ///
    /// # Errors
    /// As [`Engine::new`](crate::Engine::new), for the algorithm's own
    /// numbers ([`Error::RateTooHigh`], [`Error::InvalidWindow`], the core's
    /// checks of a window's limit and length).
    pub(crate) fn script_and_args(&self) -> Result<(&'static Script, [String; 2]), Error> {
        Ok(match *self {
            Algorithm::TokenBucket(q) => {
                let t = micros_up(u128::from(q.emission_interval_nanos()));
                if u128::from(q.emission_interval_nanos()) < 1000 {
                    return Err(Error::RateTooHigh {
                        value: format!(
                            "{} per second (Redis keeps microseconds: at most 1000000 per second per key)",
                            1e9 / q.emission_interval_nanos() as f64
                        ),
                    });
                }
                let tau = t * u128::from(q.burst());
                (&GCRA, [t.to_string(), tau.to_string()])
            }
            Algorithm::FixedWindow { limit, window }
            | Algorithm::SlidingWindow { limit, window } => {
                let w = window.as_nanos();
                if w < 1000 || w % 1000 != 0 {
                    return Err(Error::InvalidWindow {
                        nanos: w,
                        reason: "a Redis window is a whole number of microseconds, at least 1"
                            .to_string(),
                    });
                }
                // The core's checks of limit and window.
                KeyedLimiter::<u8>::new(KeyedAlgorithm::FixedWindow { limit, window })?;
                let w = w / 1000;
                let sliding = matches!(self, Algorithm::SlidingWindow { .. });
                if sliding && u128::from(limit) * w > MAX_EXACT {
                    return Err(Error::InvalidWindow {
                        nanos: window.as_nanos(),
                        reason: format!(
                            "too long for limit {limit} in Redis: limit × window in µs must be at most 2^53"
                        ),
                    });
                }
                let script = if sliding {
                    &SLIDING_WINDOW
                } else {
                    &FIXED_WINDOW
                };
                (script, [limit.to_string(), w.to_string()])
            }
        })
    }
}

fn micros_up(nanos: u128) -> u128 {
    nanos.div_ceil(1000)
}
