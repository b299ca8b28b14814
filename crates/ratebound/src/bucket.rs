//! The token bucket: GCRA state in one atomic word, quotas in generation slots.

use std::time::Duration;

use crate::clock::{Clock, MAX_TIME_NANOS, MonotonicClock};
use crate::gcra::{MAX_TAT, Params};
use crate::limiter::{Limiter, Permit, Reservation};
use crate::state::AtomicState;
use crate::sync::{AtomicU64, Mutex, Ordering};
use crate::{Decision, Error, Quota};

// The state word: [generation: 2 bits | TAT: 62 bits]. The generation picks
// which of four quota slots is in force; `set_quota` fills the next slot and
// then moves the word to the next generation in the same CAS that converts
// the TAT, so a check never combines a TAT with the wrong quota.
const GEN_SHIFT: u32 = 62;
const SLOTS: usize = 4;

#[inline]
fn generation(word: u64) -> usize {
    (word >> GEN_SHIFT) as usize
}

#[inline]
fn tat(word: u64) -> u64 {
    word & MAX_TAT
}

#[inline]
fn pack(generation: usize, tat: u64) -> u64 {
    debug_assert!(tat <= MAX_TAT);
    ((generation as u64) << GEN_SHIFT) | tat
}

#[derive(Debug)]
struct Slot {
    period: AtomicU64,
    burst: AtomicU64,
}

