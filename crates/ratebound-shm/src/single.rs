//! [`SharedLimiter`], one limit for every process, and its
//! [`SharedReservation`]s.

use std::path::Path;
use std::time::Duration;

use ratebound::any::Waiter;
use ratebound::outbound::Learned;
use ratebound::wait::{Step, drive_blocking};
use ratebound::{Clock, Decision, KeyedAlgorithm, Permit, Resumed};

#[cfg(feature = "tokio")]
use crate::clock::ASYNC_MAX_SLEEP_NANOS;
use crate::clock::{SystemClock, nanos};
use crate::error::Error;
use crate::file::MODE_SINGLE;
use crate::sync::Ordering;
use crate::table::{Table, cannot_learn, swap_learned, table_methods};

/// One limit shared by every process that opens the same file.
pub struct SharedLimiter {
    table: Table,
    clock: SystemClock,
    /// This handle's name on the permits it issues (see
    /// [`release`](Self::release)).
    id: u64,
}

/// A process-wide id for each shared limiter handle.
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    // Ordering: Relaxed — a fetch_add is unique whatever the ordering.
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Tokens taken ahead of time on the shared word by
/// [`reserve_n`](SharedLimiter::reserve_n): act after
/// [`delay`](Self::delay). Dropped or [`cancel`](Self::cancel)led, it gives
/// them back (as a Redis reservation does) if no later taker has built on
/// them; [`consume`](Self::consume) keeps them.
#[derive(Debug)]
#[must_use = "a reservation dropped at once gives its tokens back"]
pub struct SharedReservation<'a> {
    limiter: &'a SharedLimiter,
    /// Until consumed, cancelled or handed out.
    permit: Option<Permit>,
    wait: u64,
}

impl SharedReservation<'_> {
    /// How long to wait, from the moment of the reservation, before acting.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.wait)
    }

    /// Gives the tokens back if no later taker has built on them.
    pub fn cancel(mut self) {
        self.give_back();
    }

    /// Keeps the tokens: the caller acts after [`delay`](Self::delay).
    pub fn consume(mut self) {
        self.permit = None;
    }

    /// The permit, for [`SharedLimiter::release`] later (a binding's
    /// reservation object keeps it); the reservation no longer gives it back.
    pub fn into_permit(mut self) -> Permit {
        // Made with one, and taken only by the methods that consume self.
        self.permit
            .take()
            .unwrap_or_else(|| unreachable!("a reservation's permit is taken once"))
    }

    fn give_back(&mut self) {
        if let Some(p) = self.permit.take() {
            // Our own permit: never foreign.
            let _ = self.limiter.release(p);
        }
    }
}

impl Drop for SharedReservation<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl std::fmt::Debug for SharedLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLimiter")
            .field("path", &self.table.path)
            .field("rule", &self.table.rule)
            .finish()
    }
}

impl SharedLimiter {
    /// Opens the limiter at `path`, making the file (mode 0600) if there is
    /// none.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when the file holds another algorithm or
    /// parameters; [`Error::Corrupt`], [`Error::Permissions`],
    /// [`Error::StaleBoot`], [`Error::Io`] (a missing directory, say);
    /// [`Error::Limit`] for a bad algorithm.
    pub fn open(path: impl AsRef<Path>, algorithm: KeyedAlgorithm) -> Result<SharedLimiter, Error> {
        Ok(SharedLimiter {
            table: Table::open(path.as_ref(), algorithm, MODE_SINGLE, 1)?,
            clock: SystemClock,
            id: next_id(),
        })
    }

    table_methods!();

    /// Takes one now if there is one.
    ///
    /// # Errors
    /// None in practice (`n = 1` never exceeds a limit); the signature is
    /// that of [`check_n`](Self::check_n).
    pub fn check(&self) -> Result<Decision, Error> {
        self.check_n(1)
    }

    /// Takes `n` now if all `n` are there.
    ///
    /// # Errors
    /// [`Error::Limit`] with `InsufficientCapacity` when `n` exceeds the
    /// limit.
    pub fn check_n(&self, n: u64) -> Result<Decision, Error> {
        self.check_n_at(n, self.clock.now())
    }

