//! What a global limit counts — the core's [`KeyedAlgorithm`], one type for
//! a key's limit wherever it is kept — and how it maps to its script in
//! Redis, the script's fixed arguments and its key space.

use ratebound::{Error, KeyedAlgorithm, KeyedLimiter};

use crate::script::{FIXED_WINDOW, GCRA, SLIDING_WINDOW, Script};

/// What a global limit counts: the core's [`KeyedAlgorithm`] (a token
/// bucket, or a fixed or sliding window; windows are aligned to Redis'
/// clock), under the name this crate has always given it.
pub use ratebound::KeyedAlgorithm as Algorithm;

/// The largest integer a double holds exactly: the scripts' arithmetic is
/// exact below it.
const MAX_EXACT: u128 = 1 << 53;

/// How `algorithm` runs in Redis.
#[derive(Debug)]
pub(crate) struct InRedis {
    /// The script that runs it.
    pub(crate) script: &'static Script,
    /// The script's fixed arguments after `now`, `n`, `mode`: a bucket's
    /// token period and burst tolerance in µs (`T`, `tau`), a window's
    /// limit and length in µs.
    pub(crate) fixed: [String; 2],
    /// The key space's name after the prefix: each algorithm keeps its
    /// state in a format of its own, so a token bucket and a window on the
    /// same key can never read each other's state. The limit's numbers are
    /// not part of it: a limiter whose rate, burst or limit changes (a
    /// redeploy) keeps its keys, and a state beyond the new limit is
    /// refused with the exact wait.
    pub(crate) tag: &'static str,
    /// A token bucket's `T` and `tau` (µs) as numbers, for the hinted
    /// calls ([`crate::learn::scaled`]); `None` for a window, and for a
    /// bucket whose `tau` a double does not hold exactly (at or above 2^53
    /// µs: the script's own scaling is then not exact, and its calls go
    /// without a hint).
    pub(crate) bucket: Option<(u128, u128)>,
}

/// How `algorithm` runs in Redis.
///
/// # Errors
/// As [`Engine::new`](crate::Engine::new), for the algorithm's own
/// numbers ([`Error::RateTooHigh`], [`Error::InvalidWindow`], the core's
/// checks of a window's limit and length), and [`Error::Unsupported`] for
/// an algorithm Redis has no script for.
pub(crate) fn in_redis(algorithm: &KeyedAlgorithm) -> Result<InRedis, Error> {
    let mut bucket = None;
    let (script, fixed, tag) = match *algorithm {
        KeyedAlgorithm::TokenBucket(q) => {
            let t = micros_up(u128::from(q.emission_interval_nanos()));
            if u128::from(q.emission_interval_nanos()) < 1000 {
                return Err(Error::RateTooHigh {
                    value: format!(
                        "{} per second (Redis keeps microseconds: at most 1000000 per second per key)",
                        algorithm.rate()
                    ),
                });
            }
            let tau = t * u128::from(q.burst());
            bucket = (tau < MAX_EXACT).then_some((t, tau));
            (&GCRA, [t.to_string(), tau.to_string()], "tb")
        }
        KeyedAlgorithm::FixedWindow { limit, window }
        | KeyedAlgorithm::SlidingWindow { limit, window } => {
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
            let sliding = matches!(algorithm, KeyedAlgorithm::SlidingWindow { .. });
            if sliding && u128::from(limit) * w > MAX_EXACT {
                return Err(Error::InvalidWindow {
                    nanos: window.as_nanos(),
                    reason: format!(
                        "too long for limit {limit} in Redis: limit × window in µs must be at most 2^53"
                    ),
                });
            }
            let (script, tag) = if sliding {
                (&SLIDING_WINDOW, "sw")
            } else {
                (&FIXED_WINDOW, "fw")
            };
            (script, [limit.to_string(), w.to_string()], tag)
        }
        _ => {
            return Err(Error::Unsupported {
                operation: "a global limit in Redis",
                algorithm: algorithm.name(),
            });
        }
    };
    Ok(InRedis {
        script,
        fixed,
        tag,
        bucket,
    })
}

fn micros_up(nanos: u128) -> u128 {
    nanos.div_ceil(1000)
}
