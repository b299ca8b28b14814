//! What the outbound adapters learn, per key of a shared table: the
//! slot's learned word, read and replaced by compare-and-swap.

use ratebound::any::Key;
use ratebound::outbound::Learned;

use ratebound::Clock;

use super::SharedKeyedLimiter;
// For the docs' links to the single limiter's methods.
#[cfg(doc)]
use crate::SharedLimiter;
use crate::error::Error;
use crate::sync::Ordering;
use crate::table::{cannot_learn, swap_learned};

impl SharedKeyedLimiter {
    /// What the outbound adapters sharing this table learned of `key`'s
    /// partner: the slot's learned word (fresh, the configured quota, for
    /// a key with no slot — none is claimed — and for a window).
    pub fn learned(&self, key: Key<'_>) -> Learned {
        if self.table.ceiling().is_none() {
            return Learned::fresh();
        }
        match self.find(self.fingerprint_of(key)) {
            // Ordering: Acquire — pairs with an adapt's exchange.
            Some(slot) => Learned::from_bits(self.table.learned(slot).load(Ordering::Acquire)),
            None => Learned::fresh(),
        }
    }

    /// Replaces `key`'s learned word `seen` with `next` for every process,
    /// if it is still `seen`: one compare-and-swap on the key's slot (a key
    /// with no slot gets one). From then on `key` runs at `next`'s share
    /// of the configured quota ([`Learned::scale`]), its schedule kept as
    /// it is (the reservations already made stay where they are). Returns
    /// whether it replaced. A key whose slot is reused for another key
    /// (its state fresh again) forgets what it learned.
    ///
    /// # Errors
    /// [`Error::Limit`] with `Unsupported` for a window, `TooManyKeys`
    /// when the key has no slot.
    pub fn adapt(&self, key: Key<'_>, seen: Learned, next: Learned) -> Result<bool, Error> {
        self.adapt_at(key, seen, next, self.clock.now())
    }

    /// [`adapt`](Self::adapt) at `now` (ns of `CLOCK_MONOTONIC`: only a
    /// slot's reuse depends on it).
    ///
    /// # Errors
    /// As [`adapt`](Self::adapt).
    pub fn adapt_at(
        &self,
        key: Key<'_>,
        seen: Learned,
        next: Learned,
        now: u64,
    ) -> Result<bool, Error> {
        let t = &self.table;
        if t.ceiling().is_none() {
            return Err(Error::Limit(cannot_learn(t.algorithm)));
        }
        let fp = self.fingerprint_of(key);
        for _ in 0..8 {
            let found = self.locate(fp, now)?;
            let word = t.learned(found.slot);
            let replaced = swap_learned(word, seen, next);
            if self.still_home(fp, found) {
                // A lower share drops the key's queue beyond an empty
                // bucket (as TokenBucket::adapt: its waiters wait again).
                if replaced && next.fraction_units() < seen.fraction_units() {
                    let (state, pause) = (t.state(found.slot), t.pause(found.slot));
                    t.rule_at(found.slot).drop_queue_at(state, pause, now)?;
                }
                return Ok(replaced);
            }
            // The slot went to another key meanwhile: it starts from
            // nothing learned, not from our word.
            if replaced {
                // Ordering: AcqRel/Acquire, as an adapt's exchange.
                let _ =
                    word.compare_exchange(next.to_bits(), 0, Ordering::AcqRel, Ordering::Acquire);
            }
        }
        Err(Error::Limit(ratebound::Error::TooManyKeys {
            max_keys: t.slots,
        }))
    }
}
