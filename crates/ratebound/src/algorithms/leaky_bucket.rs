//! Leaky bucket as a queue: requests leave one every `T`, never faster.

use std::time::Duration;

use crate::algorithms::gcra::{MAX_TAT, give_back};
use crate::clock::{Clock, MAX_TIME_NANOS, MonotonicClock};
use crate::error::capacity;
use crate::limiter::{Permit, Reservation};
use crate::quota::MAX_SPAN_NANOS;
use crate::sync::word::{Core, WordMath, limiter_via_core};
use crate::{Decision, Error, Quota};

/// The leaky-bucket math: no atomics, no clock. The state is the next free
/// departure slot `S`: a request taking `n` slots leaves at `max(S, now)`
/// and moves `S` to that plus `n·T`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Leaky {
    pub(crate) period: u64,
    pub(crate) max_delay: u64,
    pub(crate) capacity: u64,
}

impl Leaky {
    /// Queues `n` slots: `Ok((wait, new_slot))`, or `Err(wait)` when the wait
    /// would exceed `min(max_wait, max_delay)`.
    #[inline]
    pub(crate) fn reserve(
        self,
        slot: u64,
        now: u64,
        n: u64,
        max_wait: u64,
    ) -> Result<(u64, u64), u64> {
        let start = slot.max(now);
        let wait = start - now;
        let next = start + n * self.period;
        if wait > max_wait.min(self.max_delay) || next > MAX_TAT {
            Err(wait)
        } else {
            Ok((wait, next))
        }
    }
}

impl WordMath for Leaky {
    type At = u64;

    fn at(self, now: u64) -> u64 {
        now
    }

    fn limit(self) -> u64 {
        self.capacity
    }

    /// A request may leave now only if no one is queued ahead of it.
    #[inline]
    fn admit(self, slot: u64, now: u64, n: u64) -> Option<u64> {
        if slot > now {
            None
        } else if n == 0 {
            Some(slot)
        } else {
            Some(now + n * self.period)
        }
    }

    #[inline]
    fn decision(self, slot: u64, now: u64, n: u64, allowed: bool) -> Decision {
        let after = match self.admit(slot, now, n) {
            Some(next) if allowed => next,
            _ => slot,
        };
        let busy = after.saturating_sub(now);
        Decision::counted(
            allowed,
            self.capacity,
            self.available(after, now),
            if allowed { 0 } else { busy },
            busy,
        )
    }

    fn mark(self, slot: u64, now: u64, n: u64) -> u64 {
        self.admit(slot, now, n).unwrap_or(slot)
    }

    /// Frees the slots reserved up to `reserved`, except those that later
    /// requests were queued behind (see [`Reservation::cancel`]).
    #[inline]
    fn release(self, slot: u64, reserved: u64, n: u64) -> Option<u64> {
        Some(give_back(slot, reserved, n, self.period))
    }

    /// Free places in the queue at `now`.
    #[inline]
    fn available(self, slot: u64, now: u64) -> u64 {
        let queued = (slot.saturating_sub(now)).div_ceil(self.period);
        self.capacity.saturating_sub(queued)
    }
}

