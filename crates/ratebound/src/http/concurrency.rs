//! The concurrency cap: requests in flight, for load shedding — a fixed
//! number, or one learned from latency (`adaptive`), with priorities.

use std::task::{Context, Poll};
use std::time::Duration;

use super::adaptive::{AdaptiveConcurrency, AdaptiveState, Controller, Priority};
use super::queue::{Queue, Slot};
use crate::clock::AnyClock;
use std::sync::Arc;

use crate::sync::{AtomicUsize, Ordering, fence};
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
    queue: Option<Box<(Queue, AnyClock)>>,
}

/// The longest wait [`ConcurrencyCap::with_queue`] accepts.
pub const MAX_QUEUE_WAIT: Duration = Duration::from_secs(10);

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
            queue: None,
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

    /// A short queue in front of the cap: a normal request that finds every
    /// place taken may wait up to `max_wait` (a few milliseconds: CoDel's
    /// target is 5 ms) for one ([`wait_for_place`](Self::wait_for_place)),
    /// timed by `clock`. A place given back goes straight to a waiter: the
    /// oldest while the queue is fresh, the newest once the oldest has
    /// waited half of `max_wait` (adaptive LIFO).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for a wait of 0 or above [`MAX_QUEUE_WAIT`].
    pub fn with_queue(
        mut self,
        max_wait: Duration,
        clock: AnyClock,
    ) -> Result<ConcurrencyCap, Error> {
        if max_wait.is_zero() || max_wait > MAX_QUEUE_WAIT {
            return Err(Error::InvalidNumber {
                name: "concurrency queue wait",
                value: format!("{max_wait:?}"),
                reason: "must be more than 0 and at most 10 s",
            });
        }
        let nanos = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        self.queue = Some(Box::new((Queue::new(nanos), clock)));
        Ok(self)
    }

    /// The queue's longest wait, if the cap has a queue.
    pub fn queue_wait(&self) -> Option<Duration> {
        self.queue
            .as_ref()
            .map(|q| Duration::from_nanos(q.0.max_wait))
    }

    /// Waits in the queue for a place, after [`try_enter_as`](Self::try_enter_as)
    /// found none (`None` without a queue). Poll the [`PlaceWait`] until a
    /// place is granted or [`queue_wait`](Self::queue_wait) has passed, then
    /// [`finish`](PlaceWait::finish) it.
    pub fn wait_for_place(self: &Arc<Self>) -> Option<PlaceWait> {
        let (queue, clock) = &**self.queue.as_ref()?;
        let slot = queue.register(clock.now());
        // Ordering: SeqCst — registered, then a last look for a place: a
        // place given back meanwhile is seen here or hands itself over.
        fence(Ordering::SeqCst);
        let mut taken = false;
        if self.take_raw() {
            if queue.withdraw(&slot) {
                taken = true;
            } else {
                // Granted one meanwhile as well: pass the extra one on.
                self.leave();
            }
        }
        Some(PlaceWait {
            cap: self.clone(),
            slot,
            taken,
            done: false,
        })
    }

    /// One place, if the limit allows (no priority, no queue).
    #[inline]
    fn take_raw(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        self.in_use
            .fetch_update(Ordering::SeqCst, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// A place was given back and someone may be waiting: take a place for
    /// the waiter and hand it over; give it back if nobody is there.
    #[cold]
    fn hand_off(&self, queue: &Queue, clock: &AnyClock) {
        while queue.anyone() {
            if !self.take_raw() {
                // Taken by a newcomer; its leave will hand off.
                return;
            }
            if queue.grant(clock.now()) {
                return;
            }
            let _ = self
                .in_use
                .fetch_update(Ordering::SeqCst, Ordering::Relaxed, |n| n.checked_sub(1));
            crate::sync::yield_now();
        }
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
                if bound == limit
                    && let Some(a) = &self.adaptive
                {
                    a.0.refused_at_limit();
                }
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
        if let Some(q) = &self.queue {
            // Ordering: SeqCst — the place is seen free, then the queue is
            // looked at (the waiter's side registers, then looks for a place).
            fence(Ordering::SeqCst);
            if q.0.anyone() {
                self.hand_off(&q.0, &q.1);
            }
        }
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

    /// Requests waiting in the queue for a place now (0 without a queue).
    pub fn queued(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.0.waiting())
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

/// A request waiting in a [`ConcurrencyCap`]'s queue for a place. Dropped
/// unfinished, it leaves the queue (and passes on a place granted to it).
#[derive(Debug)]
#[must_use = "a waiter leaves the queue when dropped"]
pub struct PlaceWait {
    cap: Arc<ConcurrencyCap>,
    slot: crate::sync::Arc<Slot>,
    /// It took a place itself while registering.
    taken: bool,
    done: bool,
}

impl PlaceWait {
    /// Ready once a place is granted; registers `cx`'s waker.
    pub fn poll_place(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.taken {
            return Poll::Ready(());
        }
        Queue::poll(&self.slot, cx)
    }

    /// Whether a place is held for it now.
    pub fn is_granted(&self) -> bool {
        self.taken || self.slot.state_granted()
    }

    /// Ends the wait: `true` when a place is now held (give it back with
    /// [`ConcurrencyCap::leave`]), `false` when none came (shed it).
    pub fn finish(mut self) -> bool {
        self.finish_held()
    }

    /// The cap it waits for.
    pub fn cap(&self) -> &Arc<ConcurrencyCap> {
        &self.cap
    }
}

impl Drop for PlaceWait {
    fn drop(&mut self) {
        if !self.done && self.finish_held() {
            self.cap.leave();
        }
    }
}

impl PlaceWait {
    fn finish_held(&mut self) -> bool {
        self.done = true;
        match self.cap.queue.as_ref() {
            Some(queue) => self.taken || !queue.0.withdraw(&self.slot),
            None => self.taken,
        }
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
            value: crate::error::show(fraction),
            reason: "must be a number from 0 to 1",
        });
    }
    Ok((fraction * 65536.0).round() as usize)
}
