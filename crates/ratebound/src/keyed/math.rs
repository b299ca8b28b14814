//! One key's arithmetic, whatever the algorithm: `Math` dispatches to the
//! GCRA, the fixed window or the sliding window.

use super::{KeyedAlgorithm, TIER_SHIFT};
use crate::algorithms::Fixed;
use crate::algorithms::gcra::Params;
use crate::algorithms::sliding_window::Sliding;
use crate::sync::word::WordMath;
use crate::{Decision, Error};

#[derive(Clone, Copy, Debug)]
pub(super) enum Math {
    Bucket(Params),
    Fixed(Fixed),
    Sliding(Sliding),
}

impl Math {
    pub(super) fn new(algorithm: KeyedAlgorithm) -> Result<Math, Error> {
        Ok(match algorithm {
            KeyedAlgorithm::TokenBucket(q) => Math::Bucket(Params {
                period: q.emission_interval_nanos(),
                burst: q.burst(),
            }),
            KeyedAlgorithm::FixedWindow { limit, window } => {
                Math::Fixed(Fixed::new(limit, window, TIER_SHIFT)?)
            }
            KeyedAlgorithm::SlidingWindow { limit, window } => {
                Math::Sliding(Sliding::new(limit, window, TIER_SHIFT)?)
            }
        })
    }

    /// True if a key may switch between the two (same algorithm and window).
    pub(super) fn compatible(self, other: Math) -> bool {
        match (self, other) {
            (Math::Bucket(_), Math::Bucket(_)) => true,
            (Math::Fixed(a), Math::Fixed(b)) => a.window == b.window,
            (Math::Sliding(a), Math::Sliding(b)) => a.window == b.window,
            _ => false,
        }
    }

    pub(super) fn limit(self) -> u64 {
        match self {
            Math::Bucket(p) => p.burst,
            Math::Fixed(f) => f.limit,
            Math::Sliding(s) => s.limit,
        }
    }

    #[inline]
    pub(super) fn admit(self, state: u64, now: u64, n: u64) -> Option<u64> {
        match self {
            Math::Bucket(p) => p.admit(state, now, n),
            Math::Fixed(f) => f.admit(state, f.at(now), n),
            Math::Sliding(s) => s.admit(state, s.at(now), n),
        }
    }

    #[inline]
    pub(super) fn decision(self, state: u64, now: u64, n: u64, allowed: bool) -> Decision {
        match self {
            Math::Bucket(p) => p.decision(state, now, n, allowed),
            Math::Fixed(f) => f.decision(state, f.at(now), n, allowed),
            Math::Sliding(s) => s.decision(state, s.at(now), n, allowed),
        }
    }

    pub(super) fn available(self, state: u64, now: u64) -> u64 {
        match self {
            Math::Bucket(p) => p.available(state, now),
            Math::Fixed(f) => f.available(state, f.at(now)),
            Math::Sliding(s) => s.available(state, s.at(now)),
        }
    }

    /// True if `state` decides exactly like a fresh state from `now` on.
    pub(super) fn is_fresh(self, state: u64, now: u64) -> bool {
        match self {
            // Full: max(TAT, t) = t for every t ≥ now, as for TAT = 0.
            Math::Bucket(_) => state <= now,
            Math::Fixed(f) => f.is_fresh(state, now),
            Math::Sliding(s) => s.is_fresh(state, now),
        }
    }

    /// A lower bound on the time since the key's last admission.
    pub(super) fn idle(self, state: u64, now: u64) -> u64 {
        match self {
            // The last admission, of n ≥ 1, left TAT at least T after it.
            Math::Bucket(p) => (now + p.period).saturating_sub(state),
            Math::Fixed(f) => f.idle(state, now),
            Math::Sliding(s) => s.idle(state, now),
        }
    }

    /// The longest a state can take to become fresh with no more traffic.
    pub(super) fn span(self) -> u64 {
        match self {
            Math::Bucket(p) => p.tau(),
            Math::Fixed(f) => f.window,
            Math::Sliding(s) => 2 * s.window,
        }
    }

    /// Where an admission of `n` at `now` on `state` landed.
    pub(super) fn mark(self, state: u64, now: u64, n: u64) -> u64 {
        match self {
            Math::Bucket(p) => p.admit(state, now, n).unwrap_or(state),
            Math::Fixed(f) => f.mark(state, f.at(now), n),
            Math::Sliding(s) => s.mark(state, s.at(now), n),
        }
    }

    /// `state` after giving back `n` admitted at `mark`.
    pub(super) fn release(self, state: u64, mark: u64, n: u64) -> Option<u64> {
        match self {
            Math::Bucket(p) => Some(p.cancel(state, mark, n)),
            Math::Fixed(f) => WordMath::release(f, state, mark, n),
            Math::Sliding(s) => WordMath::release(s, state, mark, n),
        }
    }

    /// `state` re-expressed for `to` at `now`, keeping the count (capped).
    pub(super) fn convert(self, state: u64, now: u64, to: Math) -> u64 {
        match (self, to) {
            (Math::Bucket(a), Math::Bucket(b)) => a.convert(state, now, b),
            (Math::Fixed(a), Math::Fixed(b)) => a.convert(state, b),
            (Math::Sliding(a), Math::Sliding(b)) => a.convert(state, b),
            // `compatible` rules the rest out; start fresh rather than guess.
            _ => 0,
        }
    }
}
