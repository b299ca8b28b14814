//! The answer to a check.

use std::time::Duration;

/// The outcome of one check: whether it was admitted, and the numbers an
/// HTTP front door turns into `Retry-After` and `RateLimit` headers.
///
/// A small `Copy` value; making one never allocates. A denial is a `Decision`
/// with [`is_allowed`](Decision::is_allowed) false, never an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) retry_after: u64,
    pub(crate) reset_after: u64,
}

impl Decision {
    /// True if the request was admitted (and its tokens taken).
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The limiter's capacity: the token bucket's burst.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whole tokens left after this decision.
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until the same request would be admitted, exactly, if no one
    /// else takes tokens meanwhile; zero when allowed.
    #[inline]
    pub fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after)
    }

    /// [`retry_after`](Decision::retry_after) in nanoseconds.
    #[inline]
    pub fn retry_after_nanos(&self) -> u64 {
        self.retry_after
    }

    /// How long until the limiter is back to full capacity if nothing more
    /// is taken.
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after)
    }

    /// [`reset_after`](Decision::reset_after) in nanoseconds.
    #[inline]
    pub fn reset_after_nanos(&self) -> u64 {
        self.reset_after
    }
}
