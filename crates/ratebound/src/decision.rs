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
    /// Bit 0: admitted. Bit 1: `a`, `b`, `c` are a token bucket's times
    /// ([`Decision::timed`]), not the numbers themselves.
    form: u8,
    pub(crate) limit: u64,
    /// `remaining = min(slack / unit, limit)`, divided only when asked for,
    /// so that a caller who reads only `is_allowed` pays no division.
    pub(crate) unit: u64,
    /// The slack, the retry and the reset in nanoseconds; or, timed, the
    /// reach, the end and the origin (see [`Decision::timed`]).
    a: u64,
    b: u64,
    c: u64,
}

const ALLOWED: u8 = 1;
const TIMED: u8 = 2;

/// The TAT of a token bucket's state word, its generation bits dropped
/// (the algorithms' `MAX_TAT`).
const TAT_BITS: u64 = (1 << 62) - 1;

impl Decision {
    /// A decision from its numbers: the slack (`remaining · unit`, at
    /// least), the unit, and the waits in nanoseconds.
    #[inline]
    pub(crate) const fn new(
        allowed: bool,
        limit: u64,
        slack: u64,
        unit: u64,
        retry_after: u64,
        reset_after: u64,
    ) -> Decision {
        Decision {
            form: allowed as u8,
            limit,
            unit,
            a: slack,
            b: retry_after,
            c: reset_after,
        }
    }

    /// A token bucket's decision on one token, from the times it decided
    /// with, none of its numbers computed until asked for: `now`; `end`,
    /// the TAT the decision leaves (a state word: bits above the TAT's are
    /// dropped); and `reach = now + τ − T`, the latest TAT a token could
    /// still be taken at. Then the reset is `end − now`, the retry (when
    /// refused, so `end > reach`) `end − reach`, and the slack
    /// `reach + T − end` (at least 0).
    #[inline]
    pub(crate) fn timed(
        allowed: bool,
        limit: u64,
        period: u64,
        now: u64,
        end: u64,
        reach: u64,
    ) -> Decision {
        Decision {
            form: TIMED | u8::from(allowed),
            limit,
            unit: period,
            a: reach,
            b: end,
            c: now,
        }
    }

    /// A decision whose remaining count is already known.
    #[inline]
    pub(crate) const fn counted(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after: u64,
        reset_after: u64,
    ) -> Decision {
        Decision::new(allowed, limit, remaining, 1, retry_after, reset_after)
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

    /// This decision refused, its numbers as they are.
    #[inline]
    pub(crate) fn refused(self) -> Decision {
        Decision {
            form: self.form & !ALLOWED,
            ..self
        }
    }

    /// This decision's numbers with `retry_after` (nanoseconds) instead of
    /// its own.
    #[inline]
    pub(crate) fn with_retry(self, retry_after: u64) -> Decision {
        Decision::new(
            self.is_allowed(),
            self.limit,
            self.slack(),
            self.unit,
            retry_after,
            self.reset_after_nanos(),
        )
    }

    fn observable(&self) -> (bool, u64, u64, u64, u64) {
        (
            self.is_allowed(),
            self.limit,
            self.remaining(),
            self.retry_after_nanos(),
            self.reset_after_nanos(),
        )
    }

    /// True if the request was admitted (and its tokens taken).
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.form & ALLOWED != 0
    }

    /// The limiter's capacity: the token bucket's burst.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// `remaining · unit`, at least (the remaining count before dividing).
    #[inline]
    pub(crate) fn slack(&self) -> u64 {
        if self.form & TIMED == 0 {
            self.a
        } else {
            (self.a + self.unit).saturating_sub(self.b & TAT_BITS)
        }
    }

    /// Whole tokens left after this decision.
    #[inline]
    pub fn remaining(&self) -> u64 {
        (self.slack() / self.unit).min(self.limit)
    }

    /// How long until the same request would be admitted, exactly, if no one
    /// else takes tokens meanwhile; zero when allowed.
    #[inline]
    pub fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after_nanos())
    }

    /// [`retry_after`](Decision::retry_after) in nanoseconds.
    #[inline]
    pub fn retry_after_nanos(&self) -> u64 {
        match self.form {
            f if f & TIMED == 0 => self.b,
            f if f & ALLOWED != 0 => 0,
            _ => (self.b & TAT_BITS).saturating_sub(self.a),
        }
    }

    /// How long until the limiter is back to full capacity if nothing more
    /// is taken.
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_nanos())
    }

    /// [`reset_after`](Decision::reset_after) in nanoseconds.
    #[inline]
    pub fn reset_after_nanos(&self) -> u64 {
        if self.form & TIMED == 0 {
            self.c
        } else {
            (self.b & TAT_BITS).saturating_sub(self.c)
        }
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
            .field("allowed", &self.is_allowed())
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("retry_after", &self.retry_after())
            .field("reset_after", &self.reset_after())
            .finish()
    }
}
