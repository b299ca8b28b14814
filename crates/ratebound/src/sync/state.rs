//! The one CAS loop: every limiter's state is one `AtomicU64` changed only here.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// One 64-bit word of limiter state on its own cache line.
#[derive(Debug)]
pub(crate) struct AtomicState {
    word: CachePadded<AtomicU64>,
}

impl AtomicState {
    pub(crate) fn new(word: u64) -> AtomicState {
        AtomicState {
            word: CachePadded::new(AtomicU64::new(word)),
        }
    }

    /// The current word.
    #[inline]
    pub(crate) fn load(&self) -> u64 {
        // Ordering: Acquire pairs with the Release half of `update`'s CAS, so
        // whatever a writer published before changing the word (a new quota
        // slot) is visible to whoever reads the word it wrote.
        self.word.load(Ordering::Acquire)
    }

    /// One compare-exchange of the word, for a caller running its own loop
    /// (the token bucket's check of one token): `Err` holds the word that
    /// beat it, to decide on again. May fail spuriously.
    #[inline]
    pub(crate) fn exchange(&self, current: u64, next: u64) -> Result<u64, u64> {
        // Ordering: as in `update`.
        self.word
            .compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
    }

    /// Applies `f` to the current word until it sticks, and returns the
    /// word the final call of `f` decided on and whether it admitted.
    ///
    /// `f` returns `Some(next)` to admit and replace the word with `next`, or
    /// `None` to refuse and leave it alone (a refusal writes nothing). A
    /// `next` equal to the word is not written either: the decision is
    /// linearized at the load that produced it. Callers build their answer
    /// from the returned word after the loop, so the loop itself moves only
    /// plain integers.
    ///
    /// Invariant: the word only ever changes from a value `w` to `f(w)`, for a
    /// `w` that was the whole word at the moment of the exchange; a failed
    /// exchange re-runs `f` on the value that beat it. So no update is lost
    /// and none is applied twice.
    #[inline]
    pub(crate) fn update(&self, f: impl FnMut(u64) -> Option<u64>) -> (u64, bool) {
        update(&self.word, f)
    }
}

/// [`AtomicState::update`] on any atomic word (a keyed limiter's entries are
/// not cache-padded: that would cost 128 bytes a key).
#[inline]
pub(crate) fn update(word: &AtomicU64, mut f: impl FnMut(u64) -> Option<u64>) -> (u64, bool) {
    // Ordering: Acquire, as in `AtomicState::load`.
    let mut current = word.load(Ordering::Acquire);
    loop {
        let Some(next) = f(current) else {
            return (current, false);
        };
        if next == current {
            return (current, true);
        }
        // Ordering: AcqRel on success — Release publishes what a writer
        // stored before the exchange (see `load`), Acquire keeps the chain
        // from earlier writers intact. Acquire on failure: the value we retry
        // with is read like `load`'s.
        match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return (current, true),
            Err(actual) => current = actual,
        }
    }
}
