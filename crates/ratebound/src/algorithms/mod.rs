//! The algorithms, one file each: the GCRA math (`gcra`) and the token
//! bucket built on it, the fixed and sliding window counters, the sliding
//! log, the leaky bucket as a queue, and `AllOf` (several limits at once).

use std::time::Duration;

use crate::Error;
use crate::clock::MAX_TIME_NANOS;
use crate::quota::MAX_SPAN_NANOS;

mod all_of;
#[cfg(test)]
mod damaged;
mod fixed_window;
pub(crate) mod gcra;
mod leaky_bucket;
mod sliding_log;
pub(crate) mod sliding_window;
mod token_bucket;

pub(crate) use fixed_window::{Fixed, Moment};

pub use all_of::AllOf;
pub use fixed_window::FixedWindow;
pub use leaky_bucket::LeakyBucket;
pub use sliding_log::{MAX_LOG_LIMIT, SlidingLog};
pub use sliding_window::SlidingWindow;
pub use token_bucket::TokenBucket;

/// The largest limit a window limiter accepts (its counts are at most 32 bits).
pub const MAX_WINDOW_LIMIT: u64 = u32::MAX as u64;

/// Bits needed to hold any count up to `limit`.
pub(crate) fn count_bits(limit: u64) -> u32 {
    64 - limit.leading_zeros()
}

/// Checks that `1 ≤ limit ≤ max` and `1 ns ≤ window ≤ 2^60 ns`; returns the
/// window in nanoseconds.
pub(crate) fn limit_and_window(limit: u64, max: u64, window: Duration) -> Result<u64, Error> {
    if limit == 0 || limit > max {
        return Err(Error::InvalidLimit { limit, max });
    }
    let nanos = window.as_nanos();
    if nanos == 0 || nanos > u128::from(MAX_SPAN_NANOS) {
        return Err(Error::InvalidWindow {
            nanos,
            reason: "must be between 1 ns and 2^60 ns".to_string(),
        });
    }
    Ok(nanos as u64)
}

/// Checks a window limiter's parameters: `counts` fields of `bits` each plus
/// a window index that must reach `MAX_TIME_NANOS / window` in the
/// `word_bits` low bits of one word (64, or 62 when a keyed limiter keeps a
/// tier in the top two).
pub(crate) fn validate(
    limit: u64,
    window: Duration,
    counts: u32,
    word_bits: u32,
) -> Result<(u64, u32), Error> {
    let window = limit_and_window(limit, MAX_WINDOW_LIMIT, window)?;
    let nanos = u128::from(window);
    let bits = count_bits(limit);
    let index_bits = word_bits - counts * bits;
    let max_index = MAX_TIME_NANOS / window;
    if index_bits < 64 && max_index >= 1 << index_bits {
        let min = (MAX_TIME_NANOS >> index_bits) + 1;
        return Err(Error::InvalidWindow {
            nanos,
            reason: format!(
                "too short for limit {limit}: its counts take {} bits of the {word_bits}-bit state, \
                 leaving {index_bits} bits of window index, enough for windows of {min} ns or more",
                counts * bits
            ),
        });
    }
    Ok((window, bits))
}

/// A `new(limit, window, word_bits)` for a window math type (fields
/// `limit`, `window`, `bits`) holding `counts` counts: [`validate`]d, so a
/// single limiter (64 bits) and a keyed entry ([`TIER_SHIFT`](crate::keyed)
/// bits) build it alike.
macro_rules! window_math_new {
    ($ty:ident, $counts:expr) => {
        impl $ty {
            pub(crate) fn new(
                limit: u64,
                window: std::time::Duration,
                word_bits: u32,
            ) -> Result<Self, crate::Error> {
                let (window, bits) =
                    crate::algorithms::validate(limit, window, $counts, word_bits)?;
                Ok($ty {
                    limit,
                    window,
                    bits,
                })
            }
        }
    };
}
pub(crate) use window_math_new;

/// A public window limiter `$ty` (its docs first) over a
/// [`Core`](crate::sync::word::Core) of the window math `$math`: `new`,
/// `with_clock`, and [`limiter_via_core!`](crate::sync::word::limiter_via_core)
/// with `window()`. `$per` says the window in the constructors' docs.
macro_rules! window_limiter {
    ($(#[$doc:meta])* $ty:ident($math:ident), $per:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $ty<C: Clock = MonotonicClock> {
            core: Core<$math, C>,
        }

        impl $ty<MonotonicClock> {
            #[doc = concat!("`limit` per ", $per, "`window`, on the default clock.")]
            ///
            /// # Errors
            #[doc = concat!("See [`", stringify!($ty), "`].")]
            pub fn new(limit: u64, window: Duration) -> Result<Self, Error> {
                Self::with_clock(limit, window, MonotonicClock::new())
            }
        }

        impl<C: Clock> $ty<C> {
            #[doc = concat!("`limit` per ", $per, "`window`, reading time from `clock`.")]
            ///
            /// # Errors
            #[doc = concat!("See [`", stringify!($ty), "`].")]
            pub fn with_clock(limit: u64, window: Duration, clock: C) -> Result<Self, Error> {
                Ok($ty {
                    core: Core::new($math::new(limit, window, 64)?, clock),
                })
            }
        }

        limiter_via_core!($ty, window);
    };
}
pub(crate) use window_limiter;
