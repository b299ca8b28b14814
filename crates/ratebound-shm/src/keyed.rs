//! [`SharedKeyedLimiter`], one limit per key, and the slot protocol of
//! its table: where a key lives (`locate`, `still_home`), how a slot is
//! claimed or reused for another key (`reclaim`), and how a reuse is
//! cancelled (`cancel`).

use std::path::Path;
use std::time::Duration;

use ratebound::any::{Key, Waiter};
use ratebound::pause;
use ratebound::{Clock, Decision, KeyedAlgorithm, Resumed};

// For the docs' links to the single limiter's methods.
#[cfg(doc)]
use crate::SharedLimiter;
use crate::clock::{SystemClock, nanos};
use crate::error::Error;
use crate::file::MODE_KEYED;
use crate::sync::{AtomicU64, Ordering};
use crate::table::{Table, table_methods};

mod learn;
mod wait;

/// The room for keys a shared-memory keyed table gets when none is asked
/// for (the Python and Node constructors' default). Smaller than an
/// in-process table's cap ([`ratebound::gate::DEFAULT_MAX_KEYS`], 1 000 000):
/// a shared table is allocated whole when its file is made — `2 × max_keys`
/// slots of 64 bytes, 1.25 MiB here, on a tmpfs such as `/dev/shm` — while an
/// in-process table grows only with the keys it meets.
pub const DEFAULT_SHARED_MAX_KEYS: u64 = 10_000;

/// A slot's fingerprint word when no key has claimed it.
const EMPTY: u64 = 0;
/// Set in a fingerprint word while a process reuses the slot for another
/// key: the other 63 bits are still the old key's, which owns the slot
/// until the reuse completes. Anyone may clear it (cancelling that reuse);
/// see `SharedKeyedLimiter::reclaim`. Fingerprints are 63 bits.
const RECLAIMING: u64 = 1 << 63;
/// How far from its home slot a key may live.
const WINDOW: usize = 64;

/// One limit per key, shared by every process that opens the same file; a
/// table of fixed size.
pub struct SharedKeyedLimiter {
    pub(crate) table: Table,
    pub(crate) clock: SystemClock,
}

impl std::fmt::Debug for SharedKeyedLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedKeyedLimiter")
            .field("path", &self.table.path)
            .field("slots", &self.table.slots)
            .finish()
    }
}

/// Where a key's state is: its slot and that slot's place in the key's
/// probe window.
#[derive(Clone, Copy)]
struct Found {
    slot: usize,
    place: usize,
}

impl SharedKeyedLimiter {
    /// A limiter on a table of `slots` words on the heap instead of a file
    /// (for the heap tests under Miri and the loom models), fingerprints
    /// keyed by `seed`; `path` only names it.
    #[cfg(test)]
    pub(crate) fn on_heap(
        algorithm: KeyedAlgorithm,
        slots: usize,
        path: &str,
        seed: (u64, u64),
    ) -> SharedKeyedLimiter {
        SharedKeyedLimiter {
            table: Table {
                region: crate::map::Region::heap(crate::table::words_for(slots).unwrap()),
                path: path.into(),
                rule: ratebound::WordRule::new(algorithm).unwrap(),
                algorithm,
                slots,
                fingerprints: ratebound::any::Fingerprinter::with_seed(
                    ratebound::fingerprint::Seed::from_keys(seed.0, seed.1),
                ),
            },
            clock: SystemClock,
        }
    }

    /// Opens the keyed limiter at `path` with room for `max_keys` keys
    /// (the table has `2 × max_keys` slots, at least 64), making the file if
    /// there is none.
    ///
    /// # Errors
    /// As [`SharedLimiter::open`]; [`Error::Limit`] for `max_keys = 0`.
    pub fn open(
        path: impl AsRef<Path>,
        algorithm: KeyedAlgorithm,
        max_keys: u64,
    ) -> Result<SharedKeyedLimiter, Error> {
        if max_keys == 0 {
            return Err(Error::Limit(ratebound::Error::InvalidNumber {
                name: "max_keys",
                value: "0".to_string(),
                reason: "must be at least 1",
            }));
        }
        let slots = max_keys.saturating_mul(2).max(WINDOW as u64);
        Ok(SharedKeyedLimiter {
            table: Table::open(path.as_ref(), algorithm, MODE_KEYED, slots)?,
            clock: SystemClock,
        })
    }

    table_methods!();

    /// Slots in the table.
    pub fn slots(&self) -> usize {
        self.table.slots
    }

