//! The concurrency cap: requests in flight, for load shedding — a fixed
//! number, or one learned from latency (`adaptive`), with priorities.

use super::adaptive::{AdaptiveConcurrency, AdaptiveState, Controller, Priority};
use crate::any::AnyClock;
use crate::sync::{AtomicUsize, Ordering};
use crate::{Clock, Error};

/// A cap on requests in flight, for load shedding: a request either gets a
/// place at once or is refused at once (503 with `Retry-After: 1` in the
/// front doors) — it never waits, so there is no queue to grow. The cap is
/// a fixed number ([`new`](Self::new)) or learned from the latency of the
/// requests it lets in ([`adaptive`](Self::adaptive)); background requests
/// get places only below a fraction of it, critical ones always go on.
/// Lock-free: one atomic count and a relaxed load of the limit, model-checked
/// with loom.
///
/// # Examples
/// ```
/// use ratebound::http::{ConcurrencyCap, Priority};
///
/// let cap = ConcurrencyCap::new(2)?;
/// assert!(cap.try_enter());
/// assert!(!cap.try_enter_as(|| Priority::Background).is_ok()); // half full: background waits
/// assert!(cap.try_enter());
/// assert!(!cap.try_enter()); // full: shed this one
/// cap.leave();
/// assert!(cap.try_enter());
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Debug)]
pub struct ConcurrencyCap {
    limit: AtomicUsize,
    in_use: AtomicUsize,
    /// The background fraction in 1/65536ths.
    background: usize,
    adaptive: Option<Box<(Controller, AnyClock)>>,
}

/// The default share of the limit background requests may fill.
pub const DEFAULT_BACKGROUND_FRACTION: f64 = 0.5;

impl ConcurrencyCap {
    /// At most `limit` requests in flight.
    ///
    /// # Errors
    /// [`Error::InvalidLimit`] for 0.
    pub fn new(limit: usize) -> Result<ConcurrencyCap, Error> {
        if limit == 0 {
            return Err(Error::InvalidLimit {
                limit: 0,
                max: u64::try_from(usize::MAX).unwrap_or(u64::MAX),
            });
        }
        Ok(ConcurrencyCap {
            limit: AtomicUsize::new(limit),
            in_use: AtomicUsize::new(0),
            background: 1 << 15,
            adaptive: None,
        })
    }

    /// A limit learned from latency, timed by `clock`: it starts at
    /// `config.initial_limit` and moves once per window of samples (see
    /// [`AdaptiveConcurrency`]). Give each place back with
    /// [`leave_after`](Self::leave_after) so that its latency counts.
    ///
    /// # Errors
    /// [`AdaptiveConcurrency::check`]'s.
    pub fn adaptive(config: AdaptiveConcurrency, clock: AnyClock) -> Result<ConcurrencyCap, Error> {
        config.check()?;
        let mut cap = ConcurrencyCap::new(config.initial_limit)?;
        cap.adaptive = Some(Box::new((Controller::new(config), clock)));
        Ok(cap)
    }

    /// Background requests get places only while fewer than
    /// `fraction · limit` are in flight (default ½; 0 sheds every
    /// background request at once, 1 treats them as normal).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] unless `fraction` is within 0..=1.
    pub fn with_background_fraction(mut self, fraction: f64) -> Result<ConcurrencyCap, Error> {
        self.background = background_share(fraction)?;
        Ok(self)
    }

    /// Takes a place if one is free; `false` when the cap is reached. A
    /// `true` must be paired with one [`leave`](Self::leave).
    #[inline]
    pub fn try_enter(&self) -> bool {
        self.try_enter_as(|| Priority::Normal).is_ok()
    }

