//! The token bucket: GCRA state in one atomic word, quotas in epoch slots.

use std::time::Duration;

use crate::algorithms::gcra::{MAX_TAT, Params};
use crate::clock::{Clock, MAX_TIME_NANOS, MonotonicClock};
use crate::limiter::{Limiter, Permit, Reservation};
use crate::pause::PauseWords;
use crate::sync::state::AtomicState;
use crate::sync::{AtomicU64, Mutex, Ordering};
use crate::{Decision, Error, Quota};

mod changes;
mod epochs;

use epochs::{SLOTS, Seen, Slots, epoch_generation, generation, pack, tat};

/// A token bucket of `burst` tokens, initially full, refilled at one token
/// every `T` — kept as one `AtomicU64` and updated without locks.
///
/// The bucket is the GCRA (generic cell rate algorithm): its state is the
/// *theoretical arrival time* TAT, the instant at which the bucket would be
/// full again. With emission interval `T` and tolerance `τ = b·T`, taking `n`
/// tokens at `now` moves TAT to `max(TAT, now) + n·T` and is allowed iff that
/// is at most `now + τ`. Everything a caller sees — tokens left, the exact
/// time until a refused request would succeed, the time until full — is
/// derived from that one number in integer nanoseconds.
///
/// Three verbs: [`check_n`](Self::check_n) takes tokens now or refuses
/// (writing nothing on refusal); [`reserve_n`](Self::reserve_n) takes them now
/// and tells you how long to wait before acting; and, with feature `tokio`,
/// `wait_n` sleeps until they are yours. Every time-dependent call has an
/// explicit-time twin (`check()` is `check_at(clock.now())`) for tests and
/// simulations; times are nanoseconds since the clock's epoch.
///
/// All methods take `&self`: share a bucket with `Arc` or a `static`. Checks
/// are lock-free (a load and a compare-exchange loop; no allocation, no
/// syscall but reading the clock). `set_quota` calls are serialized among
/// themselves by a mutex that checks never touch.
///
/// # Examples
/// ```
/// use ratebound::{ManualClock, Quota, TokenBucket};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?.with_burst(3)?, clock.clone());
/// for _ in 0..3 {
///     assert!(bucket.check().is_allowed());
/// }
/// let refused = bucket.check();
/// assert!(!refused.is_allowed());
/// assert_eq!(refused.retry_after(), Duration::from_millis(500));
///
/// clock.advance(refused.retry_after());
/// assert!(bucket.check().is_allowed());
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Debug)]
pub struct TokenBucket<C: Clock = MonotonicClock> {
    state: AtomicState,
    /// Epoch `e`'s quota in slot `e mod 4`, written before the CAS that
    /// installs it.
    slots: Slots,
    /// The latest epoch whose word is installed, stored after the CAS that
    /// installs it: a lower bound on the epoch of any word loaded after it.
    epoch: AtomicU64,
    /// Serializes quota changes; holds the quota set by the user (the
    /// ceiling an outbound adapter's learning scales, see
    /// [`adapt`](Self::adapt)).
    writer: Mutex<Quota>,
    clock: C,
    /// This bucket's id (see [`Permit`]); last, so that the hot state keeps
    /// its place in the struct.
    id: u64,
    /// Written by a pause, read by waiters when they wake (see
    /// [`pause`](crate::pause)); checks never touch them.
    pause: PauseWords,
    /// What a fleet's outbound learning wrote ([`Learned`]'s bits; 0:
    /// nothing learned, the quota as set). Checks never touch it.
    learned: AtomicU64,
}

impl TokenBucket<MonotonicClock> {
    /// A full bucket for `quota` on the default [`MonotonicClock`].
    pub fn new(quota: Quota) -> Self {
        Self::with_clock(quota, MonotonicClock::new())
    }
}

