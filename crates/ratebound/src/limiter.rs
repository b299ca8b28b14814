//! One interface for every algorithm.

use crate::{Decision, Error};

/// A rate limiter: any of the five algorithms, or several combined with
/// [`AllOf`](crate::AllOf). Switching algorithms is a one-line change.
///
/// Every call has an explicit-time twin: `check()` is
/// `check_at(self.now())`, with times in nanoseconds since the limiter's
/// clock's epoch. All methods take `&self` and are safe to call from many
/// threads at once. The trait is object-safe: `Box<dyn Limiter>` and
/// `Arc<dyn Limiter>` work.
///
/// # Examples
/// ```
/// use ratebound::{FixedWindow, Limiter, ManualClock, Quota, SlidingWindow, TokenBucket};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let minute = Duration::from_secs(60);
/// let limiters: Vec<Box<dyn Limiter>> = vec![
///     Box::new(TokenBucket::with_clock(Quota::per_minute(100)?, clock.clone())),
///     Box::new(FixedWindow::with_clock(100, minute, clock.clone())?),
///     Box::new(SlidingWindow::with_clock(100, minute, clock.clone())?),
/// ];
/// for limiter in &limiters {
///     assert!(limiter.check().is_allowed());
///     assert_eq!(limiter.check_n(100)?.is_allowed(), false); // 99 left
/// }
/// # Ok::<(), ratebound::Error>(())
/// ```
pub trait Limiter: Send + Sync {
    /// The limiter's clock reading: nanoseconds since its epoch.
    fn now(&self) -> u64;

    /// The most that can ever be taken at once (the burst, the window's
    /// limit, or the queue's capacity).
    fn limit(&self) -> u64;

    /// Takes one at `now` if allowed.
    fn check_at(&self, now: u64) -> Decision;

    /// Takes `n` at `now` if all `n` are allowed; otherwise takes nothing.
    /// `n = 0` takes nothing and is allowed.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds [`limit`](Self::limit).
    fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        self.acquire_n_at(n, now).map(|(decision, _)| decision)
    }

    /// What `check_n_at(n, now)` would decide, without taking anything.
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, Error>;

    /// Like [`check_n_at`](Self::check_n_at), and when allowed also returns a
    /// [`Permit`] with which [`release`](Self::release) can give the `n` back
    /// (used to undo a partial admission, as [`AllOf`](crate::AllOf) does).
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    fn acquire_n_at(&self, n: u64, now: u64) -> Result<(Decision, Option<Permit>), Error>;

    /// Gives back what an [`acquire_n_at`](Self::acquire_n_at) took, as far
    /// as the algorithm can: see each limiter's documentation.
    ///
    /// # Errors
    /// [`Error::ForeignPermit`] for a permit this limiter did not issue (it
    /// gives nothing back).
    fn try_release(&self, permit: Permit) -> Result<(), Error>;

    /// [`try_release`](Self::try_release), for callers that hold only their
    /// own permits: a foreign permit gives nothing back.
    fn release(&self, permit: Permit) {
        let _ = self.try_release(permit);
    }

    /// How many could be taken at `now`.
    fn available_at(&self, now: u64) -> u64;

    /// Takes one now if allowed.
    fn check(&self) -> Decision {
        self.check_at(self.now())
    }

    /// Takes `n` now if all `n` are allowed.
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    fn check_n(&self, n: u64) -> Result<Decision, Error> {
        self.check_n_at(n, self.now())
    }

    /// How many could be taken now.
    fn available(&self) -> u64 {
        self.available_at(self.now())
    }
}

/// Proof of an admission, for giving it back with [`Limiter::release`].
///
/// Single use and tied to its issuer: giving it back consumes it (it is
/// neither `Copy` nor `Clone`, so it cannot be given back twice), and a
/// limiter refuses a permit another limiter — or, for a keyed limiter,
/// another key — issued ([`Error::ForeignPermit`]), instead of granting
/// tokens it never took.
#[derive(Debug, PartialEq, Eq)]
pub struct Permit {
    pub(crate) n: u64,
    /// The issuing limiter's id.
    pub(crate) issuer: u64,
    /// For a keyed limiter, the key's hash (0 otherwise).
    pub(crate) key: u64,
    /// For a composite ([`AllOf`](crate::AllOf)), its members' permits.
    pub(crate) members: Option<Box<[Option<Permit>]>>,
    /// The algorithm's mark of where the admission landed (a TAT, a window
    /// index, a timestamp).
    pub(crate) mark: u64,
    /// A second word if the algorithm needs one (a quota generation).
    pub(crate) aux: u64,
}

impl Permit {
    /// How many the admission took.
    pub fn tokens(&self) -> u64 {
        self.n
    }
}

/// Tokens taken ahead of time by a `reserve_n` (of a [`TokenBucket`] or a
/// [`LeakyBucket`]): act after [`delay`](Reservation::delay), or
/// [`cancel`](Reservation::cancel) to give them back. Dropping a reservation
/// keeps the tokens taken.
///
/// [`TokenBucket`]: crate::TokenBucket
/// [`LeakyBucket`]: crate::LeakyBucket
#[must_use = "a reservation holds tokens: act after delay() or cancel() it"]
pub struct Reservation<'a> {
    pub(crate) limiter: &'a (dyn Limiter + 'a),
    pub(crate) permit: Permit,
    pub(crate) reserved_at: u64,
    pub(crate) wait: u64,
}

impl Reservation<'_> {
    /// How long after the reservation was made the caller may act.
    pub fn delay(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.wait)
    }

    /// The clock time (ns since the clock's epoch) at which the caller may act.
    pub fn ready_at_nanos(&self) -> u64 {
        self.reserved_at + self.wait
    }

    /// Tokens reserved.
    pub fn tokens(&self) -> u64 {
        self.permit.n
    }

    /// Gives the tokens back if no later taker has built on them: a check
    /// or reservation made after this one was decided as if these tokens
    /// were gone. A token (or leaky) bucket takes them back only while its
    /// state is still the one this reservation left — cancels in the
    /// reverse order chain, and one in the middle of a queue gives nothing
    /// back (the queue never exceeds `burst + rate·t`; stricter than Go's
    /// `x/time/rate`, whose partial give-back can exceed it); a window
    /// takes them back while its window lasts. Call it only if you did not
    /// act.
    pub fn cancel(self) {
        self.limiter.release(self.permit);
    }
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("tokens", &self.permit.n)
            .field("reserved_at", &self.reserved_at)
            .field("delay", &self.delay())
            .finish()
    }
}

/// What one step of an acquisition found (see
/// [`AnyLimiter::acquire_step`](crate::any::AnyLimiter::acquire_step)).
#[derive(Debug, PartialEq, Eq)]
pub enum Acquire {
    /// Taken now: go ahead.
    Admitted,
    /// Taken ahead of time: go ahead after `wait_nanos`. If the waiter is
    /// cancelled before then, [`release`](Limiter::release) the permit.
    Reserved {
        /// How long to wait.
        wait_nanos: u64,
        /// What to give back if the waiter gives up.
        permit: Permit,
    },
    /// Nothing taken (the algorithm cannot reserve): sleep `wait_nanos`,
    /// then take another step.
    Retry {
        /// How long to sleep, at least 1 ns.
        wait_nanos: u64,
    },
}
