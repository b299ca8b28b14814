//! The token bucket's quota epochs: the state word packs a 2-bit
//! generation with the TAT, and each generation's quota lives in a slot
//! read under a sequence number (a seqlock with one writer), so a TAT is
//! only ever combined with the quota it was written under.

use crate::algorithms::gcra::{MAX_TAT, Params};
use crate::sync::{AtomicU64, Ordering, fence};

// The state word: [generation: 2 bits | TAT: 62 bits]. Quota changes are
// numbered (epochs 0, 1, 2, …); the generation is the epoch mod 4 and picks
// the slot that holds that epoch's quota. `set_quota` fills the next slot and
// then moves the word to the next generation in the same CAS that converts
// the TAT, so a TAT is only ever combined with the quota it was written under.
pub(super) const GEN_SHIFT: u32 = 62;
pub(super) const SLOTS: usize = 4;

#[inline]
pub(super) fn generation(word: u64) -> usize {
    (word >> GEN_SHIFT) as usize
}

/// The generation of epoch `epoch`: the slot that holds its quota.
#[inline]
pub(super) fn epoch_generation(epoch: u64) -> usize {
    (epoch % SLOTS as u64) as usize
}

#[inline]
pub(super) fn tat(word: u64) -> u64 {
    word & MAX_TAT
}

#[inline]
pub(super) fn pack(generation: usize, tat: u64) -> u64 {
    debug_assert!(tat <= MAX_TAT);
    ((generation as u64) << GEN_SHIFT) | tat
}

/// One epoch's quota behind a sequence number (a seqlock with one writer):
/// `seq` is `2·epoch` while the slot holds that epoch's quota and odd while
/// it is being rewritten, so a reader knows whether the pair it read is
/// whole, and of which epoch. (The checks' path reads no `seq`: the epoch,
/// loaded before and after, tells it the same; see [`Slot::latest`].)
#[derive(Debug)]
pub(super) struct Slot {
    seq: AtomicU64,
    period: AtomicU64,
    burst: AtomicU64,
    /// `τ − T` (`(b − 1)·T`): how far the TAT may run ahead of `now` with
    /// one more token still to take — kept so that a check of one token
    /// compares without a multiplication.
    spare: AtomicU64,
}

/// A slot that has never held a quota (odd: no reader takes it as valid).
pub(super) const UNWRITTEN: u64 = u64::MAX;

impl Slot {
    pub(super) fn new(seq: u64, p: Params) -> Slot {
        Slot {
            seq: AtomicU64::new(seq),
            period: AtomicU64::new(p.period),
            burst: AtomicU64::new(p.burst),
            spare: AtomicU64::new(p.tau() - p.period),
        }
    }

    /// The quota and its epoch, or `None` if the slot is being rewritten or
    /// changed while it was read.
    #[inline]
    pub(super) fn read(&self) -> Option<(Params, u64)> {
        // Ordering: Acquire on the first `seq` load pairs with the writer's
        // final Release store, so the fields read below are at least that
        // epoch's; the Acquire fence keeps the field loads before the
        // second `seq` load, which catches a rewrite that overlapped them
        // (see `write`).
        let seq = self.seq.load(Ordering::Acquire);
        let p = Params {
            period: self.period.load(Ordering::Relaxed),
            burst: self.burst.load(Ordering::Relaxed),
        };
        fence(Ordering::Acquire);
        let again = self.seq.load(Ordering::Relaxed);
        (seq & 1 == 0 && again == seq).then_some((p, seq / 2))
    }

    /// The fields of the latest epoch's slot, for a caller that loaded the
    /// epoch (Acquire) just before and loads it again after its state word:
    /// the quota and its `τ − T`, whole and of that epoch if the epoch is
    /// still the same then (see `TokenBucket::update_latest`). No sequence
    /// number is read: the epoch stands in for it.
    #[inline]
    pub(super) fn latest(&self) -> (Params, u64) {
        // Ordering: Relaxed loads — the epoch's Acquire load before them
        // makes them at least that epoch's; the Acquire fence after them
        // pairs with the Release fence `write` puts before its field stores,
        // so if any of them read a rewrite, the epoch store that preceded
        // the rewrite happened before every load after the fence (the
        // caller's second epoch load among them).
        let p = Params {
            period: self.period.load(Ordering::Relaxed),
            burst: self.burst.load(Ordering::Relaxed),
        };
        let spare = self.spare.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (p, spare)
    }

    /// The quota of a slot that no one is rewriting (the writer's view).
    pub(super) fn held(&self) -> Params {
        Params {
            period: self.period.load(Ordering::Relaxed),
            burst: self.burst.load(Ordering::Relaxed),
        }
    }

    /// Rewrites the slot for `epoch` (one writer at a time).
    pub(super) fn write(&self, epoch: u64, p: Params) {
        // Ordering: the odd store and the Release fence come before the
        // field stores, so a reader that sees a new field also sees `seq`
        // changed on its second load (and a reader of `latest`, the epoch
        // stored before this call); the final Release store publishes the
        // whole slot with its epoch.
        self.seq.store(2 * epoch + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.period.store(p.period, Ordering::Relaxed);
        self.burst.store(p.burst, Ordering::Relaxed);
        self.spare.store(p.tau() - p.period, Ordering::Relaxed);
        self.seq.store(2 * epoch, Ordering::Release);
    }
}

/// What one pass of the CAS loop decided on: the word, the quota of the
/// word's epoch, and that epoch.
pub(super) struct Seen {
    pub(super) word: u64,
    pub(super) params: Params,
    pub(super) epoch: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot caught mid-rewrite (new period, old burst) is never read as a
    /// quota: the pair would be from two quotas.
    #[test]
    fn a_slot_being_rewritten_is_not_read() {
        let p = Params {
            period: 1_000_000_000,
            burst: 4,
        };
        let slot = Slot::new(0, p);
        assert_eq!(slot.read(), Some((p, 0)));
        slot.seq.store(2 * 4 + 1, Ordering::Relaxed);
        slot.period.store(3_000_000_000, Ordering::Relaxed);
        assert_eq!(slot.read(), None);
        slot.burst.store(9, Ordering::Relaxed);
        slot.seq.store(2 * 4, Ordering::Release);
        let (read, epoch) = slot.read().expect("whole again");
        assert_eq!((read.period, read.burst, epoch), (3_000_000_000, 9, 4));
    }
}
