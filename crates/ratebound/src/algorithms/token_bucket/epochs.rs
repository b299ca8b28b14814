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

/// Each epoch's quota behind a sequence number (a seqlock with one writer
/// per slot): slot `g` holds the quota of the latest epoch of generation
/// `g`. `seq[g]` is `2·epoch` while the slot holds that epoch's quota and
/// odd while it is being rewritten, so a reader knows whether the pair it
/// read is whole, and of which epoch. (The checks' path reads no `seq`: the
/// epoch, loaded before and after, tells it the same; see
/// [`Slots::latest`].)
///
/// Kept field by field (an array per field, not an array of slots), so
/// that a slot's field is one load at `field + 8·g`: the checks' path
/// computes no offset from the epoch beyond its generation.
#[derive(Debug)]
pub(super) struct Slots {
    seq: [AtomicU64; SLOTS],
    period: [AtomicU64; SLOTS],
    burst: [AtomicU64; SLOTS],
    /// `τ − T` (`(b − 1)·T`): how far the TAT may run ahead of `now` with
    /// one more token still to take — kept so that a check of one token
    /// compares without a multiplication.
    spare: [AtomicU64; SLOTS],
}

/// A slot that has never held a quota (odd: no reader takes it as valid).
pub(super) const UNWRITTEN: u64 = u64::MAX;

impl Slots {
    /// Slot 0 holding epoch 0's quota `p`, the others never written.
    pub(super) fn new(p: Params) -> Slots {
        let field = |v: u64| std::array::from_fn(|_| AtomicU64::new(v));
        let seq = std::array::from_fn(|g| AtomicU64::new(if g == 0 { 0 } else { UNWRITTEN }));
        Slots {
            seq,
            period: field(p.period),
            burst: field(p.burst),
            spare: field(p.tau() - p.period),
        }
    }

    /// Slot `g`'s quota and its epoch, or `None` if the slot is being
    /// rewritten or changed while it was read.
    #[inline]
    pub(super) fn read(&self, g: usize) -> Option<(Params, u64)> {
        // Ordering: Acquire on the first `seq` load pairs with the writer's
        // final Release store, so the fields read below are at least that
        // epoch's; the Acquire fence keeps the field loads before the
        // second `seq` load, which catches a rewrite that overlapped them
        // (see `write`).
        let seq = self.seq[g].load(Ordering::Acquire);
        let p = Params {
            period: self.period[g].load(Ordering::Relaxed),
            burst: self.burst[g].load(Ordering::Relaxed),
        };
        fence(Ordering::Acquire);
        let again = self.seq[g].load(Ordering::Relaxed);
        (seq & 1 == 0 && again == seq).then_some((p, seq / 2))
    }

    /// The fields of slot `g`, the latest epoch's, for a caller that
    /// loaded the epoch (Acquire) just before and loads it again after its
    /// state word: the quota and its `τ − T`, whole and of that epoch if
    /// the epoch is still the same then (see `TokenBucket::update_latest`).
    /// No sequence number is read: the epoch stands in for it.
    #[inline]
    pub(super) fn latest(&self, g: usize) -> (Params, u64) {
        // Ordering: Relaxed loads — the epoch's Acquire load before them
        // makes them at least that epoch's; the Acquire fence after them
        // pairs with the Release fence `write` puts before its field stores,
        // so if any of them read a rewrite, the epoch store that preceded
        // the rewrite happened before every load after the fence (the
        // caller's second epoch load among them).
        let p = Params {
            period: self.period[g].load(Ordering::Relaxed),
            burst: self.burst[g].load(Ordering::Relaxed),
        };
        let spare = self.spare[g].load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (p, spare)
    }

    /// The quota of slot `g`, which no one is rewriting (the writer's view).
    pub(super) fn held(&self, g: usize) -> Params {
        Params {
            period: self.period[g].load(Ordering::Relaxed),
            burst: self.burst[g].load(Ordering::Relaxed),
        }
    }

    /// Rewrites slot `g` for `epoch` (one writer at a time).
    pub(super) fn write(&self, g: usize, epoch: u64, p: Params) {
        // Ordering: the odd store and the Release fence come before the
        // field stores, so a reader that sees a new field also sees `seq`
        // changed on its second load (and a reader of `latest`, the epoch
        // stored before this call); the final Release store publishes the
        // whole slot with its epoch.
        self.seq[g].store(2 * epoch + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.period[g].store(p.period, Ordering::Relaxed);
        self.burst[g].store(p.burst, Ordering::Relaxed);
        self.spare[g].store(p.tau() - p.period, Ordering::Relaxed);
        self.seq[g].store(2 * epoch, Ordering::Release);
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
        let slots = Slots::new(p);
        assert_eq!(slots.read(0), Some((p, 0)));
        assert_eq!(slots.read(1), None, "never written");
        slots.seq[0].store(2 * 4 + 1, Ordering::Relaxed);
        slots.period[0].store(3_000_000_000, Ordering::Relaxed);
        assert_eq!(slots.read(0), None);
        slots.burst[0].store(9, Ordering::Relaxed);
        slots.seq[0].store(2 * 4, Ordering::Release);
        let (read, epoch) = slots.read(0).expect("whole again");
        assert_eq!((read.period, read.burst, epoch), (3_000_000_000, 9, 4));
    }
}
