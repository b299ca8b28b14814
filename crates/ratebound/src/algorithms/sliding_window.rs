//! Sliding window counter: the previous and current windows' counts and the
//! window index in one atomic word; the previous count is weighted by how
//! much of it still overlaps the sliding window.

use std::time::Duration;

use crate::algorithms::{Moment, window_limiter, window_math_new};
use crate::clock::{Clock, MonotonicClock};
use crate::sync::word::{Core, WordMath, limiter_via_core};
use crate::{Decision, Error};

/// The sliding-window math: no atomics, no clock.
///
/// Word: `[index | previous count | current count]`, counts `bits` wide.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sliding {
    pub(crate) limit: u64,
    pub(crate) window: u64,
    pub(crate) bits: u32,
}

window_math_new!(Sliding, 2);

/// The state as seen at a moment: window index, counts, and how far into
/// the window that moment is.
#[derive(Clone, Copy, Debug)]
struct View {
    index: u64,
    previous: u64,
    current: u64,
    elapsed: u64,
    /// `max(now, window start)`: a reading before the stored window (a clock
    /// that went back) is judged at the stored window's start.
    at: u64,
}

impl Sliding {
    #[inline]
    fn mask(self) -> u64 {
        (1 << self.bits) - 1
    }

    #[inline]
    pub(super) fn pack(self, index: u64, previous: u64, current: u64) -> u64 {
        (index << (2 * self.bits)) | (previous << self.bits) | current
    }

    #[inline(always)]
    fn view(self, word: u64, moment: Moment) -> View {
        let (now, now_index) = (moment.now, moment.index);
        let (index, previous, current) = self.unpack(word);
        let (index, previous, current) = if now_index == index {
            (index, previous, current)
        } else if now_index == index + 1 {
            (now_index, current, 0)
        } else if now_index > index {
            (now_index, 0, 0)
        } else {
            (index, previous, current)
        };
        let start = self.start(index);
        let at = now.max(start);
        View {
            index,
            previous,
            current,
            elapsed: at - start,
            at,
        }
    }

    /// The start of window `index`. Saturating: the index of a damaged word
    /// (a shared file) can lie beyond any time the clock reaches.
    #[inline(always)]
    fn start(self, index: u64) -> u64 {
        index.saturating_mul(self.window)
    }

    /// `limit·W − (previous·(W − elapsed) + current·W)`: the room left, in
    /// units of 1/W of a request (negative → 0).
    #[inline]
    fn room(self, v: View, current: u64) -> u128 {
        let w = u128::from(self.window);
        let used = u128::from(v.previous) * (w - u128::from(v.elapsed)) + u128::from(current) * w;
        (u128::from(self.limit) * w).saturating_sub(used)
    }

    #[inline]
    fn fits(self, v: View, current: u64) -> bool {
        let w = u128::from(self.window);
        u128::from(v.previous) * (w - u128::from(v.elapsed)) + u128::from(current) * w
            <= u128::from(self.limit) * w
    }

    /// Time from `v.at` until the estimate leaves room for `n ≤ limit`
    /// (refusals only: kept out of the admitting path's code).
    #[inline(never)]
    fn wait(self, v: View, n: u64) -> u64 {
        let w = u128::from(self.window);
        let elapsed = u128::from(v.elapsed);
        // Still in this window: need previous·(W − e) ≤ (limit − current − n)·W.
        if v.current + n <= self.limit && v.previous > 0 {
            let spare = u128::from(self.limit - v.current - n) * w;
            let target = w - div(spare, v.previous).min(w);
            if target < w {
                return (target.max(elapsed) - elapsed) as u64;
            }
        }
        // In the next window the current count becomes the previous one:
        // need current·(W − e) ≤ (limit − n)·W.
        let to_next = w - elapsed;
        let spare = u128::from(self.limit - n) * w;
        let target = if v.current == 0 {
            0
        } else {
            w - div(spare, v.current).min(w)
        };
        // target == W: two windows on, both counts have slid out.
        (to_next + target) as u64
    }

    #[inline]
    fn reset_after(self, v: View, current: u64, now: u64) -> u64 {
        let end = if current > 0 {
            self.start(v.index + 2)
        } else if v.previous > 0 {
            self.start(v.index + 1)
        } else {
            return 0;
        };
        end.saturating_sub(now)
    }

    #[inline]
    fn answer(self, v: View, current: u64, now: u64, allowed: bool, n: u64) -> Decision {
        let retry_after = if allowed {
            0
        } else {
            // Saturating: `v.at` of a damaged word's index may be u64::MAX.
            (v.at - now).saturating_add(self.wait(v, n))
        };
        let reset_after = self.reset_after(v, current, now);
        let room = self.room(v, current);
        match u64::try_from(room) {
            // remaining = room / W, divided only if the caller asks.
            Ok(slack) => Decision::new(
                allowed,
                self.limit,
                slack,
                self.window,
                retry_after,
                reset_after,
            ),
            Err(_) => Decision::counted(
                allowed,
                self.limit,
                (room / u128::from(self.window)) as u64,
                retry_after,
                reset_after,
            ),
        }
    }