/// A leaky bucket used as a queue (traffic shaping): admitted requests leave
/// exactly one emission interval `T` apart, never in bursts, and at most
/// `max_delay` of waiting may queue up.
///
/// [`check`](crate::Limiter::check) admits a request only if it can leave **now**
/// (nobody is queued ahead); [`reserve_n`](Self::reserve_n) and, with feature
/// `tokio`, `wait_n` hand out the next departure slot and
/// make the caller wait for it, refusing when the wait would exceed
/// `max_delay` — the bounded queue. Use it to pace outgoing calls to a
/// partner API. The state is one `AtomicU64`, the next free departure slot.
///
/// Only the quota's emission interval matters here (its burst is ignored:
/// output spacing is constant). A request for `n` takes `n` consecutive
/// slots. [`limit`](crate::Limiter::limit) is the queue's capacity,
/// `1 + ⌊max_delay / T⌋` requests, and `remaining` is the free places in it.
///
/// # Examples
/// ```
/// use ratebound::{LeakyBucket, Limiter, ManualClock, Quota};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let pacer = LeakyBucket::with_clock(Quota::per_second(10)?, Duration::from_millis(250), clock)?;
/// assert!(pacer.check().is_allowed()); // leaves now
/// assert!(!pacer.check().is_allowed()); // would have to queue
/// let delays: Vec<Duration> = (0..3)
///     .filter_map(|_| pacer.reserve_n(1, Duration::MAX).ok().map(|r| r.delay()))
///     .collect();
/// // 100 ms apart; a fourth would wait 300 ms > max_delay and is refused.
/// assert_eq!(delays, [Duration::from_millis(100), Duration::from_millis(200)]);
/// # Ok::<(), ratebound::Error>(())
/// ```
///
/// # Errors
/// [`Error::PeriodTooLong`] when `max_delay` exceeds 2^60 ns.
#[derive(Debug)]
pub struct LeakyBucket<C: Clock = MonotonicClock> {
    core: Core<Leaky, C>,
}

impl LeakyBucket<MonotonicClock> {
    /// Requests spaced by `rate`'s emission interval, at most `max_delay`
    /// queued, on the default clock.
    ///
    /// # Errors
    /// See [`LeakyBucket`].
    pub fn new(rate: Quota, max_delay: Duration) -> Result<Self, Error> {
        Self::with_clock(rate, max_delay, MonotonicClock::new())
    }
}

impl<C: Clock> LeakyBucket<C> {
    /// As [`new`](LeakyBucket::new), reading time from `clock`.
    ///
    /// # Errors
    /// See [`LeakyBucket`].
    pub fn with_clock(rate: Quota, max_delay: Duration, clock: C) -> Result<Self, Error> {
        let nanos = max_delay.as_nanos();
        if nanos > u128::from(MAX_SPAN_NANOS) {
            return Err(Error::PeriodTooLong { nanos });
        }
        let period = rate.emission_interval_nanos();
        let max_delay = nanos as u64;
        let math = Leaky {
            period,
            max_delay,
            capacity: 1 + max_delay / period,
        };
        Ok(LeakyBucket {
            core: Core::new(math, clock),
        })
    }

    /// The spacing between departures.
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.core.math.period)
    }

    /// The longest a request may be queued.
    pub fn max_delay(&self) -> Duration {
        Duration::from_nanos(self.core.math.max_delay)
    }

    /// Queues `n` requests now. See [`reserve_n_at`](Self::reserve_n_at).
    ///
    /// # Errors
    /// As [`reserve_n_at`](Self::reserve_n_at).
    pub fn reserve_n(&self, n: u64, max_wait: Duration) -> Result<Reservation<'_>, Error> {
        self.reserve_n_at(n, max_wait, self.core.clock.now())
    }

    /// Takes the next `n` departure slots at `now`; the reservation's delay
    /// is how long until the first of them.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the queue's capacity;
    /// [`Error::DeadlineExceeded`] when the wait would exceed `max_wait` or
    /// `max_delay` — then nothing is queued.
    pub fn reserve_n_at(
        &self,
        n: u64,
        max_wait: Duration,
        now: u64,
    ) -> Result<Reservation<'_>, Error> {
        let math = self.core.math;
        capacity(n, math.capacity)?;
        let now = now.min(MAX_TIME_NANOS);
        let max_wait_nanos = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        let (slot, _) = self.core.state.update(|slot| {
            let (_, next) = math.reserve(slot, now, n, max_wait_nanos).ok()?;
            Some(next)
        });
        match math.reserve(slot, now, n, max_wait_nanos) {
            Ok((wait, next)) => Ok(Reservation {
                limiter: self,
                permit: Permit {
                    n,
                    issuer: self.core.id,
                    key: 0,
                    members: None,
                    mark: next,
                    aux: 0,
                },
                reserved_at: now,
                wait,
            }),
            Err(wait) => Err(Error::DeadlineExceeded {
                wait: Duration::from_nanos(wait),
                max_wait: max_wait.min(self.max_delay()),
            }),
        }
    }
}

limiter_via_core!(LeakyBucket);