    /// Slots held by a key (fresh or not).
    pub fn len(&self) -> usize {
        (0..self.table.slots)
            .filter(|&i| self.table.fingerprint(i).load(Ordering::Relaxed) != EMPTY)
            .count()
    }

    /// True if no key was ever seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn fingerprint_of(&self, key: Key<'_>) -> u64 {
        match self.table.fingerprints.key(key)[0] & !RECLAIMING {
            EMPTY => 1,
            fp => fp,
        }
    }

    #[inline]
    pub(crate) fn slot_at(&self, fp: u64, place: usize) -> usize {
        ((fp % self.table.slots as u64) as usize + place) % self.table.slots
    }

    pub(crate) fn window(&self) -> usize {
        WINDOW.min(self.table.slots)
    }

    /// The key's slot: the first in its window holding it, else the first
    /// empty one (claimed), else the first whose state is fresh (reused).
    fn locate(&self, fp: u64, now: u64) -> Result<Found, Error> {
        let t = &self.table;
        let found = self
            .probe(fp, |slot, held| {
                if held != EMPTY {
                    return false;
                }
                // Ordering: AcqRel/Acquire — Release publishes the claim to
                // whoever next reads the fingerprint, Acquire as for the load.
                // Lost to another key: slots never become empty again, so
                // go on.
                match t.fingerprint(slot).compare_exchange(
                    EMPTY,
                    fp,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => true,
                    Err(now_held) => now_held == fp,
                }
            })
            // No empty slot left in the window: reuse the first fresh one.
            // Its old key, if a process is deciding for it right now,
            // notices and gives back (see `reclaim` and `check_n_at`).
            .or_else(|| {
                self.probe(fp, |slot, held| {
                    // Ordering: Acquire — a first look; `reclaim` decides on
                    // a read-modify-write of the state.
                    let state = t.state(slot).load(Ordering::Acquire);
                    held != EMPTY
                        && t.rule.is_fresh(state, now)
                        && self.reclaim(slot, held, fp, now)
                })
            });
        // The table holds one key per slot: that is its capacity, whatever
        // `max_keys` it was opened with (the slots are twice as many).
        found.ok_or(Error::Limit(ratebound::Error::TooManyKeys {
            max_keys: self.table.slots,
        }))
    }

    /// One pass over the key's window: the first slot holding the key, or
    /// the first other slot (`held` its fingerprint) that `take` takes for
    /// it.
    #[inline]
    fn probe(&self, fp: u64, mut take: impl FnMut(usize, u64) -> bool) -> Option<Found> {
        for place in 0..self.window() {
            let slot = self.slot_at(fp, place);
            // Ordering: Acquire — pairs with the Release of the exchange
            // that wrote this fingerprint (the key's claim, or a reuse),
            // after which that process's view of the slot is ours too.
            let held = self.table.fingerprint(slot).load(Ordering::Acquire);
            if held & !RECLAIMING == fp {
                if held == fp || self.cancel(slot, fp) {
                    return Some(Found { slot, place });
                }
                // Reused for another key just now: go on.
                continue;
            }
            if take(slot, held) {
                return Some(Found { slot, place });
            }
        }
        None
    }

    /// The slot holding `fp`'s key, without claiming one: the first in its
    /// window holding it (a reuse of it under way too: until the reuse
    /// completes, the slot is the key's), `None` once an empty slot ends
    /// the search or the window is over. What a read, a give-back or a
    /// lift looks at; a decision takes [`locate`](Self::locate).
    pub(crate) fn find(&self, fp: u64) -> Option<usize> {
        for place in 0..self.window() {
            let slot = self.slot_at(fp, place);
            // Ordering: Acquire, as in `probe`.
            let held = self.table.fingerprint(slot).load(Ordering::Acquire);
            if held & !RECLAIMING == fp {
                return Some(slot);
            }
            if held == EMPTY {
                return None;
            }
        }
        None
    }

    /// Clears the reclaiming bit of `slot` held by `fp`'s key: true if the
    /// slot is then surely `fp`'s (a reuse that had not completed fails).
    fn cancel(&self, slot: usize, fp: u64) -> bool {
        // Ordering: AcqRel/Acquire, as for a claim.
        match self.table.fingerprint(slot).compare_exchange(
            fp | RECLAIMING,
            fp,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(now_held) => now_held == fp,
        }
    }

    /// Reuses `slot`, whose fingerprint word was `held` (another key, or a
    /// reuse of it that some process began), for `fp`'s key, if its state
    /// is fresh; true if it is now `fp`'s.
    ///
    /// Three steps: announce (set `RECLAIMING` on the old key's
    /// fingerprint), read the state by a read-modify-write and give up
    /// unless it is fresh, then swap the old key's fingerprint for `fp`.
    ///
    /// Invariant: an admission of the old key is never forgotten. A
    /// process deciding for it writes the state (the decision's exchange)
    /// and then reads the fingerprint (`still_home`). If that decision's
    /// write comes before our read-modify-write of the state, we read its
    /// (not fresh) state and give up. Otherwise our read-modify-write
    /// (Release) is read by the decision's exchange (Acquire): our
    /// announcement happens before its fingerprint read, which sees the
    /// bit or our key, and either cancels us or gives the admission back.
    /// (A plain load of the state would not do: two processes' store then
    /// load on two words may each miss the other's store.) A fresh state
    /// forgets nothing that matters: it decides as a new key's does. Any
    /// process may cancel an announcement, so one left by a killed process
    /// holds nothing: the old key's next check clears it, another reuse
    /// takes it over.
    fn reclaim(&self, slot: usize, held: u64, fp: u64, now: u64) -> bool {
        let t = &self.table;
        let word = t.fingerprint(slot);
        let owner = held & !RECLAIMING;
        // Ordering: AcqRel/Acquire — a read-modify-write (also when the bit
        // was already set): it is what the decision's exchange on the state
        // will have to come after, below.
        if word
            .compare_exchange(
                held,
                owner | RECLAIMING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return false;
        }
        // Ordering: AcqRel — Release so that a decision whose exchange
        // reads this value (or a later one) sees our announcement; Acquire
        // so that we see every decision written before it.
        let state = t.state(slot).fetch_or(0, Ordering::AcqRel);
        if !t.rule.is_fresh(state, now) {
            self.cancel(slot, owner);
            return false;
        }
        // Ordering: AcqRel/Acquire, as for a claim.
        match word.compare_exchange(owner | RECLAIMING, fp, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // The new key starts from nothing learned: the old key's
                // word is forgotten with its state (an adapt of the old
                // key landing after this undoes itself, see `adapt_at`).
                // Ordering: Relaxed — a value on its own (see `rule_at`).
                t.learned(slot).store(0, Ordering::Relaxed);
                true
            }
            // Another process of the same key completed the same reuse.
            Err(now_held) => now_held == fp,
        }
    }

    /// True if `found` is still where the key lives: the slot still holds
    /// it (a reuse of it begun meanwhile is cancelled) and no slot before it
    /// in the window does.
    fn still_home(&self, fp: u64, found: Found) -> bool {
        let t = &self.table;
        // Ordering: Acquire — after the decision's exchange on the state
        // (see `reclaim`'s invariant for why that suffices).
        let held = t.fingerprint(found.slot).load(Ordering::Acquire);
        (held == fp || (held == fp | RECLAIMING && self.cancel(found.slot, fp)))
            && (0..found.place).all(|place| {
                // Ordering: Acquire, as above. A slot of this key earlier
                // in the window, even one being reused, is where it lives.
                t.fingerprint(self.slot_at(fp, place))
                    .load(Ordering::Acquire)
                    & !RECLAIMING
                    != fp
            })
    }

    /// Takes one for `key` now.
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    pub fn check(&self, key: Key<'_>) -> Result<Decision, Error> {
        self.check_n_at(key, 1, self.clock.now())
    }

    /// Takes `n` for `key` now.
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    pub fn check_n(&self, key: Key<'_>, n: u64) -> Result<Decision, Error> {
        self.check_n_at(key, n, self.clock.now())
    }

    /// Takes `n` for `key` at `now` (ns of `CLOCK_MONOTONIC`).
    ///
    /// A decision is made on the key's slot and then checked: if meanwhile
    /// the slot went to another key (it was fresh and reused) or the key
    /// turned up earlier in its window (two processes placed it at once),
    /// an admission is given back and the check is made again where the
    /// key lives. Never more than the limit; at worst, a process killed in
    /// between leaves an admission counted against a fresh key, and a new
    /// key that decides on a slot while another key's admission there is
    /// being given back is refused once.
    ///
    /// # Errors
    /// [`Error::Limit`] with `InsufficientCapacity` when `n` exceeds the
    /// limit, or `TooManyKeys` when the key has no slot (also when, eight
    /// times in a row, other processes took the slot it had decided on).
    pub fn check_n_at(&self, key: Key<'_>, n: u64, now: u64) -> Result<Decision, Error> {
        let fp = self.fingerprint_of(key);
        let t = &self.table;
        // Bounded: two keys contending for the last fresh slot could take
        // it from each other indefinitely (each gives back, then reuses it
        // again); a refusal for want of a slot ends that.
        for _ in 0..8 {
            let found = self.locate(fp, now)?;
            let rule = t.rule_at(found.slot);
            let (decision, mark) = rule.check_n_at(t.state(found.slot), n, now)?;
            if self.still_home(fp, found) {
                return Ok(decision);
            }
            if let Some(mark) = mark {
                rule.release(t.state(found.slot), mark, n);
            }
        }
        Err(Error::Limit(ratebound::Error::TooManyKeys {
            max_keys: t.slots,
        }))
    }

    /// The clock reading decisions are made at (ns of `CLOCK_MONOTONIC`).
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Empties `key`'s token bucket for every process until `d` from now;
    /// see [`pause_at`](Self::pause_at).
    ///
    /// # Errors
    /// As [`pause_at`](Self::pause_at).
    pub fn pause(&self, key: Key<'_>, d: Duration) -> Result<(), Error> {
        self.pause_at(key, d, self.clock.now())
    }

    /// Empties `key`'s token bucket for every process until `now + d`,
    /// refilling at the rate from then on (see
    /// [`SharedLimiter::pause_at`]); a key with no slot gets one.
    ///
    /// # Errors
    /// [`Error::Limit`] with `Unsupported` for a window, `TooManyKeys`
    /// when the key has no slot.
    pub fn pause_at(&self, key: Key<'_>, d: Duration, now: u64) -> Result<(), Error> {
        let t = &self.table;
        if let Some(refused) = self.on_a_window(|word, pause| t.rule.pause_at(word, pause, 0, now))
        {
            return refused.map(|_| ());
        }
        let fp = self.fingerprint_of(key);
        for _ in 0..8 {
            let found = self.locate(fp, now)?;
            t.rule_at(found.slot).pause_at(
                t.state(found.slot),
                t.pause(found.slot),
                nanos(d),
                now,
            )?;
            // A pause only adds debt: if the slot went to another key
            // meanwhile, that key is paused too (harmlessly late), and the
            // pause is made again where this key lives.
            if self.still_home(fp, found) {
                return Ok(());
            }
        }
        Err(Error::Limit(ratebound::Error::TooManyKeys {
            max_keys: t.slots,
        }))
    }

    /// For a window, `op` (a pause or a resume) on scratch words: the
    /// rule's own error, without claiming a slot; `None` for a token bucket.
    fn on_a_window<T>(
        &self,
        op: impl FnOnce(&AtomicU64, pause::Words<'_>) -> Result<T, ratebound::Error>,
    ) -> Option<Result<T, Error>> {
        if matches!(self.table.algorithm, KeyedAlgorithm::TokenBucket(_)) {
            return None;
        }
        let (end, shifted) = (AtomicU64::new(0), AtomicU64::new(0));
        let words = pause::Words {
            end: &end,
            shifted: &shifted,
        };
        Some(op(&end, words).map_err(Error::Limit))
    }

    /// Lifts `key`'s pause now; see [`resume_at`](Self::resume_at).
    ///
    /// # Errors
    /// As [`resume_at`](Self::resume_at).
    pub fn resume(&self, key: Key<'_>) -> Result<Resumed, Error> {
        self.resume_at(key, self.clock.now())
    }

    /// Lifts `key`'s pause at `now` for every process, if nothing was built
    /// on it (see [`SharedLimiter::resume_at`]). A key with no slot is
    /// [`Resumed::NotPaused`] (no slot is claimed). A paused slot is not
    /// fresh, so it cannot go to another key while the pause is on.
    ///
    /// # Errors
    /// [`Error::Limit`] with `Unsupported` for a window.
    pub fn resume_at(&self, key: Key<'_>, now: u64) -> Result<Resumed, Error> {
        let t = &self.table;
        if let Some(refused) = self.on_a_window(|word, pause| t.rule.resume_at(word, pause, now)) {
            return refused;
        }
        match self.find(self.fingerprint_of(key)) {
            Some(slot) => Ok(t
                .rule_at(slot)
                .resume_at(t.state(slot), t.pause(slot), now)?),
            None => Ok(Resumed::NotPaused),
        }
    }

    /// How many `key` could take now (the full limit if it has no slot).
    pub fn available(&self, key: Key<'_>) -> u64 {
        let t = &self.table;
        match self.find(self.fingerprint_of(key)) {
            // Ordering: Acquire, as for a decision's first load.
            Some(slot) => t
                .rule_at(slot)
                .available(t.state(slot).load(Ordering::Acquire), self.clock.now()),
            None => t.rule.limit(),
        }
    }
}
