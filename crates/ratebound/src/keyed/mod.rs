//! Per-key limiters with bounded memory: the algorithm a key gets
//! (`KeyedAlgorithm`, dispatched by `math`), the sharded table (`shards`),
//! the limiter's decisions (`limiter`) and its upkeep of tracked keys
//! (`keys`), and `WordRule`, one key's algorithm on a word kept elsewhere
//! (`word_rule`).

use std::time::Duration;

use crate::Quota;

mod all_of;
mod keys;
mod learn;
mod limiter;
mod math;
mod shards;
mod word_rule;

pub use limiter::KeyedLimiter;
pub use word_rule::WordRule;

/// The algorithm (and its parameters) a [`KeyedLimiter`] applies to each key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedAlgorithm {
    /// A token bucket (GCRA) per key.
    TokenBucket(Quota),
    /// A fixed window per key.
    FixedWindow {
        /// Requests per window.
        limit: u64,
        /// The window length.
        window: Duration,
    },
    /// A sliding window counter per key.
    SlidingWindow {
        /// Requests per sliding window.
        limit: u64,
        /// The window length.
        window: Duration,
    },
}

impl KeyedAlgorithm {
    /// The algorithm's name: `"token_bucket"`, `"fixed_window"` or
    /// `"sliding_window"` (as [`AnyLimiter::algorithm`](crate::any::AnyLimiter::algorithm)
    /// names them).
    pub fn name(&self) -> &'static str {
        match self {
            KeyedAlgorithm::TokenBucket(_) => "token_bucket",
            KeyedAlgorithm::FixedWindow { .. } => "fixed_window",
            KeyedAlgorithm::SlidingWindow { .. } => "sliding_window",
        }
    }

    /// The most one key can take at once: a bucket's burst, a window's
    /// limit.
    pub fn capacity(&self) -> u64 {
        match self {
            KeyedAlgorithm::TokenBucket(q) => q.burst(),
            KeyedAlgorithm::FixedWindow { limit, .. }
            | KeyedAlgorithm::SlidingWindow { limit, .. } => *limit,
        }
    }

    /// The average admitted per second over the long run.
    pub fn rate(&self) -> f64 {
        match self {
            KeyedAlgorithm::TokenBucket(q) => 1e9 / q.emission_interval_nanos() as f64,
            KeyedAlgorithm::FixedWindow { limit, window }
            | KeyedAlgorithm::SlidingWindow { limit, window } => {
                *limit as f64 / window.as_secs_f64()
            }
        }
    }
}

/// What a [`KeyedLimiter`] at its `max_keys` cap does with a new key once no
/// tracked key is fresh enough to drop for free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Forget one tracked key to make room: among a sample of 8 keys of the
    /// new key's shard, the one whose state is closest to fresh (for a token
    /// bucket, the earliest to refill; for a window, the oldest window) —
    /// approximately the least recently used. Evicting a partly used key
    /// forgets its debt: its next request starts from a full bucket.
    EvictLeastRecent,
    /// Refuse the new key's request with [`Error::TooManyKeys`](crate::Error::TooManyKeys) (a distinct
    /// reason, which an HTTP front door can answer with 503) and change
    /// nothing: tracked keys keep exactly their limits.
    RejectNewKeys,
}

// The top two bits of every key's word name its tier; the algorithms keep
// their state in the low 62.
pub(super) const TIER_SHIFT: u32 = 62;
pub(super) const STATE_MASK: u64 = (1 << TIER_SHIFT) - 1;
pub(super) const MAX_TIERS: usize = 4;
pub(super) const SAMPLE: usize = 8;
