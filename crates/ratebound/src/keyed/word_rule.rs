//! `WordRule`: one key's algorithm on a state word the caller keeps (a
//! shared-memory table's).

use std::time::Duration;

use crate::limiter::{Acquire, Permit};
use crate::sync::AtomicU64;
use crate::sync::state::update;
use crate::{Decision, Error};

use super::math::Math;
use super::{KeyedAlgorithm, STATE_MASK};

/// One key's algorithm on a state word the caller keeps: the arithmetic and
/// the compare-exchange loop of [`KeyedLimiter`](crate::KeyedLimiter), for state that lives
/// elsewhere — in a table in shared memory, for instance, where every
/// process that maps it updates the same words (a compare-exchange is as
/// atomic across processes as across threads).
///
/// A word starts at [`WordRule::FRESH`]; the rule uses its low 62 bits and
/// keeps the top two at 0.
///
/// # Examples
/// ```
/// use std::sync::atomic::AtomicU64;
/// use ratebound::{KeyedAlgorithm, Quota, WordRule};
///
/// let rule = WordRule::new(KeyedAlgorithm::TokenBucket(Quota::parse("1/s burst 2")?))?;
/// let word = AtomicU64::new(WordRule::FRESH);
/// let now = 5_000_000_000;
/// assert!(rule.check_n_at(&word, 1, now)?.0.is_allowed());
/// assert!(rule.check_n_at(&word, 1, now)?.0.is_allowed());
/// assert!(!rule.check_n_at(&word, 1, now)?.0.is_allowed());
/// assert!(!rule.is_fresh(word.load(std::sync::atomic::Ordering::Relaxed), now));
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct WordRule {
    math: Math,
}

impl WordRule {
    /// The state of a key never seen (or fresh again).
    pub const FRESH: u64 = 0;

    /// The rule of `algorithm`.
    ///
    /// # Errors
    /// As [`KeyedLimiter::new`](crate::KeyedLimiter::new).
    pub fn new(algorithm: KeyedAlgorithm) -> Result<WordRule, Error> {
        Ok(WordRule {
            math: Math::new(algorithm)?,
        })
    }

    /// The most one check can take.
    pub fn limit(&self) -> u64 {
        self.math.limit()
    }

