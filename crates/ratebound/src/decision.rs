//! The answer to a check.

use std::time::Duration;

/// The outcome of one check: whether it was admitted, and the numbers an
/// HTTP front door turns into `Retry-After` and `RateLimit` headers.
///
/// A small `Copy` value; making one never allocates. A denial is a `Decision`
/// with [`is_allowed`](Decision::is_allowed) false, never an error.
///
/// Two decisions are equal when everything their accessors return is equal.
#[derive(Clone, Copy)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) limit: u64,
    /// `remaining = min(slack / unit, limit)`, divided only when asked for,
    /// so that a caller who reads only `is_allowed` pays no division.
    pub(crate) slack: u64,
    pub(crate) unit: u64,
    pub(crate) retry_after: u64,
    pub(crate) reset_after: u64,
}

impl Decision {
    /// A decision whose remaining count is already known.
    #[inline]
    pub(crate) fn counted(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after: u64,
        reset_after: u64,
    ) -> Decision {
        Decision {
            allowed,
            limit,
            slack: remaining,
            unit: 1,
            retry_after,
            reset_after,
        }
    }

    /// A decision made elsewhere — by a shared store such as Redis running
    /// the same math — from its parts: whether it was allowed, the limit,
    /// the whole tokens remaining, and the waits in nanoseconds.
    ///
    /// # Examples
    /// ```
    /// let d = ratebound::Decision::from_parts(false, 20, 0, 500_000_000, 2_000_000_000);
    /// assert!(!d.is_allowed());
    /// assert_eq!(d.retry_after().as_millis(), 500);
    /// ```
    pub fn from_parts(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after_nanos: u64,
        reset_after_nanos: u64,
    ) -> Decision {
        Decision::counted(
            allowed,
            limit,
            remaining.min(limit),
            retry_after_nanos,
            reset_after_nanos,
        )
    }

    fn observable(&self) -> (bool, u64, u64, u64, u64) {
        (
            self.allowed,
            self.limit,
            self.remaining(),
            self.retry_after,
            self.reset_after,
        )
    }

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
        (self.slack / self.unit).min(self.limit)
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

impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.observable() == other.observable()
    }
}

impl Eq for Decision {}

impl std::hash::Hash for Decision {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.observable().hash(state);
    }
}

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("retry_after", &self.retry_after())
            .field("reset_after", &self.reset_after())
            .finish()
    }
}
