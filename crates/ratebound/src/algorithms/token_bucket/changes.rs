//! What only pauses, give-backs and quota changes use: writers and
//! waiters, never a check.

use std::time::Duration;

use super::{TokenBucket, epoch_generation, pack, params, tat};
use crate::algorithms::gcra::MAX_TAT;
use crate::clock::{Clock, MAX_TIME_NANOS};
use crate::limiter::Permit;
use crate::outbound::Learned;
use crate::sync::Ordering;
use crate::{Error, Quota, Resumed};

impl<C: Clock> TokenBucket<C> {
    /// Empties the bucket until `d` from now; it refills at the rate from
    /// then on. See [`pause_at`](Self::pause_at).
    pub fn pause(&self, d: Duration) {
        self.pause_at(d, self.clock.now());
    }

    /// Empties the bucket until `now + d`, for every caller: no token is
    /// available before then, and from then on the bucket refills at its
    /// rate (one token a period after `now + d`, full `τ` later) — how a
    /// client obeys a partner's `Retry-After` once for everyone sharing the
    /// bucket. Reservations already made move past the pause, in their
    /// order: the pause starts at `now` (or where a pause already on ends)
    /// and every slot due from then on moves as much later as the pause is
    /// long, as in the Redis limiter. A waiter (`wait_n`, the bindings'
    /// `acquire`) finds its move when it wakes and sleeps on; a
    /// [`Reservation`](crate::Reservation) already handed out keeps the delay it was given.
    /// A pause that ends no later than one already on changes nothing (two
    /// callers obeying one `Retry-After` pause once), `d = 0` changes
    /// nothing, and a reservation cancelled during the pause gives back
    /// nothing inside it. Times after
    /// [`MAX_TIME_NANOS`](crate::MAX_TIME_NANOS) count as that time.
    ///
    /// # Examples
    /// ```
    /// use ratebound::{ManualClock, Quota, TokenBucket};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?.with_burst(3)?, clock.clone());
    /// bucket.pause(Duration::from_secs(1));
    /// let refused = bucket.check();
    /// assert!(!refused.is_allowed());
    /// // Empty until 1 s, then one token every 0.5 s.
    /// assert_eq!(refused.retry_after(), Duration::from_millis(1_500));
    /// clock.advance(refused.retry_after());
    /// assert!(bucket.check().is_allowed());
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn pause_at(&self, d: Duration, now: u64) {
        let now = now.min(MAX_TIME_NANOS);
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Invariant (of the loop in `update`): the TAT only grows here, so a
        // pause racing a check or a reservation is applied after it or
        // before it, never half; waiters hear of it after the move.
        self.pause.words().pause(now, d, |start, shift| {
            self.update(|tat, p, _| Some(p.shift(tat, start, shift)));
        });
    }

    /// Lifts the pause on now. See [`resume_at`](Self::resume_at).
    pub fn resume(&self) -> Resumed {
        self.resume_at(self.clock.now())
    }

    /// Lifts the pause on at `now`, if nothing was built on it: when no
    /// reservation was made behind the pause or moved by it, the pause ends
    /// at `now` — the bucket is empty at `now` and refills at its rate from
    /// then on, as if the pause had ended now ([`Resumed::Lifted`]).
    /// Otherwise nothing changes: [`Resumed::NotPaused`] when no pause is
    /// on at `now`, [`Resumed::Queued`] when reservations stand behind it
    /// (their waiters go at their times; none is woken early). A resume is
    /// ordered with pauses (see [`pause`](crate::pause)) and with checks (one
    /// CAS on the state word). A quota changed during the pause leaves a
    /// state the pause did not leave: `Queued`. Times after
    /// [`MAX_TIME_NANOS`](crate::MAX_TIME_NANOS) count as that time.
    ///
    /// # Examples
    /// ```
    /// use ratebound::{ManualClock, Quota, Resumed, TokenBucket};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?.with_burst(3)?, clock.clone());
    /// bucket.pause(Duration::from_secs(10));
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(bucket.resume(), Resumed::Lifted);
    /// // Empty at 1 s, one token every 0.5 s from then on.
    /// assert_eq!(bucket.check().retry_after(), Duration::from_millis(500));
    /// assert_eq!(bucket.resume(), Resumed::NotPaused);
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn resume_at(&self, now: u64) -> Resumed {
        let now = now.min(MAX_TIME_NANOS);
        // Invariant (of the loop in `update`): the state is lifted only
        // from exactly what the pause left, in one exchange; anything a
        // check or a reservation wrote first makes it refuse.
        self.pause
            .words()
            .resume(now, |end| self.update(|tat, p, _| p.lift(tat, end, now)).1)
    }

    /// The sum of every pause's shift so far: what a waiter reads before it
    /// reserves and when it wakes (see [`Waiter::step_paused`](crate::any::Waiter::step_paused)).
    pub fn pause_shifted(&self) -> u64 {
        self.pause.words().shifted()
    }

    /// Gives back a permit's tokens if no later taker has built on them
    /// (see `gcra::give_back`); nothing across a quota change (the tokens
    /// were converted along with the rest of the state).
    pub(super) fn give_back(&self, permit: Permit) -> Result<(), Error> {
        if permit.issuer != self.id {
            return Err(Error::ForeignPermit);
        }
        // A permit of another epoch changes nothing: its tokens were
        // converted with the rest of the state.
        let end = self.pause.words().ends(self.clock.now());
        self.update(|tat, p, epoch| {
            (epoch == permit.aux).then(|| p.cancel_paused(tat, permit.mark, permit.n, end))
        });
        Ok(())
    }

