//! Pauses that move the reservations already made: two words beside a
//! token bucket's state word, written only by a pause and read only by a
//! waiter when it wakes, so checks never touch them.
//!
//! - `end`: when the latest pause ends (ns of the limiter's clock; 0: none
//!   yet). A pause of `d` at `now` ends at `last = now + d`; it starts at
//!   `start = max(now, end)` (a pause already on is not paused twice) and
//!   moves every slot due from `start` on `shift = last − start` later, in
//!   its order: the state becomes `max(TAT, start + τ) + shift` — the bucket
//!   is empty until `last` and refills at its rate from then on. A pause
//!   ending no later than the one on changes nothing, so every caller that
//!   obeys one partner's `Retry-After` pauses once. This is the rule of the
//!   Redis script (`crates/ratebound-redis/lua/gcra.lua`).
//! - `shifted`: the sum of every shift so far. A waiter reads it before it
//!   reserves and again whenever it wakes; what it grew by in between is how
//!   much later the waiter's slot now is.
//!
//! Pauses are applied one at a time, in the order they claim `end`: a
//! pause sets a lock bit in `end` with its claim and clears it after its
//! move, and a pause that finds the bit set yields until it is clear. Two
//! moves applied out of order would not compose (`max(x, s + τ) + δ` does
//! not commute), and the bucket would stay empty longer by the first
//! pause's length. Only pauses wait for each other — checks, reservations
//! and waiters never look at the bit — and only for the few instructions of
//! a move. A pause that waited about a millisecond (its holder was stopped
//! or killed -9 mid-move) goes ahead without it: at worst the bucket stays
//! empty longer, never shorter.
//!
//! The order of the writes is what makes a waiter never early: a pause
//! claims `end`, then moves the state, then adds to `shifted` (Release); a
//! waiter loads `shifted` (Acquire) before its reservation's CAS. A waiter
//! whose load saw the addition reserved after the move, on the moved state;
//! one whose load did not see it will see it when it wakes, unless the
//! addition is that late — then the pause linearizes after its departure.
//! A waiter that reserved after the move but loaded `shifted` before the
//! addition moves once more than it had to: late, never early. So does a
//! waiter that wakes late, after its due time, and finds a pause that began
//! after it was due (it obeys the partner, which is what a pause is for).
//!
//! A resume lifts the pause on, but only if nothing was built on it: the
//! state is exactly what the pauses left, `end + τ` (no reservation made
//! behind the pause, none moved by it — a slot due exactly when the pause
//! began is not counted as moved). It claims `end` with the moving bit as
//! a pause does (so it is ordered with pauses), lifts the state in one CAS
//! (so it is ordered with checks and reservations) to `now + τ` — empty
//! now, refilling at the rate from `now` — and sets `end` to `now`. If the
//! state is anything else, it writes nothing: the waiters behind the pause
//! hold their slots and go at their times ([`Resumed::Queued`]); `shifted`
//! never shrinks, so no waiter is ever woken early.

use crate::MAX_TIME_NANOS;
use crate::sync::{AtomicU64, Ordering, yield_now};

/// Where a pause took hold (see [`KeyedLimit::pause`](crate::KeyedLimit::pause)
/// and [`LocalPauses::paused`](crate::outbound::LocalPauses::paused)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reach {
    /// The limiter itself: everyone sharing it (the fleet, for a Redis
    /// limiter) waits.
    Shared,
    /// Only this process: the limiter's store could not be told (Redis
    /// unreachable); a Redis limiter failing `local` had its local share
    /// paused.
    Local,
}

/// Set in `end` while a pause moves the state.
const MOVING: u64 = 1 << 63;

/// How many times a pause yields to one that is moving the state before it
/// goes ahead without it (about a millisecond of `sched_yield`s). Under
/// loom every holder finishes, so it waits as long as it takes.
#[cfg(not(ratebound_loom))]
const PATIENCE: u32 = 1_000;
#[cfg(ratebound_loom)]
const PATIENCE: u32 = u32::MAX;

/// What a resume did (see the [module doc](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resumed {
    /// The pause ended now: the bucket is empty now and refills at its
    /// rate from now on, as if the pause had been that long.
    Lifted,
    /// No pause was on: nothing changed.
    NotPaused,
    /// Reservations stand behind the pause (made during it or moved by
    /// it): nothing changed, and the pause ends when it was to end.
    Queued,
}

impl Resumed {
    /// `"lifted"`, `"not_paused"` or `"queued"`: the bindings' answer.
    pub fn as_str(self) -> &'static str {
        match self {
            Resumed::Lifted => "lifted",
            Resumed::NotPaused => "not_paused",
            Resumed::Queued => "queued",
        }
    }

    /// True for [`Resumed::Lifted`].
    pub fn is_lifted(self) -> bool {
        self == Resumed::Lifted
    }
}

impl std::fmt::Display for Resumed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token bucket's two pause words, wherever they live (an in-process
/// bucket's fields, a shared-memory slot's words).
#[derive(Clone, Copy, Debug)]
pub struct Words<'a> {
    /// When the latest pause ends (ns of the limiter's clock; 0: none yet).
    pub end: &'a AtomicU64,
    /// The sum of every shift so far.
    pub shifted: &'a AtomicU64,
}