impl<C: Clock> TokenBucket<C> {
    /// A full bucket for `quota` that reads time from `clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        let p = params(quota);
        TokenBucket {
            id: crate::sync::next_issuer(),
            // TAT 0: full at any time ≥ 0.
            state: AtomicState::new(pack(0, 0)),
            slots: Slots::new(p),
            epoch: AtomicU64::new(0),
            writer: Mutex::new(quota),
            clock,
            pause: PauseWords::new(),
            learned: AtomicU64::new(0),
        }
    }

    /// The clock this bucket reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The quota in force.
    pub fn quota(&self) -> Quota {
        let p = self.snapshot().params;
        Quota::from_params(p.period, p.burst)
    }

    /// The quota of `word`'s epoch, given `floor`, an epoch loaded before
    /// the word; `None` when that cannot be told (the slot is being
    /// rewritten, or holds an epoch four or more past `floor`: the word is
    /// then older than the slot's quota) — the caller starts over.
    ///
    /// Why this is exact: the word's epoch `e` is at least `floor` (the
    /// epoch is stored after the CAS that installs it) and at most the
    /// slot's epoch `v` (a slot is written before the CAS that makes the
    /// word point at it, and the word was loaded with Acquire); both are
    /// `≡ generation (mod 4)`, so `v < floor + 4` leaves only `e = v`.
    #[inline]
    fn quota_of(&self, word: u64, floor: u64) -> Option<(Params, u64)> {
        let (p, v) = self.slots.read(generation(word))?;
        (v < floor + SLOTS as u64).then_some((p, v))
    }

    /// Runs `f(tat, quota, epoch)` in the CAS loop on the quota (and
    /// epoch) of each word it sees (`f` returns the new TAT to admit, `None` to refuse), and
    /// returns what the final pass decided on and whether it admitted.
    #[inline]
    fn update(&self, mut f: impl FnMut(u64, Params, u64) -> Option<u64>) -> (Seen, bool) {
        match self.update_latest(&mut f) {
            Some(done) => done,
            None => self.update_by_epoch(f),
        }
    }

    /// [`update`](Self::update) on the quota of the latest epoch: the
    /// checks' path, where no load's address depends on the word (the slot
    /// is picked by the epoch, loaded beside the word and the clock, not
    /// after the word), and no sequence number is read. `None` (nothing
    /// written) when a quota change is under way: the epoch moved while the
    /// slot and a word were read, or the word is not of the epoch loaded.
    ///
    /// Why the quota is the word's, when `epoch` read `k` (Acquire) before
    /// the slot and the word, and `k` again after the word.
    /// - The slot held epoch `k`'s quota, whole: `set_quota` wrote it
    ///   before storing `k` (Release). Its next rewrite, for `k + 4`, comes
    ///   after `k + 3` was stored, behind a Release fence; had a field load
    ///   read any of it, the Acquire fence after the fields would make that
    ///   store of `k + 3` happen before the second epoch load, which would
    ///   not find `k`.
    /// - The word's epoch `e` is at least `k`: the CAS installing `k`
    ///   happened before `k` was stored. And `e < k + 4`: the CAS installing
    ///   `e` came after `e − 1` was stored, and the word's Acquire load
    ///   read that CAS or a check's CAS after it, so `e − 1 ≥ k + 3` would
    ///   have been stored before the second epoch load.
    /// - The word's generation is `k mod 4`, so `e = k`.
    #[inline]
    fn update_latest(
        &self,
        f: &mut impl FnMut(u64, Params, u64) -> Option<u64>,
    ) -> Option<(Seen, bool)> {
        // Ordering: Acquire pairs with the writer's Release store (see the
        // proof above).
        let epoch = self.epoch.load(Ordering::Acquire);
        let (params, _) = self.slots.latest(epoch_generation(epoch));
        let mut whole = true;
        // Invariant (of the loop in `AtomicState::update`): every word `f`
        // sees is checked against the epoch after it was loaded; a word of
        // another epoch refuses, writing nothing, and the caller starts over.
        let (word, allowed) = self.state.update(|word| {
            whole = generation(word) == epoch_generation(epoch) && self.same_epoch(epoch);
            if !whole {
                return None;
            }
            Some(pack(generation(word), f(tat(word), params, epoch)?))
        });
        whole.then_some((
            Seen {
                word,
                params,
                epoch,
            },
            allowed,
        ))
    }

    /// True if the epoch is still `epoch`: the second epoch load of
    /// [`update_latest`](Self::update_latest)'s proof.
    #[inline]
    fn same_epoch(&self, epoch: u64) -> bool {
        // Ordering: Relaxed — the state word's Acquire load and the slot's
        // Acquire fence, both before it, are what the proof needs.
        self.epoch.load(Ordering::Relaxed) == epoch
    }

    /// [`update`](Self::update) on the slot of each word's generation,
    /// while a quota change is under way.
    #[cold]
    #[inline(never)]
    fn update_by_epoch(&self, mut f: impl FnMut(u64, Params, u64) -> Option<u64>) -> (Seen, bool) {
        loop {
            // Ordering: Acquire pairs with the writer's Release store, so the
            // word loaded next is at least of this epoch.
            let floor = self.epoch.load(Ordering::Acquire);
            let mut last = None;
            let (word, allowed) = self.state.update(|word| {
                last = self.quota_of(word, floor);
                let (p, epoch) = last?;
                Some(pack(generation(word), f(tat(word), p, epoch)?))
            });
            if let Some((params, epoch)) = last {
                return (
                    Seen {
                        word,
                        params,
                        epoch,
                    },
                    allowed,
                );
            }
        }
    }

    /// The current word and its quota, read without writing.
    #[inline]
    fn snapshot(&self) -> Seen {
        loop {
            let floor = self.epoch.load(Ordering::Acquire);
            let word = self.state.load();
            if let Some((params, epoch)) = self.quota_of(word, floor) {
                return Seen {
                    word,
                    params,
                    epoch,
                };
            }
        }
    }

    /// Takes one token now if there is one. See [`check_n_at`](Self::check_n_at).
    #[inline]
    pub fn check(&self) -> Decision {
        self.check_on(self.clock.now(), self.clock.bounded())
    }

    /// Takes one token at `now` (ns since the clock's epoch) if there is one.
    #[inline]
    pub fn check_at(&self, now: u64) -> Decision {
        self.check_on(now, false)
    }

    /// `check_at(now)`, where `bounded` says `now` is known to be at most
    /// `MAX_TIME_NANOS` (read from a [`Clock::bounded`] clock).
    #[inline]
    fn check_on(&self, now: u64, bounded: bool) -> Decision {
        // Times after MAX_TIME_NANOS count as that time — tested by a
        // branch rather than clamped, so that the clock's reading reaches
        // the exchange one step sooner; not tested at all for a clock that
        // never reads later.
        let one = match (bounded || now <= MAX_TIME_NANOS).then(|| self.check_latest(now)) {
            Some(Some(one)) => one,
            _ => self.check_by_epoch(now),
        };
        Decision::timed(
            one.allowed,
            one.burst,
            one.period,
            one.now,
            one.end,
            one.reach,
        )
    }

    /// [`update_latest`](Self::update_latest) for one token, written out:
    /// the same loads in the same order, under the same proof, with the
    /// arithmetic that `n = 1` allows — the bound `τ − T` read from the
    /// slot instead of multiplied, the generation checked and kept by one
    /// subtraction and one addition, and no "same word" case (a token moves
    /// the TAT by `T ≥ 1`). The decision keeps the times it was made with
    /// ([`Decision::timed`]): its numbers are worked out only when read.
    /// `None`, having written nothing, where `update_latest` gives up.
    #[inline]
    fn check_latest(&self, now: u64) -> Option<One> {
        // Ordering: as in `update_latest`.
        let epoch = self.epoch.load(Ordering::Acquire);
        let (p, spare) = self.slots.latest(epoch_generation(epoch));
        let g = pack(epoch_generation(epoch), 0);
        // `gcra::Params::admit` for n = 1: admitted iff `now ≥ TAT + T − τ`
        // (`T ≤ τ` always), i.e. iff TAT is at most `now + τ − T`.
        let last = now + spare;
        // The exchange's increment, generation included.
        let step = p.period + g;
        let one = |allowed, end| One {
            allowed,
            burst: p.burst,
            period: p.period,
            now,
            end,
            reach: last,
        };
        let mut word = self.state.load();
        loop {
            // The TAT if the word is of generation `g`; above MAX_TAT if not
            // (the difference of two other generations is at least 2^62,
            // modulo 2^64).
            let tat = word.wrapping_sub(g);
            if tat > MAX_TAT || !self.same_epoch(epoch) {
                return None;
            }
            if tat > last {
                // Refused: the TAT stays.
                return Some(one(false, tat));
            }
            // Admitted: the new word's TAT (its generation bits are not
            // the decision's: `Decision::timed` drops them).
            let next = tat.max(now) + step;
            match self.state.exchange(word, next) {
                Ok(_) => return Some(one(true, next)),
                Err(actual) => word = actual,
            }
        }
    }

    /// `check_at` while a quota change is under way, or for a time after
    /// `MAX_TIME_NANOS`.
    #[cold]
    #[inline(never)]
    fn check_by_epoch(&self, now: u64) -> One {
        // Clamped here, not on the checks' path: there a later time only
        // takes the branch to this path.
        let now = now.min(MAX_TIME_NANOS);
        // n = 1 never exceeds the burst (b ≥ 1), so this cannot be misuse.
        let (seen, allowed) = self.update_by_epoch(|tat, p, _| p.admit(tat, now, 1));
        let (p, base) = (seen.params, tat(seen.word).max(now));
        One {
            allowed,
            burst: p.burst,
            period: p.period,
            now,
            end: if allowed { base + p.period } else { base },
            reach: now + p.tau() - p.period,
        }
    }

    /// Takes `n` tokens now if there are `n`. See [`check_n_at`](Self::check_n_at).
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the burst.
    #[inline]
    pub fn check_n(&self, n: u64) -> Result<Decision, Error> {
        self.check_n_at(n, self.clock.now())
    }

    /// Takes `n` tokens at `now` if all `n` are there; otherwise takes none
    /// and says exactly how long until they would be. `n = 0` is allowed and
    /// takes nothing. A refusal writes nothing to the shared state.
    ///
    /// Times after [`MAX_TIME_NANOS`](crate::MAX_TIME_NANOS) count as that time.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the burst: such a
    /// request could never succeed, so it is misuse rather than a denial.
    #[inline]
    pub fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        self.acquire(n, now).map(|(decision, _)| decision)
    }

    /// `check_n_at`, plus a permit to give the tokens back when allowed.
    #[inline]
    fn acquire(&self, n: u64, now: u64) -> Result<(Decision, Option<Permit>), Error> {
        let now = now.min(MAX_TIME_NANOS);
        let (seen, allowed) = self.update(|tat, p, _| {
            if n > p.burst {
                return None;
            }
            p.admit(tat, now, n)
        });
        let (p, before) = (seen.params, tat(seen.word));
        if n > p.burst {
            return Err(capacity(n, p));
        }
        let decision = p.decision(before, now, n, allowed);
        let permit = allowed.then(|| Permit {
            n,
            issuer: self.id,
            key: 0,
            members: None,
            mark: p.admit(before, now, n).unwrap_or(before),
            aux: seen.epoch,
        });
        Ok((decision, permit))
    }

    /// What `check_n_at(n, now)` would decide, without taking anything.
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    pub fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        let seen = self.snapshot();
        let (p, tat) = (seen.params, tat(seen.word));
        if n > p.burst {
            return Err(capacity(n, p));
        }
        let now = now.min(MAX_TIME_NANOS);
        let allowed = p.admit(tat, now, n).is_some();
        Ok(p.decision(tat, now, n, allowed))
    }

    /// Whole tokens available now.
    pub fn available(&self) -> u64 {
        self.available_at(self.clock.now())
    }

    /// Whole tokens available at `now`.
    pub fn available_at(&self, now: u64) -> u64 {
        let seen = self.snapshot();
        seen.params
            .available(tat(seen.word), now.min(MAX_TIME_NANOS))
    }

    /// Takes `n` tokens now, possibly ahead of time: the returned
    /// [`Reservation`] says how long to wait before acting on them.
    /// See [`reserve_n_at`](Self::reserve_n_at).
    ///
    /// # Errors
    /// As [`reserve_n_at`](Self::reserve_n_at).
    pub fn reserve_n(&self, n: u64, max_wait: Duration) -> Result<Reservation<'_>, Error> {
        self.reserve_n_at(n, max_wait, self.clock.now())
    }

    /// Takes `n` tokens at `now` even if they are not there yet, as long as
    /// they will be within `max_wait`; later callers queue behind them.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the burst;
    /// [`Error::DeadlineExceeded`] when the wait would be longer than
    /// `max_wait` — then nothing is taken.
    pub fn reserve_n_at(
        &self,
        n: u64,
        max_wait: Duration,
        now: u64,
    ) -> Result<Reservation<'_>, Error> {
        let now = now.min(MAX_TIME_NANOS);
        let max_wait_nanos = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        let (seen, _) = self.update(|tat, p, _| {
            if n > p.burst {
                return None;
            }
            p.reserve(tat, now, n, max_wait_nanos)
                .ok()
                .map(|(_, next)| next)
        });
        let p = seen.params;
        if n > p.burst {
            return Err(capacity(n, p));
        }
        match p.reserve(tat(seen.word), now, n, max_wait_nanos) {
            Ok((wait, next)) => Ok(Reservation {
                limiter: self,
                permit: Permit {
                    n,
                    issuer: self.id,
                    key: 0,
                    members: None,
                    mark: next,
                    aux: seen.epoch,
                },
                reserved_at: now,
                wait,
            }),
            Err(wait) => Err(Error::DeadlineExceeded {
                wait: Duration::from_nanos(wait),
                max_wait,
            }),
        }
    }
}