    /// Changes the quota now, keeping the current number of tokens (capped
    /// at the new burst). Concurrent checks see either the old quota or the
    /// new one, never a mix. See [`set_quota_at`](Self::set_quota_at).
    ///
    /// One race is left open: a check that read the quota, then stalled
    /// while four more `set_quota` calls ran, and finds the state word equal
    /// to the very value it read (to the nanosecond), completes with the
    /// quota of four changes ago — one check's tokens priced at that quota.
    ///
    /// The quota set is the ceiling of what an outbound adapter learns
    /// ([`adapt`](Self::adapt)): with a word learned, the bucket runs at
    /// that word's share of it.
    pub fn set_quota(&self, quota: Quota) {
        self.set_quota_at(quota, self.clock.now());
    }

    /// Changes the quota at `now`, keeping the number of whole tokens
    /// available at `now` (capped at the new burst) and the token debt of
    /// queued reservations. Reservations made under the old quota can no
    /// longer be cancelled.
    pub fn set_quota_at(&self, quota: Quota, now: u64) {
        let mut ceiling = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        *ceiling = quota;
        let learned = Learned::from_bits(self.learned.load(Ordering::Relaxed));
        self.set_quota_locked(learned.scale(quota), now, false);
    }

    /// The quota set (at construction or by [`set_quota`](Self::set_quota)):
    /// what [`quota`](Self::quota) is when nothing is learned, and the
    /// ceiling of what an outbound adapter learns.
    pub fn ceiling(&self) -> Quota {
        *self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the outbound adapters calling through this bucket have learned
    /// of the partner's real limit (see [`outbound::learn`](crate::outbound::Learning)):
    /// the fresh word when nothing is.
    pub fn learned(&self) -> Learned {
        Learned::from_bits(self.learned.load(Ordering::Acquire))
    }

    /// Replaces the learned word `seen` with `next` if it is still `seen`
    /// (a compare-and-swap: of fifty adapters proposing a change from the
    /// same word, one wins), and runs the bucket at `next`'s share of the
    /// ceiling from now on, keeping the whole tokens it has (as
    /// [`set_quota`](Self::set_quota) does). Returns whether it replaced.
    pub fn adapt(&self, seen: Learned, next: Learned) -> bool {
        self.adapt_at(seen, next, self.clock.now())
    }

    /// [`adapt`](Self::adapt) at `now`.
    pub fn adapt_at(&self, seen: Learned, next: Learned, now: u64) -> bool {
        let ceiling = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        // Under the writer lock: the word and the quota change together.
        if self.learned.load(Ordering::Relaxed) != seen.to_bits() {
            return false;
        }
        self.learned.store(next.to_bits(), Ordering::Release);
        // The schedule is kept: the slots already taken stay where they are
        // and the next come after the last of them at the new rate (a
        // conversion keeping the token debt would, on a step up, put new
        // slots beside those of the waiters already asleep: twice the rate
        // for a queue's length).
        let quota = next.scale(*ceiling);
        self.set_quota_locked(quota, now, true);
        if next.fraction_units() < seen.fraction_units() {
            // A cut: the slots taken beyond an empty bucket were priced at
            // the rate found too high, and every outbound sending holding
            // one waits again when it comes (`Learned::cut_since`): they
            // are dropped, so that those sendings line up again at the new
            // rate from now rather than behind slots nobody will use (a
            // queue that would grow by a fleet's length at every cut).
            self.drop_queue(quota, now);
        }
        true
    }

    /// Empties the queue beyond an empty bucket of `quota` at `now` (or at
    /// the end of a pause on, which stays): the theoretical arrival time is
    /// at most that instant + τ — no token left, none owed beyond.
    fn drop_queue(&self, quota: Quota, now: u64) {
        let now = now.min(MAX_TIME_NANOS);
        let from = self.pause.words().ends(now).unwrap_or(now);
        let empty = from.saturating_add(
            quota
                .emission_interval_nanos()
                .saturating_mul(quota.burst()),
        );
        // Under the writer lock: the epoch is stable.
        let g = epoch_generation(self.epoch.load(Ordering::Relaxed));
        self.state
            .update(|word| (tat(word) > empty).then(|| pack(g, empty.min(MAX_TAT))));
    }

    /// Installs `quota` at `now`: the state converted to keep the whole
    /// tokens and the token debt (`set_quota`), or, with `keep_schedule`,
    /// the theoretical arrival time as it is (`adapt`).
    fn set_quota_locked(&self, quota: Quota, now: u64, keep_schedule: bool) {
        let now = now.min(MAX_TIME_NANOS);
        let to = params(quota);
        // Only writers change the epoch, and we hold the writer lock: the
        // word is of epoch `current` until our CAS, and its slot is stable.
        let current = self.epoch.load(Ordering::Relaxed);
        let next = current + 1;
        let next_g = epoch_generation(next);
        // The slot last held epoch `next − 4`. A check that loaded a word of
        // that epoch and reads the slot now sees it being rewritten, or of an
        // epoch too new for its word, and starts over: no check ever pairs a
        // word with another epoch's quota, or reads half of one. A check that
        // had already read the old quota fails its exchange, the word now
        // being of another epoch — unless, across these four changes, the
        // word came back to the very same 64 bits (same generation, same TAT
        // to the nanosecond). Closing that last gap needs either more tag
        // bits than the word has or readers that announce themselves (a
        // write on every check); quota changes are rare, administrative
        // events, so it is documented on `set_quota` instead.
        let from = self.slots.held(epoch_generation(current));
        self.slots.write(next_g, next, to);
        self.state.update(|word| {
            let t = if keep_schedule {
                tat(word)
            } else {
                from.convert(tat(word), now, to)
            };
            Some(pack(next_g, t))
        });
        // Ordering: Release — readers that load this epoch then load a word
        // at least this new (see `quota_of`).
        self.epoch.store(next, Ordering::Release);
    }
}