    #[inline(always)]
    fn unpack(self, word: u64) -> (u64, u64, u64) {
        (
            word >> (2 * self.bits),
            (word >> self.bits) & self.mask(),
            word & self.mask(),
        )
    }
}

/// What a keyed limiter needs beyond the decision.
impl Sliding {
    /// True if the state decides like a fresh one from `now` on.
    pub(crate) fn is_fresh(self, word: u64, now: u64) -> bool {
        let (index, previous, current) = self.unpack(word);
        (previous == 0 && current == 0) || index + 1 < now / self.window
    }

    /// At least this long since the last admission.
    pub(crate) fn idle(self, word: u64, now: u64) -> u64 {
        let (index, previous, current) = self.unpack(word);
        if current > 0 {
            now.saturating_sub(self.start(index + 1))
        } else if previous > 0 {
            now.saturating_sub(self.start(index))
        } else {
            now
        }
    }

    /// The same window and counts (capped) under `to`'s limit.
    pub(crate) fn convert(self, word: u64, to: Sliding) -> u64 {
        let (index, previous, current) = self.unpack(word);
        to.pack(index, previous.min(to.limit), current.min(to.limit))
    }
}

/// `a / b`, with a 64-bit division when `a` fits in 64 bits (it nearly
/// always does, and a 128-bit division costs several times more).
#[inline]
fn div(a: u128, b: u64) -> u128 {
    match u64::try_from(a) {
        Ok(a) => u128::from(a / b),
        Err(_) => a / u128::from(b),
    }
}

impl WordMath for Sliding {
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
        let v = self.view(word, now);
        if n == 0 {
            Some(word)
        } else if self.fits(v, v.current + n) {
            Some(self.pack(v.index, v.previous, v.current + n))
        } else {
            None
        }
    }

    #[inline]
    fn decision(self, word: u64, now: Moment, n: u64, allowed: bool) -> Decision {
        let v = self.view(word, now);
        let current = if allowed { v.current + n } else { v.current };
        self.answer(v, current, now.now, allowed, n)
    }

    fn mark(self, word: u64, now: Moment, _n: u64) -> u64 {
        self.view(word, now).index
    }

    /// Gives `n` back to window `index`: from the current count if that
    /// window is still current, from the previous count if it has just
    /// become the previous one.
    fn release(self, word: u64, index: u64, n: u64) -> Option<u64> {
        let (stored, previous, current) = self.unpack(word);
        if stored == index && current > 0 {
            Some(self.pack(stored, previous, current - n.min(current)))
        } else if stored == index + 1 && previous > 0 {
            Some(self.pack(stored, previous - n.min(previous), current))
        } else {
            None
        }
    }

    fn available(self, word: u64, now: Moment) -> u64 {
        let v = self.view(word, now);
        (self.room(v, v.current) / u128::from(self.window)) as u64
    }
}

window_limiter! {
    /// At most `limit` per sliding window, estimated from two fixed windows:
    /// `estimate = previous × (1 − elapsed/window) + current`, and `n` more are
    /// admitted iff `estimate + n ≤ limit` (exact integer arithmetic).
    ///
    /// This smooths the fixed window's boundary burst at the cost of assuming
    /// the previous window's requests were spread evenly. The window index and
    /// both counts share one `AtomicU64` (each count takes `⌈log2(limit + 1)⌉`
    /// bits, so the limit and the shortest window trade off; see
    /// [`Error::InvalidWindow`]), updated by a compare-exchange loop. Windows
    /// are aligned to the clock's epoch, as in [`FixedWindow`](crate::FixedWindow).
    /// `retry_after` is the exact time until the estimate leaves room for the
    /// request.
    ///
    /// # Examples
    /// ```
    /// use ratebound::{Limiter, ManualClock, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// // 50 per minute: 42 in the previous minute, 18 so far, 15 s in.
    /// let clock = ManualClock::new();
    /// let limiter = SlidingWindow::with_clock(50, Duration::from_secs(60), clock.clone())?;
    /// limiter.check_n(42)?;
    /// clock.set(Duration::from_secs(75));
    /// let d = limiter.check_n(18)?; // 42 × 0.75 + 18 = 49.5
    /// assert!(d.is_allowed());
    /// assert_eq!(d.remaining(), 0);
    /// assert!(!limiter.check().is_allowed());
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`FixedWindow`](crate::FixedWindow), with two counts in the word.
    SlidingWindow(Sliding), "sliding "
}
