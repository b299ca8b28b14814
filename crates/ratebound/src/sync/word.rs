//! The shared body of the limiters whose whole state is one word: the CAS
//! loop around an algorithm's pure math.

use crate::clock::{Clock, MAX_TIME_NANOS};
use crate::error::capacity;
use crate::limiter::Permit;
use crate::sync::state::AtomicState;
use crate::{Decision, Error};

/// An algorithm as pure functions of (state word, time): no atomics, no clock.
pub(crate) trait WordMath: Copy {
    /// A moment as the math needs it, worked out once per call (a window
    /// algorithm divides `now` by its window once, not in every step).
    type At: Copy;
    /// `now` (already capped at `MAX_TIME_NANOS`) as an `At`.
    fn at(self, now: u64) -> Self::At;
    /// The most that can be taken at once.
    fn limit(self) -> u64;
    /// The new word if `n ≤ limit` is admitted at `now`; `None` to refuse.
    /// Returning the same word admits without writing.
    fn admit(self, word: u64, now: Self::At, n: u64) -> Option<u64>;
    /// The answer for `n` at `now`, decided on `word`.
    fn decision(self, word: u64, now: Self::At, n: u64, allowed: bool) -> Decision;
    /// Where an admission of `n` at `now` on `word` landed, for `release`.
    fn mark(self, word: u64, now: Self::At, n: u64) -> u64;
    /// The word after giving back `n` admitted at `mark`; `None` if there is
    /// nothing left to give back.
    fn release(self, word: u64, mark: u64, n: u64) -> Option<u64>;
    /// How many could be taken at `now`.
    fn available(self, word: u64, now: Self::At) -> u64;
}

/// One state word, an algorithm and a clock.
#[derive(Debug)]
pub(crate) struct Core<M, C> {
    /// This limiter's id (see [`Permit`]).
    pub(crate) id: u64,
    pub(crate) state: AtomicState,
    pub(crate) math: M,
    pub(crate) clock: C,
}

impl<M: WordMath, C: Clock> Core<M, C> {
    pub(crate) fn new(math: M, clock: C) -> Self {
        Core {
            id: crate::sync::next_issuer(),
            state: AtomicState::new(0),
            math,
            clock,
        }
    }

    #[inline]
    pub(crate) fn check_at(&self, now: u64) -> Decision {
        let now = self.math.at(now.min(MAX_TIME_NANOS));
        // n = 1 never exceeds the limit (every limit is at least 1).
        let (word, allowed) = self.state.update(|word| self.math.admit(word, now, 1));
        self.math.decision(word, now, 1, allowed)
    }

    pub(crate) fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        capacity(n, self.math.limit())?;
        let now = self.math.at(now.min(MAX_TIME_NANOS));
        let word = self.state.load();
        let allowed = self.math.admit(word, now, n).is_some();
        Ok(self.math.decision(word, now, n, allowed))
    }

    #[inline]
    pub(crate) fn acquire_n_at(
        &self,
        n: u64,
        now: u64,
    ) -> Result<(Decision, Option<Permit>), Error> {
        capacity(n, self.math.limit())?;
        let now = self.math.at(now.min(MAX_TIME_NANOS));
        let (word, allowed) = self.state.update(|word| self.math.admit(word, now, n));
        let permit = allowed.then(|| Permit {
            n,
            issuer: self.id,
            key: 0,
            members: None,
            mark: self.math.mark(word, now, n),
            aux: 0,
        });
        Ok((self.math.decision(word, now, n, allowed), permit))
    }

    pub(crate) fn release(&self, permit: Permit) -> Result<(), Error> {
        if permit.issuer != self.id {
            return Err(Error::ForeignPermit);
        }
        self.state
            .update(|word| self.math.release(word, permit.mark, permit.n));
        Ok(())
    }

    pub(crate) fn available_at(&self, now: u64) -> u64 {
        self.math
            .available(self.state.load(), self.math.at(now.min(MAX_TIME_NANOS)))
    }
}

/// Implements [`Limiter`](crate::Limiter) for a public type whose field
/// `core` is a [`Core`], and its `clock()`; with `, window` also its
/// `window()` (a window math's `window`).
macro_rules! limiter_via_core {
    ($ty:ident, window) => {
        $crate::sync::word::limiter_via_core!($ty);

        impl<C: $crate::Clock> $ty<C> {
            /// The window length.
            pub fn window(&self) -> std::time::Duration {
                std::time::Duration::from_nanos(self.core.math.window)
            }
        }
    };
    ($ty:ident) => {
        impl<C: $crate::Clock> $ty<C> {
            /// The clock this limiter reads.
            pub fn clock(&self) -> &C {
                &self.core.clock
            }
        }

        impl<C: $crate::Clock> $crate::Limiter for $ty<C> {
            fn now(&self) -> u64 {
                self.core.clock.now()
            }

            fn limit(&self) -> u64 {
                $crate::sync::word::WordMath::limit(self.core.math)
            }

            #[inline]
            fn check_at(&self, now: u64) -> $crate::Decision {
                self.core.check_at(now)
            }

            fn peek_n_at(&self, n: u64, now: u64) -> Result<$crate::Decision, $crate::Error> {
                self.core.peek_n_at(n, now)
            }

            #[inline]
            fn acquire_n_at(
                &self,
                n: u64,
                now: u64,
            ) -> Result<($crate::Decision, Option<$crate::Permit>), $crate::Error> {
                self.core.acquire_n_at(n, now)
            }

            fn try_release(&self, permit: $crate::Permit) -> Result<(), $crate::Error> {
                self.core.release(permit)
            }

            fn available_at(&self, now: u64) -> u64 {
                self.core.available_at(now)
            }
        }
    };
}
pub(crate) use limiter_via_core;