/// A check of one token, as `check_at` turns it into a
/// [`Decision::timed`]: the quota, and the TAT it leaves (`end`: a state
/// word, generation bits and all, when admitted) and `reach = now + τ − T`.
struct One {
    allowed: bool,
    burst: u64,
    period: u64,
    /// The time it was made at (at most `MAX_TIME_NANOS`).
    now: u64,
    end: u64,
    reach: u64,
}

fn params(q: Quota) -> Params {
    Params {
        period: q.emission_interval_nanos(),
        burst: q.burst(),
    }
}

fn capacity(n: u64, p: Params) -> Error {
    Error::InsufficientCapacity {
        requested: n,
        burst: p.burst,
    }
}

impl<C: Clock> Limiter for TokenBucket<C> {
    fn now(&self) -> u64 {
        self.clock.now()
    }

    fn limit(&self) -> u64 {
        self.snapshot().params.burst
    }

    fn check_at(&self, now: u64) -> Decision {
        TokenBucket::check_at(self, now)
    }

    fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        TokenBucket::check_n_at(self, n, now)
    }

    fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        TokenBucket::peek_n_at(self, n, now)
    }

    fn acquire_n_at(&self, n: u64, now: u64) -> Result<(Decision, Option<Permit>), Error> {
        self.acquire(n, now)
    }

    /// Gives the tokens back if no later taker has built on them (see
    /// [`Reservation::cancel`]).
    fn try_release(&self, permit: Permit) -> Result<(), Error> {
        self.give_back(permit)
    }

    fn available_at(&self, now: u64) -> u64 {
        TokenBucket::available_at(self, now)
    }
}

#[cfg(all(test, not(ratebound_loom)))]
mod tests;