impl Words<'_> {
    /// Pauses for `d` ns from `now`: claims the pause on `end`, runs
    /// `move_state(start, shift)` (the state's CAS loop, moving every slot
    /// due from `start` on `shift` later), then tells waiters. Returns the
    /// shift, or `None` when a pause already on ends no earlier (or
    /// `d = 0`): nothing changes.
    pub fn pause(self, now: u64, d: u64, move_state: impl FnOnce(u64, u64)) -> Option<u64> {
        let (start, shift, last) = self.claim(now, d)?;
        move_state(start, shift);
        self.moved(shift);
        // Clears the bit unless a pause that lost patience took the word
        // meanwhile (its claim then stands).
        // Ordering: Release — the next pause's claim (Acquire) sees the move.
        let _ =
            self.end
                .compare_exchange(last | MOVING, last, Ordering::Release, Ordering::Relaxed);
        Some(shift)
    }

    /// `(start, shift, last)` of a pause of `d` at `now`, with `end` set to
    /// `last` and the moving bit; `None` if it changes nothing.
    fn claim(self, now: u64, d: u64) -> Option<(u64, u64, u64)> {
        let now = now.min(MAX_TIME_NANOS);
        let last = now.saturating_add(d).min(MAX_TIME_NANOS);
        let (end, _) = self.take(|end| (last > now.max(end)).then_some(last))?;
        let start = now.max(end);
        Some((start, last - start, last))
    }

    /// Takes the moving bit of `end` — pauses and resumes are applied one
    /// at a time — setting the word to `decide(end)` with the bit; `None`
    /// (nothing taken) as soon as `decide` says so. A holder of the bit
    /// is waited for (yielding) up to `PATIENCE` times, then gone around.
    /// Returns `(end, claimed)`.
    fn take(self, decide: impl Fn(u64) -> Option<u64>) -> Option<(u64, u64)> {
        // Ordering: Acquire pairs with the Release that clears the bit: the
        // earlier holder's move of the state happens before ours.
        let mut seen = self.end.load(Ordering::Acquire);
        let mut patience = PATIENCE;
        loop {
            let end = seen & !MOVING;
            let claim = decide(end)?;
            if seen & MOVING != 0 && patience > 0 {
                patience -= 1;
                yield_now();
                // Ordering: as above.
                seen = self.end.load(Ordering::Acquire);
                continue;
            }
            // Ordering: AcqRel — pauses and resumes are ordered by this word.
            match self.end.compare_exchange_weak(
                seen,
                claim | MOVING,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some((end, claim)),
                Err(v) => seen = v,
            }
        }
    }

    /// Lifts the pause on at `now`: claims `end` (with the moving bit, as a
    /// pause does — pauses and resumes are applied one at a time), then
    /// runs `lift(end)`, the state's CAS loop, which lifts the state and
    /// returns true only if it is exactly what the pause left. `end` then
    /// becomes `now` if lifted, and stays as it was if not.
    pub fn resume(self, now: u64, lift: impl FnOnce(u64) -> bool) -> Resumed {
        let now = now.min(MAX_TIME_NANOS);
        let Some((end, _)) = self.take(|end| (end > now).then_some(end)) else {
            return Resumed::NotPaused;
        };
        let lifted = lift(end);
        let after = if lifted { now } else { end };
        // Clears the bit unless a pause that lost patience took the word
        // meanwhile (its claim then stands, and its move keeps the bucket
        // empty until its end: `max(now + τ, end + τ) + shift`).
        // Ordering: Release — the next claim (Acquire) sees the lift.
        let _ =
            self.end
                .compare_exchange(end | MOVING, after, Ordering::Release, Ordering::Relaxed);
        if lifted {
            Resumed::Lifted
        } else {
            Resumed::Queued
        }
    }

    /// Tells waiters of a move of `shift` ns: called after the state moved.
    fn moved(self, shift: u64) {
        // Ordering: Release pairs with the Acquire load in `shifted`: a
        // waiter that sees this addition also sees the moved state.
        self.shifted.fetch_add(shift, Ordering::Release);
    }

    /// The sum of every shift so far (a waiter's reading).
    pub fn shifted(self) -> u64 {
        // Ordering: Acquire, see `moved`.
        self.shifted.load(Ordering::Acquire)
    }

    /// When the pause on at `now` ends, if one is on.
    pub fn ends(self, now: u64) -> Option<u64> {
        // Ordering: Acquire, as in `claim`; only a give-back's floor uses it.
        let end = self.end.load(Ordering::Acquire) & !MOVING;
        (end > now.min(MAX_TIME_NANOS)).then_some(end)
    }
}

/// The two pause words of an in-process token bucket (a shared-memory
/// table keeps its own in the file and uses the functions above).
#[derive(Debug)]
pub(crate) struct PauseWords {
    pub(crate) end: AtomicU64,
    pub(crate) shifted: AtomicU64,
}

impl PauseWords {
    pub(crate) fn new() -> PauseWords {
        PauseWords {
            end: AtomicU64::new(0),
            shifted: AtomicU64::new(0),
        }
    }

    pub(crate) fn words(&self) -> Words<'_> {
        Words {
            end: &self.end,
            shifted: &self.shifted,
        }
    }
}