impl Slot {
    fn new(p: Params) -> Slot {
        Slot {
            period: AtomicU64::new(p.period),
            burst: AtomicU64::new(p.burst),
        }
    }
}

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
    slots: [Slot; SLOTS],
    writer: Mutex<()>,
    clock: C,
    /// This bucket's id (see [`Permit`]); last, so that the hot state keeps
    /// its place in the struct.
    id: u64,
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
            slots: [Slot::new(p), Slot::new(p), Slot::new(p), Slot::new(p)],
            writer: Mutex::new(()),
            clock,
        }
    }

    /// The clock this bucket reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The quota in force.
    pub fn quota(&self) -> Quota {
        let p = self.params(generation(self.state.load()));
        Quota::from_params(p.period, p.burst)
    }

    #[inline]
    fn params(&self, generation: usize) -> Params {
        let slot = &self.slots[generation];
        // Ordering: Relaxed — the slot was written before the Release CAS that
        // installed `generation`, and the word was read with Acquire.
        Params {
            period: slot.period.load(Ordering::Relaxed),
            burst: slot.burst.load(Ordering::Relaxed),
        }
    }

    /// Takes one token now if there is one. See [`check_n_at`](Self::check_n_at).
    #[inline]
    pub fn check(&self) -> Decision {
        self.check_at(self.clock.now())
    }

    /// Takes one token at `now` (ns since the clock's epoch) if there is one.
    #[inline]
    pub fn check_at(&self, now: u64) -> Decision {
        let now = now.min(MAX_TIME_NANOS);
        // n = 1 never exceeds the burst (b ≥ 1), so this cannot be misuse.
        let (word, allowed) = self.state.update(|word| {
            let g = generation(word);
            let next = self.params(g).admit(tat(word), now, 1)?;
            Some(pack(g, next))
        });
        self.params(generation(word))
            .decision(tat(word), now, 1, allowed)
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
        let (word, allowed) = self.state.update(|word| {
            let g = generation(word);
            let p = self.params(g);
            if n > p.burst {
                return None;
            }
            Some(pack(g, p.admit(tat(word), now, n)?))
        });
        let g = generation(word);
        let p = self.params(g);
        if n > p.burst {
            return Err(capacity(n, p));
        }
        let decision = p.decision(tat(word), now, n, allowed);
        let permit = allowed.then(|| Permit {
            n,
            issuer: self.id,
            key: 0,
            members: None,
            mark: p.admit(tat(word), now, n).unwrap_or(tat(word)),
            aux: g as u64,
        });
        Ok((decision, permit))
    }

    /// What `check_n_at(n, now)` would decide, without taking anything.
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    pub fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        let word = self.state.load();
        let p = self.params(generation(word));
        if n > p.burst {
            return Err(capacity(n, p));
        }
        let now = now.min(MAX_TIME_NANOS);
        let allowed = p.admit(tat(word), now, n).is_some();
        Ok(p.decision(tat(word), now, n, allowed))
    }

    /// Whole tokens available now.
    pub fn available(&self) -> u64 {
        self.available_at(self.clock.now())
    }

    /// Whole tokens available at `now`.
    pub fn available_at(&self, now: u64) -> u64 {
        let word = self.state.load();
        self.params(generation(word))
            .available(tat(word), now.min(MAX_TIME_NANOS))
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
        let (word, _) = self.state.update(|word| {
            let g = generation(word);
            let p = self.params(g);
            if n > p.burst {
                return None;
            }
            let (_, next) = p.reserve(tat(word), now, n, max_wait_nanos).ok()?;
            Some(pack(g, next))
        });
        let g = generation(word);
        let p = self.params(g);
        if n > p.burst {
            return Err(capacity(n, p));
        }
        match p.reserve(tat(word), now, n, max_wait_nanos) {
            Ok((wait, next)) => Ok(Reservation {
                limiter: self,
                permit: Permit {
                    n,
                    issuer: self.id,
                    key: 0,
                    members: None,
                    mark: next,
                    aux: g as u64,
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

    /// Gives back a permit's tokens, except those that later takers depend
    /// on; nothing across a quota change (the tokens were converted along
    /// with the rest of the state).
    fn give_back(&self, permit: Permit) -> Result<(), Error> {
        if permit.issuer != self.id {
            return Err(Error::ForeignPermit);
        }
        self.state.update(|word| {
            let g = generation(word);
            (g as u64 == permit.aux)
                .then(|| pack(g, self.params(g).cancel(tat(word), permit.mark, permit.n)))
        });
        Ok(())
    }

    /// Changes the quota now, keeping the current number of tokens (capped
    /// at the new burst). Concurrent checks see either the old quota or the
    /// new one, never a mix. See [`set_quota_at`](Self::set_quota_at).
    pub fn set_quota(&self, quota: Quota) {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.set_quota_locked(quota, self.clock.now());
    }

    /// Changes the quota at `now`, keeping the number of whole tokens
    /// available at `now` (capped at the new burst) and the token debt of
    /// queued reservations. Reservations made under the old quota can no
    /// longer be cancelled.
    pub fn set_quota_at(&self, quota: Quota, now: u64) {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.set_quota_locked(quota, now);
    }

    fn set_quota_locked(&self, quota: Quota, now: u64) {
        let now = now.min(MAX_TIME_NANOS);
        let to = params(quota);
        // Only writers change the generation and we hold the writer lock, so
        // the generation read here stays the current one until our CAS.
        let g = generation(self.state.load());
        let next_g = (g + 1) % SLOTS;
        // The next slot last served generation g − 3. A check still holding a
        // word of that generation fails its CAS, because the word now carries
        // another generation — unless it stalled across four `set_quota`
        // calls and the word came back to the very same 64 bits. That window
        // (four quota changes inside one check's load-to-CAS, and an equal
        // TAT to the nanosecond) is the one gap in this scheme, and is why
        // quota changes are meant to be rare, administrative events.
        let slot = &self.slots[next_g];
        // Ordering: Relaxed — published by the Release CAS in `update` below.
        slot.period.store(to.period, Ordering::Relaxed);
        slot.burst.store(to.burst, Ordering::Relaxed);
        self.state.update(|word| {
            let converted = self.params(generation(word)).convert(tat(word), now, to);
            Some(pack(next_g, converted))
        });
    }
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
        self.params(generation(self.state.load())).burst
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

    /// Gives the tokens back as far as no later taker depends on them (see
    /// [`Reservation::cancel`]).
    fn try_release(&self, permit: Permit) -> Result<(), Error> {
        self.give_back(permit)
    }

    fn available_at(&self, now: u64) -> u64 {
        TokenBucket::available_at(self, now)
    }
}