    /// Takes `n` at `now` (ns of `CLOCK_MONOTONIC`).
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        Ok(self
            .table
            .rule_at(0)
            .check_n_at(self.table.state(0), n, now)?
            .0)
    }

    /// The clock reading decisions are made at (ns of `CLOCK_MONOTONIC`).
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Takes `n` tokens of a token bucket now, possibly ahead of time, for
    /// every process: see [`reserve_n_at`](Self::reserve_n_at).
    ///
    /// # Errors
    /// As [`reserve_n_at`](Self::reserve_n_at).
    pub fn reserve_n(&self, n: u64, max_wait: Duration) -> Result<SharedReservation<'_>, Error> {
        self.reserve_n_at(n, max_wait, self.clock.now())
    }

    /// Takes `n` tokens at `now` on the shared word even if they are not
    /// there yet, as long as they will be within `max_wait`; every later
    /// caller, in any process, queues behind them (as
    /// [`TokenBucket::reserve_n_at`](ratebound::TokenBucket::reserve_n_at)).
    ///
    /// # Errors
    /// [`Error::Limit`] with `InsufficientCapacity` when `n` exceeds the
    /// burst, `DeadlineExceeded` (nothing taken) when the wait would be
    /// longer than `max_wait`, `Unsupported` for a window.
    pub fn reserve_n_at(
        &self,
        n: u64,
        max_wait: Duration,
        now: u64,
    ) -> Result<SharedReservation<'_>, Error> {
        let rule = self.table.rule_at(0);
        let (wait, mark) = rule.reserve_n_at(self.table.state(0), n, nanos(max_wait), now)?;
        Ok(SharedReservation {
            limiter: self,
            permit: Some(rule.permit(n, mark, self.id)),
            wait,
        })
    }

    /// Gives back the tokens of a permit this handle issued (a
    /// reservation's, an abandoned waiter's) if no later taker has built on
    /// them.
    ///
    /// # Errors
    /// [`Error::Limit`] with `ForeignPermit` for another handle's permit:
    /// nothing is given back.
    pub fn release(&self, permit: Permit) -> Result<(), Error> {
        let t = &self.table;
        Ok(t.rule_at(0).release_permit_paused(
            t.state(0),
            t.pause(0),
            permit,
            self.id,
            self.clock.now(),
        )?)
    }

    /// Empties a token bucket for every process until `d` from now; see
    /// [`pause_at`](Self::pause_at).
    ///
    /// # Errors
    /// As [`pause_at`](Self::pause_at).
    pub fn pause(&self, d: Duration) -> Result<(), Error> {
        self.pause_at(d, self.clock.now())
    }

    /// Empties a token bucket for every process until `now + d`; it
    /// refills at the rate from then on. Reservations already made, by any
    /// process, move past the pause in their order, as in the Redis
    /// limiter (see [`ratebound::pause`] for the rule): a waiter
    /// ([`acquire_n`](Self::acquire_n), [`wait_step`](Self::wait_step))
    /// finds its move in the file when it wakes and sleeps on; a
    /// [`SharedReservation`] already handed out keeps its delay. A pause
    /// that ends no later than one already on changes nothing, so every
    /// process obeying one `Retry-After` pauses once.
    ///
    /// # Errors
    /// [`Error::Limit`] with `Unsupported` for a window.
    pub fn pause_at(&self, d: Duration, now: u64) -> Result<(), Error> {
        let t = &self.table;
        t.rule_at(0)
            .pause_at(t.state(0), t.pause(0), nanos(d), now)?;
        Ok(())
    }

    /// Lifts the pause on now; see [`resume_at`](Self::resume_at).
    ///
    /// # Errors
    /// As [`resume_at`](Self::resume_at).
    pub fn resume(&self) -> Result<Resumed, Error> {
        self.resume_at(self.clock.now())
    }

    /// Lifts the pause on at `now` for every process, if nothing was built
    /// on it: when no reservation (of any process) was made behind the
    /// pause or moved by it, the slot's state is exactly what the pause
    /// left (`end + τ`, its pause words' `end`), and the pause ends at
    /// `now` — empty now, refilling at the rate from then on
    /// ([`Resumed::Lifted`]). Otherwise nothing changes:
    /// [`Resumed::NotPaused`], or [`Resumed::Queued`] when reservations
    /// stand behind the pause (their waiters go at their times). Ordered
    /// with pauses by the slot's `end` word and with checks by one CAS on
    /// its state word (see [`ratebound::pause`]).
    ///
    /// # Errors
    /// [`Error::Limit`] with `Unsupported` for a window.
    pub fn resume_at(&self, now: u64) -> Result<Resumed, Error> {
        let t = &self.table;
        Ok(t.rule_at(0).resume_at(t.state(0), t.pause(0), now)?)
    }

    /// Advances `waiter` now: [`Step::Done`] or how long to sleep. A token
    /// bucket reserves on the shared word at the first step (one order for
    /// every process); a window says to sleep its exact `retry_after` and
    /// decides again.
    ///
    /// # Errors
    /// [`Error::Limit`] with `DeadlineExceeded` at once, taking nothing,
    /// when the wait would end after the deadline; `InsufficientCapacity`
    /// when `n` exceeds the limit.
    pub fn wait_step(&self, waiter: &mut Waiter) -> Result<Step, Error> {
        let (rule, word) = (self.table.rule_at(0), self.table.state(0));
        // Read before the step reserves (see `Waiter::step_paused`).
        let shifted = self.table.pause(0).shifted();
        let now = self.clock.now();
        Ok(waiter.step_paused(now, shifted, |n, deadline| {
            rule.acquire_step(word, n, deadline, now, self.id)
                .map(|(step, _)| step)
        })?)
    }

    /// Ends `waiter` early (cancelled, timed out): the tokens it holds go
    /// back if no later taker has built on them.
    ///
    /// # Errors
    /// [`Error::Limit`] with `ForeignPermit` for another handle's waiter.
    pub fn abandon(&self, waiter: &mut Waiter) -> Result<(), Error> {
        match waiter.abandon() {
            Some(permit) => self.release(permit),
            None => Ok(()),
        }
    }

    /// Waits on this thread until `n` tokens are the caller's, or fails at
    /// once, taking nothing, if that would take longer than `timeout`
    /// (`None`: as long as it takes). A token bucket reserves on the shared
    /// word and sleeps once; a window sleeps its exact `retry_after` and
    /// decides again.
    ///
    /// # Examples
    /// ```
    /// use ratebound::{KeyedAlgorithm, Quota};
    /// use ratebound_shm::SharedLimiter;
    /// use std::time::{Duration, Instant};
    ///
    /// let dir = std::env::temp_dir().join(format!("rb-shm-acq-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("20/s burst 1")?);
    /// let lim = SharedLimiter::open(dir.join("partner.limit"), algorithm)?;
    /// let start = Instant::now();
    /// lim.acquire_n(1, None)?; // the burst
    /// lim.acquire_n(1, Some(Duration::from_secs(1)))?; // 50 ms later
    /// assert!(start.elapsed() >= Duration::from_millis(50));
    /// // A wait beyond the timeout fails at once, taking nothing.
    /// assert!(lim.acquire_n(1, Some(Duration::from_millis(1))).is_err());
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`wait_step`](Self::wait_step).
    pub fn acquire_n(&self, n: u64, timeout: Option<Duration>) -> Result<(), Error> {
        let mut waiter = Waiter::start(n, timeout, self.clock.now(), u64::MAX);
        drive_blocking(
            &mut waiter,
            |w| self.wait_step(w),
            |_, never| match never {},
        )
    }

    /// [`acquire_n`](Self::acquire_n) without blocking the thread (feature
    /// `tokio`): the task sleeps on tokio's timer. Dropped before it is
    /// over, the future gives back the tokens it holds.
    ///
    /// # Errors
    /// As [`acquire_n`](Self::acquire_n).
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self, n: u64, timeout: Option<Duration>) -> Result<(), Error> {
        let waiter = Waiter::start(n, timeout, self.clock.now(), ASYNC_MAX_SLEEP_NANOS);
        ratebound::wait::drive(
            waiter,
            |w| self.wait_step(w),
            |w| {
                let _ = self.abandon(w);
            },
        )
        .await
    }

    /// What the outbound adapters sharing this limiter learned of the
    /// partner's limit: the file's learned word (fresh, the configured
    /// quota, when nothing is; always, for a window).
    pub fn learned(&self) -> Learned {
        if self.table.ceiling().is_none() {
            return Learned::fresh();
        }
        // Ordering: Acquire — pairs with an adapt's exchange.
        Learned::from_bits(self.table.learned(0).load(Ordering::Acquire))
    }

    /// Replaces the learned word `seen` with `next` for every process, if
    /// it is still `seen` (one compare-and-swap on the file's word: of
    /// fifty processes proposing a change from the same word, one wins).
    /// From then on every check, reservation and wait runs at `next`'s
    /// share of the configured quota ([`Learned::scale`]), the schedule
    /// kept as it is on a raise, and the queue beyond an empty bucket
    /// dropped on a fall (as [`TokenBucket::adapt`](ratebound::TokenBucket::adapt)).
    /// Returns whether it replaced.
    ///
    /// # Errors
    /// [`Error::Limit`] with `Unsupported` for a window.
    pub fn adapt(&self, seen: Learned, next: Learned) -> Result<bool, Error> {
        self.adapt_at(seen, next, self.clock.now())
    }

    /// [`adapt`](Self::adapt) at `now`. A lower share drops the queue
    /// beyond an empty bucket at the new rate, a pause on kept (as
    /// [`TokenBucket::adapt`](ratebound::TokenBucket::adapt) does: the
    /// adapters' waiters holding those slots wait again).
    ///
    /// # Errors
    /// As [`adapt`](Self::adapt).
    pub fn adapt_at(&self, seen: Learned, next: Learned, now: u64) -> Result<bool, Error> {
        let t = &self.table;
        if t.ceiling().is_none() {
            return Err(Error::Limit(cannot_learn(t.algorithm)));
        }
        let replaced = swap_learned(t.learned(0), seen, next);
        if replaced && next.fraction_units() < seen.fraction_units() {
            t.rule_at(0).drop_queue_at(t.state(0), t.pause(0), now)?;
        }
        Ok(replaced)
    }

    /// How many could be taken now.
    pub fn available(&self) -> u64 {
        let state = self.table.state(0).load(Ordering::Acquire);
        self.table.rule_at(0).available(state, self.clock.now())
    }
}
