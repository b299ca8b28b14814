//! Async waiting on tokio's timer, and background cleanup (feature `tokio`).

use std::hash::Hash;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::limiter::Reservation;
use crate::{Clock, Error, KeyedLimiter, LeakyBucket, MAX_TIME_NANOS, TokenBucket};

/// A clock over tokio's time (`tokio::time::Instant`), from its creation.
///
/// The waits of this crate sleep on tokio's timer; a limiter on this clock
/// decides on the same time line. Under tokio's paused time
/// (`#[tokio::test(start_paused = true)]`, `tokio::time::pause`) both are
/// virtual, so a test can check a wait's length exactly, without real
/// sleeps. Make it inside the runtime whose time it should read.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), ratebound::Error> {
/// use ratebound::{Quota, TokenBucket, TokioClock};
/// use std::time::Duration;
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(10)?.with_burst(1)?, TokioClock::new());
/// let start = tokio::time::Instant::now();
/// bucket.wait_n(1, Duration::ZERO).await?;
/// bucket.wait_n(1, Duration::from_secs(1)).await?;
/// assert_eq!(start.elapsed(), Duration::from_millis(100)); // exactly, in virtual time
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    epoch: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading 0 now.
    pub fn new() -> TokioClock {
        TokioClock {
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(MAX_TIME_NANOS)
            .min(MAX_TIME_NANOS)
    }
}

/// Gives a reservation's tokens back unless the wait completed.
struct CancelOnDrop<'a>(Option<Reservation<'a>>);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(reservation) = self.0.take() {
            reservation.cancel();
        }
    }
}

impl<C: Clock> TokenBucket<C> {
    /// Waits until one token is yours. See [`wait_n`](Self::wait_n).
    ///
    /// # Errors
    /// Only [`Error::DeadlineExceeded`], when the queue ahead is longer than
    /// the state can represent (decades).
    pub async fn until_ready(&self) -> Result<(), Error> {
        self.wait_n(1, Duration::MAX).await
    }

    /// Waits until `n` tokens are yours, however long that takes.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the burst.
    pub async fn until_n_ready(&self, n: u64) -> Result<(), Error> {
        self.wait_n(n, Duration::MAX).await
    }

    /// Reserves `n` tokens and sleeps (on tokio's timer) until they are
    /// yours, unless that would take longer than `max_wait`: then it returns
    /// [`Error::DeadlineExceeded`] at once, without sleeping and without
    /// taking anything. Waiters are served in the order they reserved.
    ///
    /// If the future is dropped before it completes, the tokens are given
    /// back (as [`Reservation::cancel`] does).
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the burst;
    /// [`Error::DeadlineExceeded`] when the wait would exceed `max_wait`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ratebound::Error> {
    /// use ratebound::{Quota, TokenBucket};
    /// use std::time::Duration;
    ///
    /// let bucket = TokenBucket::new(Quota::per_second(100)?.with_burst(1)?);
    /// bucket.wait_n(1, Duration::ZERO).await?; // the bucket starts full
    /// let err = bucket.wait_n(1, Duration::from_millis(1)).await.unwrap_err();
    /// assert_eq!(err.code(), "deadline_exceeded"); // ~10 ms away: refused at once
    /// bucket.wait_n(1, Duration::from_millis(50)).await?; // sleeps ~10 ms
    /// # Ok(()) }
    /// ```
    ///
    /// A [`pause`](Self::pause) while it sleeps moves its slot past the
    /// pause (it wakes, finds the move, and sleeps on).
    pub async fn wait_n(&self, n: u64, max_wait: Duration) -> Result<(), Error> {
        // Read before reserving (see `pause`): a move made after is found.
        let mut seen = self.pause_shifted();
        let reservation = self.reserve_n(n, max_wait)?;
        let mut delay = reservation.delay();
        if delay.is_zero() {
            return Ok(());
        }
        let mut guard = CancelOnDrop(Some(reservation));
        loop {
            tokio::time::sleep(delay).await;
            let shifted = self.pause_shifted();
            let moved = shifted.saturating_sub(seen);
            if moved == 0 {
                break;
            }
            seen = shifted;
            if let Some(r) = guard.0.as_mut() {
                // The slot moved with the state; a give-back must find it.
                r.permit.mark = r.permit.mark.saturating_add(moved);
            }
            delay = Duration::from_nanos(moved);
        }
        // Completed: the tokens are the caller's now.
        guard.0 = None;
        Ok(())
    }
}

impl<C: Clock> LeakyBucket<C> {
    /// Waits for the next departure slot, up to the bucket's `max_delay`.
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] at once when the queue is full.
    pub async fn until_ready(&self) -> Result<(), Error> {
        self.wait_n(1, Duration::MAX).await
    }

    /// Queues for `n` departure slots and sleeps (on tokio's timer) until the
    /// first of them, unless the wait would exceed `max_wait` or the
    /// bucket's `max_delay`: then it fails at once, queuing nothing. If the
    /// future is dropped before it completes, the slots are given back.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the queue's capacity;
    /// [`Error::DeadlineExceeded`] when the wait would be too long.
    pub async fn wait_n(&self, n: u64, max_wait: Duration) -> Result<(), Error> {
        sleep_until_ready(self.reserve_n(n, max_wait)?).await;
        Ok(())
    }
}

/// Sleeps for a reservation's delay; gives it back if dropped before then.
async fn sleep_until_ready(reservation: Reservation<'_>) {
    let delay = reservation.delay();
    if delay.is_zero() {
        return;
    }
    let mut guard = CancelOnDrop(Some(reservation));
    tokio::time::sleep(delay).await;
    // Completed: the tokens are the caller's now.
    guard.0 = None;
}

/// A background cleanup started by [`KeyedLimiter::spawn_cleanup`]; stops
/// when dropped (or when the limiter is dropped).
#[derive(Debug)]
pub struct CleanupTask(tokio::task::JoinHandle<()>);

impl CleanupTask {
    /// Stops the task.
    pub fn stop(self) {}
}

impl Drop for CleanupTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<K, C> KeyedLimiter<K, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
{
    /// Runs [`cleanup`](KeyedLimiter::cleanup) every `every` on the current
    /// tokio runtime, until the returned task is dropped or the limiter is.
    /// Never needed for correctness (the `max_keys` cap sweeps on its own);
    /// it keeps memory low between floods.
    ///
    /// # Panics
    /// Outside a tokio runtime (as `tokio::spawn` does).
    pub fn spawn_cleanup(self: &Arc<Self>, every: Duration) -> CleanupTask {
        let limiter: Weak<Self> = Arc::downgrade(self);
        CleanupTask(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.tick().await; // the first tick is immediate
            loop {
                ticks.tick().await;
                match limiter.upgrade() {
                    Some(limiter) => {
                        limiter.cleanup();
                    }
                    None => return,
                }
            }
        }))
    }
}