    /// Takes a place for a request of the priority `priority()` tells —
    /// asked only when the requests in flight reach the background share
    /// (below it every request is admitted alike), at most once. `Err`
    /// carries the priority of a request refused a place: a critical one
    /// goes on without a place, the others are shed. `Ok` carries how many
    /// were in flight before this one (0: it entered alone; see
    /// [`record`](Self::record)).
    #[inline]
    pub fn try_enter_as(&self, priority: impl FnOnce() -> Priority) -> Result<usize, Priority> {
        let mut priority = Some(priority);
        let mut known = Priority::Normal;
        // Ordering: Relaxed — the limit is advice; a request admitted
        // against a limit just lowered is one more in flight, never a
        // lost count.
        let limit = self.limit.load(Ordering::Relaxed);
        let share = limit.saturating_mul(self.background) >> 16;
        let mut n = self.in_use.load(Ordering::Relaxed);
        loop {
            if n >= share
                && let Some(ask) = priority.take()
            {
                known = ask();
            }
            let bound = if n < share || known != Priority::Background {
                limit
            } else {
                share
            };
            if n >= bound {
                return Err(known);
            }
            // Ordering: Acquire pairs with leave()'s Release: what the
            // previous holder of the place did happens before this request
            // runs. The count itself is exact (one read-modify-write at a
            // time), so never more places are out than a limit allowed.
            match self
                .in_use
                .compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Ok(n),
                Err(now) => n = now,
            }
        }
    }

    /// Gives back a place taken by [`try_enter`](Self::try_enter). An
    /// unpaired call is ignored rather than wrapping the count.
    #[inline]
    pub fn leave(&self) {
        // Ordering: Release — what the request did happens before its place
        // is seen free.
        let _ = self
            .in_use
            .fetch_update(Ordering::Release, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// The clock reading a place's latency starts from (0 for a fixed cap,
    /// which measures nothing).
    #[inline]
    pub fn start(&self) -> u64 {
        self.adaptive.as_ref().map_or(0, |a| a.1.now())
    }

    /// Records the latency of a request that entered at `start` (a reading
    /// of [`start`](Self::start)) with `before` others in flight (what
    /// [`try_enter_as`](Self::try_enter_as) returned) — an adaptive limit
    /// learns from it; a fixed cap ignores it. The place stays taken: give
    /// it back with [`leave`](Self::leave).
    #[inline]
    pub fn record(&self, start: u64, before: usize) {
        if let Some(a) = &self.adaptive {
            let (controller, clock) = &**a;
            let micros = clock.now().saturating_sub(start).div_ceil(1000);
            let limit = self.limit.load(Ordering::Relaxed);
            if let Some(next) = controller.sample(micros, before == 0, limit, self.in_flight()) {
                // Ordering: Relaxed, as the load in try_enter_as.
                self.limit.store(next, Ordering::Relaxed);
            }
        }
    }

    /// [`record`](Self::record) and [`leave`](Self::leave): the place of a
    /// request that entered at `start` with `before` others in flight is
    /// given back and its latency counts.
    #[inline]
    pub fn leave_after(&self, start: u64, before: usize) {
        self.record(start, before);
        self.leave();
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    /// The limit in force now.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Whether the limit is learned from latency.
    pub fn is_adaptive(&self) -> bool {
        self.adaptive.is_some()
    }

    /// The adaptive limit's tuning, if it is adaptive.
    pub fn tuning(&self) -> Option<&AdaptiveConcurrency> {
        self.adaptive.as_ref().map(|a| a.0.config())
    }

    /// What the adaptive limit knows now (`None` for a fixed cap).
    pub fn state(&self) -> Option<AdaptiveState> {
        self.adaptive.as_ref().map(|a| a.0.state(self.limit()))
    }
}

/// Checks a background fraction.
pub(crate) fn concurrency_share_check(fraction: f64) -> Result<(), Error> {
    background_share(fraction).map(|_| ())
}

/// `fraction` as 1/65536ths, checked.
pub(crate) fn background_share(fraction: f64) -> Result<usize, Error> {
    if !(0.0..=1.0).contains(&fraction) {
        return Err(Error::InvalidNumber {
            name: "background_fraction",
            value: crate::any::numbers::show(fraction),
            reason: "must be a number from 0 to 1",
        });
    }
    Ok((fraction * 65536.0).round() as usize)
}