    /// Takes `n` at `now` from `word` if all `n` are there; a refusal
    /// writes nothing. Also where the admission landed (for
    /// [`release`](Self::release)), when admitted.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the limit.
    #[inline]
    pub fn check_n_at(
        &self,
        word: &AtomicU64,
        n: u64,
        now: u64,
    ) -> Result<(Decision, Option<u64>), Error> {
        let math = self.math;
        if n > math.limit() {
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst: math.limit(),
            });
        }
        let now = now.min(crate::MAX_TIME_NANOS);
        let (seen, allowed) = update(word, |w| math.admit(w & STATE_MASK, now, n));
        let state = seen & STATE_MASK;
        let mark = allowed.then(|| math.mark(state, now, n));
        Ok((math.decision(state, now, n, allowed), mark))
    }

    /// Gives back `n` admitted at `mark` (see
    /// [`KeyedLimiter::release`](crate::KeyedLimiter::release)): as far as no later admission depends on
    /// them.
    pub fn release(&self, word: &AtomicU64, mark: u64, n: u64) {
        let math = self.math;
        update(word, |w| math.release(w & STATE_MASK, mark, n));
    }

    /// The algorithm's name, as [`Error::Unsupported`] gives it.
    fn algorithm(&self) -> &'static str {
        match self.math {
            Math::Bucket(_) => "token_bucket",
            Math::Fixed(_) => "fixed_window",
            Math::Sliding(_) => "sliding_window",
        }
    }

    /// Takes `n` at `now` from a token bucket's `word` even if they are
    /// not there yet, as long as they will be within `max_wait` ns: the
    /// wait and where the reservation landed (for [`release`](Self::release)),
    /// as [`TokenBucket::reserve_n_at`](crate::TokenBucket::reserve_n_at).
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the burst;
    /// [`Error::DeadlineExceeded`], taking nothing, when the wait would be
    /// longer than `max_wait`; [`Error::Unsupported`] for the windows.
    pub fn reserve_n_at(
        &self,
        word: &AtomicU64,
        n: u64,
        max_wait: u64,
        now: u64,
    ) -> Result<(u64, u64), Error> {
        let Math::Bucket(p) = self.math else {
            return Err(Error::Unsupported {
                operation: "reservations",
                algorithm: self.algorithm(),
            });
        };
        if n > p.burst {
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst: p.burst,
            });
        }
        let now = now.min(crate::MAX_TIME_NANOS);
        let (seen, _) = update(word, |w| {
            p.reserve(w & STATE_MASK, now, n, max_wait)
                .ok()
                .map(|(_, next)| next)
        });
        p.reserve(seen & STATE_MASK, now, n, max_wait)
            .map_err(|wait| Error::DeadlineExceeded {
                wait: Duration::from_nanos(wait),
                max_wait: Duration::from_nanos(max_wait),
            })
    }

    /// One step of waiting for `n` at `now` on `word`, to be admitted no
    /// later than the clock time `deadline`: a token bucket reserves (the
    /// caller sleeps once and goes), a window says how long to sleep before
    /// deciding again — as [`AnyLimiter::acquire_step`](crate::any::AnyLimiter::acquire_step).
    /// Also where what was taken landed (for [`release`](Self::release)).
    /// A permit held by a reservation carries `tag` (the caller's name for
    /// the word) and is given back with [`release_permit`](Self::release_permit).
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] at once, taking nothing, when the wait
    /// would end after the deadline; [`Error::InsufficientCapacity`] when
    /// `n` exceeds the limit.
    pub fn acquire_step(
        &self,
        word: &AtomicU64,
        n: u64,
        deadline: Option<u64>,
        now: u64,
        tag: u64,
    ) -> Result<(Acquire, Option<u64>), Error> {
        let now = now.min(crate::MAX_TIME_NANOS);
        let max_wait = deadline.map_or(u64::MAX, |d| d.saturating_sub(now));
        if let Math::Bucket(_) = self.math {
            let (wait_nanos, mark) = self.reserve_n_at(word, n, max_wait, now)?;
            let step = if wait_nanos == 0 {
                Acquire::Admitted
            } else {
                Acquire::Reserved {
                    wait_nanos,
                    permit: self.permit(n, mark, tag),
                }
            };
            return Ok((step, Some(mark)));
        }
        let (d, mark) = self.check_n_at(word, n, now)?;
        if d.is_allowed() {
            return Ok((Acquire::Admitted, mark));
        }
        let wait = d.retry_after_nanos().max(1);
        if wait > max_wait {
            return Err(Error::DeadlineExceeded {
                wait: Duration::from_nanos(wait),
                max_wait: Duration::from_nanos(max_wait),
            });
        }
        Ok((Acquire::Retry { wait_nanos: wait }, None))
    }

    /// A permit for `n` reserved up to `mark`, carrying `tag` (see
    /// [`acquire_step`](Self::acquire_step)).
    pub fn permit(&self, n: u64, mark: u64, tag: u64) -> Permit {
        Permit {
            n,
            issuer: 0,
            key: tag,
            members: None,
            mark,
            aux: 0,
        }
    }

    /// Gives back a permit's tokens (one of [`permit`](Self::permit) or
    /// [`acquire_step`](Self::acquire_step)) to `word`, as far as no later
    /// taker depends on them.
    ///
    /// # Errors
    /// [`Error::ForeignPermit`], giving nothing back, unless the permit
    /// carries `tag` and was made by a rule.
    pub fn release_permit(&self, word: &AtomicU64, permit: Permit, tag: u64) -> Result<(), Error> {
        if permit.issuer != 0 || permit.key != tag {
            return Err(Error::ForeignPermit);
        }
        self.release(word, permit.mark, permit.n);
        Ok(())
    }

    /// [`release_permit`](Self::release_permit) for a token bucket with
    /// pause words: never into a pause that is on at `now`.
    ///
    /// # Errors
    /// As [`release_permit`](Self::release_permit).
    pub fn release_permit_paused(
        &self,
        word: &AtomicU64,
        pause: crate::pause::Words<'_>,
        permit: Permit,
        tag: u64,
        now: u64,
    ) -> Result<(), Error> {
        if permit.issuer != 0 || permit.key != tag {
            return Err(Error::ForeignPermit);
        }
        self.release_paused(word, pause, permit.mark, permit.n, now);
        Ok(())
    }

    /// Empties a token bucket's `word` until `now + d` ns, refilling at the
    /// rate from then on, and moves every reservation already made past the
    /// pause, in its order (see [`pause`](crate::pause) for the rule and
    /// why a waiter reading `pause` is never early): `pause` are the
    /// word's two pause words. A pause ending no later than one already on
    /// changes nothing. What it moved by, if anything, is returned.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the windows.
    pub fn pause_at(
        &self,
        word: &AtomicU64,
        pause: crate::pause::Words<'_>,
        d: u64,
        now: u64,
    ) -> Result<Option<u64>, Error> {
        let Math::Bucket(p) = self.math else {
            return Err(Error::Unsupported {
                operation: "pause",
                algorithm: self.algorithm(),
            });
        };
        // Invariant: the state only grows here, so a pause racing a check
        // or a reservation is applied after it or before it, never half.
        Ok(pause.pause(now, d, |start, shift| {
            update(word, |w| Some(p.shift(w & STATE_MASK, start, shift)));
        }))
    }

    /// Drops a token bucket's queue at `now`: the slots taken beyond an
    /// empty bucket (from `now`, or from the end of a pause on, which
    /// stays) are forgotten, so that the next taker lines up from there —
    /// what a store does when an outbound adapter's learned rate falls
    /// (their holders wait again: [`Learned::cut_since`](crate::outbound::Learned::cut_since);
    /// see [`TokenBucket::adapt`](crate::TokenBucket::adapt)). `self` is the
    /// rule in force after the fall.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the windows.
    pub fn drop_queue_at(
        &self,
        word: &AtomicU64,
        pause: crate::pause::Words<'_>,
        now: u64,
    ) -> Result<(), Error> {
        let Math::Bucket(p) = self.math else {
            return Err(Error::Unsupported {
                operation: "drop_queue",
                algorithm: self.algorithm(),
            });
        };
        let now = now.min(crate::MAX_TIME_NANOS);
        let from = pause.ends(now).unwrap_or(now);
        let empty = from
            .saturating_add(p.tau())
            .min(crate::algorithms::gcra::MAX_TAT);
        update(word, |w| {
            (w & STATE_MASK > empty).then_some((w & !STATE_MASK) | empty)
        });
        Ok(())
    }

    /// Lifts the pause on `word` at `now` if nothing was built on it (see
    /// [`TokenBucket::resume_at`](crate::TokenBucket::resume_at)): `pause`
    /// are the word's two pause words.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the windows.
    pub fn resume_at(
        &self,
        word: &AtomicU64,
        pause: crate::pause::Words<'_>,
        now: u64,
    ) -> Result<crate::Resumed, Error> {
        let Math::Bucket(p) = self.math else {
            return Err(Error::Unsupported {
                operation: "resume",
                algorithm: self.algorithm(),
            });
        };
        let now = now.min(crate::MAX_TIME_NANOS);
        // Invariant: one exchange, from exactly what the pause left.
        Ok(pause.resume(now, |end| {
            update(word, |w| p.lift(w & STATE_MASK, end, now)).1
        }))
    }

    /// [`release`](Self::release) for a token bucket with pause words:
    /// never into a pause that is on at `now`.
    pub fn release_paused(
        &self,
        word: &AtomicU64,
        pause: crate::pause::Words<'_>,
        mark: u64,
        n: u64,
        now: u64,
    ) {
        let Math::Bucket(p) = self.math else {
            return self.release(word, mark, n);
        };
        let end = pause.ends(now);
        update(word, |w| {
            Some(p.cancel_paused(w & STATE_MASK, mark, n, end))
        });
    }

    /// How many `state` could take at `now`.
    pub fn available(&self, state: u64, now: u64) -> u64 {
        self.math
            .available(state & STATE_MASK, now.min(crate::MAX_TIME_NANOS))
    }

    /// True if `state` decides exactly like [`FRESH`](Self::FRESH) from
    /// `now` on: the key may be forgotten, its word reused.
    pub fn is_fresh(&self, state: u64, now: u64) -> bool {
        self.math
            .is_fresh(state & STATE_MASK, now.min(crate::MAX_TIME_NANOS))
    }
}
