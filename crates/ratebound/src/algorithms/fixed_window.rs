//! Fixed window: a counter that resets at each window boundary, packed with
//! the window index into one atomic word.

use std::time::Duration;

use super::{window_limiter, window_math_new};
use crate::clock::{Clock, MonotonicClock};
use crate::sync::word::{Core, WordMath, limiter_via_core};
use crate::{Decision, Error};

/// The fixed-window math: no atomics, no clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fixed {
    pub(crate) limit: u64,
    pub(crate) window: u64,
    pub(crate) bits: u32,
}

window_math_new!(Fixed, 1);

impl Fixed {
    #[inline]
    fn unpack(self, word: u64) -> (u64, u64) {
        (word >> self.bits, word & ((1 << self.bits) - 1))
    }

    #[inline]
    pub(super) fn pack(self, index: u64, count: u64) -> u64 {
        (index << self.bits) | count
    }

    /// The end of window `index`. Saturating: the index of a damaged word
    /// (a shared file) can lie beyond any time the clock reaches.
    #[inline]
    fn end(self, index: u64) -> u64 {
        (index + 1).saturating_mul(self.window)
    }

    /// The window in force at `now` and its count. A reading before the
    /// stored window (a clock that went back) stays in the stored window.
    #[inline]
    fn current(self, word: u64, now: Moment) -> (u64, u64) {
        let (index, count) = self.unpack(word);
        let now_index = now.index;
        if now_index > index {
            (now_index, 0)
        } else {
            (index, count)
        }
    }
}

/// What a keyed limiter needs beyond the decision.
impl Fixed {
    /// True if the state decides like a fresh one from `now` on.
    pub(crate) fn is_fresh(self, word: u64, now: u64) -> bool {
        let (index, count) = self.unpack(word);
        count == 0 || index < now / self.window
    }

    /// At least this long since the last admission.
    pub(crate) fn idle(self, word: u64, now: u64) -> u64 {
        let (index, count) = self.unpack(word);
        if count == 0 {
            now
        } else {
            now.saturating_sub(self.end(index))
        }
    }

    /// The same window and count (capped) under `to`'s limit.
    pub(crate) fn convert(self, word: u64, to: Fixed) -> u64 {
        let (index, count) = self.unpack(word);
        to.pack(index, count.min(to.limit))
    }
}

/// A time and the window it falls in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Moment {
    pub(crate) now: u64,
    pub(crate) index: u64,
}

impl WordMath for Fixed {
    type At = Moment;

    #[inline]
    fn at(self, now: u64) -> Moment {
        Moment {
            now,
            index: now / self.window,
        }
    }

    fn limit(self) -> u64 {
        self.limit
    }

    #[inline]
    fn admit(self, word: u64, now: Moment, n: u64) -> Option<u64> {
        let (index, count) = self.current(word, now);
        if n == 0 {
            Some(word)
        } else if count + n <= self.limit {
            Some(self.pack(index, count + n))
        } else {
            // n ≤ limit, so the next window admits it.
            None
        }
    }

    #[inline]
    fn decision(self, word: u64, now: Moment, n: u64, allowed: bool) -> Decision {
        let (index, count) = self.current(word, now);
        let count = if allowed { count + n } else { count };
        // `end ≥ now`: the window in force has not ended.
        let until_end = self.end(index) - now.now;
        Decision::counted(
            allowed,
            self.limit,
            // Saturating: the count field is wider than the limit, and a
            // damaged word may hold more than the limit (never admitted).
            self.limit.saturating_sub(count),
            if allowed { 0 } else { until_end },
            if count == 0 { 0 } else { until_end },
        )
    }

    fn mark(self, word: u64, now: Moment, _n: u64) -> u64 {
        self.current(word, now).0
    }

    /// Gives the count back if the mark's window is still the stored one; a
    /// window that has ended has reset anyway.
    fn release(self, word: u64, index: u64, n: u64) -> Option<u64> {
        let (stored, count) = self.unpack(word);
        (stored == index && count > 0).then(|| self.pack(stored, count - n.min(count)))
    }

    fn available(self, word: u64, now: Moment) -> u64 {
        // Saturating, as in `decision`: a count above the limit leaves none.
        self.limit.saturating_sub(self.current(word, now).1)
    }
}

window_limiter! {
    /// At most `limit` per window of fixed length; the count resets at each
    /// window boundary.
    ///
    /// Windows are aligned to the clock's epoch: window `k` is
    /// `[k·window, (k+1)·window)` in the clock's nanoseconds (for
    /// [`MonotonicClock`], counted from the first reading in the process; for
    /// [`ManualClock`](crate::ManualClock), from 0). The window index and the
    /// count share one `AtomicU64`, updated by a compare-exchange loop; a
    /// refusal writes nothing.
    ///
    /// The pitfall: a burst at the end of one window and another at the start of
    /// the next pass up to **2 × limit** within a span much shorter than the
    /// window. [`SlidingWindow`](crate::SlidingWindow) and
    /// [`SlidingLog`](crate::SlidingLog) do not.
    ///
    /// # Examples
    /// ```
    /// use ratebound::{FixedWindow, Limiter, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = FixedWindow::with_clock(2, Duration::from_secs(1), clock.clone())?;
    /// assert!(limiter.check().is_allowed());
    /// assert!(limiter.check().is_allowed());
    /// let refused = limiter.check();
    /// assert_eq!(refused.retry_after(), Duration::from_secs(1)); // the next window
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    ///
    /// # Errors
    /// Constructors return [`Error::InvalidLimit`] for a limit of 0 or above
    /// [`MAX_WINDOW_LIMIT`](crate::MAX_WINDOW_LIMIT), and [`Error::InvalidWindow`] for a zero window, one
    /// over 2^60 ns, or one too short for the limit's bits (the window index
    /// needs `log2(2^61 / window)` bits beside the count's `log2(limit + 1)`:
    /// for a limit of 100 any window of 16 ns or more is fine).
    FixedWindow(Fixed), ""
}
