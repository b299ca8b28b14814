//! Sliding log: one timestamp per admitted request, exact over any window.

use std::collections::VecDeque;
use std::time::Duration;

use crate::algorithms::limit_and_window;
use crate::clock::{Clock, MAX_TIME_NANOS, MonotonicClock};
use crate::error::capacity;
use crate::limiter::{Limiter, Permit};
use crate::sync::Mutex;
use crate::{Decision, Error};

/// The largest limit a [`SlidingLog`] accepts: its memory is 8 bytes per
/// request in the window, so at most 8 MB per limiter.
pub const MAX_LOG_LIMIT: u64 = 1_000_000;

/// Exactly at most `limit` per window, for every window: `n` are admitted
/// iff the requests admitted in the last `window` (the half-open span
/// `(now − window, now]`) plus `n` are at most `limit`.
///
/// The price of exactness is memory: one `u64` timestamp per admitted request
/// still in the window, up to `8 × limit` bytes per limiter (hence
/// [`MAX_LOG_LIMIT`]). The log sits behind a mutex held for a short,
/// allocation-free critical section once the log has grown (pruning expired
/// entries from the front, appending at the back); taking `n` at once
/// appends `n` entries. `retry_after` is exact: the moment the oldest entry
/// that stands in the way leaves the window.
///
/// # Examples
/// ```
/// use ratebound::{Limiter, ManualClock, SlidingLog};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let log = SlidingLog::with_clock(2, Duration::from_secs(1), clock.clone())?;
/// assert!(log.check().is_allowed());
/// clock.advance(Duration::from_millis(300));
/// assert!(log.check().is_allowed());
/// let refused = log.check();
/// assert_eq!(refused.retry_after(), Duration::from_millis(700)); // the first leaves
/// # Ok::<(), ratebound::Error>(())
/// ```
///
/// # Errors
/// Constructors return [`Error::InvalidLimit`] for 0 or above
/// [`MAX_LOG_LIMIT`], [`Error::InvalidWindow`] for a zero window or one over
/// 2^60 ns.
#[derive(Debug)]
pub struct SlidingLog<C: Clock = MonotonicClock> {
    /// This log's id (see [`Permit`]).
    id: u64,
    log: Mutex<VecDeque<u64>>,
    limit: u64,
    window: u64,
    clock: C,
}

impl SlidingLog<MonotonicClock> {
    /// `limit` per sliding `window`, on the default clock.
    ///
    /// # Errors
    /// See [`SlidingLog`].
    pub fn new(limit: u64, window: Duration) -> Result<Self, Error> {
        Self::with_clock(limit, window, MonotonicClock::new())
    }
}

impl<C: Clock> SlidingLog<C> {
    /// `limit` per sliding `window`, reading time from `clock`.
    ///
    /// # Errors
    /// See [`SlidingLog`].
    pub fn with_clock(limit: u64, window: Duration, clock: C) -> Result<Self, Error> {
        let window = limit_and_window(limit, MAX_LOG_LIMIT, window)?;
        Ok(SlidingLog {
            id: crate::sync::next_issuer(),
            log: Mutex::new(VecDeque::new()),
            limit,
            window,
            clock,
        })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Runs `f` on the log with every entry that has left the window at
    /// `now` removed.
    fn with_log<T>(&self, now: u64, f: impl FnOnce(&mut VecDeque<u64>) -> T) -> T {
        // A panic cannot happen while the lock is held (no user code runs
        // under it), so a poisoned lock still holds a consistent log.
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        while log.front().is_some_and(|&t| t + self.window <= now) {
            log.pop_front();
        }
        f(&mut log)
    }

    fn decide(&self, log: &VecDeque<u64>, now: u64, n: u64, admit: bool) -> Decision {
        let count = log.len() as u64;
        let allowed = count + n <= self.limit;
        let after = if allowed && admit { count + n } else { count };
        let newest = if allowed && admit && n > 0 {
            Some(log.back().map_or(now, |&t| t.max(now)))
        } else {
            log.back().copied()
        };
        let retry_after = if allowed {
            0
        } else {
            // The (count + n − limit)-th oldest entry must leave the window.
            let blocker = log[(count + n - self.limit - 1) as usize];
            blocker + self.window - now
        };
        Decision::counted(
            allowed,
            self.limit,
            self.limit - after,
            retry_after,
            newest.map_or(0, |t| t + self.window - now),
        )
    }
}

impl<C: Clock> Limiter for SlidingLog<C> {
    fn now(&self) -> u64 {
        self.clock.now()
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn check_at(&self, now: u64) -> Decision {
        // 1 ≤ limit always.
        self.take(1, now.min(MAX_TIME_NANOS)).0
    }

    fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        capacity(n, self.limit)?;
        let now = now.min(MAX_TIME_NANOS);
        Ok(self.with_log(now, |log| self.decide(log, now, n, false)))
    }

    fn acquire_n_at(&self, n: u64, now: u64) -> Result<(Decision, Option<Permit>), Error> {
        capacity(n, self.limit)?;
        Ok(self.take(n, now.min(MAX_TIME_NANOS)))
    }

    /// Removes up to `n` entries stamped with the permit's time, if they are
    /// still in the log.
    fn try_release(&self, permit: Permit) -> Result<(), Error> {
        if permit.issuer != self.id {
            return Err(Error::ForeignPermit);
        }
        self.give_back(permit);
        Ok(())
    }

    fn available_at(&self, now: u64) -> u64 {
        let now = now.min(MAX_TIME_NANOS);
        self.with_log(now, |log| self.limit - log.len() as u64)
    }
}

impl<C: Clock> SlidingLog<C> {
    /// Admits `n ≤ limit` at `now` if the window has room.
    fn take(&self, n: u64, now: u64) -> (Decision, Option<Permit>) {
        self.with_log(now, |log| {
            let decision = self.decide(log, now, n, true);
            if !decision.is_allowed() {
                return (decision, None);
            }
            // Entries stay sorted even if the clock went back.
            let stamp = log.back().map_or(now, |&t| t.max(now));
            log.extend(std::iter::repeat_n(stamp, n as usize));
            let permit = Permit {
                n,
                issuer: self.id,
                key: 0,
                members: None,
                mark: stamp,
                aux: 0,
            };
            (decision, Some(permit))
        })
    }

    fn give_back(&self, permit: Permit) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let mut left = permit.n;
        let mut i = log.len();
        while i > 0 && left > 0 {
            i -= 1;
            match log[i].cmp(&permit.mark) {
                std::cmp::Ordering::Equal => {
                    log.remove(i);
                    left -= 1;
                }
                std::cmp::Ordering::Less => break,
                std::cmp::Ordering::Greater => {}
            }
        }
    }
}
